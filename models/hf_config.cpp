// Hugging Face config.json -> DenseDecoderConfig.
module;
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>

module slicesched.models.dense;

namespace slicesched {

namespace {

struct HfReader {
  const std::string& path;
  const nlohmann::json& j;

  Status error(const std::string& key, const std::string& what) const {
    return InvalidArgument(path + ": " + key + ": " + what);
  }
  static std::string shown(const nlohmann::json& v) { return v.dump(); }

  // A positive integer at `key`, at most `max`; `fallback` (> 0) when
  // absent, required when 0. (The bounds are far above any published
  // model's and keep the parameter count, a product of them, inside int64.)
  Result<std::int64_t> count(const std::string& key, std::int64_t fallback = 0,
                             std::int64_t max = std::int64_t{1} << 24) const {
    if (!j.contains(key) || j[key].is_null()) {
      if (fallback > 0) return fallback;
      return error(key, "is required (a positive integer)");
    }
    const auto& v = j[key];
    if (!v.is_number_integer()) return error(key, "expected a positive integer, got " + shown(v));
    if (v.is_number_unsigned() ? v.get<std::uint64_t>() > static_cast<std::uint64_t>(max) : v.get<std::int64_t>() > max)
      return error(key, "expected at most " + std::to_string(max) + ", got " + shown(v));
    if (v.get<std::int64_t>() < 1) return error(key, "expected a positive integer, got " + shown(v));
    return v.get<std::int64_t>();
  }
  Result<bool> flag(const std::string& key, bool fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean()) return error(key, "expected true or false, got " + shown(j[key]));
    return j[key].get<bool>();
  }
  Result<double> positive(const std::string& key, double fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    const auto& v = j[key];
    if (!v.is_number() || !(v.get<double>() > 0)) return error(key, "expected a number > 0, got " + shown(v));
    return v.get<double>();
  }
};

}  // namespace

Result<DenseDecoderConfig> read_hf_config(const std::string& path, std::string name, int groups) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open (a Hugging Face config.json was expected)");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    // (where it broke: Python's json writes NaN and Infinity, which JSON is not)
    return InvalidArgument(path + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) return InvalidArgument(path + ": expected a JSON object (a config.json)");
  HfReader r{path, j};

  DenseDecoderConfig c;
  c.name = std::move(name);
  c.groups = groups;
  if (!j.contains("model_type") || !j["model_type"].is_string())
    return r.error("model_type", "is required (\"llama\", \"mistral\", \"qwen2\" or \"phi\")");
  c.model_type = j["model_type"].get<std::string>();
  if (c.model_type != "llama" && c.model_type != "mistral" && c.model_type != "qwen2" && c.model_type != "phi")
    return r.error("model_type", "expected \"llama\", \"mistral\", \"qwen2\" or \"phi\" (a dense decoder), got \"" +
                                     c.model_type + "\"");
  const bool phi = c.model_type == "phi";
