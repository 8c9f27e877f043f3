// SliceScheduler's live-mode compute: a Llama (3) model split into the
// operators the scheduler places, `embed`, `layers0` .. `layers{G-1}` (each
// L/G consecutive decoder layers) and `head`, plus the copies between
// devices. The executor orchestrates; this library only computes and copies.
//
// Plain C++ with no LibTorch include, so that C++20 module code can include
// it in a global module fragment; LibTorch lives in runtime_model.cpp only.
// Use: #include "executor/torch/runtime.h", link slicesched_torch (CMake
// builds it only when LibTorch is found: SLICESCHED_HAVE_TORCH).
//
// Devices are strings: "cpu", "cpu:N", "cuda", "cuda:N" ("cuda" means
// "cuda:0"; "cpu:0" means "cpu"). Every "cpu:N" is a separate *virtual*
// device: it computes on the host CPU, but its weights and values are its own
// copies, and an operator refuses a Value labelled with another device. That
// lets the executor run several virtual accelerators on one CPU with the same
// copies (and memory) as real ones, and catches a forgotten copy_to.
//
// Failure: every function reports a bad argument by throwing
// std::invalid_argument (one line, naming the field / op / sequence), a call
// out of order (weights not loaded, input on another device) by throwing
// std::logic_error naming the op, running out of device memory by throwing
// DeviceOutOfMemory, and any other LibTorch error as std::runtime_error whose
// message starts with the op and device. No function leaves an observable
// partial result behind: outputs are assigned only on success.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace at {
class Tensor;  // (LlamaModel's private head_with; no LibTorch include here)
}

namespace slicesched::rt {

namespace cuda {
class NcclLinks;  // executor/torch/cuda.h
}

struct LlamaConfig {
  std::string name;  // "llama-tiny", "llama3-8b"; only for messages
  std::int64_t vocab = 128256, hidden = 4096, layers = 32, heads = 32, kv_heads = 8, mlp = 14336;
  // The attention head size when the model gives one (Gemma-style configs
  // where heads * head_dim != hidden); 0: hidden / heads.
  std::int64_t explicit_head_dim = 0;
  int groups = 4;  // layers % groups == 0; op "layers<g>" holds layers [g*L/G, (g+1)*L/G)
  double rope_theta = 500000.0, norm_eps = 1e-5;
  // Llama 3.1 / 3.2's "llama3" RoPE scaling of the rotation frequencies, as
  // Hugging Face computes it; rope_factor 0: none.
  double rope_factor = 0, rope_low_freq_factor = 1, rope_high_freq_factor = 4;
  std::int64_t rope_original_context = 8192;
  std::string dtype = "bfloat16";  // "float32" | "bfloat16" | "float16" (all three run on CPU too)
  // Qwen2: q, k and v projections carry a bias. Llama 3.2 1B/3B: the LM head
  // is the embedding matrix (the head op then owns only the final norm).
  bool qkv_bias = false, tied_embeddings = false;
  // Phi-2's block (parallel_block): one LayerNorm (weight and bias) feeds
  // attention and a fc1 -> GELU -> fc2 MLP, both added to the residual;
  // q/k/v, the attention output `dense`, fc1, fc2 and the LM head have
  // biases (qkv_bias must be set); RoPE turns the first rotary_dim
  // dimensions of each head (0: all). exact_gelu: erf's GELU, else tanh's
  // (transformers' gelu_new). Not with tied embeddings.
  bool parallel_block = false, exact_gelu = false;
  std::int64_t rotary_dim = 0;
  std::uint64_t seed = 0;  // random weights are deterministic from the seed: no downloads
  // A Hugging Face checkpoint directory (safetensors, see checkpoint.h):
  // the weights come from its files and `seed` is ignored. "": random weights.
  std::string checkpoint;
  std::int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : hidden / heads; }
};

