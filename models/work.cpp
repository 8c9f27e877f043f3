module;
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

module slicesched.models.work;

namespace slicesched {

namespace {

constexpr std::array<std::string_view, kSublayers> kNames = {
    "embedding", "input_layernorm", "q_proj",         "k_proj",    "v_proj",  "rope",
    "attn",      "o_proj",          "post_layernorm", "gate_proj", "up_proj", "act_fn",
    "down_proj", "final_layernorm", "lm_head",        "add"};

// A layer's kernels: sequential or parallel block, gated or plain MLP.
constexpr std::array<Sublayer, 12> kLayer = {Sublayer::kInputNorm, Sublayer::kQProj,    Sublayer::kKProj,
                                             Sublayer::kVProj,     Sublayer::kRope,     Sublayer::kAttn,
                                             Sublayer::kOProj,     Sublayer::kPostNorm, Sublayer::kGateProj,
                                             Sublayer::kUpProj,    Sublayer::kActFn,    Sublayer::kDownProj};
constexpr std::array<Sublayer, 11> kLayerPlainMlp = {
    Sublayer::kInputNorm, Sublayer::kQProj,    Sublayer::kKProj,  Sublayer::kVProj, Sublayer::kRope,    Sublayer::kAttn,
    Sublayer::kOProj,     Sublayer::kPostNorm, Sublayer::kUpProj, Sublayer::kActFn, Sublayer::kDownProj};
constexpr std::array<Sublayer, 12> kParallelLayer = {Sublayer::kInputNorm, Sublayer::kQProj,    Sublayer::kKProj,
                                                     Sublayer::kVProj,     Sublayer::kRope,     Sublayer::kAttn,
                                                     Sublayer::kOProj,     Sublayer::kGateProj, Sublayer::kUpProj,
                                                     Sublayer::kActFn,     Sublayer::kDownProj, Sublayer::kResidualAdd};
constexpr std::array<Sublayer, 11> kParallelLayerPlainMlp = {
    Sublayer::kInputNorm, Sublayer::kQProj,    Sublayer::kKProj,      Sublayer::kVProj,
    Sublayer::kRope,      Sublayer::kAttn,     Sublayer::kOProj,      Sublayer::kUpProj,
    Sublayer::kActFn,     Sublayer::kDownProj, Sublayer::kResidualAdd};

// A matrix product of `rows` rows through an in x out weight: its FLOPs, and
// the weight, the input rows and the output rows through HBM once each.
Work gemm(double rows, double in, double out, double eb, bool bias) {
  return {WorkKind::kGemm, 2 * rows * in * out, eb * (in * out + rows * (in + out) + (bias ? out : 0))};
}

}  // namespace

std::string_view work_kind_name(WorkKind k) {
  switch (k) {
    case WorkKind::kGemm:
      return "gemm";
    case WorkKind::kAttention:
      return "attention";
    case WorkKind::kElementwise:
      return "elementwise";
    case WorkKind::kEmbedding:
      return "embedding";
    case WorkKind::kKvRead:
      return "kv_read";
    case WorkKind::kStreaming:
      return "streaming";
  }
  return "?";
}

std::string_view sublayer_name(Sublayer l) { return kNames[static_cast<std::size_t>(l)]; }

std::optional<Sublayer> sublayer_from_name(std::string_view name) {
  for (std::size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<Sublayer>(i);
  return std::nullopt;
}

WorkKind sublayer_kind(Sublayer l) {
  switch (l) {
    case Sublayer::kEmbedding:
      return WorkKind::kEmbedding;
    case Sublayer::kQProj:
    case Sublayer::kKProj:
    case Sublayer::kVProj:
    case Sublayer::kOProj:
    case Sublayer::kGateProj:
    case Sublayer::kUpProj:
    case Sublayer::kDownProj:
    case Sublayer::kLmHead:
      return WorkKind::kGemm;
    case Sublayer::kAttn:
      return WorkKind::kAttention;
    case Sublayer::kResidualAdd:
      return WorkKind::kStreaming;
    default:
      return WorkKind::kElementwise;
  }
}

std::span<const Sublayer> decoder_layer_sublayers(const DenseShape& s) {
  if (s.parallel_block) return s.gated_mlp ? std::span<const Sublayer>(kParallelLayer) : kParallelLayerPlainMlp;
  return s.gated_mlp ? std::span<const Sublayer>(kLayer) : kLayerPlainMlp;
}

Work sublayer_work(const DenseShape& s, const SublayerCall& c) {
  const double eb = static_cast<double>(s.elem_bytes), n = c.rows;
  const double h = static_cast<double>(s.hidden), q = static_cast<double>(s.heads * s.head_dim);
  const double kv = static_cast<double>(s.kv_heads * s.head_dim), m = static_cast<double>(s.mlp);
  Work w;
  switch (c.layer) {
    case Sublayer::kEmbedding:  // gather one row per token, write it out; read the token ids
      w = {WorkKind::kEmbedding, 0, 2 * eb * n * h + 8 * n};
      break;
    case Sublayer::kInputNorm:
    case Sublayer::kPostNorm:
    case Sublayer::kFinalNorm:  // the norm and the residual add before it: read twice, write once
      // (LayerNorm's mean is one more pass per element, and it reads a bias
      // beside its weight)
      w = {WorkKind::kElementwise, (s.layer_norm ? 8 : 5) * n * h, eb * (3 * n * h + (s.layer_norm ? 2 * h : h))};
      break;
    case Sublayer::kResidualAdd: {
      // One add: read two, write one. A parallel block's attention and MLP
      // outputs join the residual in two (as vLLM's Phi and Vidur's
      // profiler run them: `attn + mlp + residual`).
      const double adds = s.parallel_block ? 2 : 1;
      w = {WorkKind::kStreaming, adds * n * h, adds * 3 * eb * n * h};
      break;
    }
    case Sublayer::kQProj:
      w = gemm(n, h, q, eb, s.qkv_bias);
      break;
    case Sublayer::kKProj:
    case Sublayer::kVProj:
      w = gemm(n, h, kv, eb, s.qkv_bias);
      break;
    case Sublayer::kOProj:
      w = gemm(n, q, h, eb, s.linear_bias);
      break;
    case Sublayer::kGateProj:
    case Sublayer::kUpProj:
      w = gemm(n, h, m, eb, s.linear_bias);
      break;
    case Sublayer::kDownProj:
      w = gemm(n, m, h, eb, s.linear_bias);
      break;
    case Sublayer::kLmHead:
      w = gemm(n, h, static_cast<double>(s.vocab), eb, s.linear_bias);
      break;
    case Sublayer::kRope: {
      // Rotate q and k: the rotary part of each head turns, and the whole
      // rows are read and written (transformers' partial RoPE copies the
      // rest back beside it; Vidur's profiler turns whole heads even for
      // Phi-2, so no measured row tells a partial kernel's bytes apart).
      const double hd = static_cast<double>(s.head_dim);
      const double part =
          s.rotary_dim > 0 && s.head_dim > 0 ? std::min(1.0, static_cast<double>(s.rotary_dim) / hd) : 1;
      w = {WorkKind::kElementwise, 3 * n * (q + kv) * part, 2 * eb * n * (q + kv)};
      break;
    }
    case Sublayer::kActFn:  // SiLU(gate) * up: read two, write one; GELU(up) (tanh's): read one, write one
      w = s.gated_mlp ? Work{WorkKind::kElementwise, 5 * n * m, 3 * eb * n * m}
                      : Work{WorkKind::kElementwise, 8 * n * m, 2 * eb * n * m};
      break;
    case Sublayer::kAttn: {
      const double seqs = c.sequences > 0 ? c.sequences : 1;
      const double t = n / seqs, ctx = c.context / seqs;
      const double pairs = seqs * t * (ctx + (t + 1) / 2);
      // QK^T and PV: 2 FLOPs a multiply-add, twice, per head dim per pair.
      w = {WorkKind::kAttention, 4 * q * pairs, eb * (2 * n * q + 2 * kv * n), eb * 2 * kv * c.context};
      break;
    }
  }
  w.flops *= c.count;
  w.bytes *= c.count;
  w.cache_bytes *= c.count;
  return w;
}

}  // namespace slicesched
