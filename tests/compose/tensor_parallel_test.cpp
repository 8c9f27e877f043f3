// Tensor-parallel groups (`tp` on a cluster's accelerator): an operator
// costs one rank's share of the model plus its all-reduces, and the group's
// HBM holds an equal share on each GPU.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

import slicesched.compose.offline;
import slicesched.config;
import slicesched.compose.policy;
import slicesched.compose.run;
import slicesched.core.gmg;
import slicesched.core.ids;
import slicesched.core.plugin;
import slicesched.engine.metrics;
import slicesched.engine.tenant;
import slicesched.simulator.profile;

using namespace slicesched;
namespace fs = std::filesystem;

namespace {

const std::string kSource(SLICESCHED_SOURCE_DIR);
const std::string kLone = kSource + "/tests/compose/tp_lone.toml";

struct Run {
  std::unique_ptr<PolicyParts> parts;
  PolicyRun run;
};

Run run_policy(const std::string& config, const std::string& policy, std::vector<ConfigOverride> sets = {}) {
  auto cfg = load_config(config, sets);
  if (!cfg.ok()) FAIL(cfg.status().message());
  PluginRegistries plugins;
  REQUIRE(load_plugins(*cfg, plugins).ok());
  auto truths = load_truths(*cfg);
  if (!truths.ok()) FAIL(truths.status().message());
  auto p = find_policy(*cfg, policy);
  REQUIRE(p.ok());
  auto parts = build_policy(*cfg, *p.value(), plugins);
  if (!parts.ok()) FAIL(parts.status().message());
  auto r = run_offline(*cfg, *parts.value(), *truths);
  if (!r.ok()) FAIL(r.status().message());
  return {std::move(parts).value(), std::move(r).value()};
}

// The run of tp_lone.toml's lone request (or of `config`'s), and the request.
Run lone_run(const std::vector<ConfigOverride>& sets, const std::string& config = kLone) {
  Run r = run_policy(config, "Solo", sets);
  const auto& records = r.parts->tenants.at(0).records();
  REQUIRE(records.size() == 1);
  CHECK(records[0].generated == 4);
  return r;
}
RequestRecord lone(const std::vector<ConfigOverride>& sets, const std::string& config = kLone) {
  return lone_run(sets, config).parts->tenants.at(0).records()[0];
}

// tp_lone.toml with each (from, to) of `edits` made (each `from` must be in
// it), as a temporary file removed with this object: for what --set cannot
// say (a key left out, another accelerator).
struct LoneVariant {
  fs::path path;
  LoneVariant(const std::string& tag, const std::vector<std::pair<std::string, std::string>>& edits,
              const std::string& base = kLone)
      : path(fs::temp_directory_path() / ("slicesched_tp_" + tag + "_" + std::to_string(getpid()) + ".toml")) {
    std::ifstream in(base);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const auto& [from, to] : edits) {
      REQUIRE(text.find(from) != std::string::npos);
      text.replace(text.find(from), from.size(), to);
    }
    std::ofstream(path) << text;
  }
  ~LoneVariant() { fs::remove(path); }
};

}  // namespace

TEST_CASE("tensor parallelism: each all-reduce crosses the ring, 162 an iteration of Llama-2-70B", "[compose][tp]") {
  // A ring all-reduce over four GPUs takes 2 x 3 steps, each paying the
  // link's latency: 10 us more latency costs 60 us an all-reduce. An
  // iteration all-reduces after the embedding, each of 80 layers' attention
  // and MLP, and the logits: 162.
  const RequestRecord near = lone({});
  const RequestRecord far = lone({{"cluster.link_classes.0.latency_us", "15.0"}});
  const Nanos per_iteration = 162 * 6 * 10'000;
  CHECK(per_iteration == 9'720'000);
  // (each of the iteration's ten operators rounds to a nanosecond)
  CHECK(far.first_token - near.first_token >= per_iteration - 10);
  CHECK(far.first_token - near.first_token <= per_iteration + 10);
  // The prefill and three decode steps.
  CHECK(far.done - near.done >= 4 * per_iteration - 40);
  CHECK(far.done - near.done <= 4 * per_iteration + 40);
}

