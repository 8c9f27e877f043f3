// The LibTorch part of runtime.h: weights, the operators, copies. The only
// translation unit that includes LibTorch (ATen, not <torch/torch.h>: it
// compiles in half the time and the model needs no torch::nn).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <numbers>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "checkpoint.h"
#include "cuda.h"
#include "runtime.h"
#include "runtime_internal.h"
#include "sampler.h"

namespace slicesched::rt {

// ---- values -----------------------------------------------------------------------------------------------------

struct ValueImpl {
  Value::Kind kind = Value::Kind::kEmpty;
  std::string label;  // canonical device label
  at::Tensor hidden;  // kHidden: [tokens, hidden]
  // kKv: the group's cache, one tensor [layers/groups, 2 (K, V), kv_heads, tokens, head_dim] with each
  // sequence's tokens contiguous: seqs[i] at [start[i], start[i] + len[i]).
  int group = -1;
  at::Tensor cache;
  std::vector<std::uint64_t> seqs;
  std::vector<std::int64_t> start, len;
  std::unordered_map<std::uint64_t, std::size_t> index;  // seq -> i
  std::int64_t bytes = 0, tokens = 0;

  // The position of seq in seqs, or -1.
  std::int64_t find(std::uint64_t seq) const {
    auto it = index.find(seq);
    return it == index.end() ? -1 : static_cast<std::int64_t>(it->second);
  }
};

struct ValueAccess {
  static Value make(std::shared_ptr<const ValueImpl> impl) {
    Value v;
    v.impl_ = std::move(impl);
    return v;
  }
  static const ValueImpl* get(const Value& v) { return v.impl_.get(); }
};

namespace {

std::int64_t held_bytes(const at::Tensor& t) { return static_cast<std::int64_t>(t.storage().nbytes()); }

Value make_hidden(at::Tensor t, std::string label) {
  auto impl = std::make_shared<ValueImpl>();
  impl->kind = Value::Kind::kHidden;
  impl->label = std::move(label);
  impl->bytes = held_bytes(t);
  impl->tokens = t.size(0);
  impl->hidden = std::move(t);
  return ValueAccess::make(std::move(impl));
}

Value make_kv(int group, at::Tensor cache, std::vector<std::uint64_t> seqs, std::vector<std::int64_t> start,
              std::vector<std::int64_t> len, std::string label) {
  auto impl = std::make_shared<ValueImpl>();
  impl->kind = Value::Kind::kKv;
  impl->label = std::move(label);
  impl->group = group;
  impl->index.reserve(seqs.size());
  for (std::size_t i = 0; i < seqs.size(); ++i) impl->index.emplace(seqs[i], i);
  impl->bytes = held_bytes(cache);
  impl->tokens = cache.size(3);
  impl->cache = std::move(cache);
  impl->seqs = std::move(seqs);
  impl->start = std::move(start);
  impl->len = std::move(len);
  return ValueAccess::make(std::move(impl));
}

// ---- devices and errors -----------------------------------------------------------------------------------------

int cached_cuda_count() {
  static const int n = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  return n;
}

struct Dev {
  std::string label;
  c10::Device device{c10::kCPU};
};

Dev parse_device(const std::string& s) {
  const auto colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  long index = -1;
  if (colon != std::string::npos) {
    const std::string num = s.substr(colon + 1);
    if (num.empty() || num.size() > 6 || num.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("device '" + s + "': expected cpu, cpu:N, cuda or cuda:N");
    index = std::stol(num);
  }
  if (kind == "cpu")
    return Dev{index <= 0 ? std::string("cpu") : "cpu:" + std::to_string(index), c10::Device(c10::kCPU)};
  if (kind == "cuda") {
    if (index < 0) index = 0;
    const int n = cached_cuda_count();
    if (n == 0) throw std::invalid_argument("device '" + s + "': CUDA is not available");
    if (index >= n)
      throw std::invalid_argument("device '" + s + "': only " + std::to_string(n) + " CUDA device(s) are visible");
    return Dev{"cuda:" + std::to_string(index), c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index))};
  }
  throw std::invalid_argument("device '" + s + "': expected cpu, cpu:N, cuda or cuda:N");
}

// Runs f, turning LibTorch's errors into the header's: out of memory into
// DeviceOutOfMemory, any other c10::Error into std::runtime_error; both
// prefixed with `what` ("layers1 on cuda:0"). Our own std exceptions pass.
template <class F>
auto guarded(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::OutOfMemoryError& e) {
    throw DeviceOutOfMemory(what + ": " + e.what_without_backtrace());
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    if (msg.find("out of memory") != std::string::npos || msg.find("can't allocate memory") != std::string::npos)
      throw DeviceOutOfMemory(what + ": " + msg);
    throw std::runtime_error(what + ": " + msg);
  }
}

at::ScalarType scalar_type(const std::string& dtype) {
  if (dtype == "float32") return at::kFloat;
  if (dtype == "bfloat16") return at::kBFloat16;
  if (dtype == "float16") return at::kHalf;
  throw std::invalid_argument("dtype '" + dtype + "' is not one of float32, bfloat16, float16");
}

// A host buffer made into a device tensor without stalling the device's
// stream: on CUDA through pinned memory and an asynchronous copy (the caching
// host allocator keeps the buffer until the copy is done).
template <class T>
at::Tensor upload(const std::vector<T>& v, at::ScalarType type, const Dev& d) {
  const bool cuda = d.device.is_cuda();
  at::Tensor host =
      at::empty({static_cast<std::int64_t>(v.size())}, at::TensorOptions().dtype(type).pinned_memory(cuda));
  std::memcpy(host.data_ptr(), v.data(), v.size() * sizeof(T));
  return cuda ? host.to(d.device, type, /*non_blocking=*/true) : host;
}

// ---- plans --------------------------------------------------------------------------------------------------------

void check_plan(const std::string& op, const StepPlan& plan) {
  if (plan.seqs.empty()) throw std::invalid_argument(op + ": the plan has no sequences");
  std::unordered_set<std::uint64_t> seen;
  seen.reserve(plan.seqs.size());
  for (const SeqStep& s : plan.seqs) {
    if (!seen.insert(s.seq).second)
      throw std::invalid_argument(op + ": sequence " + std::to_string(s.seq) + " appears twice in the plan");
    if (s.tokens.empty())
      throw std::invalid_argument(op + ": sequence " + std::to_string(s.seq) + " has no new tokens");
    if (s.position < 0)
      throw std::invalid_argument(op + ": sequence " + std::to_string(s.seq) + " has negative position " +
                                  std::to_string(s.position));
  }
}

const ValueImpl& need_hidden(const std::string& op, const Value& v, const Dev& d, std::int64_t tokens,
                             std::int64_t hidden) {
  const ValueImpl* h = ValueAccess::get(v);
  if (h == nullptr || h->kind != Value::Kind::kHidden)
    throw std::logic_error(op + ": the input is not a hidden state" + (h == nullptr ? " (empty Value)" : ""));
  if (h->label != d.label) throw std::logic_error(op + ": the hidden state is on " + h->label + ", not " + d.label);
  if (h->hidden.dim() != 2 || h->hidden.size(0) != tokens || h->hidden.size(1) != hidden)
    throw std::invalid_argument(op + ": the hidden state has " + std::to_string(h->hidden.size(0)) +
                                " tokens, the plan " + std::to_string(tokens));
  return *h;
}

// ---- the model ----------------------------------------------------------------------------------------------------

// One op's weights on one device, in a fixed order: embed {W}; head {norm, W}
// (a parallel block's: {norm, W, norm bias, W's bias}); layers: per layer
// {wqkv, wo, wgu, wd, norm1, norm2, bqkv, bo, bgu, bd, norm1 bias}. bqkv is
// undefined without q/k/v biases, the last four but in a parallel block
// (Phi), whose wgu is fc1 alone, wd fc2, and which has no norm2. With tied
// embeddings the head's W is the embedding's tensor on the same device,
// shared, and not in `bytes`.
struct OpWeights {
  std::vector<at::Tensor> t;
  std::int64_t bytes = 0;
};
constexpr int kPerLayer = 11;
enum LayerTensor { kQkv, kO, kGateUp, kDown, kNorm1, kNorm2, kQkvBias, kOBias, kUpBias, kDownBias, kNorm1Bias };

OpWeights finish(std::vector<at::Tensor> t) {
  OpWeights w;
  w.t = std::move(t);
  for (const auto& x : w.t)
    if (x.defined()) w.bytes += held_bytes(x);
  return w;
}

// An op's CPU master: per slot of OpWeights, the parts that are stacked
// along dim 0 into that slot's device tensor (a checkpoint's q, k and v
// into the fused matrix; gate and up). Random weights have one part a slot;
// a checkpoint's parts are views of its mapping. No parts: an undefined slot.
struct Master {
  std::vector<std::vector<at::Tensor>> slots;
};

