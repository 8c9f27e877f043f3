// Real checkpoints in the LibTorch runtime: a tiny Hugging Face checkpoint
// written here (random weights, safetensors) loads, memory-mapped, and
// generates exactly the tokens of an independent reference loop over the
// same weights (tiny_checkpoint.h); broken files are refused with one line
// naming the file, the tensor, the expected and the found shape.
#include "executor/torch/checkpoint.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "executor/torch/runtime.h"
#include "tiny_checkpoint.h"

using namespace slicesched::rt;
namespace fs = std::filesystem;

namespace {

std::string scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("slicesched_ckpt_" + std::to_string(::getpid()) + "_" + name);
  fs::create_directories(p);
  return p.string();
}

LlamaConfig config_of(const tiny_ckpt::Shape& s, const std::string& dir, const std::string& dtype = "float32") {
  LlamaConfig c;
  c.name = "tiny-ckpt";
  c.vocab = s.vocab, c.hidden = s.hidden, c.layers = s.layers, c.heads = s.heads, c.kv_heads = s.kv_heads;
  c.mlp = s.mlp, c.groups = 2;
  c.explicit_head_dim = s.head_dim * s.heads == s.hidden ? 0 : s.head_dim;
  c.rope_theta = s.rope_theta, c.norm_eps = s.eps;
  c.rope_factor = s.rope_factor, c.rope_low_freq_factor = s.rope_low, c.rope_high_freq_factor = s.rope_high;
  c.rope_original_context = s.rope_original;
  c.dtype = dtype;
  c.qkv_bias = s.qkv_bias, c.tied_embeddings = s.tied;
  c.seed = 99;  // ignored with a checkpoint
  c.checkpoint = dir;
  return c;
}

const std::vector<std::vector<std::int64_t>> kPrompts = {{1, 2, 3, 4, 5}, {100, 7, 300, 42, 9, 11, 500, 2, 0}};

}  // namespace

TEST_CASE("a tiny checkpoint generates exactly the tokens of the reference loop over its weights", "[torch]") {
  // Llama (one file, float32), Llama 3 (rope_scaling "llama3") in two shards
  // stored as bfloat16, and
  // Qwen2-style (q/k/v biases, tied embeddings, head_dim 32 != hidden/heads)
  // stored as float16.
  const int variant = GENERATE(0, 1, 2);
  tiny_ckpt::Shape s;
  if (variant == 1) s.file_dtype = "BF16", s.shards = 2, s.rope_theta = 500000.0, s.rope_factor = 8;
  if (variant == 2) s.file_dtype = "F16", s.qkv_bias = true, s.tied = true, s.head_dim = 32;
  INFO("variant " << variant);
  const auto weights = tiny_ckpt::make_weights(s, 1234u + static_cast<std::uint32_t>(variant));
  const std::string dir = scratch("gen" + std::to_string(variant));
  tiny_ckpt::write_checkpoint(dir, s, weights);

  const int max_new = 6;
  std::vector<std::vector<std::int64_t>> expected;
  for (const auto& p : kPrompts) expected.push_back(tiny_ckpt::generate(s, weights, p, max_new));

  LlamaModel m(config_of(s, dir));
  CHECK(m.generate_reference(kPrompts, max_new, "cpu") == expected);
  // Another virtual device gets its own copy of the same weights.
  CHECK(m.generate_reference(kPrompts, max_new, "cpu:1") == expected);
  // Bytes per op as weight_bytes says (so as the model contract charges them).
  for (const std::string op : {"embed", "layers0", "layers1", "head"})
    CHECK(m.load(op, "cpu:2") == weight_bytes(m.config(), op));

  // The seed plays no part.
  LlamaConfig other = config_of(s, dir);
  other.seed = 5;
  CHECK(LlamaModel(other).generate_reference({kPrompts[0]}, max_new, "cpu")[0] == expected[0]);
  // Converted on load to the configured dtype: bfloat16 runs too (its
  // rounding may change a token, so only its shape is checked).
  LlamaModel bf(config_of(s, dir, "bfloat16"));
  const auto bf_tokens = bf.generate_reference({kPrompts[0]}, 2, "cpu");
  CHECK(bf_tokens[0].size() == 2);
  fs::remove_all(dir);
}

