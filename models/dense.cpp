module;
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

module slicesched.models.dense;
import slicesched.core.shape;

namespace slicesched {

DenseDecoderConfig llama3_8b() { return {}; }

DenseDecoderConfig llama_tiny() {
  DenseDecoderConfig c;
  c.name = "llama-tiny";
  c.vocab = 512, c.hidden = 64, c.heads = 4, c.kv_heads = 2, c.head_dim = 16, c.mlp = 128, c.layers = 4, c.groups = 2;
  c.dtype = DType::kF32;
  c.context_window = 1 << 20;  // a toy: RoPE has no trained length to respect
  return c;
}

std::string invalid_reason(const DenseDecoderConfig& c) {
  auto n = [](std::int64_t v) { return std::to_string(v); };
  if (c.hidden < 1 || c.layers < 1 || c.heads < 1 || c.kv_heads < 1 || c.head_dim < 1 || c.mlp < 1 || c.vocab < 2)
    return "hidden, layers, heads, kv_heads, head_dim, mlp and vocab must be positive (vocab >= 2)";
  if (c.heads % c.kv_heads != 0)
    return "kv_heads: expected a divisor of heads (" + n(c.heads) + "), got " + n(c.kv_heads);
  if (c.head_dim % 2 != 0) return "head_dim: expected an even number (RoPE rotates pairs), got " + n(c.head_dim);
  if (c.rotary_dim < 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
    return "rotary_dim: expected an even number of dimensions in [0, head_dim (" + n(c.head_dim) + ")], got " +
           n(c.rotary_dim);
  if (c.groups < 1 || c.layers % c.groups != 0)
    return "groups: expected a divisor of layers (" + n(c.layers) + "), got " + std::to_string(c.groups);
  if (c.context_window < 1) return "context_window: expected a positive number of tokens, got " + n(c.context_window);
  if (c.dtype != DType::kF32 && c.dtype != DType::kF16 && c.dtype != DType::kBF16)
    return "dtype: expected float32, float16 or bfloat16";
  return "";
}

namespace {

// Parameters of one norm (LayerNorm's bias beside its weight).
std::int64_t norm_parameters(const DenseDecoderConfig& c) { return c.layer_norm ? 2 * c.hidden : c.hidden; }

// Parameters of one decoder layer.
std::int64_t layer_parameters(const DenseDecoderConfig& c) {
  const std::int64_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  const std::int64_t attn =
      c.hidden * q + 2 * c.hidden * kv + q * c.hidden + (c.qkv_bias ? q + 2 * kv : 0) + (c.linear_bias ? c.hidden : 0);
  const std::int64_t mlp =
      (c.gated_mlp ? 3 : 2) * c.hidden * c.mlp + (c.linear_bias ? (c.gated_mlp ? 2 : 1) * c.mlp + c.hidden : 0);
  return attn + mlp + (c.parallel_block ? 1 : 2) * norm_parameters(c);
}

// The head's own parameters: the final norm, and the LM head's bias.
std::int64_t head_parameters(const DenseDecoderConfig& c) { return norm_parameters(c) + (c.linear_bias ? c.vocab : 0); }

}  // namespace

std::int64_t parameter_count(const DenseDecoderConfig& c) {
  const std::int64_t table = c.vocab * c.hidden;
  return table + c.layers * layer_parameters(c) + head_parameters(c) + (c.tied_embeddings ? 0 : table);
}

Result<std::shared_ptr<const DenseDecoder>> DenseDecoder::make(DenseDecoderConfig c) {
  if (std::string why = invalid_reason(c); !why.empty()) return InvalidArgument("model '" + c.name + "': " + why);
  return std::shared_ptr<const DenseDecoder>(new DenseDecoder(std::move(c)));
}

DenseDecoder::DenseDecoder(DenseDecoderConfig c) : c_(std::move(c)) {
  const int per_group = static_cast<int>(c_.layers) / c_.groups;
  ops_.push_back({"embed", OpRole::kEmbed, 0, 0, 0});
  for (int g = 0; g < c_.groups; ++g) ops_.push_back({group_op(g), OpRole::kLayers, g * per_group, per_group, g});
  ops_.push_back({"head", OpRole::kHead, 0, 0, 0});
}

// Dims: `tokens`, `sequences`, `context`, `kv_prev` (IterationDims). Cost
// features per group: {tokens, tokens*(context+tokens), context+tokens, 1}
// (linear layers, attention, KV reads, weight reads); the head's:
// {sequences, 1} (logits for each sequence's last token only, then its
// weights); priors are H100 rooflines (bf16 at ~400 TFLOP/s effective,
// 3.35 TB/s HBM), each term tagged so other accelerators scale it. One
// template serves prefill (context = 0, no KV attached) and decode (each
// group attaches to the KV cache its counterpart of the previous step
// retained).
GraphTemplate DenseDecoder::make_template() const {
  const DenseDecoderConfig& s = c_;
  TemplateBuilder b(s.name);
  Expr T = b.dim("tokens"), S = b.dim("sequences"), C = b.dim("context");
  auto k = [](std::int64_t v) { return Expr::constant(v); };
  const int per_group = static_cast<int>(s.layers) / s.groups;
  const DType dt = s.dtype;
  const std::int64_t eb = dtype_bytes(dt);
  const std::int64_t kv_per_token = 2 * per_group * s.kv_heads * s.head_dim;  // K and V, elements
  const std::int64_t layer_params = layer_parameters(s);
  // The reference accelerator's (core/graph.cppm, kPriorPeakFlops): about
  // 40 % of its bf16 peak effective, and its HBM.
  const double flops_per_s = 400e12, hbm_per_s = kPriorBytesPerS;
  using enum PriorTerm;
  const double group_bytes = static_cast<double>(eb) * per_group * static_cast<double>(layer_params);

  // Prompt tokens come from the host; a decode step's one token comes from
  // the previous step's head.
  b.port("tokens", {{T}, DType::kI64}, /*optional=*/true);
  // The KV cache a step takes over holds `kv_prev` tokens: with continuous
  // batching it can be more than `context`, the tokens still attended (the
  // sequences that finished are dropped from it by this step).
  Expr kv_prev = b.dim("kv_prev");
  for (int g = 0; g < s.groups; ++g) b.port(kv_port(g), {{kv_prev * k(kv_per_token)}, dt}, true);

  b.op("embed")
      .input("tokens")
      .output({{T * k(s.hidden)}, dt})
      .features({T, k(1)})
      .prior({static_cast<double>(eb) * s.hidden / hbm_per_s, 5e-6}, {kMemory, kFixed})  // one row read per token
      .weights(eb * s.vocab * s.hidden);
  std::string prev = "embed";
  for (int g = 0; g < s.groups; ++g) {
    b.op(group_op(g))
        .input(prev, {{T * k(s.hidden)}, dt})
        .input(kv_port(g))
        .output({{T * k(s.hidden)}, dt})
        .workspace(T * k(4 * s.mlp))
        .retain("kv", {{(C + T) * k(kv_per_token)}, dt})
        .features({T, T * (C + T), C + T, k(1)})
        .prior({2.0 * per_group * layer_params / flops_per_s, 4.0 * per_group * s.hidden / flops_per_s,
                static_cast<double>(eb) * kv_per_token / hbm_per_s, group_bytes / hbm_per_s},
               {kCompute, kCompute, kMemory, kMemory})
        .weights(static_cast<std::int64_t>(group_bytes));
    prev = group_op(g);
  }
  // Final norm, LM head and greedy sampling on each sequence's last token:
  // the norm's float rows and the logits (at most 4 bytes an element) per
  // sequence, and the sampled next token of each. Tied embeddings: the LM
  // head is the embedding's table, charged once, with the embedding (a
  // model's weights are resident whole wherever it is held).
  b.op("head")
      .input(prev)
      .output({{S}, DType::kI64})
      .workspace(S * k(4 * (s.vocab + 2 * s.hidden)))
      .features({S, k(1)})
      // Per sequence: its logits' matmul; fixed: reading the LM head.
      .prior({2.0 * s.vocab * s.hidden / flops_per_s, static_cast<double>(eb) * s.vocab * s.hidden / hbm_per_s},
             {kCompute, kMemory})
      .weights(eb * ((s.tied_embeddings ? 0 : s.vocab * s.hidden) + head_parameters(s)));
  return std::move(b).build().value();
}

std::vector<std::pair<std::string, std::int64_t>> DenseDecoder::bind(const IterationDims& d) const {
  return {{"tokens", d.tokens}, {"sequences", d.sequences}, {"context", d.context}, {"kv_prev", d.kv_prev}};
}

IterationDims DenseDecoder::dims_of(const GraphTemplate& t, std::span<const std::int64_t> values) const {
  auto at = [&](std::string_view dim) -> std::int64_t {
    const int i = t.dims().find(dim);
    return i < 0 || static_cast<std::size_t>(i) >= values.size() ? 0 : values[static_cast<std::size_t>(i)];
  };
  return {at("tokens"), at("sequences"), at("context"), at("kv_prev")};
}

std::vector<SublayerCall> DenseDecoder::kernels(std::size_t op, const IterationDims& d) const {
  const auto T = static_cast<double>(d.tokens), S = static_cast<double>(d.sequences);
  const auto C = static_cast<double>(d.context);
  std::vector<SublayerCall> out;
  const ModelOp& m = ops_.at(op);
  switch (m.role) {
    case OpRole::kEmbed:
      out.push_back({Sublayer::kEmbedding, T, S, C, 1});
      break;
    case OpRole::kLayers:
      for (Sublayer l : decoder_layer_sublayers(shape())) out.push_back({l, T, S, C, static_cast<double>(m.layers)});
      break;
    case OpRole::kHead:  // logits for each sequence's last token only
      out.push_back({Sublayer::kFinalNorm, S, S, C, 1});
      out.push_back({Sublayer::kLmHead, S, S, C, 1});
      break;
  }
  return out;
}

DenseShape DenseDecoder::shape() const {
  DenseShape s;
  s.hidden = c_.hidden, s.heads = c_.heads, s.kv_heads = c_.kv_heads, s.head_dim = c_.head_dim, s.mlp = c_.mlp;
  s.vocab = c_.vocab;
  s.elem_bytes = dtype_bytes(c_.dtype);
  s.qkv_bias = c_.qkv_bias;
  s.parallel_block = c_.parallel_block, s.gated_mlp = c_.gated_mlp, s.layer_norm = c_.layer_norm;
  s.linear_bias = c_.linear_bias, s.rotary_dim = c_.rotary_dim;
  return s;
}

std::int64_t DenseDecoder::weight_bytes() const { return parameter_count(c_) * dtype_bytes(c_.dtype); }

std::int64_t DenseDecoder::kv_bytes_per_token() const {
  return 2 * c_.layers * c_.kv_heads * c_.head_dim * dtype_bytes(c_.dtype);
}

}  // namespace slicesched