// The slot's device tensor in `dtype`: one real copy (a new allocation even
// on the CPU, since virtual devices own their weights), converting as it
// copies. Blocks until the data is on the device.
at::Tensor stack_onto(const std::vector<at::Tensor>& parts, const c10::Device& device, at::ScalarType dtype) {
  if (parts.empty()) return at::Tensor();
  std::vector<std::int64_t> size = parts[0].sizes().vec();
  size[0] = 0;
  for (const auto& p : parts) size[0] += p.size(0);
  at::Tensor out = at::empty(size, at::TensorOptions().dtype(dtype).device(device));
  std::int64_t at_row = 0;
  for (const auto& p : parts) {
    out.narrow(0, at_row, p.size(0)).copy_(p);
    at_row += p.size(0);
  }
  return out;
}

at::ScalarType checkpoint_type(const std::string& dtype) {
  return dtype == "F32" ? at::kFloat : dtype == "F16" ? at::kHalf : at::kBFloat16;  // checkpoint.h made it one of 3
}

// N(0, std^2) samples from gen, drawn in float32 and stored in dtype.
at::Tensor normal(at::Generator& gen, at::IntArrayRef size, double std, at::ScalarType dtype) {
  at::Tensor x = at::randn(size, gen, at::TensorOptions().dtype(at::kFloat));
  x.mul_(std);
  return dtype == at::kFloat ? x : x.to(dtype);
}

// RMSNorm, computed in float32 as Llama does, scaled by w in the model dtype.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  const bool f32 = x.scalar_type() == at::kFloat;
  at::Tensor xf = f32 ? x : x.to(at::kFloat);
  at::Tensor inv = xf.pow(2).mean(-1, /*keepdim=*/true).add_(eps).rsqrt_();
  at::Tensor y = xf * inv;
  if (!f32) y = y.to(x.scalar_type());
  return y.mul_(w);
}

// LayerNorm (Phi's), in the model dtype as torch.nn.LayerNorm computes it.
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps) {
  return at::layer_norm(x, {x.size(-1)}, w, b, eps);
}

// RoPE (rotate-half convention) of x [T, n, hd] into out [T, n, hd] (may be
// strided); cos, sin: [T, 1, hd/2].
void rope_into(const at::Tensor& out, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const std::int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  at::Tensor o1 = out.narrow(-1, 0, half), o2 = out.narrow(-1, half, half);
  at::mul_out(o1, x1, cos);
  o1.addcmul_(x2, sin, -1);
  at::mul_out(o2, x2, cos);
  o2.addcmul_(x1, sin, 1);
}

// ---- layers: the steps of one call ------------------------------------------------------------------------------

// kv_in as layers<group> on d may read it: empty, or that group's cache there.
const ValueImpl* need_kv(const std::string& op, const Value& kv_in, const Dev& d, int group) {
  const ValueImpl* kin = ValueAccess::get(kv_in);
  if (kin != nullptr) {
    if (kin->kind != Value::Kind::kKv) throw std::logic_error(op + ": kv_in is not a KV cache");
    if (kin->label != d.label) throw std::logic_error(op + ": kv_in is on " + kin->label + ", not " + d.label);
    if (kin->group != group)
      throw std::logic_error(op + ": kv_in is the KV cache of layers" + std::to_string(kin->group));
  }
  return kin;
}

// Decodes (one new token) attend in batches: buckets of sequences whose
// lengths are within 2x of each other, their caches gathered into a padded
// [kv_heads, rows, width, head_dim] block per layer. Longer steps (prefills,
// chunks) attend one sequence at a time.
struct Bucket {
  std::int64_t rows, width, at;          // at: where its indices start in StepLayout::idx
  bool ragged;                           // some sequence shorter than width: needs a padding mask
  at::Tensor row_idx, gather_idx, mask;  // on the device (upload_step)
};

// The host side of a step, all index arithmetic, in one int64 vector `idx`
// uploaded at once:
//  [keep: N source tokens of kv_in for the new cache] (only when something is kept)
//  [slots: T new tokens' places in the new cache]
//  per decode bucket: [rows: its sequences' rows in hidden] [gather: rows*width cache tokens] [lens: rows]
// Each sequence's tokens are contiguous in the new cache, in plan order: old
// ones first, then the new.
struct StepLayout {
  // Per sequence: where it starts in the new cache, its length there (old +
  // new tokens), its first row in the hidden state, where it started in kv_in (-1: nothing cached).
  std::vector<std::int64_t> start, len, offset, old_start;
  std::int64_t cached = 0;  // N, the new cache's tokens
  std::int64_t kept = 0;    // of them, carried over from kv_in
  std::vector<std::int64_t> idx;
  std::int64_t slots_at = 0;  // where the slots start in idx
  std::vector<Bucket> buckets;
  std::vector<std::size_t> singles;  // the sequences that attend alone
};

// Where each sequence goes in the new cache; a sequence with a position
// must find exactly that many cached tokens of its own in kv_in.
void place_sequences(const std::string& op, const StepPlan& plan, const ValueImpl* kin, StepLayout& L) {
  const std::size_t S = plan.seqs.size();
  L.start.assign(S, 0);
  L.len.assign(S, 0);
  L.offset.assign(S, 0);
  L.old_start.assign(S, -1);
  for (std::size_t i = 0, o = 0; i < S; ++i) {
    const SeqStep& s = plan.seqs[i];
    const std::int64_t t = static_cast<std::int64_t>(s.tokens.size());
    if (s.position > 0) {  // its cache must be there with exactly `position` tokens
      const std::int64_t k = kin ? kin->find(s.seq) : -1;
      if (k < 0)
        throw std::invalid_argument(op + ": sequence " + std::to_string(s.seq) + " has position " +
                                    std::to_string(s.position) + " but kv_in holds no cache for it");
      const std::int64_t cached = kin->len[static_cast<std::size_t>(k)];
      if (cached != s.position)
        throw std::invalid_argument(op + ": sequence " + std::to_string(s.seq) + " has position " +
                                    std::to_string(s.position) + " but kv_in caches " + std::to_string(cached) +
                                    " tokens of it");
      L.old_start[i] = kin->start[static_cast<std::size_t>(k)];
      L.kept += s.position;
    }
    L.start[i] = L.cached;
    L.len[i] = s.position + t;
    L.offset[i] = static_cast<std::int64_t>(o);
    L.cached += L.len[i];
    o += static_cast<std::size_t>(t);
  }
}

// The keep and slot sections of idx.
void index_cache(const StepPlan& plan, StepLayout& L) {
  const std::size_t S = plan.seqs.size();
  L.idx.reserve(static_cast<std::size_t>((L.kept > 0 ? L.cached : 0) + plan.tokens()));
  if (L.kept > 0)
    for (std::size_t i = 0; i < S; ++i)
      for (std::int64_t j = 0; j < L.len[i]; ++j)  // new tokens' slots take any source: they are overwritten
        L.idx.push_back(j < plan.seqs[i].position ? L.old_start[i] + j : 0);
  L.slots_at = static_cast<std::int64_t>(L.idx.size());
  for (std::size_t i = 0; i < S; ++i)
    for (std::int64_t j = plan.seqs[i].position; j < L.len[i]; ++j) L.idx.push_back(L.start[i] + j);
}

// The decode buckets (longest first) and their sections of idx; the rest
// attend alone.
void bucket_decodes(const StepPlan& plan, StepLayout& L) {
  const auto& len = L.len;
  std::vector<std::size_t> dec;
  for (std::size_t i = 0; i < plan.seqs.size(); ++i) (plan.seqs[i].tokens.size() == 1 ? dec : L.singles).push_back(i);
  std::sort(dec.begin(), dec.end(),
            [&](std::size_t a, std::size_t b) { return len[a] != len[b] ? len[a] > len[b] : a < b; });
  for (std::size_t b = 0; b < dec.size();) {
    std::size_t e = b + 1;
    while (e < dec.size() && 2 * len[dec[e]] >= len[dec[b]]) ++e;
    Bucket k{static_cast<std::int64_t>(e - b), len[dec[b]], static_cast<std::int64_t>(L.idx.size()), false, {}, {}, {}};
    for (std::size_t q = b; q < e; ++q) L.idx.push_back(L.offset[dec[q]]);
    for (std::size_t q = b; q < e; ++q)
      for (std::int64_t j = 0; j < k.width; ++j) L.idx.push_back(L.start[dec[q]] + (j < len[dec[q]] ? j : 0));
    for (std::size_t q = b; q < e; ++q) {
      L.idx.push_back(len[dec[q]]);
      k.ragged = k.ragged || len[dec[q]] < k.width;
    }
    L.buckets.push_back(std::move(k));
    b = e;
  }
}