// Throws std::invalid_argument with a one-line message naming the field on a
// bad config: non-positive sizes, hidden % heads (without an explicit
// head_dim), heads % kv_heads, layers % groups, odd head_dim (RoPE rotates
// pairs), non-positive rope_theta / norm_eps, unknown dtype.
void validate(const LlamaConfig& cfg);

// Sizes in bytes, exactly as the implementation allocates them (so the
// scheduler's memory accounting matches reality). They validate cfg first.
// dtype: 4 for "float32", 2 for "bfloat16" / "float16"; else invalid_argument.
std::int64_t dtype_bytes(const std::string& dtype);
// op = "embed" (vocab*hidden) | "layers<g>" (L/G layers, each: q,k,v,o
// projections, q/k/v biases when qkv_bias, gate/up/down, 2 RMSNorm weights;
// a parallel block: q,k,v,dense and fc1, fc2 with their biases, one
// LayerNorm's weight and bias) | "head" (final norm + vocab*hidden, the LM
// head's bias and the norm's in a parallel block, or the final norm alone
// with tied embeddings: the head reads the embedding's matrix on its device); times
// dtype_bytes. Unknown op: invalid_argument. These agree with the model
// contract's (models/dense.cppm) per-op weights.
std::int64_t weight_bytes(const LlamaConfig& cfg, const std::string& op);
// One layer group's cache for one token: 2 (K, V) * (layers/groups) * kv_heads * head_dim * dtype_bytes.
std::int64_t kv_bytes_per_token(const LlamaConfig& cfg);
// The hidden state passed between ops for `tokens` tokens: tokens * hidden * dtype_bytes.
std::int64_t hidden_bytes(const LlamaConfig& cfg, std::int64_t tokens);

// How one sequence's next token is chosen (the request's sampling
// parameters, slicesched::SamplingParams, in this header's own terms).
// Ranges are the caller's to check: temperature >= 0 (0: argmax), top_p in
// (0, 1], top_k >= 0 (0: all), min_p in [0, 1], repetition_penalty > 0.
struct Sampling {
  double temperature = 0, top_p = 1, min_p = 0;
  std::int64_t top_k = 0;
  std::uint64_t seed = 0;
  double presence_penalty = 0, frequency_penalty = 0, repetition_penalty = 1;
  std::int32_t logprobs = -1;  // -1: none; k >= 0: the chosen token's and the k most likely
  // What the penalties count: the prompt's tokens, then the output's from
  // history[prompt_tokens] on (empty without penalties).
  std::vector<std::int64_t> history;
  std::int64_t prompt_tokens = 0;
};

// The log-probabilities of a chosen token and the most likely ones, from
// the raw logits (log_softmax before any penalty, temperature or cut).
struct Logprobs {
  double chosen = 0;
  std::vector<std::pair<std::int64_t, double>> top;  // most likely first
};

// One sequence's part of one iteration.
struct SeqStep {
  std::uint64_t seq = 0;                               // request id, unique within a plan
  std::int64_t position = 0;                           // tokens already in this sequence's KV cache (0 for a prefill)
  std::vector<std::int64_t> tokens;                    // the new token ids (the prompt for a prefill, 1 id for a
                                                       // decode); non-empty, each in [0, vocab)
  std::shared_ptr<const Sampling> sampling = nullptr;  // null: greedy, no log-probabilities
};
// One iteration (one graph instance): its sequences, in the order their
// tokens are concatenated in the hidden state and head() returns tokens.
struct StepPlan {
  std::vector<SeqStep> seqs;
  std::int64_t tokens() const;  // sum of seqs[i].tokens.size()
};

struct ValueImpl;    // defined by the implementation
struct ValueAccess;  // the implementation's access to Value's handle

// An opaque tensor-like value living on one device: either the hidden state
// between ops ([tokens, hidden], rows in plan order), or one layer group's KV
// cache: K and V of the group's layers for every cached token of its
// sequences, one tensor [layers/groups, 2, kv_heads, tokens, head_dim] with
// each sequence's tokens contiguous, in sequences() order -- exactly
// kv_bytes_per_token * tokens() bytes, no padding.
//
// Immutable once made; copying a Value shares the data (cheap, like a
// shared_ptr) and the memory is freed when the last copy is destroyed. Safe
// to read, copy and destroy from any thread. A default-constructed Value is
// empty.
class Value {
 public:
  enum class Kind { kEmpty, kHidden, kKv };

