// The dense-decoder family: Llama 2 / 3 / 3.1 / 3.2, Mistral, Qwen2 / 2.5,
// and Phi-2. One decoder layer is RMSNorm, grouped-query attention with RoPE
// (Qwen2 adds a bias to q, k and v), RMSNorm and a SwiGLU MLP; the embedding
// comes first and final norm + LM head last (tied to the embedding in the
// small Llama 3.2s). Phi-2's layer is a parallel block: one LayerNorm feeds
// both attention (RoPE on part of each head) and a GELU MLP of two
// matrices, every projection biased. As a graph template: `embed`, `layers0` .. `layers{G-1}`
// (layers/G consecutive layers each, each retaining its KV cache) and `head`.
//
// Immutable once built; safe from any thread.
module;
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

export module slicesched.models.dense;
import slicesched.models.model;
import slicesched.core.graph;
import slicesched.core.status;
import slicesched.models.work;

export namespace slicesched {

// A dense decoder's shapes, as a Hugging Face config.json gives them (plus
// how many layer groups the scheduler places, and the model's name).
struct DenseDecoderConfig {
  std::string name = "llama3-8b";
  std::string model_type = "llama";  // config.json's model_type: "llama", "mistral", "qwen2" or "phi"
  std::int64_t hidden = 4096, layers = 32, heads = 32, kv_heads = 8, head_dim = 128, mlp = 14336, vocab = 128256;
  int groups = 4;  // scheduling units of layers/groups layers each
  bool tied_embeddings = false;
  bool qkv_bias = false;
  // The block's form (models/work.cppm, DenseShape): Llama's by default;
  // Phi's is parallel, a plain GELU MLP, LayerNorm, biases everywhere.
  bool parallel_block = false, gated_mlp = true, layer_norm = false, linear_bias = false;
  std::int64_t rotary_dim = 0;      // RoPE's dimensions of each head; 0: head_dim
  std::string hidden_act = "silu";  // config.json's; Phi's GELU: "gelu" (erf's) or a tanh one ("gelu_new", ...)
  double rope_theta = 500000.0, norm_eps = 1e-5;
  // Llama 3.1 / 3.2's "llama3" RoPE scaling (config.json's rope_scaling);
  // rope_factor 0: none. Live mode only (the simulator's costs ignore RoPE).
  double rope_factor = 0, rope_low_freq_factor = 1, rope_high_freq_factor = 4;
  std::int64_t rope_original_context = 8192;
  DType dtype = DType::kBF16;          // weights, activations and KV cache
  std::int64_t context_window = 8192;  // max_position_embeddings
};

// Llama-3-8B, and the toy of the CPU tests (4 layers in 2 groups, float32).
DenseDecoderConfig llama3_8b();
DenseDecoderConfig llama_tiny();

// The built-in presets by name (models/presets.cpp; shapes from each
// model's Hugging Face config.json, cited there): llama3-8b, llama3.1-8b,
// llama-tiny, llama2-7b, llama2-70b, codellama-34b, internlm-20b,
// mistral-7b, phi-2. nullopt for any other name. The config's name is the preset's.
std::optional<DenseDecoderConfig> dense_preset(std::string_view name);
// Their names, in the order above (for messages: "expected one of ...").
std::span<const std::string_view> dense_preset_names();

// Why `c` is not a dense decoder this code can build ("heads: expected a
// divisor of hidden ..."), or "" when it is.
std::string invalid_reason(const DenseDecoderConfig& c);

// Parameters: embedding, per layer q/k/v/o (+ their biases), the MLP's
// matrices (+ biases) and norms, final norm, LM head (+ bias) unless tied
// (then counted once).
std::int64_t parameter_count(const DenseDecoderConfig& c);

// Reads a Hugging Face config.json (model_type llama, mistral, qwen2 or
// phi; Phi's partial_rotary_factor sets rotary_dim, qk_layernorm is refused).
// RoPE: rope_theta at the top level or in transformers 5's rope_parameters;
// rope_scaling (or rope_parameters) of rope_type "default" or "llama3",
// any other type is refused. The dtype: torch_dtype, or transformers 5's dtype.
// `name` names the model; `groups` is the scheduler's. Errors are one line
// naming the file and the key: "hf/x.json: num_key_value_heads: expected a
// positive integer dividing num_attention_heads (32), got 5".
Result<DenseDecoderConfig> read_hf_config(const std::string& path, std::string name, int groups = 4);

class DenseDecoder final : public Model {
 public:
  // Fails with invalid_reason(c).
  static Result<std::shared_ptr<const DenseDecoder>> make(DenseDecoderConfig c);

  const DenseDecoderConfig& config() const { return c_; }
  const std::string& name() const override { return c_.name; }
  std::string family() const override { return "dense-decoder"; }
  GraphTemplate make_template() const override;
  std::span<const ModelOp> ops() const override { return ops_; }
  std::size_t sampler() const override { return ops_.size() - 1; }
  std::vector<std::pair<std::string, std::int64_t>> bind(const IterationDims& d) const override;
  IterationDims dims_of(const GraphTemplate& t, std::span<const std::int64_t> values) const override;
  std::vector<SublayerCall> kernels(std::size_t op, const IterationDims& d) const override;
  DenseShape shape() const override;
  std::int64_t weight_bytes() const override;
  std::int64_t kv_bytes_per_token() const override;
  std::int64_t context_window() const override { return c_.context_window; }

  // Template op and port names.
  static std::string group_op(int g) { return "layers" + std::to_string(g); }
  static std::string kv_port(int g) { return "kv" + std::to_string(g); }

 private:
  explicit DenseDecoder(DenseDecoderConfig c);
  DenseDecoderConfig c_;
  std::vector<ModelOp> ops_;
};

}  // namespace slicesched
