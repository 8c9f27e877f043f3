// Test support: a tiny Hugging Face checkpoint written by the tests (random
// weights in the safetensors format, a config.json), and an independent
// reference forward pass over the same weights: plain float loops written
// from Hugging Face's Llama / Qwen2 definitions (RMSNorm in float, rotate-half
// RoPE, grouped-query causal attention, SiLU-gated MLP, q/k/v biases, tied
// LM head), recomputing the whole sequence at every step -- no KV cache, no
// LibTorch, nothing shared with the runtime it checks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace tiny_ckpt {

struct Shape {
  std::int64_t vocab = 512, hidden = 64, layers = 4, heads = 4, kv_heads = 2, head_dim = 16, mlp = 128;
  bool qkv_bias = false, tied = false;
  double rope_theta = 10000.0, eps = 1e-6;
  // Llama 3's rope_scaling ("llama3"); factor 0: none. A short original
  // context makes it change most frequencies of a tiny model.
  double rope_factor = 0, rope_low = 1, rope_high = 4;
  std::int64_t rope_original = 32;
  std::string file_dtype = "F32";  // "F32" | "BF16" | "F16": how the tensors are stored
  int shards = 1;                  // > 1: model-0000i-of-0000n.safetensors + index.json
};

struct Tensor {
  std::vector<std::int64_t> shape;
  std::vector<float> v;  // the values as stored (rounded to file_dtype)
};
using Weights = std::map<std::string, Tensor>;

inline std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even
  return static_cast<std::uint16_t>(u >> 16);
}
inline float from_bf16(std::uint16_t b) {
  const std::uint32_t u = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline std::uint16_t to_f16(float f) {  // normal range only (the test's values are)
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000;
  const int exp = int((u >> 23) & 0xFF) - 127 + 15;
  std::uint32_t mant = u & 0x7FFFFF;
  if (exp <= 0) return static_cast<std::uint16_t>(sign);  // flush tiny values to zero
  std::uint32_t h = sign | (std::uint32_t(exp) << 10) | (mant >> 13);
  if ((mant & 0x1FFF) > 0x1000 || ((mant & 0x1FFF) == 0x1000 && (h & 1))) ++h;
  return static_cast<std::uint16_t>(h);
}
inline float from_f16(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000) << 16;
  const int exp = (h >> 10) & 0x1F;
  const std::uint32_t mant = h & 0x3FF;
  if (exp == 0) return sign ? -0.0f : 0.0f;
  const std::uint32_t u = sign | (std::uint32_t(exp - 15 + 127) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Random weights with the Hugging Face names, rounded to the file dtype.
inline Weights make_weights(const Shape& s, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Weights w;
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape, float std, float mean = 0) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::normal_distribution<float> nd(mean, std);
    Tensor t{shape, std::vector<float>(static_cast<std::size_t>(n))};
    for (auto& x : t.v) {
      x = nd(rng);
      if (s.file_dtype == "BF16") x = from_bf16(to_bf16(x));
      if (s.file_dtype == "F16") x = from_f16(to_f16(x));
    }
    w[name] = std::move(t);
  };
  const std::int64_t h = s.hidden, q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  const float in_h = 1.0f / std::sqrt(float(h));
  add("model.embed_tokens.weight", {s.vocab, h}, 0.2f);  // small: a tied head must not just echo the input
  for (std::int64_t i = 0; i < s.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "self_attn.q_proj.weight", {q, h}, in_h);
    add(p + "self_attn.k_proj.weight", {kv, h}, in_h);
    add(p + "self_attn.v_proj.weight", {kv, h}, in_h);
    if (s.qkv_bias) {
      add(p + "self_attn.q_proj.bias", {q}, 0.5f);
      add(p + "self_attn.k_proj.bias", {kv}, 0.5f);
      add(p + "self_attn.v_proj.bias", {kv}, 0.5f);
    }
    add(p + "self_attn.o_proj.weight", {h, q}, 1.0f / std::sqrt(float(q)));
    add(p + "mlp.gate_proj.weight", {s.mlp, h}, in_h);
    add(p + "mlp.up_proj.weight", {s.mlp, h}, in_h);
    add(p + "mlp.down_proj.weight", {h, s.mlp}, 1.0f / std::sqrt(float(s.mlp)));
    add(p + "input_layernorm.weight", {h}, 0.1f, 1.0f);  // not all ones: the norm weights must be read
    add(p + "post_attention_layernorm.weight", {h}, 0.1f, 1.0f);
  }
  add("model.norm.weight", {h}, 0.1f, 1.0f);
  if (!s.tied) add("lm_head.weight", {s.vocab, h}, in_h);
  return w;
}

inline std::string shape_json(const std::vector<std::int64_t>& shape) {
  std::string o = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) o += (i ? "," : "") + std::to_string(shape[i]);
  return o + "]";
}