StepLayout layout_step(const std::string& op, const StepPlan& plan, const ValueImpl* kin) {
  StepLayout L;
  place_sequences(op, plan, kin, L);
  index_cache(plan, L);
  bucket_decodes(plan, L);
  return L;
}

// The sizes every layer of the group works with.
struct LayerDims {
  std::int64_t H, KV, hd, rep, half, per, mlp;  // half: RoPE's pairs a head (rotary_dim / 2)
  double norm_eps;
  bool parallel, exact_gelu;
  at::ScalarType dt;
  at::TensorOptions opts;  // dt on the step's device

  LayerDims(const LlamaConfig& c, at::ScalarType dtype, const Dev& d)
      : H(c.heads),
        KV(c.kv_heads),
        hd(c.head_dim()),
        rep(H / KV),
        half((c.rotary_dim > 0 ? c.rotary_dim : hd) / 2),
        per(c.layers / c.groups),
        mlp(c.mlp),
        norm_eps(c.norm_eps),
        parallel(c.parallel_block),
        exact_gelu(c.exact_gelu),
        dt(dtype),
        opts(at::TensorOptions().dtype(dtype).device(d.device)) {}
};

// Sequences attending alone go over blocks of queries, at most ~64M score
// elements at a time; a block of more than one query needs a causal mask
// [tb, 1, keys] (true = masked).
struct Block {
  std::int64_t i0, tb;
  at::Tensor mask;
};

// What every layer of the step shares on the device.
struct StepTensors {
  at::Tensor cache;  // [per, 2 (K, V), KV, N, hd]: the new cache, the kept tokens in place
  at::Tensor slots;  // the new tokens' places in it
  // RoPE for every new token at its absolute position [T, 1, half]; the
  // query's 1/sqrt(hd) is folded into cos_q and sin_q.
  at::Tensor cos, sin, cos_q, sin_q;
  std::vector<std::vector<Block>> blocks;  // per sequence that attends alone
  at::Tensor kvbuf;                        // [T, 2, KV, hd]: a layer's new K (RoPE'd) and V
  at::Tensor attn;                         // [T, H hd]: a layer's attention output
};

// The new cache, exactly N tokens: what it keeps of kv_in gathered in one
// copy (which also drops the sequences the plan left out). Gathers index
// dim 1 of a 3-d view: LibTorch's CPU index_select is several times slower
// on a middle dim of a 5-d tensor.
at::Tensor new_cache(const ValueImpl* kin, const StepLayout& L, const at::Tensor& up_idx, const LayerDims& m) {
  const std::int64_t N = L.cached;
  return L.kept > 0 ? kin->cache.view({m.per * 2 * m.KV, kin->tokens, m.hd})
                          .index_select(1, up_idx.narrow(0, 0, N))
                          .view({m.per, 2, m.KV, N, m.hd})
                    : at::empty({m.per, 2, m.KV, N, m.hd}, m.opts);
}

// The buckets' index tensors, views of the uploaded idx, and their padding masks.
void bind_buckets(std::vector<Bucket>& buckets, const at::Tensor& up_idx, const Dev& d) {
  for (Bucket& k : buckets) {
    k.row_idx = up_idx.narrow(0, k.at, k.rows);
    k.gather_idx = up_idx.narrow(0, k.at + k.rows, k.rows * k.width);
    if (k.ragged) {
      at::Tensor lens = up_idx.narrow(0, k.at + k.rows + k.rows * k.width, k.rows);
      at::Tensor cols = at::arange(k.width, at::TensorOptions().dtype(at::kLong).device(d.device));
      k.mask = cols.unsqueeze(0).ge(lens.unsqueeze(1)).view({1, k.rows, 1, k.width});
    }
  }
}

// RoPE's rotation frequency of pair i, with Llama 3's scaling when the
// config has it (Hugging Face's _compute_llama3_parameters): long
// wavelengths slowed by `factor`, short ones kept, a smooth blend between.
double inv_freq(const LlamaConfig& c, std::int64_t i, std::int64_t hd) {
  const double f = 1.0 / std::pow(c.rope_theta, double(2 * i) / double(hd));
  if (c.rope_factor <= 0) return f;
  const double old_ctx = double(c.rope_original_context), wavelen = 2 * std::numbers::pi / f;
  if (wavelen < old_ctx / c.rope_high_freq_factor) return f;
  if (wavelen > old_ctx / c.rope_low_freq_factor) return f / c.rope_factor;
  const double smooth =
      (old_ctx / wavelen - c.rope_low_freq_factor) / (c.rope_high_freq_factor - c.rope_low_freq_factor);
  return (1 - smooth) * f / c.rope_factor + smooth * f;
}

// The RoPE tables, from one upload of [positions..., inv_freq...].
void rope_tables(const StepPlan& plan, const LlamaConfig& c, const LayerDims& m, const Dev& d, StepTensors& s) {
  const std::int64_t T = plan.tokens();
  std::vector<float> host(static_cast<std::size_t>(T + m.half));
  std::size_t n = 0;
  for (const SeqStep& q : plan.seqs)
    for (std::size_t i = 0; i < q.tokens.size(); ++i) host[n++] = static_cast<float>(q.position + std::int64_t(i));
  for (std::int64_t i = 0; i < m.half; ++i) host[n++] = static_cast<float>(inv_freq(c, i, 2 * m.half));
  at::Tensor up = upload(host, at::kFloat, d);
  at::Tensor angles = at::outer(up.narrow(0, 0, T), up.narrow(0, T, m.half));  // [T, half] float
  s.cos = angles.cos().to(m.dt).unsqueeze(1), s.sin = angles.sin().to(m.dt).unsqueeze(1);
  const double scale = 1.0 / std::sqrt(double(m.hd));
  s.cos_q = s.cos * scale, s.sin_q = s.sin * scale;
}

std::vector<std::vector<Block>> query_blocks(const StepPlan& plan, const StepLayout& L, std::int64_t H, const Dev& d) {
  std::vector<std::vector<Block>> blocks(plan.seqs.size());
  const std::int64_t budget = std::int64_t(1) << 26;
  for (std::size_t i : L.singles) {
    const std::int64_t p = plan.seqs[i].position, t = L.len[i] - p;
    const std::int64_t tb = std::max<std::int64_t>(1, std::min<std::int64_t>(t, budget / (H * L.len[i])));
    for (std::int64_t i0 = 0; i0 < t; i0 += tb) {
      Block b{i0, std::min(tb, t - i0), {}};
      if (b.tb > 1) {
        const auto lopts = at::TensorOptions().dtype(at::kLong).device(d.device);
        at::Tensor keys = at::arange(p + i0 + b.tb, lopts);
        at::Tensor queries = at::arange(p + i0, p + i0 + b.tb, lopts);
        b.mask = keys.unsqueeze(0).gt(queries.unsqueeze(1)).unsqueeze(1);
      }
      blocks[i].push_back(std::move(b));
    }
  }
  return blocks;
}

StepTensors upload_step(const StepPlan& plan, const ValueImpl* kin, StepLayout& L, const LlamaConfig& c,
                        const LayerDims& m, const Dev& d) {
  StepTensors s;
  const at::Tensor up_idx = upload(L.idx, at::kLong, d);
  s.cache = new_cache(kin, L, up_idx, m);
  s.slots = up_idx.narrow(0, L.slots_at, plan.tokens());
  bind_buckets(L.buckets, up_idx, d);
  rope_tables(plan, c, m, d, s);
  s.blocks = query_blocks(plan, L, m.H, d);
  s.kvbuf = at::empty({plan.tokens(), 2, m.KV, m.hd}, m.opts);
  s.attn = at::empty({plan.tokens(), m.H * m.hd}, m.opts);
  return s;
}

at::Tensor softmax(const at::Tensor& sc, at::ScalarType dt) {
  return dt == at::kFloat ? at::_softmax(sc, -1, false) : at::softmax(sc, -1, at::kFloat).to(dt);
}

// The decode buckets' attention of queries q [T, H, hd] over layer_cache
// [2, KV, N, hd], into their rows of attn.
void attend_buckets(const at::Tensor& q, const at::Tensor& layer_cache, const StepLayout& L, const LayerDims& m,
                    at::Tensor& attn) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const std::int64_t KV = m.KV, hd = m.hd, rep = m.rep;
  for (const Bucket& k : L.buckets) {
    // [2 KV, rows * width, hd]: K and V of the bucket's sequences, padded to width.
    at::Tensor g = layer_cache.view({2 * KV, L.cached, hd}).index_select(1, k.gather_idx);
    at::Tensor K = g.narrow(0, 0, KV).view({KV * k.rows, k.width, hd});
    at::Tensor V = g.narrow(0, KV, KV).view({KV * k.rows, k.width, hd});
    at::Tensor qb =
        q.index_select(0, k.row_idx).view({k.rows, KV, rep, hd}).permute({1, 0, 2, 3}).reshape({KV * k.rows, rep, hd});
    at::Tensor sc = at::bmm(qb, K.transpose(1, 2));  // [KV rows, rep, width]
    if (k.ragged) sc.view({KV, k.rows, rep, k.width}).masked_fill_(k.mask, neg_inf);
    at::Tensor ob = at::bmm(softmax(sc, m.dt), V);  // [KV rows, rep, hd]
    attn.index_copy_(0, k.row_idx, ob.view({KV, k.rows, rep, hd}).permute({1, 0, 2, 3}).reshape({k.rows, m.H * hd}));
  }
}