TEST_CASE("tensor parallelism: a group of four runs one rank's share of every kernel, then the all-reduces",
          "[compose][tp]") {
  // Links with no latency and 1 PB/s: the all-reduces cost their bytes only.
  const Run group_run =
      lone_run({{"cluster.link_classes.0.latency_us", "0"}, {"cluster.link_classes.0.bandwidth_gbps", "1000000"}});
  const RequestRecord group = group_run.parts->tenants.at(0).records()[0];
  // One GPU running a quarter of Llama-2-70B: 16 heads and 2 KV heads of
  // 128, MLP 7,168, vocabulary 8,000 (what each rank of the four runs).
  const LoneVariant one_gpu("rank", {{", tp = 4, tp_link = \"nvlink\"", ""}});
  const Run rank_run = lone_run({{"model.heads", "16"},
                                 {"model.kv_heads", "2"},
                                 {"model.head_dim", "128"},
                                 {"model.mlp", "7168"},
                                 {"model.vocab", "8000"}},
                                one_gpu.path.string());
  const RequestRecord rank = rank_run.parts->tenants.at(0).records()[0];
  // A ring all-reduce of B bytes over 4 GPUs moves B / 4 in each of 6
  // steps. The prefill all-reduces 161 times 512 rows of 8,192 bf16 values
  // (the embedding's and each layer's two) and the logits of its one
  // sequence (32,000 values); a decode step the same for one row.
  const auto ring = [](double bytes) { return 6 * bytes / 4 / 1e15; };
  const double prefill = 161 * ring(512 * 8192 * 2) + ring(32000 * 2);
  const double decode = 161 * ring(8192 * 2) + ring(32000 * 2);
  const auto ns = [](double s) { return static_cast<Nanos>(s * 1e9 + 0.5); };
  CHECK(ns(prefill) == 2026);
  CHECK(ns(decode) == 4);
  CHECK(rank.first_token - rank.arrival > 10'000'000);  // (not a trivial iteration)
  // (each of an iteration's ten operators rounds to a nanosecond)
  CHECK(group.first_token - rank.first_token >= ns(prefill) - 10);
  CHECK(group.first_token - rank.first_token <= ns(prefill) + 10);
  CHECK(group.done - rank.done >= ns(prefill + 3 * decode) - 40);
  CHECK(group.done - rank.done <= ns(prefill + 3 * decode) + 40);
  // Each GPU of the group held what the one GPU held: its share of the
  // weights, caches and workspaces, its own norms, and a whole copy of every
  // activation (an outside probe found the group's 18.9 MB short when the
  // activations were held once). What differs: the LM head's workspace
  // keeps two hidden-size rows a sequence whole on each rank, counted
  // once here (4 x 2 x 8,192 bytes x 3/4).
  REQUIRE(group_run.run.memory.peak.size() == 1);
  REQUIRE(rank_run.run.memory.peak.size() == 1);
  const std::int64_t per_gpu = (group_run.run.memory.peak[0] + group_run.run.accel_copies[0]) / 4;
  INFO("per GPU: group " << per_gpu << " B, one GPU running a rank " << rank_run.run.memory.peak[0] << " B");
  CHECK(std::abs(per_gpu - rank_run.run.memory.peak[0]) <= 64 * 1024);
}