#define SLICESCHED_TAKE(field, expr)  \
  {                                   \
    auto v_ = (expr);                 \
    if (!v_.ok()) return v_.status(); \
    field = v_.value();               \
  }
  // Settings that change the weights or the attention but that nothing
  // here models are refused, not simulated (or served) as another model.
  if (j.contains("quantization_config") && !j["quantization_config"].is_null())
    return r.error("quantization_config",
                   "quantized weights are not modelled (their bytes and kernels would be counted at the "
                   "config's dtype); give the unquantized model's config.json");
  if (j.contains("mlp_bias") && j["mlp_bias"] == true)
    return r.error("mlp_bias", "true is not supported (the MLP's projections have no bias here)");
  SLICESCHED_TAKE(c.hidden, r.count("hidden_size", 0, 1 << 20))
  SLICESCHED_TAKE(c.layers, r.count("num_hidden_layers", 0, 10000))
  SLICESCHED_TAKE(c.heads, r.count("num_attention_heads", 0, 1 << 16))
  SLICESCHED_TAKE(c.kv_heads, r.count("num_key_value_heads", c.heads, 1 << 16))
  if (c.heads % c.kv_heads != 0)
    return r.error("num_key_value_heads", "expected a divisor of num_attention_heads (" + std::to_string(c.heads) +
                                              "), got " + std::to_string(c.kv_heads));
  if (!j.contains("head_dim") && c.hidden % c.heads != 0)
    return r.error("num_attention_heads", "expected a divisor of hidden_size (" + std::to_string(c.hidden) +
                                              ") or a head_dim, got " + std::to_string(c.heads));
  SLICESCHED_TAKE(c.head_dim, r.count("head_dim", c.hidden / c.heads, 1 << 16))
  if (c.head_dim % 2 != 0)
    return r.error("head_dim",
                   "expected an even head dimension (RoPE rotates pairs), got " + std::to_string(c.head_dim));
  SLICESCHED_TAKE(c.mlp, r.count("intermediate_size"))
  SLICESCHED_TAKE(c.vocab, r.count("vocab_size"))
  SLICESCHED_TAKE(c.context_window, r.count("max_position_embeddings", 0, std::int64_t{1} << 30))
  // A sliding window (Mistral v0.1's 4,096 tokens; Qwen2 with
  // use_sliding_window) is not modelled: attention here is full. Up to the
  // window the two are the same, so the model serves (and simulates) that
  // many positions, not max_position_embeddings: no token comes from
  // attention the real model would not do, and no KV cache is counted that
  // it would not hold.
  const bool windowed = c.model_type == "qwen2" ? j.contains("use_sliding_window") && j["use_sliding_window"] == true
                                                : j.contains("sliding_window") && !j["sliding_window"].is_null();
  if (windowed && j.contains("sliding_window") && !j["sliding_window"].is_null()) {
    std::int64_t window = 0;
    SLICESCHED_TAKE(window, r.count("sliding_window", 0, std::int64_t{1} << 30))
    c.context_window = std::min(c.context_window, window);
  }
  SLICESCHED_TAKE(c.tied_embeddings, r.flag("tie_word_embeddings", false))
  // Qwen2 always biases q, k and v (not o_proj). Llama's attention_bias
  // biases all four, o_proj too, which nothing here models; Mistral has no
  // biases whatever the key says (transformers ignores it there).
  if (c.model_type == "llama") {
    bool attention_bias = false;
    SLICESCHED_TAKE(attention_bias, r.flag("attention_bias", false))
    if (attention_bias)
      return r.error("attention_bias",
                     "true is not supported for model_type \"llama\": it biases o_proj as well as q, k and v, and "
                     "an o_proj bias is not modelled (Qwen2's q/k/v biases are)");
  }
  c.qkv_bias = c.model_type == "qwen2";
  // The gated MLP's activation is SiLU here; another would serve other
  // tokens than transformers' (Phi's GELU is read below).
  if (!phi && j.contains("hidden_act") && !j["hidden_act"].is_null()) {
    const auto& a = j["hidden_act"];
    const std::string act = a.is_string() ? a.get<std::string>() : "";
    if (act != "silu" && act != "swish")
      return r.error("hidden_act",
                     "expected \"silu\" (or \"swish\", its other name: the gated MLP's activation "
                     "here), got " +
                         a.dump());
  }
  if (phi) {
    // transformers' PhiForCausalLM: one LayerNorm feeds attention and a
    // fc1 -> GELU -> fc2 MLP, summed into the residual; every projection,
    // the norms and the LM head have biases; RoPE turns the first
    // partial_rotary_factor of each head.
    bool qk_norm = false;
    SLICESCHED_TAKE(qk_norm, r.flag("qk_layernorm", false))
    if (qk_norm) return r.error("qk_layernorm", "true is not supported (no norm on q and k is modelled)");
    if (j.contains("hidden_act") && !j["hidden_act"].is_null()) {
      const auto& a = j["hidden_act"];
      const std::string act = a.is_string() ? a.get<std::string>() : "";
      if (act != "gelu_new" && act != "gelu" && act != "gelu_fast" && act != "gelu_pytorch_tanh")
        return r.error("hidden_act",
                       "expected a GELU (\"gelu_new\", \"gelu\", \"gelu_fast\" or "
                       "\"gelu_pytorch_tanh\"), got " +
                           a.dump());
      c.hidden_act = act;
    } else {
      c.hidden_act = "gelu_new";
    }
    // (in transformers 5's rope_parameters, which wins as it does there, or
    // at the top)
    double factor = 0.5;
    const bool in_rope = j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
                         j["rope_parameters"].contains("partial_rotary_factor") &&
                         !j["rope_parameters"]["partial_rotary_factor"].is_null();
    const nlohmann::json& holder = in_rope ? j["rope_parameters"] : j;
    const std::string key = in_rope ? "rope_parameters.partial_rotary_factor" : "partial_rotary_factor";
    if (holder.contains("partial_rotary_factor") && !holder["partial_rotary_factor"].is_null()) {
      const auto& f = holder["partial_rotary_factor"];
      if (!f.is_number() || !(f.get<double>() > 0 && f.get<double>() <= 1))
        return r.error(key, "expected a number in (0, 1], got " + f.dump());
      factor = f.get<double>();
    }
    c.rotary_dim = static_cast<std::int64_t>(factor * static_cast<double>(c.head_dim));  // (transformers' int())
    if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0)
      return r.error(key, "turns " + std::to_string(c.rotary_dim) + " of head_dim " + std::to_string(c.head_dim) +
                              " dimensions, expected an even number of at least 2");
    c.qkv_bias = true;
    c.parallel_block = true, c.gated_mlp = false, c.layer_norm = true, c.linear_bias = true;
  }
  // transformers 5 writes RoPE's settings in rope_parameters; older files
  // have rope_theta at the top and rope_scaling beside it.
  const std::string rope_key =
      j.contains("rope_parameters") && j["rope_parameters"].is_object() ? "rope_parameters" : "rope_scaling";
  const nlohmann::json rope = j.contains(rope_key) ? j[rope_key] : nlohmann::json();
  if (!rope.is_null() && !rope.is_object()) return r.error(rope_key, "expected an object or null, got " + rope.dump());
  // Where both give it, rope_parameters' wins, as in transformers 5 (a
  // config it rewrote may keep a stale top-level value).
  if (rope_key == "rope_parameters" && rope.contains("rope_theta") && !rope["rope_theta"].is_null()) {
    HfReader rr{path, rope};
    SLICESCHED_TAKE(c.rope_theta, rr.positive("rope_theta", 10000.0))
  } else {
    SLICESCHED_TAKE(c.rope_theta, r.positive("rope_theta", 10000.0))
  }
  if (rope.is_object()) {
    const auto& type = rope.contains("rope_type") ? rope["rope_type"] : rope.contains("type") ? rope["type"] : rope;
    const std::string t = type.is_string() ? type.get<std::string>() : "";
    if (t == "llama3") {
      HfReader rr{path, rope};
      SLICESCHED_TAKE(c.rope_factor, rr.positive("factor", 8.0))
      SLICESCHED_TAKE(c.rope_low_freq_factor, rr.positive("low_freq_factor", 1.0))
      SLICESCHED_TAKE(c.rope_high_freq_factor, rr.positive("high_freq_factor", 4.0))
      SLICESCHED_TAKE(c.rope_original_context, rr.count("original_max_position_embeddings", 8192))
      if (!(c.rope_high_freq_factor > c.rope_low_freq_factor))
        return r.error(rope_key, "high_freq_factor must exceed low_freq_factor");
    } else if (t != "default") {
      return r.error(rope_key, "rope_type " + type.dump() + " is not supported (\"default\" or \"llama3\")");
    }
  }
  SLICESCHED_TAKE(c.norm_eps, r.positive(phi ? "layer_norm_eps" : "rms_norm_eps", phi ? 1e-5 : 1e-6))
#undef SLICESCHED_TAKE
  std::string dtype = "bfloat16";
  // (transformers 5 writes dtype; older files torch_dtype, sometimes null)
  const std::string dtype_key = j.contains("torch_dtype") && !j["torch_dtype"].is_null() ? "torch_dtype" : "dtype";
  if (j.contains(dtype_key) && !j[dtype_key].is_null()) {
    if (!j[dtype_key].is_string()) return r.error(dtype_key, "expected a string, got " + j[dtype_key].dump());
    dtype = j[dtype_key].get<std::string>();
  }
  if (dtype == "bfloat16")
    c.dtype = DType::kBF16;
  else if (dtype == "float16")
    c.dtype = DType::kF16;
  else if (dtype == "float32")
    c.dtype = DType::kF32;
  else
    return r.error(dtype_key, "expected \"bfloat16\", \"float16\" or \"float32\", got \"" + dtype + "\"");
  if (c.layers % groups != 0)
    return r.error("num_hidden_layers", "expected a multiple of the model's groups (" + std::to_string(groups) +
                                            "), got " + std::to_string(c.layers));
  return c;
}

}  // namespace slicesched