// The causal attention of each sequence that attends alone, block by block
// of its queries, into its rows of attn.
void attend_singles(const at::Tensor& q, const at::Tensor& layer_cache, const StepPlan& plan, const StepLayout& L,
                    const std::vector<std::vector<Block>>& blocks, const LayerDims& m, at::Tensor& attn) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const std::int64_t KV = m.KV, hd = m.hd, rep = m.rep;
  for (std::size_t i : L.singles) {
    const std::int64_t p = plan.seqs[i].position, t = L.len[i] - p, o = L.offset[i];
    at::Tensor seq_cache = layer_cache.narrow(2, L.start[i], L.len[i]);
    at::Tensor K = seq_cache.select(0, 0), V = seq_cache.select(0, 1);               // [KV, len, hd]
    at::Tensor qs = q.narrow(0, o, t).view({t, KV, rep, hd}).permute({1, 0, 2, 3});  // [KV, t, rep, hd]
    for (const Block& b : blocks[i]) {
      const std::int64_t keys = p + b.i0 + b.tb;
      at::Tensor qb = qs.narrow(1, b.i0, b.tb).reshape({KV, b.tb * rep, hd});
      at::Tensor sc = at::bmm(qb, K.narrow(1, 0, keys).transpose(1, 2));  // [KV, tb rep, keys]
      if (b.mask.defined()) sc.view({KV, b.tb, rep, keys}).masked_fill_(b.mask, neg_inf);
      at::Tensor pr = softmax(sc, m.dt);
      if (b.tb == 1) {  // one query: its output row is a contiguous [KV, rep, hd]
        at::Tensor row = attn.select(0, o + b.i0).view({KV, rep, hd});
        at::bmm_out(row, pr, V.narrow(1, 0, keys));
      } else {
        at::Tensor ob = at::bmm(pr, V.narrow(1, 0, keys));  // [KV, tb rep, hd]
        attn.narrow(0, o + b.i0, b.tb)
            .view({b.tb, KV, rep, hd})
            .copy_(ob.view({KV, b.tb, rep, hd}).permute({1, 0, 2, 3}));
      }
    }
  }
}

// Phi's parallel block: one LayerNorm, then attention (RoPE on the first
// rotary_dim dimensions of each head, the rest passed through; q scaled
// by 1 / sqrt(head_dim) whole) and fc1 -> GELU -> fc2 on the same input,
// both added to the residual.
at::Tensor parallel_layer(const at::Tensor& x_in, const at::Tensor* W, at::Tensor layer_cache, const StepPlan& plan,
                          const StepLayout& L, StepTensors& s, const LayerDims& m) {
  const std::int64_t T = plan.tokens(), H = m.H, KV = m.KV, hd = m.hd, rd = 2 * m.half;
  const at::Tensor a = layer_norm(x_in, W[kNorm1], W[kNorm1Bias], m.norm_eps);
  const at::Tensor qkv = at::addmm(W[kQkvBias], a, W[kQkv].t());  // [T, (H + 2 KV) hd]
  const at::Tensor qx = qkv.narrow(1, 0, H * hd).view({T, H, hd});
  const at::Tensor kx = qkv.narrow(1, H * hd, KV * hd).view({T, KV, hd});
  at::Tensor q = at::empty({T, H, hd}, m.opts);
  const at::Tensor k = s.kvbuf.select(1, 0);
  rope_into(q.narrow(-1, 0, rd), qx.narrow(-1, 0, rd), s.cos_q, s.sin_q);
  rope_into(k.narrow(-1, 0, rd), kx.narrow(-1, 0, rd), s.cos, s.sin);
  if (rd < hd) {
    q.narrow(-1, rd, hd - rd).copy_(qx.narrow(-1, rd, hd - rd)).mul_(1.0 / std::sqrt(double(hd)));
    k.narrow(-1, rd, hd - rd).copy_(kx.narrow(-1, rd, hd - rd));
  }
  s.kvbuf.select(1, 1).copy_(qkv.narrow(1, (H + KV) * hd, KV * hd).view({T, KV, hd}));
  layer_cache.index_copy_(2, s.slots, s.kvbuf.permute({1, 2, 0, 3}));  // layer_cache: [2, KV, N, hd]

  attend_buckets(q, layer_cache, L, m, s.attn);
  attend_singles(q, layer_cache, plan, L, s.blocks, m, s.attn);
  const at::Tensor up = at::addmm(W[kUpBias], a, W[kGateUp].t());  // [T, mlp]
  const at::Tensor act = at::gelu(up, m.exact_gelu ? "none" : "tanh");
  // x + attention's output + the MLP's, in transformers' order.
  at::Tensor x = at::addmm(W[kOBias], s.attn, W[kO].t());
  x.add_(at::addmm(W[kDownBias], act, W[kDown].t())).add_(x_in);
  return x;
}

// One decoder layer (weights W, its slice of the new cache) on hidden
// state x [T, hidden]: attention, with this step's K and V written into the
// cache first, then the MLP, each with its residual. Returns the new x.
at::Tensor decoder_layer(const at::Tensor& x_in, const at::Tensor* W, at::Tensor layer_cache, const StepPlan& plan,
                         const StepLayout& L, StepTensors& s, const LayerDims& m) {
  if (m.parallel) return parallel_layer(x_in, W, std::move(layer_cache), plan, L, s, m);
  const std::int64_t T = plan.tokens(), H = m.H, KV = m.KV, hd = m.hd;
  at::Tensor a = rms_norm(x_in, W[kNorm1], m.norm_eps);
  at::Tensor qkv =
      W[kQkvBias].defined() ? at::addmm(W[kQkvBias], a, W[kQkv].t()) : at::mm(a, W[kQkv].t());  // [T, (H + 2 KV) hd]
  at::Tensor q = at::empty({T, H, hd}, m.opts);
  rope_into(q, qkv.narrow(1, 0, H * hd).view({T, H, hd}), s.cos_q, s.sin_q);
  rope_into(s.kvbuf.select(1, 0), qkv.narrow(1, H * hd, KV * hd).view({T, KV, hd}), s.cos, s.sin);
  s.kvbuf.select(1, 1).copy_(qkv.narrow(1, (H + KV) * hd, KV * hd).view({T, KV, hd}));
  layer_cache.index_copy_(2, s.slots, s.kvbuf.permute({1, 2, 0, 3}));  // layer_cache: [2, KV, N, hd]

  attend_buckets(q, layer_cache, L, m, s.attn);
  attend_singles(q, layer_cache, plan, L, s.blocks, m, s.attn);
  at::Tensor x = at::addmm(x_in, s.attn, W[kO].t());
  a = rms_norm(x, W[kNorm2], m.norm_eps);
  at::Tensor gu = at::mm(a, W[kGateUp].t());  // [T, 2 mlp]
  at::Tensor act = at::silu(gu.narrow(1, 0, m.mlp)).mul_(gu.narrow(1, m.mlp, m.mlp));
  return at::addmm(x, act, W[kDown].t());
}
}  // namespace

struct LlamaModel::Impl {
  LlamaConfig cfg;
  at::ScalarType dtype;
  std::shared_ptr<const ckpt::Checkpoint> checkpoint;  // null: random weights

  using Key = std::pair<std::string, std::string>;  // (op, device label)
  mutable std::mutex mu;                            // guards the maps below, held briefly
  std::map<Key, std::shared_ptr<const OpWeights>> loaded;
  std::map<Key, std::shared_ptr<std::mutex>> loading;  // one load at a time per (op, device)
  std::map<std::string, std::shared_ptr<const Master>> masters;
  std::map<Key, std::shared_ptr<std::mutex>> mastering;  // keyed (op, "")

  std::shared_ptr<std::mutex> lock_for(std::map<Key, std::shared_ptr<std::mutex>>& m, const Key& k) {
    std::lock_guard<std::mutex> g(mu);
    auto& p = m[k];
    if (!p) p = std::make_shared<std::mutex>();
    return p;
  }

  std::shared_ptr<const OpWeights> weights(const std::string& op, const Dev& d) const {
    std::lock_guard<std::mutex> g(mu);
    auto it = loaded.find({op, d.label});
    if (it == loaded.end())
      throw std::logic_error(op + ": weights are not loaded on " + d.label + " (call load first)");
    return it->second;
  }