  Value() = default;
  bool empty() const { return impl_ == nullptr; }
  Kind kind() const;
  std::int64_t bytes() const;  // device memory held (0 when empty)
  std::string device() const;  // canonical device label; "" when empty
  // Hidden: rows (tokens). KV: cached tokens of all its sequences. 0 when empty.
  std::int64_t tokens() const;
  // KV only (empty otherwise): the sequences it holds, in the order of the
  // plan that made it, and one sequence's cached tokens (-1 if absent).
  std::vector<std::uint64_t> sequences() const;
  std::int64_t cached_tokens(std::uint64_t seq) const;
  // KV only: its layer group (-1 otherwise).
  int group() const;
  // For tests and debugging: a host copy converted to float, row-major in
  // the layouts above. Blocks until the data is ready (a device sync).
  std::vector<float> to_floats() const;

 private:
  friend struct ValueAccess;
  std::shared_ptr<const ValueImpl> impl_;
};

// Thrown when a device allocation fails (e.g. CUDA out of memory).
struct DeviceOutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A value's layout (LlamaModel::layout): its kind and tensor's element type
// and shape, and for a KV cache its group and sequences' spans.
struct ValueLayout {
  Value::Kind kind = Value::Kind::kEmpty;
  int group = -1;                   // KV only
  int dtype = 0;                    // the element type, as LibTorch numbers them (c10::ScalarType)
  std::vector<std::int64_t> sizes;  // the tensor's shape (1 to 5 dimensions)
  std::vector<std::uint64_t> seqs;  // KV only: sequences, each at [start, start + len) tokens
  std::vector<std::int64_t> start, len;
  std::int64_t data_bytes = 0;  // the tensor's bytes, contiguous
};

// The model. Movable, not copyable. All member functions are thread-safe:
// devices load and compute concurrently; the only shared state is the
// read-only weights and the table of loaded (op, device) weights. Each call
// does its own work on the calling thread under LibTorch's inference mode;
// on CUDA it enqueues work on the calling thread's current stream of that
// device and returns without waiting, except head() and to_floats(), which
// must read results on the host. On CPU the intra-op thread count is the
// caller's business (this library never sets it).
class LlamaModel {
 public:
  // Validates cfg (invalid_argument). Random weights (no checkpoint) are
  // not built here: each op's weights are generated on the CPU the first
  // time any device loads that op, from a CPU generator seeded by
  // (cfg.seed, layer) -- so every device gets an identical copy, the weights
  // do not depend on `groups` or load order, and are deterministic across
  // runs and machines for one LibTorch build. Init: linear weights normal
  // with std 1/sqrt(fan_in), embedding normal with std 1, norm weights 1,
  // q/k/v biases normal with std 1/sqrt(hidden). The CPU master copies are
  // kept for the model's lifetime (so a later load elsewhere copies, not
  // regenerates).
  // With cfg.checkpoint, the directory's safetensors files are memory-mapped
  // and every tensor's name, shape and dtype checked here, before anything
  // loads (invalid_argument, one line naming the file and tensor); the
  // masters are then views of the mapping, converted to cfg.dtype as they
  // are copied onto a device. The mapping lives as long as the model.
  explicit LlamaModel(LlamaConfig cfg);
  ~LlamaModel();
  LlamaModel(LlamaModel&&) noexcept;
  LlamaModel& operator=(LlamaModel&&) noexcept;
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  const LlamaConfig& config() const;

