// Ground-truth profiles: the real shipped tables give back exactly what was
// measured (rows read by hand below), hand-written tables pin the
// interpolation rules, and the noise has the promised mean, spread and seed.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

import slicesched.simulator.profile;
import slicesched.core.status;

using namespace slicesched;
namespace fs = std::filesystem;

namespace {

const fs::path kProfiles = fs::path(SLICESCHED_SOURCE_DIR) / "data" / "profiles";
const fs::path kLayersH100 = kProfiles / "llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv";
const fs::path kNetH100 = kProfiles / "vidur_network_h100_dgx_send_recv.csv";
const fs::path kNetA100 = kProfiles / "vidur_network_a100_dgx_send_recv.csv";

constexpr double ns = 1e-9;
constexpr double kKvBytesPerToken = 2.0 * 8 * 128 * 2;  // K and V, 8 heads of 128, bf16

// A file under the temp directory, removed at scope exit.
struct TempFile {
  fs::path path;
  TempFile(std::string_view name, std::string_view text)
      : path(fs::temp_directory_path() / ("slicesched_profile_test_" + std::string(name))) {
    std::ofstream(path, std::ios::binary) << text;
  }
  ~TempFile() { fs::remove(path); }
};

struct Row {
  std::string op;
  std::int64_t tokens;
  double latency_ns;
  int tp = 1;
  int kv = 0;
};

std::string layers_csv(const std::vector<Row>& rows) {
  std::string s = "layer_name,input,kv_cache,tp_size,latency(ns)\n";
  for (const auto& r : rows) {
    s += r.op + "," + std::to_string(r.tokens) + "," + std::to_string(r.kv) + "," + std::to_string(r.tp) + "," +
         std::to_string(r.latency_ns) + "\n";
  }
  return s;
}

// Every decoder-layer op at 1,000 / 3,000 / 7,000 ns for 16 / 32 / 64
// tokens; the embedding and the head's two ops on grids of their own, so
// sums have to be taken over the union of the grids.
std::vector<Row> hand_rows() {
  std::vector<Row> rows;
  for (auto op : LayerProfile::layer_ops()) {
    rows.push_back({std::string(op), 16, 1000});
    rows.push_back({std::string(op), 32, 3000});
    rows.push_back({std::string(op), 64, 7000});
  }
  rows.push_back({"embedding", 10, 100});
  rows.push_back({"embedding", 40, 400});
  rows.push_back({"final_layernorm", 16, 100});
  rows.push_back({"final_layernorm", 64, 500});
  rows.push_back({"lm_head", 32, 1000});
  rows.push_back({"lm_head", 64, 2000});
  return rows;
}

}  // namespace

TEST_CASE("layer profile: the real H100 table gives the measured rows back") {
  auto p = LayerProfile::load(kLayersH100);
  REQUIRE(p.ok());
  CHECK(p->tp_size() == 1);

  // input = 1: input_layernorm, q, k, v, rope, attn, o, post_layernorm,
  // gate, up, act_fn, down (lines 3..14 of the file).
  const double layer1 = 17701 + 16078 + 8275 + 8065 + 26853 + 5810 + 15995 + 17120 + 41769 + 39978 + 4179 + 42647;
  CHECK(layer1 == 244470);
  CHECK(p->layer_seconds(1, 0) == Approx(layer1 * ns).epsilon(1e-12));
  CHECK(p->embed_seconds(1) == Approx(2915 * ns).epsilon(1e-12));
  CHECK(p->head_seconds(1) == Approx((18363 + 366336) * ns).epsilon(1e-12));

  // input = 2048, the largest measured count, same op order.
  const double layer2048 =
      149425 + 98210 + 27275 + 25745 + 174652 + 177401 + 97173 + 149134 + 315596 + 311590 + 98260 + 305387;
  CHECK(p->layer_seconds(2048, 0) == Approx(layer2048 * ns).epsilon(1e-12));
  CHECK(p->embed_seconds(2048) == Approx(61415 * ns).epsilon(1e-12));
  CHECK(p->head_seconds(2048) == Approx((148010 + 2866251) * ns).epsilon(1e-12));

  // Past 2048 every op's secant from 1024 is positive, so the layer grows at
  // (S(2048) - S(1024)) / 1024 per token; S(1024) = 895,205 ns.
  const double slope = (layer2048 - 895205) / 1024;
  CHECK(p->layer_seconds(4096, 0) == Approx((layer2048 + 2048 * slope) * ns).epsilon(1e-12));
  CHECK(p->layer_seconds(3000, 0) > p->layer_seconds(2048, 0));
}