  // Tied embeddings: the embedding matrix already on d, which the head reads.
  at::Tensor tied_matrix(const Dev& d) const {
    std::lock_guard<std::mutex> g(mu);
    auto it = loaded.find({"embed", d.label});
    if (it == loaded.end())
      throw std::logic_error("head: tied embeddings: load embed on " + d.label +
                             " first (the head reads the embedding's matrix there)");
    return it->second->t[0];
  }

  std::uint64_t seed_for(std::uint64_t tag) const { return detail::mix(detail::mix(cfg.seed) ^ tag); }

  // The CPU master of op's weights, made once.
  std::shared_ptr<const Master> master(const std::string& op, int g) {
    auto m = lock_for(mastering, {op, ""});
    std::lock_guard<std::mutex> lk(*m);
    {
      std::lock_guard<std::mutex> gd(mu);
      auto it = masters.find(op);
      if (it != masters.end()) return it->second;
    }
    auto w = std::make_shared<const Master>(checkpoint ? from_checkpoint(g) : random(g));
    std::lock_guard<std::mutex> gd(mu);
    masters[op] = w;
    return w;
  }

  // Random weights. Each layer (and the embedding, the head) has its own
  // generator, so a layer's weights depend only on (seed, layer index), not
  // on `groups`.
  Master random(int g) const {
    const std::int64_t h = cfg.hidden, hd = cfg.head_dim();
    const auto opts = at::TensorOptions().dtype(dtype);
    Master w;
    if (g == detail::kEmbed) {
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed_for(1));
      w.slots = {{normal(gen, {cfg.vocab, h}, 1.0, dtype)}};
    } else if (g == detail::kHead) {
      w.slots = {{at::ones({h}, opts)}};
      if (!cfg.tied_embeddings) {
        at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed_for(2));
        w.slots.push_back({normal(gen, {cfg.vocab, h}, 1.0 / std::sqrt(double(h)), dtype)});
        if (cfg.parallel_block)  // the LayerNorm's bias, the LM head's
          w.slots.insert(w.slots.end(), {{at::zeros({h}, opts)}, {normal(gen, {cfg.vocab}, 0.1, dtype)}});
      }
    } else {
      const std::int64_t per = cfg.layers / cfg.groups;
      std::vector<at::Tensor> t(static_cast<std::size_t>(per * kPerLayer));
      // Layers are independent streams: generate them in parallel (the
      // normal sampler itself is serial).
      at::parallel_for(0, per, 1, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          const std::int64_t layer = g * per + i;
          const std::uint64_t s = seed_for(16 + static_cast<std::uint64_t>(layer));
          at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(s);
          auto gen_w = [&](at::IntArrayRef size, double std) { return normal(gen, size, std, dtype); };
          const double in_h = 1.0 / std::sqrt(double(h));
          at::Tensor* L = &t[static_cast<std::size_t>(i * kPerLayer)];
          L[kQkv] = gen_w({(cfg.heads + 2 * cfg.kv_heads) * hd, h}, in_h);
          L[kO] = gen_w({h, cfg.heads * hd}, 1.0 / std::sqrt(double(cfg.heads * hd)));
          L[kGateUp] = gen_w({2 * cfg.mlp, h}, in_h);
          L[kDown] = gen_w({h, cfg.mlp}, 1.0 / std::sqrt(double(cfg.mlp)));
          L[kNorm1] = at::ones({h}, opts);
          L[kNorm2] = at::ones({h}, opts);
          // Drawn last, so a model without biases draws the same weights.
          if (cfg.qkv_bias) L[kQkvBias] = gen_w({(cfg.heads + 2 * cfg.kv_heads) * hd}, in_h);
          if (cfg.parallel_block) {  // fc1 alone, fc2; biases; one LayerNorm
            L[kGateUp] = L[kGateUp].narrow(0, 0, cfg.mlp).clone();
            L[kNorm2] = at::Tensor();
            L[kOBias] = gen_w({h}, 0.1);
            L[kUpBias] = gen_w({cfg.mlp}, 0.1);
            L[kDownBias] = gen_w({h}, 0.1);
            L[kNorm1Bias] = at::zeros({h}, opts);
          }
        }
      });
      for (auto& x : t) w.slots.push_back(x.defined() ? std::vector<at::Tensor>{x} : std::vector<at::Tensor>{});
    }
    return w;
  }

  // A tensor of the checkpoint as a CPU tensor over its mapping (no copy):
  // the deleter holds the checkpoint, so the mapping outlives every view.
  // check() in the constructor made sure it is there with the right shape.
  at::Tensor view(const std::string& name) const {
    const ckpt::TensorView* v = checkpoint->find(name);
    const at::ScalarType type = checkpoint_type(v->dtype);
    at::Tensor t = at::from_blob(
        const_cast<void*>(v->data), v->shape, [keep = checkpoint](void*) {}, at::TensorOptions().dtype(type));
    // Safetensors does not promise aligned offsets; LibTorch's kernels
    // expect element alignment.
    if (reinterpret_cast<std::uintptr_t>(v->data) % at::elementSize(type) != 0) t = t.clone();
    return t;
  }

  Master from_checkpoint(int g) const {
    Master w;
    if (g == detail::kEmbed) {
      w.slots = {{view("model.embed_tokens.weight")}};
    } else if (g == detail::kHead) {
      if (cfg.parallel_block)
        w.slots = {{view("model.final_layernorm.weight")},
                   {view("lm_head.weight")},
                   {view("model.final_layernorm.bias")},
                   {view("lm_head.bias")}};
      else
        w.slots = {{view("model.norm.weight")}};
      if (!cfg.tied_embeddings && !cfg.parallel_block) w.slots.push_back({view("lm_head.weight")});
    } else {
      const std::int64_t per = cfg.layers / cfg.groups;
      for (std::int64_t i = 0; i < per; ++i) {
        const std::string p = "model.layers." + std::to_string(g * per + i) + ".";
        auto one = [&](const std::string& n) { return std::vector<at::Tensor>{view(p + n)}; };
        const std::string a = p + "self_attn.";
        if (cfg.parallel_block) {  // Phi: slots as OpWeights orders them
          w.slots.push_back({view(a + "q_proj.weight"), view(a + "k_proj.weight"), view(a + "v_proj.weight")});
          w.slots.push_back(one("self_attn.dense.weight"));
          w.slots.push_back(one("mlp.fc1.weight"));
          w.slots.push_back(one("mlp.fc2.weight"));
          w.slots.push_back(one("input_layernorm.weight"));
          w.slots.emplace_back();
          w.slots.push_back({view(a + "q_proj.bias"), view(a + "k_proj.bias"), view(a + "v_proj.bias")});
          w.slots.push_back(one("self_attn.dense.bias"));
          w.slots.push_back(one("mlp.fc1.bias"));
          w.slots.push_back(one("mlp.fc2.bias"));
          w.slots.push_back(one("input_layernorm.bias"));
          continue;
        }
        w.slots.push_back({view(a + "q_proj.weight"), view(a + "k_proj.weight"), view(a + "v_proj.weight")});
        w.slots.push_back(one("self_attn.o_proj.weight"));
        w.slots.push_back({view(p + "mlp.gate_proj.weight"), view(p + "mlp.up_proj.weight")});
        w.slots.push_back(one("mlp.down_proj.weight"));
        w.slots.push_back(one("input_layernorm.weight"));
        w.slots.push_back(one("post_attention_layernorm.weight"));
        if (cfg.qkv_bias)
          w.slots.push_back({view(a + "q_proj.bias"), view(a + "k_proj.bias"), view(a + "v_proj.bias")});
        else
          w.slots.emplace_back();
        for (int k = kOBias; k <= kNorm1Bias; ++k) w.slots.emplace_back();
      }
    }
    return w;
  }
};

LlamaModel::LlamaModel(LlamaConfig cfg) : impl_(std::make_unique<Impl>()) {
  validate(cfg);
  impl_->dtype = scalar_type(cfg.dtype);
  if (!cfg.checkpoint.empty()) {
    impl_->checkpoint = ckpt::Checkpoint::open(cfg.checkpoint);
    ckpt::check(*impl_->checkpoint, cfg);
  }
  impl_->cfg = std::move(cfg);
}
LlamaModel::~LlamaModel() = default;
LlamaModel::LlamaModel(LlamaModel&&) noexcept = default;
LlamaModel& LlamaModel::operator=(LlamaModel&&) noexcept = default;

const LlamaConfig& LlamaModel::config() const { return impl_->cfg; }