TEST_CASE("Llama-2-70B as one tensor-parallel group of four H100s holds a quarter on each GPU, and runs",
          "[compose][tp]") {
  const std::vector<ConfigOverride> short_run = {{"duration_s", "20"}, {"tenants.*.stream.duration_s", "20"}};
  auto c = load_config(kSource + "/configs/experiments/llama2-70b-tp.toml", short_run);
  REQUIRE(c.ok());
  // Four 80 GiB GPUs, less three more copies of the 161 norms of 8,192 bf16
  // weights (the vocabulary, 32,000 rows, splits evenly).
  const std::int64_t copies = 3 * 161 * 8192 * 2;
  REQUIRE(c->accelerators.size() == 1);
  CHECK(c->accelerators[0].hbm_bytes == 4 * (80ll << 30) - copies);
  const Run tp = run_policy(kSource + "/configs/experiments/llama2-70b-tp.toml", "SliceScheduler", short_run);
  const Gmg& gmg = *tp.parts->gmg;
  const std::int64_t whole = tp.parts->models.of(tp.parts->tmpl)->weight_bytes();
  CHECK(gmg.hbm(0).weights == whole);
  REQUIRE(tp.run.memory.peak.size() == 1);
  CHECK(tp.run.memory.peak[0] > whole);
  CHECK(tp.run.memory.peak[0] <= tp.run.memory.budget[0]);
  CHECK(tp.run.metrics.requests_done > 5);
  // Each GPU holds a quarter of the weights and caches and its own norms.
  REQUIRE(tp.run.accel_copies.size() == 1);
  CHECK(tp.run.accel_gpus.at(0) == 4);
  CHECK(tp.run.accel_copies[0] == copies);
  const std::int64_t per_gpu = (tp.run.memory.peak[0] + copies) / 4;
  CHECK(per_gpu > whole / 4);
  CHECK(per_gpu <= 80ll << 30);
  // The same four GPUs as a pipeline (llama2-70b.toml) take turns on one
  // request; as a group they share each operator: first tokens come much
  // sooner.
  const Run pipeline = run_policy(kSource + "/configs/experiments/llama2-70b.toml", "SliceScheduler", short_run);
  INFO("TTFT p50: group " << tp.run.metrics.ttft_p50_s << " s, pipeline " << pipeline.run.metrics.ttft_p50_s << " s");
  CHECK(tp.run.metrics.ttft_p50_s < pipeline.run.metrics.ttft_p50_s / 2);
}

TEST_CASE("tensor parallelism: a group's own tp_link rings its all-reduces, over a measured profile", "[compose][tp]") {
  // tp_lone.toml with the measured H100 profile as well: its group names a
  // link, which wins; without the link the profile plays.
  const std::string profile = kSource + "/data/profiles/vidur_network_h100_dgx_all_reduce.csv";
  const RequestRecord ring = lone({});
  const RequestRecord both = lone({{"ground_truth.all_reduce", "\"" + profile + "\""}});
  CHECK(both.first_token == ring.first_token);
  const LoneVariant measured("measured", {{", tp_link = \"nvlink\"", ""}});
  const RequestRecord played = lone({{"ground_truth.all_reduce", "\"" + profile + "\""}}, measured.path.string());
  // The prefill's 161 all-reduces of 512 rows and one of the logits, each
  // as Vidur's four-GPU profile times it instead of the ring's 6 x (5 us +
  // bytes / 4 / 300 GB/s).
  auto measured4 = TransferProfile::load_all_reduce(profile, 4);
  REQUIRE(measured4.ok());
  const auto gap = [&](double bytes) {
    return measured4->seconds(static_cast<std::int64_t>(bytes)) - 6 * (5e-6 + bytes / 4 / 300e9);
  };
  const auto expected = static_cast<Nanos>((161 * gap(512 * 8192 * 2) + gap(32000 * 2)) * 1e9);
  CHECK(expected != 0);
  CHECK(played.first_token - ring.first_token >= expected - 10);
  CHECK(played.first_token - ring.first_token <= expected + 10);
}