TEST_CASE("layer profile: linear between measured counts, octave secant past the last") {
  const TempFile file("hand_layers.csv", layers_csv(hand_rows()));
  auto p = LayerProfile::load(file.path);
  REQUIRE(p.ok());
  const double ops = 12;

  CHECK(p->layer_seconds(16, 0) == Approx(ops * 1000 * ns).epsilon(1e-12));
  CHECK(p->layer_seconds(24, 0) == Approx(ops * 2000 * ns).epsilon(1e-12));  // midpoint of 16 and 32
  CHECK(p->layer_seconds(48, 0) == Approx(ops * 5000 * ns).epsilon(1e-12));
  CHECK(p->layer_seconds(40, 0) == Approx(ops * 4000 * ns).epsilon(1e-12));
  CHECK(p->layer_seconds(8, 0) == Approx(ops * 1000 * ns).epsilon(1e-12));  // clamped below
  // Past 64: secant from 32 (= 64 / 2) to 64 is 125 ns/token per op.
  CHECK(p->layer_seconds(128, 0) == Approx(ops * (7000 + 64 * 125) * ns).epsilon(1e-12));

  CHECK(p->embed_seconds(25) == Approx(250 * ns).epsilon(1e-12));
  // Past 40 the embedding's octave anchor is 10 (the largest <= 20).
  CHECK(p->embed_seconds(70) == Approx((400 + 30 * 10) * ns).epsilon(1e-12));
  // The head sums two ops on different grids: at 48 tokens final_layernorm
  // is 100 + 32/48 * 400 and lm_head is midway, 1,500; at 24 lm_head is
  // still clamped to its first point.
  CHECK(p->head_seconds(48) == Approx((100 + 400.0 * 32 / 48 + 1500) * ns).epsilon(1e-12));
  CHECK(p->head_seconds(24) == Approx((100 + 400.0 * 8 / 48 + 1000) * ns).epsilon(1e-12));
}

TEST_CASE("layer profile: other tp sizes, cached rows, unknown ops and repeats") {
  auto rows = hand_rows();
  rows.push_back({"q_proj", 16, 1e9, 2});     // another tp size
  rows.push_back({"q_proj", 16, 1e9, 1, 5});  // kv_cache != 0
  rows.push_back({"add", 16, 1e9});           // an op no template op uses
  rows.push_back({"k_proj", 32, 5000});       // repeated count: averaged with 3,000
  auto p = LayerProfile::parse(layers_csv(rows), "mem.csv");
  REQUIRE(p.ok());
  CHECK(p->layer_seconds(16, 0) == Approx(12 * 1000 * ns).epsilon(1e-12));
  CHECK(p->layer_seconds(32, 0) == Approx((12 * 3000 + 1000) * ns).epsilon(1e-12));
}

TEST_CASE("layer profile: attention over the cache reads K and V once at HBM bandwidth") {
  auto p = LayerProfile::load(kLayersH100);
  REQUIRE(p.ok());
  const double slope = kKvBytesPerToken / 3.35e12;  // seconds per cached token per layer
  for (std::int64_t c : {1, 1000, 2048, 8192, 131072}) {
    CHECK(p->kv_read_seconds(c) == Approx(c * slope).epsilon(1e-12));
    CHECK(p->layer_seconds(1, c) - p->layer_seconds(1, 0) == Approx(c * slope).epsilon(1e-9));
    CHECK(p->layer_seconds(300, c) - p->layer_seconds(300, 0) == Approx(c * slope).epsilon(1e-9));
  }
  CHECK(p->group_seconds(1, 2048) == Approx(8 * p->layer_seconds(1, 2048)).epsilon(1e-12));
  CHECK(p->group_seconds(1, 2048, 2) == Approx(2 * p->layer_seconds(1, 2048)).epsilon(1e-12));

  // The bandwidth is an option; tensor parallelism splits the KV heads.
  LayerProfileOptions a100;
  a100.hbm_bytes_per_s = 2.0e12;
  auto q = LayerProfile::load(kLayersH100, 1, a100);
  REQUIRE(q.ok());
  CHECK(q->kv_read_seconds(1000) == Approx(1000 * kKvBytesPerToken / 2.0e12).epsilon(1e-12));
  auto rows = hand_rows();
  for (auto& r : rows) r.tp = 2;
  auto tp2 = LayerProfile::parse(layers_csv(rows), "mem.csv", 2);
  REQUIRE(tp2.ok());
  CHECK(tp2->kv_read_seconds(1000) == Approx(1000 * slope / 2).epsilon(1e-12));
}

TEST_CASE("layer profile: llama template op names") {
  auto p = LayerProfile::load(kLayersH100);
  REQUIRE(p.ok());
  const std::int64_t tokens = 1, context = 2048;
  CHECK(p->op_seconds("embed", tokens, context).value() == p->embed_seconds(tokens));
  CHECK(p->op_seconds("head", tokens, context).value() == p->head_seconds(tokens));
  for (const char* g : {"layers0", "layers1", "layers2", "layers3"}) {
    CHECK(p->op_seconds(g, tokens, context).value() == p->group_seconds(tokens, context, 8));
  }
  for (const char* bad : {"layers4", "layers", "layers00", "layersx", "lm_head", ""}) {
    auto r = p->op_seconds(bad, tokens, context);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kNotFound);
    CHECK(r.status().message() ==
          "unknown template op '" + std::string(bad) + "', expected embed, layers0 .. layers3 or head");
  }
  auto all = p->op_latencies(tokens, context);
  REQUIRE(all.size() == 6);
  CHECK(all[0].template_op == "embed");
  CHECK(all[1].template_op == "layers0");
  CHECK(all[4].template_op == "layers3");
  CHECK(all[5].template_op == "head");
  for (const auto& op : all) CHECK(op.seconds == p->op_seconds(op.template_op, tokens, context).value());
}