std::int64_t LlamaModel::load(const std::string& op, const std::string& device) {
  const int g = detail::parse_op(impl_->cfg, op);
  const Dev d = parse_device(device);
  const Impl::Key key{op, d.label};
  auto m = impl_->lock_for(impl_->loading, key);
  std::lock_guard<std::mutex> lk(*m);
  {
    std::lock_guard<std::mutex> gd(impl_->mu);
    auto it = impl_->loaded.find(key);
    if (it != impl_->loaded.end()) return it->second->bytes;
  }
  auto w = guarded("load " + op + " on " + d.label, [&] {
    c10::InferenceMode im;
    auto master = impl_->master(op, g);
    c10::OptionalDeviceGuard dg(d.device);
    std::vector<at::Tensor> t;
    t.reserve(master->slots.size() + 1);
    // A real copy even on the CPU: each virtual device owns its weights.
    for (const auto& parts : master->slots) t.push_back(stack_onto(parts, d.device, impl_->dtype));
    OpWeights w = finish(std::move(t));
    if (g == detail::kHead && impl_->cfg.tied_embeddings) w.t.push_back(impl_->tied_matrix(d));  // shared, uncounted
    return std::make_shared<const OpWeights>(std::move(w));
  });
  std::lock_guard<std::mutex> gd(impl_->mu);
  impl_->loaded[key] = w;
  return w->bytes;
}

std::int64_t LlamaModel::unload(const std::string& op, const std::string& device) {
  detail::parse_op(impl_->cfg, op);
  const Dev d = parse_device(device);
  std::shared_ptr<const OpWeights> dropped;  // freed outside the lock
  std::lock_guard<std::mutex> gd(impl_->mu);
  auto it = impl_->loaded.find({op, d.label});
  if (it == impl_->loaded.end()) return 0;
  if (op == "embed" && impl_->cfg.tied_embeddings && impl_->loaded.count({"head", d.label}))
    throw std::logic_error("unload embed on " + d.label + ": the head there shares its matrix (tied embeddings); " +
                           "unload head first");
  dropped = std::move(it->second);
  impl_->loaded.erase(it);
  return dropped->bytes;
}

bool LlamaModel::loaded(const std::string& op, const std::string& device) const {
  detail::parse_op(impl_->cfg, op);
  const Dev d = parse_device(device);
  std::lock_guard<std::mutex> gd(impl_->mu);
  return impl_->loaded.count({op, d.label}) != 0;
}

Value LlamaModel::embed(const StepPlan& plan, const std::string& device) {
  const std::string op = "embed";
  const Dev d = parse_device(device);
  auto w = impl_->weights(op, d);
  check_plan(op, plan);
  const LlamaConfig& c = impl_->cfg;
  std::vector<std::int64_t> ids;
  ids.reserve(static_cast<std::size_t>(plan.tokens()));
  for (const SeqStep& s : plan.seqs)
    for (std::int64_t id : s.tokens) {
      if (id < 0 || id >= c.vocab)
        throw std::invalid_argument(op + ": sequence " + std::to_string(s.seq) + " has token id " + std::to_string(id) +
                                    " outside [0, " + std::to_string(c.vocab) + ")");
      ids.push_back(id);
    }
  return guarded(op + " on " + d.label, [&] {
    c10::InferenceMode im;
    c10::OptionalDeviceGuard dg(d.device);
    return make_hidden(at::embedding(w->t[0], upload(ids, at::kLong, d)), d.label);
  });
}

Value LlamaModel::layers(int group, const Value& hidden, const Value& kv_in, const StepPlan& plan,
                         const std::string& device, Value& kv_out) {
  const LlamaConfig& c = impl_->cfg;
  if (group < 0 || group >= c.groups)
    throw std::invalid_argument("layers: group " + std::to_string(group) + " is outside [0, " +
                                std::to_string(c.groups) + ")");
  const std::string op = "layers" + std::to_string(group);
  const Dev d = parse_device(device);
  auto w = impl_->weights(op, d);
  check_plan(op, plan);
  const ValueImpl& x_in = need_hidden(op, hidden, d, plan.tokens(), c.hidden);
  const ValueImpl* kin = need_kv(op, kv_in, d, group);
  StepLayout layout = layout_step(op, plan, kin);

  return guarded(op + " on " + d.label, [&] {
    c10::InferenceMode im;
    c10::OptionalDeviceGuard dg(d.device);
    const LayerDims dims(c, impl_->dtype, d);
    StepTensors step = upload_step(plan, kin, layout, c, dims, d);
    at::Tensor x = x_in.hidden;  // never written: every layer makes a new tensor
    for (std::int64_t l = 0; l < dims.per; ++l)
      x = decoder_layer(x, &w->t[static_cast<std::size_t>(l * kPerLayer)], step.cache.select(0, l), plan, layout, step,
                        dims);

    std::vector<std::uint64_t> ids(plan.seqs.size());
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = plan.seqs[i].seq;
    Value out = make_hidden(std::move(x), d.label);
    kv_out =
        make_kv(group, std::move(step.cache), std::move(ids), std::move(layout.start), std::move(layout.len), d.label);
    return out;
  });
}

std::vector<std::int64_t> LlamaModel::head(const Value& hidden, const StepPlan& plan, const std::string& device) {
  return head_sampled(hidden, plan, device).tokens;
}

std::vector<float> LlamaModel::head_logits(const Value& hidden, const StepPlan& plan, const std::string& device) {
  std::vector<float> out;
  head_with(hidden, plan, device, [&](const at::Tensor& logits) {
    const at::Tensor l = logits.to(at::kFloat).contiguous().to(at::kCPU);
    out.assign(l.data_ptr<float>(), l.data_ptr<float>() + l.numel());
  });
  return out;
}

LlamaModel::Sampled LlamaModel::head_sampled(const Value& hidden, const StepPlan& plan, const std::string& device) {
  Sampled out;
  head_with(hidden, plan, device, [&](const at::Tensor& logits) { out = detail::sample(logits, plan); });
  return out;
}

// The head's logits [sequences, vocab] on `device`, handed to `use`.
void LlamaModel::head_with(const Value& hidden, const StepPlan& plan, const std::string& device,
                           const std::function<void(const at::Tensor&)>& use) {
  const std::string op = "head";
  const Dev d = parse_device(device);
  auto w = impl_->weights(op, d);
  check_plan(op, plan);
  const std::int64_t T = plan.tokens(), S = static_cast<std::int64_t>(plan.seqs.size());
  const ValueImpl& h = need_hidden(op, hidden, d, T, impl_->cfg.hidden);
  return guarded(op + " on " + d.label, [&] {
    c10::InferenceMode im;
    c10::OptionalDeviceGuard dg(d.device);
    at::Tensor x = h.hidden;
    if (T != S) {  // keep each sequence's last token only
      std::vector<std::int64_t> last(static_cast<std::size_t>(S));
      std::int64_t o = 0;
      for (std::int64_t i = 0; i < S; ++i) {
        o += static_cast<std::int64_t>(plan.seqs[static_cast<std::size_t>(i)].tokens.size());
        last[static_cast<std::size_t>(i)] = o - 1;
      }
      x = at::index_select(x, 0, upload(last, at::kLong, d));
    }
    if (impl_->cfg.parallel_block)  // LayerNorm, and the LM head's bias
      use(at::addmm(w->t[3], layer_norm(x, w->t[0], w->t[2], impl_->cfg.norm_eps), w->t[1].t()));
    else
      use(at::mm(rms_norm(x, w->t[0], impl_->cfg.norm_eps), w->t[1].t()));  // [S, vocab]; use waits for the device
  });
}

namespace {

// A copy of t on device d (its own storage, even CPU -> CPU), by the
// rules of copy_to. Under the caller's inference mode and device guard.
at::Tensor copy_tensor(const at::Tensor& t, const Dev& d, cuda::NcclLinks* nccl) {
  const c10::Device from = t.device();
  if (from.is_cuda() && d.device.is_cuda()) {
    if (nccl != nullptr && nccl->connects(from.index(), d.device.index())) {
      const at::Tensor s = t.contiguous();
      at::Tensor out = at::empty_like(s, s.options().device(d.device));
      nccl->send_recv(s.data_ptr(), out.data_ptr(), s.nbytes(), from.index(), d.device.index());
      return out;
    }
    return t.to(d.device, t.scalar_type(), /*non_blocking=*/true, /*copy=*/true);
  }
  if (from.is_cuda()) {  // to the host: DMA into pinned memory, then wait for it
    at::Tensor out = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
    out.copy_(t, /*non_blocking=*/true);
    c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(from).synchronize();
    return out;
  }
  if (d.device.is_cuda())  // from the host: staged in pinned memory, DMA'd asynchronously
    return t.pin_memory().to(d.device, t.scalar_type(), /*non_blocking=*/true, /*copy=*/false);
  return t.clone(at::MemoryFormat::Contiguous);  // one virtual CPU device to another
}

}  // namespace

Value LlamaModel::copy_to(const Value& v, const std::string& device, cuda::NcclLinks* nccl) {
  const ValueImpl* src = ValueAccess::get(v);
  const Dev d = parse_device(device);
  if (src == nullptr) return Value();
  return guarded("copy " + src->label + " -> " + d.label, [&] {
    c10::InferenceMode im;
    c10::OptionalDeviceGuard dg(d.device);
    if (src->kind == Value::Kind::kHidden) return make_hidden(copy_tensor(src->hidden, d, nccl), d.label);
    return make_kv(src->group, copy_tensor(src->cache, d, nccl), src->seqs, src->start, src->len, d.label);
  });
}

