// The dense-decoder presets against their published shapes and parameter
// counts, the model config errors, and two models sharing one cluster.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

import slicesched.compose.policy;
import slicesched.config;
import slicesched.core.plugin;
import slicesched.models.dense;
import slicesched.engine.tenant;
import slicesched.models.model;
import slicesched.models.work;
import slicesched.core.ids;
import slicesched.core.graph;
import slicesched.core.gmg;

using namespace slicesched;
namespace fs = std::filesystem;

namespace {

const std::string kSource = SLICESCHED_SOURCE_DIR;

struct Preset {
  std::string name;
  std::int64_t hidden, layers, heads, kv_heads, head_dim, mlp, vocab;
  bool tied, qkv_bias;
  double rope_theta;
  std::int64_t window, elem_bytes;
  std::int64_t parameters;  // published
};

// The published config.json values and parameter counts.
const std::vector<Preset> kPresets = {
    {"llama2-7b", 4096, 32, 32, 32, 128, 11008, 32000, false, false, 1e4, 4096, 2, 6'738'415'616},
    {"llama3-8b", 4096, 32, 32, 8, 128, 14336, 128256, false, false, 5e5, 8192, 2, 8'030'261'248},
    {"llama3.2-1b", 2048, 16, 32, 8, 64, 8192, 128256, true, false, 5e5, 131072, 2, 1'235'814'400},
    {"llama3.2-3b", 3072, 28, 24, 8, 128, 8192, 128256, true, false, 5e5, 131072, 2, 3'212'749'824},
    {"mistral-7b", 4096, 32, 32, 8, 128, 14336, 32000, false, false, 1e4, 4096, 2,
     7'241'732'096},  // (its sliding window)
    {"qwen2.5-7b", 3584, 28, 28, 4, 128, 18944, 152064, false, true, 1e6, 131072, 2, 7'615'616'512},
    // (a parallel block with LayerNorm, a plain GELU MLP and biases everywhere)
    {"phi-2", 2560, 32, 32, 32, 80, 10240, 51200, false, true, 1e4, 2048, 2, 2'779'683'840},
};

std::string load_error(const std::string& path) {
  auto cfg = load_config(path);
  REQUIRE_FALSE(cfg.ok());
  return cfg.status().message();
}

}  // namespace

TEST_CASE("every model preset has its published shapes, parameters and KV bytes", "[models][presets]") {
  for (const Preset& p : kPresets) {
    INFO(p.name);
    auto cfg = load_config(kSource + "/configs/models/" + p.name + ".toml");
    REQUIRE(cfg.ok());
    REQUIRE(cfg->models.size() == 1);
    auto made = make_model(cfg->models.front());
    REQUIRE(made.ok());
    const DenseDecoder& m = *made.value();
    const DenseDecoderConfig& c = m.config();
    CHECK(c.hidden == p.hidden);
    CHECK(c.layers == p.layers);
    CHECK(c.heads == p.heads);
    CHECK(c.kv_heads == p.kv_heads);
    CHECK(c.head_dim == p.head_dim);
    CHECK(c.mlp == p.mlp);
    CHECK(c.vocab == p.vocab);
    CHECK(c.tied_embeddings == p.tied);
    CHECK(c.qkv_bias == p.qkv_bias);
    CHECK(c.rope_theta == p.rope_theta);
    CHECK(m.context_window() == p.window);
    CHECK(parameter_count(c) == p.parameters);
    CHECK(m.weight_bytes() == p.parameters * p.elem_bytes);
    // K and V of every layer for one token.
    CHECK(m.kv_bytes_per_token() == 2 * p.layers * p.kv_heads * p.head_dim * p.elem_bytes);
    // The template charges exactly the model's weights (a tied table once).
    const GraphTemplate t = m.make_template();
    std::int64_t charged = 0;
    for (const auto& op : t.ops()) charged += op.weight_bytes;
    CHECK(charged == m.weight_bytes());
    // Its operators: embed, 4 layer groups, the head, which samples.
    REQUIRE(m.ops().size() == 6);
    CHECK(m.ops()[m.sampler()].role == OpRole::kHead);
    CHECK(t.ops()[m.sampler()].name == "head");
    // The kernels: a group runs each decoder kernel layers/4 times over the
    // tokens, the head final norm + lm_head over one row per sequence.
    const IterationDims d{100, 3, 500, 500};
    const auto group = m.kernels(1, d);
    REQUIRE(group.size() == decoder_layer_sublayers(m.shape()).size());
    for (const SublayerCall& k : group) {
      CHECK(k.count == static_cast<double>(p.layers / 4));
      CHECK(k.rows == 100);
      CHECK(k.sequences == 3);
      CHECK(k.context == 500);
    }
    const auto head = m.kernels(m.sampler(), d);
    REQUIRE(head.size() == 2);
    CHECK(head[0].layer == Sublayer::kFinalNorm);
    CHECK(head[1].layer == Sublayer::kLmHead);
    CHECK(head[1].rows == 3);
    const auto embed = m.kernels(0, d);
    REQUIRE(embed.size() == 1);
    CHECK(embed[0].layer == Sublayer::kEmbedding);
    CHECK(embed[0].rows == 100);
    CHECK(m.shape().qkv_bias == p.qkv_bias);
    CHECK(m.shape().kv_heads == p.kv_heads);
  }
}

TEST_CASE("[model] stays the shorthand for one model: llama3-8b and llama-tiny unchanged", "[models][config]") {
  auto cfg = load_config(kSource + "/tests/cli/small.toml");
  REQUIRE(cfg.ok());
  REQUIRE(cfg->models.size() == 1);
  auto m = make_model(cfg->models.front());
  REQUIRE(m.ok());
  CHECK(m.value()->name() == "llama3-8b");
  CHECK(m.value()->weight_bytes() == 8'030'261'248ll * 2);
  auto tiny = load_config(kSource + "/configs/live/tiny-cpu.toml");
  REQUIRE(tiny.ok());
  CHECK(tiny->models.front().name == "llama-tiny");
  CHECK(make_model(tiny->models.front()).value()->config().layers == 4);
}

TEST_CASE("model config errors are one line naming the file, the key and what was expected", "[models][config]") {
  const std::string dir = kSource + "/tests/bad_inputs/";
  CHECK(load_error(dir + "models_unknown.toml") ==
        dir +
            "models_unknown.toml:16: tenants[0].model: tenant 'chat' names no known model 'mistral' (models: llama, "
            "qwen)");
  CHECK(load_error(dir + "models_nowhere.toml") ==
        dir +
            "models_nowhere.toml:16: tenants[0].model: tenant 'chat' runs model 'qwen', which no accelerator holds "
            "(list it in an accelerator group's models, or leave models out so it goes where it fits)");
  // No lists: the default residency filled every accelerator with the
  // first model, and the message says so (it advised leaving out the lists
  // that were not there).
  auto filled = load_config(kSource + "/configs/experiments/heterogeneous.toml",
                            {{"cluster.accelerators[0].hbm_gib", "20"}, {"cluster.accelerators[1].hbm_gib", "20"}});
  REQUIRE_FALSE(filled.ok());
  CHECK_THAT(filled.status().message(),
             Catch::Matchers::EndsWith("tenant 'online2' runs model 'qwen', which no accelerator holds (by default "
                                       "each accelerator holds the models that fit, in config order, and the ones "
                                       "before it took the room: list it in an accelerator group's models)"));
  CHECK(load_error(dir + "models_too_big.toml") ==
        dir +
            "models_too_big.toml:6: models[1]: model 'qwen' needs 14.19 GiB of weights and fits on no accelerator "
            "(the largest has 8.00 GiB of HBM)");
  CHECK(load_error(dir + "models_overflow.toml") ==
        dir +
            "models_overflow.toml:10: tenants[0].model: tenant 'chat' sends requests of 5000 tokens (4800 in, 200 "
            "out), more than model 'llama2''s context window of 4096 (on_overflow = \"truncate\" cuts them)");
  // Lengths an override gave: the error names the override, not the model's line.
  auto set = load_config(dir + "models_overflow.toml", {{"tenants.chat.stream.input_tokens", "3800"}});
  REQUIRE(set.ok());
  set = load_config(dir + "models_overflow.toml", {{"tenants.chat.stream.output_tokens", "400", "--vary"}});
  REQUIRE_FALSE(set.ok());
  CHECK(set.status().message() ==
        "--vary tenants.chat.stream.output_tokens=400: tenants[0].stream.output_tokens: tenant 'chat' sends requests "
        "of 5200 tokens (4800 in, 400 out), more than model 'llama2''s context window of 4096 (on_overflow = "
        "\"truncate\" cuts them)");
  CHECK(load_error(dir + "models_bad_hf.toml") ==
        dir + "models_bad_hf.toml:2: models[0].hf_config: " + dir +
            "models_bad_hf.json: num_key_value_heads: expected a divisor of num_attention_heads (32), got 5");
}

TEST_CASE("a config.json that is not JSON says where it broke", "[models][config]") {
  // Python's json writes NaN, which JSON is not.
  const std::string path = std::filesystem::temp_directory_path() / "slicesched_nan_config.json";
  std::ofstream(path) << "{\"model_type\": \"llama\",\n \"rope_theta\": NaN}\n";
  auto c = read_hf_config(path, "m");
  std::filesystem::remove(path);
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(),
             Catch::StartsWith(path + ": not valid JSON (") && Catch::Contains("line 2, column 16"));
}

// A config.json written to a temporary file, read back.
static Result<DenseDecoderConfig> hf_of(const std::string& extra, const std::string& model_type = "llama") {
  const std::string path = std::filesystem::temp_directory_path() / "slicesched_hf_case.json";
  std::ofstream(path) << "{\"model_type\": \"" << model_type
                      << "\", \"hidden_size\": 4096, \"num_hidden_layers\": 32, \"num_attention_heads\": 32, "
                         "\"num_key_value_heads\": 8, \"intermediate_size\": 14336, \"vocab_size\": 32000, "
                         "\"max_position_embeddings\": 32768"
                      << extra << "}";
  auto c = read_hf_config(path, "m");
  std::filesystem::remove(path);
  return c;
}

TEST_CASE("config.json settings nothing models are refused, not simulated as another model", "[models][config]") {
  const std::string path = std::filesystem::temp_directory_path() / "slicesched_hf_case.json";
  const struct {
    std::string extra, message;
  } rows[] = {
      {", \"quantization_config\": {\"quant_method\": \"awq\", \"bits\": 4}",
       "quantization_config: quantized weights are not modelled (their bytes and kernels would be counted at the "
       "config's dtype); give the unquantized model's config.json"},
      {", \"mlp_bias\": true", "mlp_bias: true is not supported (the MLP's projections have no bias here)"},
      // Sizes whose products would overflow the parameter count.
      {", \"hidden_size\": 4294967296", "hidden_size: expected at most 1048576, got 4294967296"},
      {", \"vocab_size\": 18446744073709551615", "vocab_size: expected at most 16777216, got 18446744073709551615"},
      {", \"num_hidden_layers\": 100000", "num_hidden_layers: expected at most 10000, got 100000"},
      // Served as SiLU, a GELU Llama made other tokens than transformers'.
      {", \"hidden_act\": \"gelu\"",
       "hidden_act: expected \"silu\" (or \"swish\", its other name: the gated MLP's activation here), got \"gelu\""},
      {", \"hidden_act\": 3",
       "hidden_act: expected \"silu\" (or \"swish\", its other name: the gated MLP's activation here), got 3"},
      {", \"attention_bias\": true",
       "attention_bias: true is not supported for model_type \"llama\": it biases o_proj as well as q, k and v, and "
       "an o_proj bias is not modelled (Qwen2's q/k/v biases are)"},
  };
  for (const auto& row : rows) {
    INFO(row.extra);
    auto c = hf_of(row.extra);
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().message() == path + ": " + row.message);
  }
  // Null settings are absent ones.
  CHECK(hf_of(", \"quantization_config\": null, \"mlp_bias\": false, \"hidden_act\": null").ok());
  CHECK(hf_of(", \"hidden_act\": \"swish\", \"attention_bias\": false").ok());
  // Qwen2 biases q, k and v whatever the key says; Mistral never (transformers
  // ignores attention_bias there).
  CHECK(hf_of(", \"attention_bias\": false", "qwen2").value().qkv_bias);
  CHECK_FALSE(hf_of(", \"attention_bias\": true", "mistral").value().qkv_bias);
  CHECK_FALSE(hf_of(", \"hidden_act\": \"silu\"", "mistral").value().qkv_bias);
  CHECK_FALSE(hf_of(", \"hidden_act\": \"gelu\"", "qwen2").ok());
}

TEST_CASE("a sliding window bounds the positions served, dtype is read when torch_dtype is null", "[models][config]") {
  // Mistral v0.1: attention within 4,096 tokens, so 4,096 positions (full
  // attention is the same up to the window).
  CHECK(hf_of(", \"sliding_window\": 4096", "mistral").value().context_window == 4096);
  CHECK(hf_of(", \"sliding_window\": null", "mistral").value().context_window == 32768);
  // Qwen2 windows only with use_sliding_window.
  CHECK(hf_of(", \"sliding_window\": 4096, \"use_sliding_window\": false", "qwen2").value().context_window == 32768);
  CHECK(hf_of(", \"sliding_window\": 4096, \"use_sliding_window\": true", "qwen2").value().context_window == 4096);
  CHECK(hf_of(", \"torch_dtype\": null, \"dtype\": \"float32\"").value().dtype == DType::kF32);
  CHECK(hf_of(", \"torch_dtype\": \"float16\", \"dtype\": \"float32\"").value().dtype == DType::kF16);
}

TEST_CASE("a context overflow with on_overflow = truncate is cut to the window and counted", "[models][config]") {
  auto cfg =
      load_config(kSource + "/tests/bad_inputs/models_overflow.toml", {{"models.llama2.on_overflow", "truncate"}});
  REQUIRE(cfg.ok());
  PluginRegistries plugins;
  REQUIRE(load_plugins(*cfg, plugins).ok());
  auto parts = build_policy(*cfg, cfg->policies.front(), plugins);
  REQUIRE(parts.ok());
  CHECK(parts.value()->requests_truncated == 10);
  for (const RequestRecord& r : parts.value()->tenants.front().records())
    CHECK(r.input_tokens + r.output_tokens == 4096);
}

TEST_CASE("two models on one cluster: HBM charges each accelerator its resident models' weights",
          "[models][placement]") {
  auto cfg = load_config(kSource + "/configs/experiments/two-models.toml");
  REQUIRE(cfg.ok());
  REQUIRE(cfg->models.size() == 2);
  const std::int64_t llama = make_model(cfg->models[0]).value()->weight_bytes();
  const std::int64_t qwen = make_model(cfg->models[1]).value()->weight_bytes();
  CHECK(llama == 8'030'261'248ll * 2);
  CHECK(qwen == 7'615'616'512ll * 2);
  PluginRegistries plugins;
  REQUIRE(load_plugins(*cfg, plugins).ok());
  auto built = build_policy(*cfg, cfg->policies.front(), plugins);
  REQUIRE(built.ok());
  PolicyParts& p = *built.value();
  const Gmg& gmg = *p.gmg;
  // gpu0, gpu1 hold both; gpu2 llama only; gpu3 qwen only.
  const std::vector<std::int64_t> expected = {llama + qwen, llama + qwen, llama, qwen};
  REQUIRE(p.accels->size() == 4);
  for (AccelId a = 0; a < 4; ++a) CHECK(gmg.hbm(a).weights == expected[a]);
  // Each tenant runs its own model's template.
  REQUIRE(p.tenants.size() == 2);
  CHECK(p.tenants[0].tmpl() == p.tmpls[0]);
  CHECK(p.tenants[1].tmpl() == p.tmpls[1]);
  CHECK(p.models.of(p.tmpls[1])->name() == "qwen");
  // Residency: the GMG refuses an operator where its model's weights are not.
  const auto& templates = gmg.templates();
  for (std::size_t m = 0; m < 2; ++m) {
    const GraphTemplate& t = templates.get(p.tmpls[m]);
    for (AccelId a = 0; a < 4; ++a) {
      const bool held = a < 2 || a == (m == 0 ? 2u : 3u);
      for (const auto& op : t.ops()) {
        INFO(t.name() << "/" << op.name << " on accelerator " << a);
        if (op.weight_bytes > 0) CHECK(gmg.weights_on(op.kind, a) == held);
      }
    }
  }
}

TEST_CASE("Phi-2: a parallel LayerNorm/GELU block with biases, read from its config.json", "[models][config]") {
  auto read = read_hf_config(kSource + "/configs/models/hf/phi-2.json", "phi-2");
  REQUIRE(read.ok());
  const DenseDecoderConfig& c = read.value();
  const DenseDecoderConfig preset = dense_preset("phi-2").value();
  CHECK(c.parallel_block);
  CHECK_FALSE(c.gated_mlp);
  CHECK(c.layer_norm);
  CHECK(c.linear_bias);
  CHECK(c.qkv_bias);
  CHECK(c.rotary_dim == 32);  // partial_rotary_factor 0.4 of head_dim 80
  CHECK(c.norm_eps == 1e-5);
  CHECK(c.dtype == DType::kF16);
  CHECK(parameter_count(c) == parameter_count(preset));
  auto made = DenseDecoder::make(c);
  REQUIRE(made.ok());
  const DenseShape s = made.value()->shape();
  CHECK(s == DenseDecoder::make(preset).value()->shape());
  // A layer: one norm, q/k/v, rope, attention, dense, fc1, GELU, fc2, add.
  const IterationDims d{100, 3, 500, 500};
  std::vector<Sublayer> layer;
  for (const SublayerCall& k : made.value()->kernels(1, d)) layer.push_back(k.layer);
  CHECK(layer == std::vector<Sublayer>{Sublayer::kInputNorm, Sublayer::kQProj, Sublayer::kKProj, Sublayer::kVProj,
                                       Sublayer::kRope, Sublayer::kAttn, Sublayer::kOProj, Sublayer::kUpProj,
                                       Sublayer::kActFn, Sublayer::kDownProj, Sublayer::kResidualAdd});
  // What the block changes beside it; the rest of the phi rules.
  CHECK(hf_of(", \"partial_rotary_factor\": 0.25", "phi").value().rotary_dim == 32);
  CHECK(hf_of("", "phi").value().rotary_dim == 64);  // transformers' default, 0.5
  // transformers 5 writes it inside rope_parameters, which wins over a
  // stale top-level value (as does its rope_theta, Llama's too).
  CHECK(hf_of(", \"partial_rotary_factor\": 0.5, \"rope_parameters\": {\"rope_type\": \"default\", "
              "\"rope_theta\": 100.0, \"partial_rotary_factor\": 0.25}, \"rope_theta\": 50.0",
              "phi")
            .value()
            .rotary_dim == 32);
  CHECK(hf_of(", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 100.0}, \"rope_theta\": 50.0")
            .value()
            .rope_theta == 100.0);
  CHECK(hf_of(", \"rope_theta\": 50.0").value().rope_theta == 50.0);
  CHECK(hf_of(", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0, "
              "\"partial_rotary_factor\": 0.25}",
              "phi")
            .value()
            .rotary_dim == 32);
  const struct {
    std::string extra, message;
  } rows[] = {
      {", \"qk_layernorm\": true", "qk_layernorm: true is not supported (no norm on q and k is modelled)"},
      {", \"qk_layernorm\": 1", "qk_layernorm: expected true or false, got 1"},
      {", \"hidden_act\": \"relu\"",
       "hidden_act: expected a GELU (\"gelu_new\", \"gelu\", \"gelu_fast\" or \"gelu_pytorch_tanh\"), got \"relu\""},
      {", \"partial_rotary_factor\": 1.5", "partial_rotary_factor: expected a number in (0, 1], got 1.5"},
      {", \"partial_rotary_factor\": 0.001",
       "partial_rotary_factor: turns 0 of head_dim 128 dimensions, expected an even number of at least 2"},
  };
  const std::string path = std::filesystem::temp_directory_path() / "slicesched_hf_case.json";
  for (const auto& row : rows) {
    INFO(row.extra);
    auto bad = hf_of(row.extra, "phi");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.status().message() == path + ": " + row.message);
  }
  // A Llama config never takes Phi's keys.
  CHECK(hf_of(", \"partial_rotary_factor\": 0.25").value().rotary_dim == 0);
}

TEST_CASE(
    "Phi-2 in a simulate config: a resized head keeps its partial RoPE rule, and no LLMServingSim table measured it",
    "[models][config]") {
  const std::string dir = kSource + "/configs/models/";
  const fs::path p = fs::temp_directory_path() / ("slicesched_phi_" + std::to_string(getpid()) + ".toml");
  auto with = [&](const std::string& from, const std::string& to) {
    std::ifstream in(dir + "phi-2.toml");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(text.find(from) != std::string::npos);
    text.replace(text.find(from), from.size(), to);
    // (relative paths as from the shipped folder)
    for (std::string::size_type at; (at = text.find("\"../../data/")) != std::string::npos;)
      text.replace(at, 12, "\"" + kSource + "/data/");
    if (const auto at = text.find("\"hf/phi-2.json\""); at != std::string::npos)
      text.replace(at, 15, "\"" + dir + "hf/phi-2.json\"");
    std::ofstream(p) << text;
    return load_config(p.string());
  };
  // The preset with a head of 64: 0.4 of it is 25 dimensions, refused as
  // transformers' int(0.4 x 64) would leave RoPE an odd count.
  auto resized = with("hf_config = \"hf/phi-2.json\"", "preset = \"phi-2\"\nhead_dim = 64");
  REQUIRE_FALSE(resized.ok());
  CHECK_THAT(resized.status().message(),
             Catch::EndsWith(": a head of 64 dimensions leaves 25 to preset 'phi-2''s partial RoPE (0.40 of each "
                             "head), expected an even number of at least 2 (set head_dim)"));
  auto halved = with("hf_config = \"hf/phi-2.json\"", "preset = \"phi-2\"\nhead_dim = 40");
  REQUIRE(halved.ok());
  CHECK(make_model(halved->models.front()).value()->config().rotary_dim == 16);
  // The shipped table timed Llama-3.1-8B's block: naming phi-2 as what it
  // measured is refused; without layers_model, phi-2 plays the roofline.
  auto claimed = with("layers_model = \"llama3-8b\"", "layers_model = \"phi-2\"");
  REQUIRE_FALSE(claimed.ok());
  CHECK_THAT(claimed.status().message(),
             Catch::Contains("ground_truth.layers_model: 'phi-2' runs another block than Llama's (attention and MLP in "
                             "parallel, or a plain MLP), and an LLMServingSim layers table times Llama's"));
  auto unnamed = with("layers_model = \"llama3-8b\"", "");
  REQUIRE(unnamed.ok());
  CHECK(unnamed->ground_truth.off_profile_models == std::vector<std::string>{"phi-2"});
  fs::remove(p);
}