// One safetensors file of `names` from w, stored as `dtype`.
inline void write_safetensors(const std::string& path, const Weights& w, const std::vector<std::string>& names,
                              const std::string& dtype) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::string data;
  for (const auto& n : names) {
    const Tensor& t = w.at(n);
    const std::size_t begin = data.size();
    for (float x : t.v) {
      if (dtype == "F32") {
        data.append(reinterpret_cast<const char*>(&x), 4);
      } else {
        const std::uint16_t b = dtype == "BF16" ? to_bf16(x) : to_f16(x);
        data.append(reinterpret_cast<const char*>(&b), 2);
      }
    }
    header += ",\"" + n + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape_json(t.shape) + ",\"data_offsets\":[" +
              std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
  }
  header += "}";
  while ((8 + header.size()) % 8 != 0) header += ' ';  // as the Python writer pads
  std::ofstream out(path, std::ios::binary);
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xFF));  // little-endian
  out << header << data;
}

// The checkpoint directory: config.json and the safetensors (sharded when
// s.shards > 1, with model.safetensors.index.json).
inline void write_checkpoint(const std::string& dir, const Shape& s, const Weights& w) {
  namespace fs = std::filesystem;
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream cfg(fs::path(dir) / "config.json");
  cfg << "{\"model_type\": \"" << (s.qkv_bias ? "qwen2" : "llama") << "\", \"hidden_size\": " << s.hidden
      << ", \"num_hidden_layers\": " << s.layers << ", \"num_attention_heads\": " << s.heads
      << ", \"num_key_value_heads\": " << s.kv_heads << ", \"head_dim\": " << s.head_dim
      << ", \"intermediate_size\": " << s.mlp << ", \"vocab_size\": " << s.vocab
      << ", \"max_position_embeddings\": 4096, \"rope_theta\": " << s.rope_theta << ", \"rms_norm_eps\": " << s.eps
      << ", \"tie_word_embeddings\": " << (s.tied ? "true" : "false") << ", \"torch_dtype\": \"float32\""
      << ", \"hidden_act\": \"silu\", \"attention_bias\": " << (s.qkv_bias ? "true" : "false")
      << ", \"architectures\": [\"" << (s.qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM") << "\"]";
  if (s.rope_factor > 0)
    cfg << ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": " << s.rope_factor
        << ", \"low_freq_factor\": " << s.rope_low << ", \"high_freq_factor\": " << s.rope_high
        << ", \"original_max_position_embeddings\": " << s.rope_original << "}";
  cfg << "}\n";
  std::vector<std::string> names;
  for (const auto& [n, t] : w) names.push_back(n);
  if (s.shards <= 1) {
    write_safetensors((fs::path(dir) / "model.safetensors").string(), w, names, s.file_dtype);
    return;
  }
  std::string map;
  for (int k = 0; k < s.shards; ++k) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", k + 1, s.shards);
    std::vector<std::string> mine;
    for (std::size_t i = 0; i < names.size(); ++i)
      if (int(i % std::size_t(s.shards)) == k) {
        mine.push_back(names[i]);
        map += std::string(map.empty() ? "" : ",") + "\"" + names[i] + "\":\"" + file + "\"";
      }
    write_safetensors((fs::path(dir) / file).string(), w, mine, s.file_dtype);
  }
  std::ofstream(fs::path(dir) / "model.safetensors.index.json")
      << "{\"metadata\":{\"total_size\":0},\"weight_map\":{" << map << "}}\n";
}

// ---- the reference forward pass -----------------------------------------------------------------------------------

inline std::vector<float> rms_norm(const std::vector<float>& x, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / double(x.size()) + eps));
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

// y = W x (+ b), W [out, in] row-major.
inline std::vector<float> linear(const Tensor& W, const std::vector<float>& x, const Tensor* b = nullptr) {
  const std::int64_t out = W.shape[0], in = W.shape[1];
  std::vector<float> y(static_cast<std::size_t>(out));
  for (std::int64_t o = 0; o < out; ++o) {
    double acc = b ? b->v[std::size_t(o)] : 0.0;
    for (std::int64_t i = 0; i < in; ++i) acc += double(W.v[std::size_t(o * in + i)]) * x[std::size_t(i)];
    y[std::size_t(o)] = static_cast<float>(acc);
  }
  return y;
}

// Hugging Face's rotate-half RoPE on every head of v [n_heads * hd] at
// `pos`, its frequencies scaled as transformers' _compute_llama3_parameters
// does when the shape has a rope_factor.
inline void rope(std::vector<float>& v, std::int64_t n_heads, std::int64_t hd, std::int64_t pos, const Shape& s) {
  const std::int64_t half = hd / 2;
  for (std::int64_t h = 0; h < n_heads; ++h)
    for (std::int64_t i = 0; i < half; ++i) {
      double inv_freq = 1.0 / std::pow(s.rope_theta, double(2 * i) / double(hd));
      if (s.rope_factor > 0) {
        const double wavelen = 2 * std::numbers::pi / inv_freq, old_ctx = double(s.rope_original);
        const double scaled = wavelen > old_ctx / s.rope_low ? inv_freq / s.rope_factor : inv_freq;
        const double smooth = (old_ctx / wavelen - s.rope_low) / (s.rope_high - s.rope_low);
        const bool medium = !(wavelen < old_ctx / s.rope_high) && !(wavelen > old_ctx / s.rope_low);
        inv_freq = medium ? (1 - smooth) * scaled / s.rope_factor + smooth * scaled : scaled;
      }
      const double a = double(pos) * inv_freq;
      float& x1 = v[std::size_t(h * hd + i)];
      float& x2 = v[std::size_t(h * hd + i + half)];
      const double y1 = x1 * std::cos(a) - x2 * std::sin(a), y2 = x2 * std::cos(a) + x1 * std::sin(a);
      x1 = static_cast<float>(y1), x2 = static_cast<float>(y2);
    }
}