  // Makes op's weights resident on `device`; returns their bytes (==
  // weight_bytes(config(), op)). Idempotent per (op, device): a second call
  // returns the same bytes without allocating. Blocks until the weights are
  // on the device. Concurrent loads of one (op, device) wait for each other.
  // With tied embeddings "head" shares the embedding matrix already on
  // `device` (no second copy), so "embed" must be loaded there first (else
  // std::logic_error naming both).
  std::int64_t load(const std::string& op, const std::string& device);
  // Drops op's weights from `device`; returns the bytes released (0 if not
  // loaded). Operator calls already running keep their weights alive until
  // they return. Must not race with load() of the same (op, device). With
  // tied embeddings "embed" cannot go while "head" is loaded on `device`
  // (std::logic_error): the head's memory would not be released.
  std::int64_t unload(const std::string& op, const std::string& device);
  bool loaded(const std::string& op, const std::string& device) const;

  // The operators. Each runs on `device`; op's weights must be loaded there
  // and every input Value must live there (else std::logic_error naming the
  // op). The plan must be well-formed (non-empty, seq ids unique, tokens
  // non-empty and in [0, vocab), position >= 0; else invalid_argument). None
  // modifies its inputs. Outputs are new Values on `device`.

  // -> hidden [plan.tokens(), hidden]: the sequences' new tokens' embeddings.
  Value embed(const StepPlan& plan, const std::string& device);
  // Decoder layers [group*L/G, (group+1)*L/G) over hidden ([plan.tokens(),
  // hidden], else invalid_argument). kv_in: the KV cache this group's
  // previous iteration left (an empty Value for none). Sequences of kv_in
  // absent from `plan` are dropped; a sequence in `plan` with position > 0
  // must be in kv_in with exactly `position` cached tokens (else
  // invalid_argument naming the seq); one with position 0 starts afresh
  // (any cache kv_in holds for it is ignored). Returns the new hidden state
  // and sets kv_out to a new Value holding, for exactly the plan's sequences
  // in plan order, position + new tokens cached tokens. kv_in is not
  // modified (its memory is the caller's to free); kv_out may be the same
  // object as kv_in.
  Value layers(int group, const Value& hidden, const Value& kv_in, const StepPlan& plan, const std::string& device,
               Value& kv_out);
  // Final norm, LM head and greedy sampling: the argmax next token after
  // each sequence's last new token, in plan order. Waits for the device.
  std::vector<std::int64_t> head(const Value& hidden, const StepPlan& plan, const std::string& device);
  // The same with each sequence's Sampling honoured on `device`: penalties,
  // temperature, top_k, top_p, min_p, then a draw that is a pure function
  // of (seed, the position of the token drawn); a sequence without
  // sampling (or temperature 0) takes the argmax. `logprobs` is parallel to
  // `tokens` when any sequence asked for log-probabilities (empty entries
  // for those that did not), else empty.
  struct Sampled {
    std::vector<std::int64_t> tokens;
    std::vector<Logprobs> logprobs;
  };
  Sampled head_sampled(const Value& hidden, const StepPlan& plan, const std::string& device);
  // The head's raw logits [sequences, vocab] as floats, row-major (for
  // tests: references computed from the same logits). Waits for the device.
  std::vector<float> head_logits(const Value& hidden, const StepPlan& plan, const std::string& device);