TEST_CASE("broken checkpoints are refused with one line naming the file, the tensor and the shapes", "[torch]") {
  tiny_ckpt::Shape s;
  s.layers = 2;
  const auto weights = tiny_ckpt::make_weights(s, 7);
  const std::string dir = scratch("broken");
  const std::string file = dir + "/model.safetensors";
  auto names = [&](auto keep) {
    std::vector<std::string> out;
    for (const auto& [n, t] : weights)
      if (keep(n)) out.push_back(n);
    return out;
  };
  auto all = [](const std::string&) { return true; };
  auto refused = [&](const std::string& what) {
    INFO(what);
    CHECK_THROWS_WITH(LlamaModel(config_of(s, dir)), Catch::Contains(what));
    CHECK_THROWS_AS(LlamaModel(config_of(s, dir)), std::invalid_argument);
  };

  tiny_ckpt::write_checkpoint(dir, s, weights);
  CHECK_NOTHROW(LlamaModel(config_of(s, dir)));

  // A missing tensor.
  tiny_ckpt::write_safetensors(file, weights, names([](const std::string& n) { return n != "model.norm.weight"; }),
                               "F32");
  refused(dir + ": tensor 'model.norm.weight' is missing (expected shape [64])");

  // A wrong shape: the config says 2 KV heads, the file has 4.
  auto wide = weights;
  wide["model.layers.1.self_attn.k_proj.weight"] = {{64, 64}, std::vector<float>(64 * 64, 0.5f)};
  tiny_ckpt::write_safetensors(file, wide, names(all), "F32");
  refused(file + ": tensor 'model.layers.1.self_attn.k_proj.weight' has shape [64, 64], expected [32, 64]");

  // An unexpected tensor: q/k/v biases the config does not have.
  auto biased = weights;
  biased["model.layers.0.self_attn.q_proj.bias"] = {{64}, std::vector<float>(64, 0.0f)};
  std::vector<std::string> with_bias = names(all);
  with_bias.push_back("model.layers.0.self_attn.q_proj.bias");
  tiny_ckpt::write_safetensors(file, biased, with_bias, "F32");
  refused(file + ": unexpected tensor 'model.layers.0.self_attn.q_proj.bias' of shape [64]");

  // A rotary inv_freq buffer (older Llama checkpoints) is ignored.
  auto inv = weights;
  inv["model.layers.0.self_attn.rotary_emb.inv_freq"] = {{8}, std::vector<float>(8, 1.0f)};
  std::vector<std::string> with_inv = names(all);
  with_inv.push_back("model.layers.0.self_attn.rotary_emb.inv_freq");
  tiny_ckpt::write_safetensors(file, inv, with_inv, "F32");
  CHECK_NOTHROW(LlamaModel(config_of(s, dir)));

  // Header problems: a dtype the runtime does not load, an unknown one,
  // offsets beyond the file, a truncated file, offsets not matching the shape.
  auto write_raw = [&](const std::string& header, std::size_t data_bytes) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    const std::uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xFF));
    out << header << std::string(data_bytes, '\0');
  };
  write_raw(R"({"model.norm.weight":{"dtype":"I64","shape":[64],"data_offsets":[0,512]}})", 512);
  refused(file + ": tensor 'model.norm.weight' has dtype I64; the runtime loads F32, F16 and BF16 weights");
  write_raw(R"({"model.norm.weight":{"dtype":"F13","shape":[64],"data_offsets":[0,256]}})", 256);
  refused(file + ": tensor 'model.norm.weight' has unknown dtype \"F13\"");
  write_raw(R"({"model.norm.weight":{"dtype":"F32","shape":[64],"data_offsets":[0,256]}})", 100);
  refused(file + ": tensor 'model.norm.weight' has data_offsets [0,256] beyond the file's 100 data bytes");
  write_raw(R"({"model.norm.weight":{"dtype":"F32","shape":[64],"data_offsets":[0,200]}})", 256);
  refused("spanning 200 bytes, but shape [64] of F32 needs 256");
  write_raw(R"({"model.norm.weight":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0);
  refused(file + ": tensor 'model.norm.weight' has an impossibly large shape [4294967296,4294967296]");
  write_raw(R"({"model.norm.weight")", 0);
  refused(file + ": the header is not a JSON object");
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << std::string("\x40\x00\x00\x00\x00\x00\x00\x00{\"a\"", 12);  // says 64 bytes of header, has 4
  }
  refused(file + ": truncated: the header says 64 bytes of JSON, the file has 4 after the length");
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << "abc";
  }
  refused(file + ": truncated: 3 bytes, less than the 8-byte header length");

  // Shards: an index whose weight_map names a tensor its shard lacks.
  tiny_ckpt::Shape sharded = s;
  sharded.shards = 2;
  tiny_ckpt::write_checkpoint(dir, sharded, weights);
  CHECK_NOTHROW(LlamaModel(config_of(s, dir)));
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"weight_map":{"model.norm.weight":"model-00002-of-00002.safetensors",)"
      << R"("model.embed_tokens.weight":"model-00002-of-00002.safetensors"}})";
  // (Names are dealt to the shards in sorted order: model.norm.weight, the
  // 21st, went to the first.)
  CHECK_THROWS_WITH(ckpt::Checkpoint::open(dir),
                    Catch::Contains("model.safetensors.index.json: weight_map: tensor 'model.norm.weight' is not in " +
                                    dir + "/model-00002-of-00002.safetensors"));

  // No safetensors at all.
  fs::remove_all(dir);
  fs::create_directories(dir);
  refused(dir + ": no model.safetensors or model.safetensors.index.json");
  CHECK_THROWS_WITH(LlamaModel(config_of(s, dir + "/nope")), Catch::Contains("not a directory"));
  fs::remove_all(dir);
}