TEST_CASE("transfer profile: the real H100 DGX table") {
  auto p = TransferProfile::load(kNetH100);
  REQUIRE(p.ok());
  CHECK(p->min_bytes() == 2048);
  CHECK(p->max_bytes() == 64 << 20);
  // Within-node medians (ms) that are in order with their neighbours, so
  // the monotone fit keeps them: 2 KB 0.005 (line 996), 1 MiB 0.01 (line
  // 1124), 64 MiB 0.193 (line 1989).
  CHECK(p->seconds(2048) == Approx(0.005e-3).epsilon(1e-12));
  CHECK(p->seconds(1 << 20) == Approx(0.01e-3).epsilon(1e-12));
  CHECK(p->seconds(64 << 20) == Approx(0.193e-3).epsilon(1e-12));
  CHECK(p->peak_bytes_per_s() == Approx(348e9).epsilon(0.05));
  // Below the smallest size: its latency; past the largest: its bandwidth.
  CHECK(p->seconds(0) == p->seconds(2048));
  CHECK(p->seconds(100) == p->seconds(2048));
  CHECK(p->seconds(std::int64_t{128} << 20) == Approx(2 * 0.193e-3).epsilon(1e-12));

  double prev = 0, first_drop = 0;  // sizes 1 B .. 1 GB, 0.3 % apart
  for (double b = 1; b < 1e9; b *= 1.003) {
    const double t = p->seconds(static_cast<std::int64_t>(b));
    if (t < prev && first_drop == 0) first_drop = b;
    prev = t;
  }
  CHECK(first_drop == 0);

  auto across = TransferProfile::load(kNetH100, false);
  REQUIRE(across.ok());
  CHECK(across->seconds(2048) == Approx(0.017e-3).epsilon(1e-12));
  CHECK(across->peak_bytes_per_s() == Approx(36e9).epsilon(0.1));
  auto a100 = TransferProfile::load(kNetA100);
  REQUIRE(a100.ok());
  CHECK(a100->peak_bytes_per_s() == Approx(228e9).epsilon(0.05));
}

TEST_CASE("transfer profile: log-size interpolation and the monotone fit") {
  const std::string header = "time_stats.send_recv.median,size,devices_per_node\n";
  const TempFile file("hand_net.csv", header + "0.01,1000,2\n0.03,4000,2\n0.5,1000,1\n");
  auto p = TransferProfile::load(file.path);
  REQUIRE(p.ok());
  CHECK(p->seconds(2000) == Approx(0.02e-3).epsilon(1e-12));  // halfway in log(size)
  CHECK(p->seconds(1000) == Approx(0.01e-3).epsilon(1e-12));
  CHECK(p->seconds(8000) == Approx(0.06e-3).epsilon(1e-12));

  // 1 ms, then 4 ms measured twice, then 1 ms: the violators pool to the
  // weighted mean (4 + 4 + 1) / 3 = 3 ms.
  auto q = TransferProfile::parse(header + "1,1,2\n4,2,2\n4,2,2\n1,3,2\n", "mem.csv");
  REQUIRE(q.ok());
  CHECK(q->seconds(1) == Approx(1e-3).epsilon(1e-12));
  CHECK(q->seconds(2) == Approx(3e-3).epsilon(1e-12));
  CHECK(q->seconds(3) == Approx(3e-3).epsilon(1e-12));
}

TEST_CASE("noisy clock: unbiased, the promised spread, reproducible by seed") {
  NoisyClock clock(42);
  CHECK(clock.cv() == 0.006);
  const int n = 100'000;
  std::vector<double> first;
  double sum = 0, sum_sq = 0, lowest = 1;
  for (int i = 0; i < n; ++i) {
    const double t = clock.sample(2.0e-3);
    if (i < 100) first.push_back(t);
    lowest = std::min(lowest, t);
    sum += t;
    sum_sq += t * t;
  }
  CHECK(lowest > 0);
  const double mean = sum / n;
  const double sd = std::sqrt((sum_sq - n * mean * mean) / (n - 1));
  CHECK(mean == Approx(2.0e-3).epsilon(0.001));
  CHECK(sd / mean == Approx(0.006).epsilon(0.1));

  NoisyClock again(42), other(43);
  bool differs = false;
  for (double t : first) {
    CHECK(again.sample(2.0e-3) == t);
    differs = differs || other.sample(2.0e-3) != t;
  }
  CHECK(differs);

  NoisyClock exact(7, 0.0);
  CHECK(exact.sample(1.5e-3) == 1.5e-3);
  CHECK(clock.sample(0.0) == 0.0);
  NoisyClock wide(1, 2.0);  // even a huge spread stays positive
  lowest = 1;
  for (int i = 0; i < 1000; ++i) lowest = std::min(lowest, wide.sample(1.0));
  CHECK(lowest > 0);
}