  // A transfer: a copy of v on `device` -- a real copy even cpu -> cpu, since
  // virtual accelerators are separate memories. An empty v gives an empty
  // Value. v must be complete (its producer's stream drained).
  // - CUDA -> CUDA with `nccl` connecting the two: ncclSend/ncclRecv on the
  //   calling thread's current streams of both devices; returns when both
  //   are done.
  // - Otherwise CUDA -> CUDA: a LibTorch peer copy queued on the
  //   destination's current stream; does not block the host.
  // - CUDA -> CPU: into pinned host memory on the source's current stream,
  //   then waits for it. CPU -> CUDA: staged through pinned host memory,
  //   queued on the destination's current stream; does not block the host.
  static Value copy_to(const Value& v, const std::string& device, cuda::NcclLinks* nccl = nullptr);
  // A value as bytes, to cross processes (the executors' peer transfers):
  // metadata and the tensor's data, read back through the host for a GPU
  // value. Empty for an empty value. from_bytes makes the value on
  // `device`; malformed bytes: invalid_argument. Thread-safe.
  static std::string to_bytes(const Value& v);
  static Value from_bytes(std::string_view bytes, const std::string& device);
  // What a value is without its data: enough for another process to
  // allocate its twin and receive the data into it (NCCL between executor
  // processes). encode/decode are to_bytes' form less the data; a malformed
  // layout: invalid_argument. layout() of an empty value: kind kEmpty.
  static ValueLayout layout(const Value& v);
  static std::string encode(const ValueLayout& l);
  static ValueLayout decode(std::string_view bytes);
  // An uninitialized value of layout `l` on `device` (the receiving side),
  // allocated on the calling thread's current stream.
  static Value allocate(const ValueLayout& l, const std::string& device);
  // `v` itself when its tensor is contiguous, else a contiguous copy
  // queued on the calling thread's current stream (the sending side).
  static Value contiguous(const Value& v);
  // The tensor's storage: layout(v).data_bytes bytes at this address, on
  // v's device. Not contiguous: logic_error. Writing through it is only for
  // a value fresh from allocate() that no other thread holds yet.
  static void* data(const Value& v);
  // A preempted sequence's KV cache held apart (swapped to host memory) and
  // joined back. select_kv: a copy on `device` of sequence `seq`'s part of
  // KV cache `kv` (a KV value holding only it; `kv` is not modified); a
  // value that is no KV cache, or holds no part of `seq`: invalid_argument
  // naming them. join_kv: one KV value on `device` holding every part's
  // sequences, in order (empty parts skipped; none: an empty value). The
  // parts must be KV caches of one layer group with the same shape, on
  // `device`, and hold each sequence once (else invalid_argument naming
  // the first that does not).
  static Value select_kv(const Value& kv, std::uint64_t seq, const std::string& device);
  static Value join_kv(const std::vector<Value>& parts, const std::string& device);
  // Blocks until the work queued on the device's current stream (of the
  // calling thread) is done. CPU: no-op.
  static void synchronize(const std::string& device);
  // CUDA: makes a stream of its own (from LibTorch's pool) the calling
  // thread's current stream on `device`, once per thread and device, so
  // every executor thread (one worker and one receiver per accelerator)
  // queues on its own stream and accelerators sharing a GPU overlap. CPU:
  // no-op. Thread-safe (the state is per thread).
  static void bind_thread_stream(const std::string& device);

  // Reference: a plain single-device loop with no scheduler. Loads every op
  // on `device`, then for each prompt separately: prefill it, then decode one
  // token at a time; returns max_new tokens per prompt (greedy, no EOS).
  std::vector<std::vector<std::int64_t>> generate_reference(const std::vector<std::vector<std::int64_t>>& prompts,
                                                            int max_new, const std::string& device);

 private:
  void head_with(const Value& hidden, const StepPlan& plan, const std::string& device,
                 const std::function<void(const at::Tensor&)>& use);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Deterministic prompt token ids for request `seq` of length n from a seed
// (for trace replay, where traces give only lengths). Values in [0, vocab);
// pure function of (cfg.vocab, seed, seq, n), no LibTorch. n < 0: invalid_argument.
std::vector<std::int64_t> synthetic_prompt(const LlamaConfig& cfg, std::uint64_t seed, std::uint64_t seq,
                                           std::int64_t n);

// The CUDA ordinal of a device label: N for "cuda:N" ("cuda" is 0), -1 for a
// CPU device. A malformed label: invalid_argument.
int cuda_ordinal(const std::string& device);

// Whether LibTorch sees a CUDA device (false on a CPU-only LibTorch build),
// and how many.
bool cuda_available();
int cuda_device_count();
// Intra-op threads for CPU work: LibTorch's pool and, when the system BLAS
// is OpenBLAS, its pool. Process-wide; call before running operators.
// n < 1: invalid_argument.
void set_cpu_threads(int n);

}  // namespace slicesched::rt