// The next token after `ids` (greedy), recomputing every position.
inline std::int64_t next_token(const Shape& s, const Weights& w, const std::vector<std::int64_t>& ids) {
  const std::int64_t n = static_cast<std::int64_t>(ids.size()), h = s.hidden, hd = s.head_dim;
  const std::int64_t rep = s.heads / s.kv_heads;
  std::vector<std::vector<float>> x(static_cast<std::size_t>(n));
  const Tensor& E = w.at("model.embed_tokens.weight");
  for (std::int64_t t = 0; t < n; ++t)
    x[std::size_t(t)].assign(E.v.begin() + ids[std::size_t(t)] * h, E.v.begin() + (ids[std::size_t(t)] + 1) * h);
  for (std::int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto W = [&](const std::string& k) -> const Tensor& { return w.at(p + k); };
    auto B = [&](const std::string& k) -> const Tensor* { return s.qkv_bias ? &w.at(p + k) : nullptr; };
    const auto rows = static_cast<std::size_t>(n);
    std::vector<std::vector<float>> q(rows), k(rows), v(rows);
    for (std::int64_t t = 0; t < n; ++t) {
      const auto a = rms_norm(x[std::size_t(t)], W("input_layernorm.weight").v, s.eps);
      q[std::size_t(t)] = linear(W("self_attn.q_proj.weight"), a, B("self_attn.q_proj.bias"));
      k[std::size_t(t)] = linear(W("self_attn.k_proj.weight"), a, B("self_attn.k_proj.bias"));
      v[std::size_t(t)] = linear(W("self_attn.v_proj.weight"), a, B("self_attn.v_proj.bias"));
      rope(q[std::size_t(t)], s.heads, hd, t, s);
      rope(k[std::size_t(t)], s.kv_heads, hd, t, s);
    }
    for (std::int64_t t = 0; t < n; ++t) {
      std::vector<float> attn(static_cast<std::size_t>(s.heads * hd), 0.0f);
      for (std::int64_t head = 0; head < s.heads; ++head) {
        const std::int64_t g = head / rep;
        std::vector<double> sc(static_cast<std::size_t>(t + 1));
        double mx = -1e300;
        for (std::int64_t u = 0; u <= t; ++u) {
          double d = 0;
          for (std::int64_t i = 0; i < hd; ++i)
            d += double(q[std::size_t(t)][std::size_t(head * hd + i)]) * k[std::size_t(u)][std::size_t(g * hd + i)];
          sc[std::size_t(u)] = d / std::sqrt(double(hd));
          mx = std::max(mx, sc[std::size_t(u)]);
        }
        double z = 0;
        for (auto& e : sc) z += (e = std::exp(e - mx));
        for (std::int64_t i = 0; i < hd; ++i) {
          double acc = 0;
          for (std::int64_t u = 0; u <= t; ++u)
            acc += sc[std::size_t(u)] / z * v[std::size_t(u)][std::size_t(g * hd + i)];
          attn[std::size_t(head * hd + i)] = static_cast<float>(acc);
        }
      }
      const auto o = linear(W("self_attn.o_proj.weight"), attn);
      for (std::int64_t i = 0; i < h; ++i) x[std::size_t(t)][std::size_t(i)] += o[std::size_t(i)];
      const auto a = rms_norm(x[std::size_t(t)], W("post_attention_layernorm.weight").v, s.eps);
      auto gate = linear(W("mlp.gate_proj.weight"), a);
      const auto up = linear(W("mlp.up_proj.weight"), a);
      for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
      const auto d = linear(W("mlp.down_proj.weight"), gate);
      for (std::int64_t i = 0; i < h; ++i) x[std::size_t(t)][std::size_t(i)] += d[std::size_t(i)];
    }
  }
  const auto f = rms_norm(x.back(), w.at("model.norm.weight").v, s.eps);
  const auto logits = linear(w.at(s.tied ? "model.embed_tokens.weight" : "lm_head.weight"), f);
  return std::max_element(logits.begin(), logits.end()) - logits.begin();
}

// max_new greedy tokens after `prompt`.
inline std::vector<std::int64_t> generate(const Shape& s, const Weights& w, std::vector<std::int64_t> prompt,
                                          int max_new) {
  std::vector<std::int64_t> out;
  for (int i = 0; i < max_new; ++i) {
    out.push_back(next_token(s, w, prompt));
    prompt.push_back(out.back());
  }
  return out;
}

}  // namespace tiny_ckpt
