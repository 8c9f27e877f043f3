// The built-in dense-decoder presets. Shapes are those of each model's
// Hugging Face config.json (hidden_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads, intermediate_size, vocab_size,
// rope_theta, max_position_embeddings, torch_dtype); the Vidur profiles of
// ../shared/data/profiles/vidur/ were measured on the same shapes (their
// CSVs carry n_head, n_kv_head, n_embd, n_expanded_embd).
//
// phi-2 (microsoft/phi-2) is the one of another block: attention and a
// two-matrix GELU MLP run in parallel from one LayerNorm (with bias), every
// projection has a bias, and RoPE turns 32 of each head's 80 dimensions
// (partial_rotary_factor 0.4). Its Vidur profile measures those kernels
// (use_gated_mlp False, no post-attention norm).
module;
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

module slicesched.models.dense;

namespace slicesched {

namespace {

// A Llama-2-shaped model: RoPE theta 10,000, 4,096 positions, float16.
DenseDecoderConfig llama2(std::string_view name, std::int64_t hidden, std::int64_t layers, std::int64_t heads,
                          std::int64_t kv_heads, std::int64_t mlp, std::int64_t vocab) {
  DenseDecoderConfig c;
  c.name = std::string(name);
  c.hidden = hidden, c.layers = layers, c.heads = heads, c.kv_heads = kv_heads, c.head_dim = hidden / heads;
  c.mlp = mlp, c.vocab = vocab;
  c.rope_theta = 10000.0;
  c.context_window = 4096;
  c.dtype = DType::kF16;
  return c;
}

constexpr std::array<std::string_view, 9> kPresets = {"llama3-8b",    "llama3.1-8b", "llama-tiny",
                                                      "llama2-7b",    "llama2-70b",  "codellama-34b",
                                                      "internlm-20b", "mistral-7b",  "phi-2"};

}  // namespace

std::span<const std::string_view> dense_preset_names() { return kPresets; }

std::optional<DenseDecoderConfig> dense_preset(std::string_view name) {
  if (name == "llama3-8b") return llama3_8b();
  if (name == "llama3.1-8b") {  // meta-llama/Llama-3.1-8B: Llama-3-8B's shapes, 131,072 positions
    DenseDecoderConfig c = llama3_8b();
    c.name = "llama3.1-8b";
    c.context_window = 131072;
    c.rope_factor = 8, c.rope_low_freq_factor = 1, c.rope_high_freq_factor = 4, c.rope_original_context = 8192;
    return c;
  }
  if (name == "llama-tiny") return llama_tiny();
  // meta-llama/Llama-2-7b-hf: 32 KV heads (no grouped-query attention).
  if (name == "llama2-7b") return llama2(name, 4096, 32, 32, 32, 11008, 32000);
  // meta-llama/Llama-2-70b-hf: grouped-query attention, 8 KV heads.
  if (name == "llama2-70b") return llama2(name, 8192, 80, 64, 8, 28672, 32000);
  if (name == "codellama-34b") {  // codellama/CodeLlama-34b-Instruct-hf: RoPE theta 1e6, 16,384 positions
    DenseDecoderConfig c = llama2(name, 8192, 48, 64, 8, 22016, 32000);
    c.rope_theta = 1000000.0;
    c.context_window = 16384;
    c.dtype = DType::kBF16;
    return c;
  }
  if (name == "internlm-20b") {  // internlm/internlm-20b: llama-shaped, 40 KV heads, vocab 103,168
    DenseDecoderConfig c = llama2(name, 5120, 60, 40, 40, 13824, 103168);
    c.dtype = DType::kBF16;
    return c;
  }
  // mistralai/Mistral-7B-v0.1: 8 KV heads, 32,768 positions under a 4,096-token
  // sliding window. Attention here is full, the same up to the window, so the
  // preset serves 4,096 positions (as read_hf_config does with its config.json).
  if (name == "mistral-7b") {
    DenseDecoderConfig c = llama2(name, 4096, 32, 32, 8, 14336, 32000);
    c.model_type = "mistral";
    c.context_window = 4096;
    c.dtype = DType::kBF16;
    return c;
  }
  // microsoft/phi-2: 2,048 positions, float16, LayerNorm eps 1e-5.
  if (name == "phi-2") {
    DenseDecoderConfig c = llama2(name, 2560, 32, 32, 32, 10240, 51200);
    c.model_type = "phi";
    c.context_window = 2048;
    c.norm_eps = 1e-5;
    c.qkv_bias = true;
    c.parallel_block = true, c.gated_mlp = false, c.layer_norm = true, c.linear_bias = true;
    c.rotary_dim = 32;
    c.hidden_act = "gelu_new";
    return c;
  }
  return std::nullopt;
}

}  // namespace slicesched