// Hidden: the fixture of ctest's serve_checkpoint_cpu. Writes a tiny
// Qwen2-style checkpoint (biases, tied, bfloat16 shards) and a serve config
// naming it into $SLICESCHED_CHECKPOINT_OUT.
TEST_CASE("write a tiny checkpoint and a serve config for the cli test", "[.write_checkpoint]") {
  const char* out = std::getenv("SLICESCHED_CHECKPOINT_OUT");
  REQUIRE(out != nullptr);
  tiny_ckpt::Shape s;
  s.qkv_bias = true, s.tied = true, s.file_dtype = "BF16", s.shards = 2;
  tiny_ckpt::write_checkpoint(out, s, tiny_ckpt::make_weights(s, 2024));
  std::ofstream(fs::path(out) / "serve.toml") << R"(# Live serving from the checkpoint in this folder (ctest).
name = "serve-checkpoint"
seed = 3
[cluster]
link_classes = [{ name = "host", bandwidth_gbps = 10.0 }]
accelerators = [{ name_prefix = "cpu", count = 3, type = "cpu", hbm_gib = 0.25, device = "cpu:*" }]
[[models]]
name = "tiny-qwen"
checkpoint = "."
groups = 2
[live]
time_scale = 4.0
[[tenants]]
name = "online"
priority = 10
stream = { poisson_rate = 3.0, duration_s = 3, input_tokens = 16, output_tokens = 6 }
[[policies]]
name = "SliceScheduler"
tenants = ["online"]
placement = { plugin = "simulation-guided" }
partition_sets = [{ plugin = "singles" }, { plugin = "all" }]
)";
}
