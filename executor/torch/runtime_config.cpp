// The LibTorch-free part of runtime.h: config checks, byte sizes, plans and
// synthetic prompts. Kept apart so it compiles in a blink.
#include <stdexcept>
#include <string>

#include "runtime.h"
#include "runtime_internal.h"

namespace slicesched::rt {
namespace {

[[noreturn]] void bad(const LlamaConfig& cfg, const std::string& what) {
  throw std::invalid_argument("model '" + cfg.name + "': " + what);
}

void positive(const LlamaConfig& cfg, const char* field, std::int64_t v) {
  if (v <= 0) bad(cfg, std::string(field) + " must be positive, got " + std::to_string(v));
}

using detail::mix;

}  // namespace

void validate(const LlamaConfig& cfg) {
  positive(cfg, "vocab", cfg.vocab);
  positive(cfg, "hidden", cfg.hidden);
  positive(cfg, "layers", cfg.layers);
  positive(cfg, "heads", cfg.heads);
  positive(cfg, "kv_heads", cfg.kv_heads);
  positive(cfg, "mlp", cfg.mlp);
  positive(cfg, "groups", cfg.groups);
  if (cfg.explicit_head_dim < 0)
    bad(cfg, "head_dim must be positive (or 0 for hidden / heads), got " + std::to_string(cfg.explicit_head_dim));
  if (cfg.explicit_head_dim == 0 && cfg.hidden % cfg.heads != 0)
    bad(cfg,
        "hidden (" + std::to_string(cfg.hidden) + ") must be a multiple of heads (" + std::to_string(cfg.heads) + ")");
  if (cfg.heads % cfg.kv_heads != 0)
    bad(cfg, "heads (" + std::to_string(cfg.heads) + ") must be a multiple of kv_heads (" +
                 std::to_string(cfg.kv_heads) + ")");
  if (cfg.layers % cfg.groups != 0)
    bad(cfg, "layers (" + std::to_string(cfg.layers) + ") must be a multiple of groups (" + std::to_string(cfg.groups) +
                 ")");
  if (cfg.head_dim() % 2 != 0) bad(cfg, "head_dim (" + std::to_string(cfg.head_dim()) + ") must be even for RoPE");
  if (cfg.rotary_dim < 0 || cfg.rotary_dim > cfg.head_dim() || cfg.rotary_dim % 2 != 0)
    bad(cfg, "rotary_dim (" + std::to_string(cfg.rotary_dim) + ") must be even and at most head_dim (" +
                 std::to_string(cfg.head_dim()) + ")");
  if (cfg.parallel_block && (!cfg.qkv_bias || cfg.tied_embeddings))
    bad(cfg, "a parallel block (Phi) has q/k/v biases and an LM head of its own (qkv_bias, no tied embeddings)");
  if (!(cfg.rope_theta > 0)) bad(cfg, "rope_theta must be positive, got " + std::to_string(cfg.rope_theta));
  if (cfg.rope_factor < 0 ||
      (cfg.rope_factor > 0 && (!(cfg.rope_high_freq_factor > cfg.rope_low_freq_factor) ||
                               !(cfg.rope_low_freq_factor > 0) || cfg.rope_original_context <= 0)))
    bad(cfg,
        "rope scaling: expected factor >= 0, 0 < low_freq_factor < high_freq_factor and a positive original "
        "context");
  if (!(cfg.norm_eps > 0)) bad(cfg, "norm_eps must be positive, got " + std::to_string(cfg.norm_eps));
  if (cfg.dtype != "float32" && cfg.dtype != "bfloat16" && cfg.dtype != "float16")
    bad(cfg, "dtype '" + cfg.dtype + "' is not one of float32, bfloat16, float16");
}

std::int64_t dtype_bytes(const std::string& dtype) {
  if (dtype == "float32") return 4;
  if (dtype == "bfloat16" || dtype == "float16") return 2;
  throw std::invalid_argument("dtype '" + dtype + "' is not one of float32, bfloat16, float16");
}

namespace detail {

int parse_op(const LlamaConfig& cfg, const std::string& op) {
  if (op == "embed") return kEmbed;
  if (op == "head") return kHead;
  // "layers<g>": decimal g without leading zeros, g < groups.
  if (op.rfind("layers", 0) == 0 && op.size() > 6 && op.size() <= 6 + 9 &&
      op.find_first_not_of("0123456789", 6) == std::string::npos && (op.size() == 7 || op[6] != '0')) {
    const int g = std::stoi(op.substr(6));
    if (g < cfg.groups) return g;
  }
  throw std::invalid_argument("model '" + cfg.name + "': unknown op '" + op + "' (expected embed, layers0.." +
                              (cfg.groups > 0 ? "layers" + std::to_string(cfg.groups - 1) : std::string("?")) +
                              ", head)");
}

}  // namespace detail

std::int64_t weight_bytes(const LlamaConfig& cfg, const std::string& op) {
  validate(cfg);
  const std::int64_t b = dtype_bytes(cfg.dtype), h = cfg.hidden, hd = cfg.head_dim();
  const int g = detail::parse_op(cfg, op);
  if (g == detail::kEmbed) return cfg.vocab * h * b;
  // Final RMSNorm + LM head; tied, the LM head is the embedding's matrix,
  // charged to "embed" (as the model contract charges it).
  if (g == detail::kHead)
    return (h + (cfg.tied_embeddings ? 0 : cfg.vocab * h) + (cfg.parallel_block ? h + cfg.vocab : 0)) * b;
  const std::int64_t qkv = (cfg.heads + 2 * cfg.kv_heads) * hd;
  const std::int64_t per_layer =
      h * qkv                     // q, k, v (one fused matrix)
      + (cfg.qkv_bias ? qkv : 0)  // their biases (one fused vector)
      + cfg.heads * hd * h        // o
      +
      (cfg.parallel_block ? 2 * h * cfg.mlp + cfg.mlp + 2 * h + 2 * h  // fc1, fc2, their and dense's biases, LayerNorm
                          : 3 * h * cfg.mlp + 2 * h);                  // gate, up (fused), down; 2 RMSNorm weights
  return cfg.layers / cfg.groups * per_layer * b;
}

std::int64_t kv_bytes_per_token(const LlamaConfig& cfg) {
  validate(cfg);
  return 2 * (cfg.layers / cfg.groups) * cfg.kv_heads * cfg.head_dim() * dtype_bytes(cfg.dtype);
}

std::int64_t hidden_bytes(const LlamaConfig& cfg, std::int64_t tokens) {
  validate(cfg);
  return tokens * cfg.hidden * dtype_bytes(cfg.dtype);
}

std::int64_t StepPlan::tokens() const {
  std::int64_t n = 0;
  for (const auto& s : seqs) n += static_cast<std::int64_t>(s.tokens.size());
  return n;
}

std::vector<std::int64_t> synthetic_prompt(const LlamaConfig& cfg, std::uint64_t seed, std::uint64_t seq,
                                           std::int64_t n) {
  if (n < 0) throw std::invalid_argument("synthetic_prompt: length must be >= 0, got " + std::to_string(n));
  if (cfg.vocab <= 0) throw std::invalid_argument("synthetic_prompt: vocab must be positive");
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  const std::uint64_t base = mix(mix(seed) ^ seq);
  const auto vocab = static_cast<std::uint64_t>(cfg.vocab);
  for (std::int64_t i = 0; i < n; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(mix(base + static_cast<std::uint64_t>(i)) % vocab);
  return out;
}

}  // namespace slicesched::rt