Value LlamaModel::select_kv(const Value& kv, std::uint64_t seq, const std::string& device) {
  const ValueImpl* src = ValueAccess::get(kv);
  const Dev d = parse_device(device);
  if (src == nullptr || src->kind != Value::Kind::kKv)
    throw std::invalid_argument("select_kv: sequence " + std::to_string(seq) + ": the value is not a KV cache");
  const std::int64_t k = src->find(seq);
  if (k < 0)
    throw std::invalid_argument("select_kv: the KV cache of layers" + std::to_string(src->group) +
                                " holds no part of sequence " + std::to_string(seq));
  const auto i = static_cast<std::size_t>(k);
  return guarded("select_kv " + src->label + " -> " + d.label, [&] {
    c10::InferenceMode im;
    c10::OptionalDeviceGuard dg(d.device);
    // (contiguous first: a narrowed view keeps the whole cache's storage)
    const at::Tensor part = src->cache.narrow(3, src->start[i], src->len[i]).contiguous();
    return make_kv(src->group, copy_tensor(part, d, nullptr), {seq}, {0}, {src->len[i]}, d.label);
  });
}

Value LlamaModel::join_kv(const std::vector<Value>& parts, const std::string& device) {
  const Dev d = parse_device(device);
  std::vector<const ValueImpl*> in;
  for (const Value& v : parts)
    if (const ValueImpl* p = ValueAccess::get(v)) in.push_back(p);
  if (in.empty()) return Value();
  std::unordered_set<std::uint64_t> seen;
  for (const ValueImpl* p : in) {
    if (p->kind != Value::Kind::kKv) throw std::invalid_argument("join_kv: a part is not a KV cache");
    if (p->label != d.label)
      throw std::invalid_argument("join_kv: a part lives on " + p->label + ", not on " + d.label);
    if (p->group != in[0]->group || p->cache.dim() != 5 || p->cache.scalar_type() != in[0]->cache.scalar_type() ||
        p->cache.size(0) != in[0]->cache.size(0) || p->cache.size(2) != in[0]->cache.size(2) ||
        p->cache.size(4) != in[0]->cache.size(4))
      throw std::invalid_argument("join_kv: a part of layers" + std::to_string(p->group) +
                                  " does not match the shape of layers" + std::to_string(in[0]->group) + "'s cache");
    for (std::uint64_t s : p->seqs)
      if (!seen.insert(s).second)
        throw std::invalid_argument("join_kv: sequence " + std::to_string(s) + " is in two parts");
  }
  if (in.size() == 1)  // (immutable: the part itself)
    for (const Value& v : parts)
      if (!v.empty()) return v;
  return guarded("join_kv on " + d.label, [&] {
    c10::InferenceMode im;
    c10::OptionalDeviceGuard dg(d.device);
    std::vector<at::Tensor> caches;
    std::vector<std::uint64_t> seqs;
    std::vector<std::int64_t> start, len;
    std::int64_t at = 0;
    for (const ValueImpl* p : in) {
      caches.push_back(p->cache);
      for (std::size_t i = 0; i < p->seqs.size(); ++i) {
        seqs.push_back(p->seqs[i]);
        start.push_back(at + p->start[i]);
        len.push_back(p->len[i]);
      }
      at += p->cache.size(3);
    }
    return make_kv(in[0]->group, at::cat(caches, 3), std::move(seqs), std::move(start), std::move(len), d.label);
  });
}

// Wire form: a fixed little-endian header, the metadata, then the tensor's
// bytes exactly as it holds them (contiguous, host order).
namespace {

struct WireHeader {
  char magic[4] = {'S', 'L', 'V', '1'};
  std::int32_t kind = 0, group = -1, dtype = 0, dims = 0;
  std::int64_t seqs = 0, data = 0;
  std::int64_t sizes[5] = {};
};

template <class T>
void put(std::string& out, const T* p, std::size_t n) {
  out.append(reinterpret_cast<const char*>(p), n * sizeof(T));
}

}  // namespace

std::string LlamaModel::to_bytes(const Value& v) {
  const ValueImpl* src = ValueAccess::get(v);
  if (src == nullptr) return {};
  return guarded("serialize " + src->label, [&] {
    c10::InferenceMode im;
    const at::Tensor& t0 = src->kind == Value::Kind::kHidden ? src->hidden : src->cache;
    // A GPU value is read back through the host (waits for the device).
    at::Tensor t = t0.to(at::kCPU).contiguous();
    WireHeader h;
    h.kind = static_cast<std::int32_t>(src->kind);
    h.group = src->group;
    h.dtype = static_cast<std::int32_t>(t.scalar_type());
    h.dims = static_cast<std::int32_t>(t.dim());
    if (h.dims > 5) throw std::logic_error("serialize: a value of " + std::to_string(h.dims) + " dimensions");
    for (int i = 0; i < h.dims; ++i) h.sizes[i] = t.size(i);
    h.seqs = static_cast<std::int64_t>(src->seqs.size());
    h.data = static_cast<std::int64_t>(t.nbytes());
    std::string out;
    out.reserve(sizeof h + static_cast<std::size_t>(h.seqs) * 24 + static_cast<std::size_t>(h.data));
    put(out, &h, 1);
    put(out, src->seqs.data(), src->seqs.size());
    put(out, src->start.data(), src->start.size());
    put(out, src->len.data(), src->len.size());
    out.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
    return out;
  });
}

Value LlamaModel::from_bytes(std::string_view bytes, const std::string& device) {
  const Dev d = parse_device(device);
  if (bytes.empty()) return Value();
  WireHeader h;
  if (bytes.size() < sizeof h) throw std::invalid_argument("deserialize: " + std::to_string(bytes.size()) + " bytes");
  std::memcpy(&h, bytes.data(), sizeof h);
  const std::size_t meta = static_cast<std::size_t>(h.seqs) * 3 * 8;
  if (std::memcmp(h.magic, "SLV1", 4) != 0 || h.dims < 1 || h.dims > 5 || h.seqs < 0 || h.data < 0 ||
      bytes.size() != sizeof h + meta + static_cast<std::size_t>(h.data))
    throw std::invalid_argument("deserialize: not a value (bad header or " + std::to_string(bytes.size()) + " bytes)");
  return guarded("deserialize onto " + d.label, [&] {
    c10::InferenceMode im;
    const char* p = bytes.data() + sizeof h;
    std::vector<std::uint64_t> seqs(static_cast<std::size_t>(h.seqs));
    std::vector<std::int64_t> start(seqs.size()), len(seqs.size());
    if (!seqs.empty()) {  // (a hidden state has none: data() may be null, which memcpy must not get)
      std::memcpy(seqs.data(), p, seqs.size() * 8);
      std::memcpy(start.data(), p + seqs.size() * 8, seqs.size() * 8);
      std::memcpy(len.data(), p + seqs.size() * 16, seqs.size() * 8);
    }
    const std::vector<std::int64_t> sizes(h.sizes, h.sizes + h.dims);
    at::Tensor host = at::empty(sizes, at::TensorOptions().dtype(static_cast<at::ScalarType>(h.dtype)));
    if (static_cast<std::int64_t>(host.nbytes()) != h.data)
      throw std::invalid_argument("deserialize: " + std::to_string(h.data) + " data bytes for a tensor of " +
                                  std::to_string(host.nbytes()));
    if (host.nbytes() > 0) std::memcpy(host.data_ptr(), p + meta, host.nbytes());
    at::Tensor t = d.device.is_cuda() ? host.to(d.device) : host;
    if (static_cast<Value::Kind>(h.kind) == Value::Kind::kHidden) return make_hidden(std::move(t), d.label);
    return make_kv(h.group, std::move(t), std::move(seqs), std::move(start), std::move(len), d.label);
  });
}

ValueLayout LlamaModel::layout(const Value& v) {
  const ValueImpl* src = ValueAccess::get(v);
  ValueLayout l;
  if (src == nullptr) return l;
  const at::Tensor& t = src->kind == Value::Kind::kHidden ? src->hidden : src->cache;
  l.kind = src->kind;
  l.group = src->group;
  l.dtype = static_cast<int>(t.scalar_type());
  l.sizes = t.sizes().vec();
  l.seqs = src->seqs;
  l.start = src->start;
  l.len = src->len;
  l.data_bytes = static_cast<std::int64_t>(t.nbytes());
  return l;
}