TEST_CASE("tensor parallelism: a hand-off crosses every GPU's host link at once", "[compose][tp]") {
  // tests/cli/prefill_lanes.toml's lone request (512 prompt tokens of
  // Llama-3-8B, a 64 MiB cache) on groups of two H100s: each GPU copies
  // half the cache over its own PCIe link (50 GB/s, 10 us).
  const Run r = run_policy(
      kSource + "/tests/cli/prefill_lanes.toml", "Solo-Apart",
      {{"cluster.accelerators.0.tp", "2"},
       {"cluster.accelerators.0.tp_link", "nvlink"},
       {"tenants.online0.stream", "{ constant_rate = 1.0, duration_s = 1, input_tokens = 512, output_tokens = 8 }"}});
  REQUIRE(r.run.host_copies.size() == 1);
  const std::int64_t bytes = 512ll * 32 * 2 * 8 * 128 * 2;
  CHECK(r.run.host_copies[0].second.bytes == bytes);
  CHECK(r.run.host_copies[0].second.copy == 10'000 + static_cast<Nanos>(static_cast<double>(bytes) / 100e9 * 1e9));
  CHECK(r.run.host_copies[0].second.copy == 681'088);
}

TEST_CASE("tensor parallelism: GPU utilization weighs a group as its GPUs", "[compose][tp]") {
  // Llama-3-8B on a group of two H100s beside one idle H100: the group's
  // busy time counts twice, over three GPUs.
  const LoneVariant mixed(
      "mixed", {{"hbm_gib = 80, tp = 4, tp_link = \"nvlink\" }]",
                 "hbm_gib = 80, tp = 2, tp_link = \"nvlink\" }, { name = \"one\", type = \"H100\", hbm_gib = 80 }]"},
                {"name = \"llama2-70b\"\nlayers = 80\ngroups = 8", "name = \"llama3-8b\""}});
  const Run r = run_policy(mixed.path.string(), "Solo");
  const RunMetrics& m = r.run.metrics;
  REQUIRE(m.accel_busy_s.size() == 2);
  CHECK(m.accel_busy_s[0] > 0);
  CHECK(m.accel_busy_s[1] == 0);
  CHECK(m.gpu_utilization == Approx(m.accel_busy_s[0] * 2 / (3 * m.span_s)));
}

namespace {

const std::string kMeasured = kSource + "/tests/compose/tp_measured.toml";
const std::string kTp1 = kSource + "/data/profiles/llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv";
const std::string kTp2 = kSource + "/data/profiles/llmservingsim_H100_Llama-3.1-8B_tp2_layers.csv";

// A copy of `from` with every row's tp_size (the fourth column) `tp`.
struct RetaggedProfile {
  fs::path path;
  RetaggedProfile(const std::string& from, int tp)
      : path(fs::temp_directory_path() / ("slicesched_tp_rows_" + std::to_string(getpid()) + ".csv")) {
    std::ifstream in(from);
    std::ofstream out(path);
    std::string line;
    std::getline(in, line);
    out << line << "\n";
    while (std::getline(in, line)) {
      std::size_t c = 0;
      for (int k = 0; k < 3; ++k) c = line.find(',', c) + 1;
      out << line.substr(0, c) << tp << line.substr(line.find(',', c)) << "\n";
    }
  }
  ~RetaggedProfile() { fs::remove(path); }
};

}  // namespace

TEST_CASE("tensor parallelism: a group plays one rank's measured layers (layers_tp), then its all-reduces",
          "[compose][tp]") {
  // Free links: the pair's first token is what one GPU takes playing the
  // same rows as its own profile (a prefill reads no KV cache, where a
  // rank's half of the KV heads would tell them apart).
  const std::vector<ConfigOverride> free = {{"cluster.link_classes.0.latency_us", "0"},
                                            {"cluster.link_classes.0.bandwidth_gbps", "1000000"}};
  const RequestRecord pair = lone(free, kMeasured);
  const RetaggedProfile as_one(kTp2, 1);
  const LoneVariant one_gpu(
      "measured_one",
      {{", tp = 2, tp_link = \"nvlink\"", ""},
       {"layers = \"../../data/profiles/llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv\"",
        "layers = \"" + as_one.path.string() + "\""},
       {"layers_tp = [\"../../data/profiles/llmservingsim_H100_Llama-3.1-8B_tp2_layers.csv\"]", ""}},
      kMeasured);
  const RequestRecord one = lone(free, one_gpu.path.string());
  // (66 all-reduces of at most 4 MiB at 1 PB/s: under a microsecond)
  CHECK(pair.first_token - one.first_token >= 0);
  CHECK(pair.first_token - one.first_token < 1'000);
  // And the rows are the pair's, not one GPU's: the tp1 table is slower.
  const LoneVariant tp1_only(
      "measured_tp1",
      {{", tp = 2, tp_link = \"nvlink\"", ""},
       {"\"../../data/profiles/llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv\"", "\"" + kTp1 + "\""},
       {"layers_tp = [\"../../data/profiles/llmservingsim_H100_Llama-3.1-8B_tp2_layers.csv\"]", ""}},
      kMeasured);
  CHECK(lone(free, tp1_only.path.string()).first_token > pair.first_token + 1'000'000);
  // Each all-reduce crosses the ring: 2 x (2 - 1) steps, 10 us more latency
  // each, 66 of them in the prefill (the embedding, 32 layers' attention
  // and MLP, the logits).
  const RequestRecord near = lone({}, kMeasured);
  const RequestRecord far = lone({{"cluster.link_classes.0.latency_us", "15.0"}}, kMeasured);
  CHECK(far.first_token - near.first_token >= 66 * 2 * 10'000 - 10);
  CHECK(far.first_token - near.first_token <= 66 * 2 * 10'000 + 10);
}

TEST_CASE("tensor parallelism: what each group plays is said, and a size no file measured plays the roofline",
          "[compose][tp]") {
  auto cfg = load_config(kMeasured, {{"cluster.accelerators",
                                      "[{ name = \"g0\", type = \"H100\", hbm_gib = 80, tp = 2, tp_link = \"nvlink\" },"
                                      " { name = \"g1\", type = \"H100\", hbm_gib = 80, tp = 4, tp_link = \"nvlink\" },"
                                      " { name = \"g2\", type = \"H100\", hbm_gib = 80 }]"}});
  REQUIRE(cfg.ok());
  auto truths = load_truths(*cfg);
  REQUIRE(truths.ok());
  const auto played = truth_played(*cfg, *truths);
  REQUIRE(played.size() == 3);
  CHECK(played[0].type == "H100/tp2");
  CHECK(played[0].truth == "profile");
  CHECK(played[0].source == "llmservingsim_H100_Llama-3.1-8B_tp2_layers.csv");
  CHECK(played[1].type == "H100/tp4");
  CHECK(played[1].truth == "roofline");
  CHECK(played[2].truth == "profile");
  CHECK(played[2].source == "llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv");
  const auto lines = tp_group_lines(played);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] ==
        "ground truth: H100/tp2 (a tensor-parallel group of 2 H100-SXM) plays "
        "llmservingsim_H100_Llama-3.1-8B_tp2_layers.csv (one rank's layers, measured), its all-reduces ring over "
        "link class 'nvlink'");
  CHECK(lines[1].find("H100/tp4 (a tensor-parallel group of 4 H100-SXM) plays the roofline") != std::string::npos);
  // The tp2 table is played, so no line says otherwise.
  for (const auto& line : ground_truth_lines(*cfg, played))
    CHECK(line.find("is played by no group") == std::string::npos);
  // Without a pair, the table is read for nothing, and a line says so.
  auto no_pair = load_config(kMeasured, {{"cluster.accelerators",
                                          "[{ name = \"g1\", type = \"H100\", hbm_gib = 80, tp = 4, tp_link = "
                                          "\"nvlink\" }, { name = \"g2\", type = \"H100\", hbm_gib = 80 }]"}});
  REQUIRE(no_pair.ok());
  auto no_pair_truths = load_truths(*no_pair);
  REQUIRE(no_pair_truths.ok());
  const auto no_pair_lines = ground_truth_lines(*no_pair, truth_played(*no_pair, *no_pair_truths));
  CHECK(std::count(no_pair_lines.begin(), no_pair_lines.end(),
                   "ground truth: llmservingsim_H100_Llama-3.1-8B_tp2_layers.csv (ground_truth.layers_tp) is played by "
                   "no group: the cluster has no tensor-parallel group of the size it measured, of type 'H100'") == 1);
  // A model of another shape than the table's plays the roofline on the
  // pair too, and the line says so.
  auto other = load_config(kMeasured, {{"model.name", "\"llama2-7b\""}});
  REQUIRE(other.ok());
  auto other_truths = load_truths(*other);
  REQUIRE(other_truths.ok());
  // With no model the table measured, the pair plays the roofline alone,
  // and says so (it said it played the table "for the model it measured").
  const auto other_played = truth_played(*other, *other_truths);
  const auto other_lines = tp_group_lines(other_played);
  REQUIRE(other_lines.size() == 1);
  CHECK(other_lines[0].find(" plays the roofline at one rank's shapes (efficiencies from ") != std::string::npos);
  const auto pair =
      std::find_if(other_played.begin(), other_played.end(), [](const TruthPlayed& p) { return p.tp == 2; });
  REQUIRE(pair != other_played.end());
  CHECK(pair->truth == "roofline");
  CHECK(pair->profile_unplayed == "llmservingsim_H100_Llama-3.1-8B_tp2_layers.csv");
}

TEST_CASE("tensor parallelism: layers_tp mistakes are one line naming the key and the file",
          "[config][bad-input][tp]") {
  auto error = [](const std::string& config, std::vector<ConfigOverride> sets = {}) {
    auto cfg = load_config(config, sets);
    if (!cfg.ok()) return cfg.status().message();
    auto truths = load_truths(*cfg);
    REQUIRE_FALSE(truths.ok());
    return truths.status().message();
  };
  CHECK(error(kMeasured, {{"ground_truth.layers_tp", "[]"}})
            .find("ground_truth.layers_tp: expected at least one file name") != std::string::npos);
  const std::string list = "[\"" + kTp2 + "\", \"" + kTp2 + "\"]";
  CHECK(error(kMeasured, {{"ground_truth.layers_tp", list}}) ==
        kMeasured + ": ground_truth.layers_tp: " + kTp2 + ": a second profile of tp_size 2 (one file a group size)");
  CHECK(error(kMeasured, {{"ground_truth.layers_tp", "[\"" + kTp1 + "\"]"}}) ==
        kMeasured + ": ground_truth.layers_tp: " + kTp1 +
            ": its rows have tp_size 1, one GPU's (give that profile as ground_truth.layers)");
  // A file of two sizes (the tp1 rows, then the tp2 ones).
  const fs::path mixed = fs::temp_directory_path() / ("slicesched_tp_mixed_" + std::to_string(getpid()) + ".csv");
  {
    std::ifstream a(kTp1), b(kTp2);
    std::ofstream out(mixed);
    out << a.rdbuf();
    std::string header;
    std::getline(b, header);
    out << b.rdbuf();
  }
  CHECK(error(kMeasured, {{"ground_truth.layers_tp", "[\"" + mixed.string() + "\"]"}}) ==
        kMeasured + ": ground_truth.layers_tp: " + mixed.string() +
            ": expected the rows of one tensor-parallel size (tp_size), found tp_size 1, 2");
  fs::remove(mixed);
  CHECK(error(kMeasured, {{"ground_truth.layers_tp", "\"" + kTp2 + "\""}}).find("ground_truth.layers_tp: expected") !=
        std::string::npos);
  const LoneVariant no_layers(
      "no_layers",
      {{"layers = \"../../data/profiles/llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv\"\nlayers_model = "
        "\"llama3-8b\"\n"
        "layers_type = \"H100\"\n",
        ""}},
      kMeasured);
  CHECK(error(no_layers.path.string())
            .find("ground_truth.layers_tp: measures the layers profile's model and type on "
                  "tensor-parallel ranks: give layers too") != std::string::npos);
}
