// What an operator asks of an accelerator, in the units a roofline needs:
// floating-point operations and bytes moved through HBM, by kind of work.
//
// The vocabulary between models (which kernels an operator runs, on how many
// rows) and hardware (how long a kernel of that kind takes on a given
// accelerator type). A dense decoder's kernels are named as the
// LLMServingSim profiles name them, so a measured profile row and a model's
// operator speak of the same thing.
//
// Pure functions of their arguments: safe from any thread.
module;
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

export module slicesched.models.work;

export namespace slicesched {

// The kinds a roofline has one efficiency each for: matrix products against
// weights (projections, MLP, LM head), attention scores over the new tokens
// (QK^T, softmax, PV: their FLOPs and the new tokens' q, k, v and output),
// elementwise and normalisation kernels, embedding gathers, and reading a
// KV cache (the cached K and V an attention kernel streams from HBM: decode
// over a long context is this read), and pure streams (a residual add: read
// two tensors, write one, no work per byte worth the name). kKvRead is never
// a kernel's own kind: it is the part `Work::cache_bytes` of an attention
// kernel. Elementwise and streaming are apart because they read memory
// differently: a norm, rope or activation does a reduction or a
// transcendental per element and runs at a rate its SMs set, a plain add
// streams at HBM speed (docs/ground-truth.md). A dense decoder fuses its
// residual adds into the norms (as vLLM and TensorRT-LLM do), so only
// profiles that time the add alone (Vidur's) have streaming rows.
enum class WorkKind : std::uint8_t { kGemm, kAttention, kElementwise, kEmbedding, kKvRead, kStreaming };
inline constexpr int kWorkKinds = 6;
// "gemm", "attention", "elementwise", "embedding", "kv_read", "streaming"
std::string_view work_kind_name(WorkKind k);

// One kernel's demand: FLOPs and HBM bytes (weights read, activations read
// and written), and apart from them the bytes of a KV cache it reads
// (costed at the kKvRead efficiency; 0 for every kernel but attention).
struct Work {
  WorkKind kind = WorkKind::kGemm;
  double flops = 0;
  double bytes = 0;
  double cache_bytes = 0;
};

// The kernels of a dense decoder: one decoder layer is input_layernorm ..
// down_proj (the residual adds are folded into the norms' traffic), the
// embedding comes first and final_layernorm, lm_head last. Llama, Mistral
// and Qwen2 run every one of them but `add` (their residual adds are fused
// into the norms); a parallel block (Phi) has no post_layernorm and ends
// with `add`, attention's and the MLP's outputs joining the residual; a
// plain two-matrix MLP has no gate_proj (its fc1 is up_proj, its fc2
// down_proj; its attention output `dense` is o_proj).
enum class Sublayer : std::uint8_t {
  kEmbedding,
  kInputNorm,
  kQProj,
  kKProj,
  kVProj,
  kRope,
  kAttn,
  kOProj,
  kPostNorm,
  kGateProj,
  kUpProj,
  kActFn,
  kDownProj,
  kFinalNorm,
  kLmHead,
  kResidualAdd,  // a parallel block's residual adds (attention's and the MLP's outputs)
};
inline constexpr int kSublayers = 16;
// LLMServingSim's layer_name for each ("embedding", "input_layernorm", ...,
// "lm_head"), and back (nullopt for a name that is none of them).
std::string_view sublayer_name(Sublayer l);
std::optional<Sublayer> sublayer_from_name(std::string_view name);
WorkKind sublayer_kind(Sublayer l);
// The shapes a dense decoder's kernels depend on. The defaults are
// Llama-3-8B's: RMSNorm, then attention, RMSNorm and a SwiGLU MLP in turn.
struct DenseShape {
  std::int64_t hidden = 4096, heads = 32, kv_heads = 8, head_dim = 128, mlp = 14336, vocab = 128256;
  std::int64_t elem_bytes = 2;  // weights, activations and KV cache
  bool qkv_bias = false;        // Qwen2 and Phi add a bias to q, k and v
  // Phi-2's block (and GPT-J's, GPT-NeoX's): attention and the MLP both
  // read one norm's output and their sum joins the residual, so a layer has
  // one norm.
  bool parallel_block = false;
  bool gated_mlp = true;        // SwiGLU's gate, up and down; else up (fc1), GELU, down (fc2)
  bool layer_norm = false;      // LayerNorm (a weight and a bias) instead of RMSNorm (a weight)
  bool linear_bias = false;     // biases on o_proj, the MLP's matrices and the LM head (Phi)
  std::int64_t rotary_dim = 0;  // dimensions of each head RoPE rotates; 0: all of head_dim
  bool operator==(const DenseShape&) const = default;
};

// Whether `s`'s layer is Llama's: attention, then a gated MLP (the block
// an LLMServingSim layers table times).
inline bool llama_block(const DenseShape& s) { return !s.parallel_block && s.gated_mlp; }

// The kernels of one decoder layer of shape `s`, in order.
std::span<const Sublayer> decoder_layer_sublayers(const DenseShape& s = {});

// One kernel call: `rows` token rows go through it (tokens of the batch; for
// lm_head, the rows sampled), spread over `sequences` sequences that have
// `context` tokens cached between them (attention reads their K and V and
// attends to them). `count` repeats it (e.g. the layers of a group).
struct SublayerCall {
  Sublayer layer = Sublayer::kQProj;
  double rows = 1;
  double sequences = 1;
  double context = 0;
  double count = 1;
};

// FLOPs and bytes of one call (times its count) from the shapes. Attention is
// causal within the new tokens: each sequence's t new tokens attend to its
// c cached ones and to the new ones before them, t * (c + (t + 1) / 2) pairs,
// with the rows and context spread evenly over the sequences. Its `bytes`
// are the new tokens' q, k, v and output; its `cache_bytes` the cached K
// and V, read once (context * 2 * kv_heads * head_dim * elem_bytes).
Work sublayer_work(const DenseShape& s, const SublayerCall& call);

}  // namespace slicesched