std::string LlamaModel::encode(const ValueLayout& l) {
  WireHeader h;
  if (l.sizes.empty() || l.sizes.size() > 5 || l.start.size() != l.seqs.size() || l.len.size() != l.seqs.size())
    throw std::invalid_argument("encode: a layout of " + std::to_string(l.sizes.size()) + " dimensions and " +
                                std::to_string(l.seqs.size()) + " sequences");
  h.kind = static_cast<std::int32_t>(l.kind);
  h.group = l.group;
  h.dtype = l.dtype;
  h.dims = static_cast<std::int32_t>(l.sizes.size());
  for (std::size_t i = 0; i < l.sizes.size(); ++i) h.sizes[i] = l.sizes[i];
  h.seqs = static_cast<std::int64_t>(l.seqs.size());
  h.data = l.data_bytes;
  std::string out;
  put(out, &h, 1);
  put(out, l.seqs.data(), l.seqs.size());
  put(out, l.start.data(), l.start.size());
  put(out, l.len.data(), l.len.size());
  return out;
}

ValueLayout LlamaModel::decode(std::string_view bytes) {
  WireHeader h;
  if (bytes.size() < sizeof h)
    throw std::invalid_argument("decode: a layout of " + std::to_string(bytes.size()) + " bytes");
  std::memcpy(&h, bytes.data(), sizeof h);
  const auto kind = static_cast<Value::Kind>(h.kind);
  if (std::memcmp(h.magic, "SLV1", 4) != 0 || h.dims < 1 || h.dims > 5 || h.seqs < 0 || h.data < 0 ||
      (kind != Value::Kind::kHidden && kind != Value::Kind::kKv) ||
      bytes.size() != sizeof h + static_cast<std::size_t>(h.seqs) * 3 * 8)
    throw std::invalid_argument("decode: not a layout (bad header or " + std::to_string(bytes.size()) + " bytes)");
  ValueLayout l;
  l.kind = kind;
  l.group = h.group;
  l.dtype = h.dtype;
  l.sizes.assign(h.sizes, h.sizes + h.dims);
  l.seqs.resize(static_cast<std::size_t>(h.seqs));
  l.start.resize(l.seqs.size());
  l.len.resize(l.seqs.size());
  const char* p = bytes.data() + sizeof h;
  if (!l.seqs.empty()) {  // (as in from_bytes: no null pointer to memcpy)
    std::memcpy(l.seqs.data(), p, l.seqs.size() * 8);
    std::memcpy(l.start.data(), p + l.seqs.size() * 8, l.seqs.size() * 8);
    std::memcpy(l.len.data(), p + l.seqs.size() * 16, l.seqs.size() * 8);
  }
  l.data_bytes = h.data;
  return l;
}

Value LlamaModel::allocate(const ValueLayout& l, const std::string& device) {
  const Dev d = parse_device(device);
  if (l.kind == Value::Kind::kEmpty) return Value();
  return guarded("allocate on " + d.label, [&] {
    c10::InferenceMode im;
    c10::OptionalDeviceGuard dg(d.device);
    if (l.dtype < 0 || l.dtype >= static_cast<int>(at::ScalarType::NumOptions))
      throw std::invalid_argument("allocate: element type " + std::to_string(l.dtype));
    at::Tensor t = at::empty(l.sizes, at::TensorOptions().dtype(static_cast<at::ScalarType>(l.dtype)).device(d.device));
    if (static_cast<std::int64_t>(t.nbytes()) != l.data_bytes)
      throw std::invalid_argument("allocate: " + std::to_string(l.data_bytes) + " data bytes for a tensor of " +
                                  std::to_string(t.nbytes()));
    if (l.kind == Value::Kind::kHidden) return make_hidden(std::move(t), d.label);
    return make_kv(l.group, std::move(t), l.seqs, l.start, l.len, d.label);
  });
}

Value LlamaModel::contiguous(const Value& v) {
  const ValueImpl* src = ValueAccess::get(v);
  if (src == nullptr) return v;
  const at::Tensor& t = src->kind == Value::Kind::kHidden ? src->hidden : src->cache;
  if (t.is_contiguous()) return v;
  return guarded("contiguous " + src->label, [&] {
    c10::InferenceMode im;
    c10::OptionalDeviceGuard dg(t.device());
    if (src->kind == Value::Kind::kHidden) return make_hidden(t.contiguous(), src->label);
    return make_kv(src->group, t.contiguous(), src->seqs, src->start, src->len, src->label);
  });
}

void* LlamaModel::data(const Value& v) {
  const ValueImpl* src = ValueAccess::get(v);
  if (src == nullptr) return nullptr;
  const at::Tensor& t = src->kind == Value::Kind::kHidden ? src->hidden : src->cache;
  if (!t.is_contiguous()) throw std::logic_error("data: " + src->label + " value is not contiguous");
  return t.data_ptr();
}

void LlamaModel::synchronize(const std::string& device) {
  const Dev d = parse_device(device);
  if (!d.device.is_cuda()) return;
  guarded("synchronize " + d.label,
          [&] { c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(d.device).synchronize(); });
}

void LlamaModel::bind_thread_stream(const std::string& device) {
  const Dev d = parse_device(device);
  if (!d.device.is_cuda()) return;
  thread_local std::unordered_set<int> bound;  // device indices this thread has a stream on
  if (!bound.insert(d.device.index()).second) return;
  guarded("stream for " + d.label, [&] {
    const auto* impl = c10::impl::getDeviceGuardImpl(c10::kCUDA);
    impl->exchangeStream(impl->getStreamFromGlobalPool(d.device));
  });
}

std::vector<std::vector<std::int64_t>> LlamaModel::generate_reference(
    const std::vector<std::vector<std::int64_t>>& prompts, int max_new, const std::string& device) {
  const LlamaConfig& c = impl_->cfg;
  if (max_new < 0) throw std::invalid_argument("generate_reference: max_new must be >= 0");
  load("embed", device);
  for (int g = 0; g < c.groups; ++g) load("layers" + std::to_string(g), device);
  load("head", device);
  std::vector<std::vector<std::int64_t>> out;
  out.reserve(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    std::vector<std::int64_t> gen;
    StepPlan plan;
    plan.seqs.push_back(SeqStep{i, 0, prompts[i]});
    std::vector<Value> kv(static_cast<std::size_t>(c.groups));
    for (int n = 0; n < max_new; ++n) {
      Value x = embed(plan, device);
      for (int g = 0; g < c.groups; ++g) x = layers(g, x, kv[std::size_t(g)], plan, device, kv[std::size_t(g)]);
      const std::int64_t next = head(x, plan, device)[0];
      gen.push_back(next);
      SeqStep& s = plan.seqs[0];
      s.position += static_cast<std::int64_t>(s.tokens.size());
      s.tokens.assign(1, next);
    }
    out.push_back(std::move(gen));
  }
  return out;
}

// ---- Value --------------------------------------------------------------------------------------------------------

Value::Kind Value::kind() const { return impl_ ? impl_->kind : Kind::kEmpty; }
std::int64_t Value::bytes() const { return impl_ ? impl_->bytes : 0; }
std::string Value::device() const { return impl_ ? impl_->label : std::string(); }
std::int64_t Value::tokens() const { return impl_ ? impl_->tokens : 0; }

std::vector<std::uint64_t> Value::sequences() const {
  return impl_ && impl_->kind == Kind::kKv ? impl_->seqs : std::vector<std::uint64_t>();
}

std::int64_t Value::cached_tokens(std::uint64_t seq) const {
  if (!impl_ || impl_->kind != Kind::kKv) return -1;
  const std::int64_t i = impl_->find(seq);
  return i < 0 ? -1 : impl_->len[static_cast<std::size_t>(i)];
}

int Value::group() const { return impl_ && impl_->kind == Kind::kKv ? impl_->group : -1; }

std::vector<float> Value::to_floats() const {
  if (!impl_) return {};
  return guarded("to_floats on " + impl_->label, [&] {
    c10::InferenceMode im;
    std::vector<float> out;
    auto append = [&](const at::Tensor& t) {
      at::Tensor h = t.to(at::kCPU, at::kFloat).contiguous();
      const float* p = h.data_ptr<float>();
      out.insert(out.end(), p, p + h.numel());
    };
    append(impl_->kind == Kind::kHidden ? impl_->hidden : impl_->cache);
    return out;
  });
}

bool cuda_available() { return cached_cuda_count() > 0; }

int cuda_ordinal(const std::string& device) {
  const Dev d = parse_device(device);
  return d.device.is_cuda() ? d.device.index() : -1;
}

void set_cpu_threads(int n) {
  if (n < 1) throw std::invalid_argument("threads: expected >= 1, got " + std::to_string(n));
  at::set_num_threads(n);
  // LibTorch hands matrix products to the system BLAS; OpenBLAS keeps its
  // own thread pool, sized here too when it is the one loaded.
  using SetThreads = void (*)(int);
  if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}
int cuda_device_count() { return cached_cuda_count(); }

}  // namespace slicesched::rt
