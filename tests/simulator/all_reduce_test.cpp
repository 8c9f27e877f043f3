// What a tensor-parallel group's all-reduces cost: a measured profile
// (Vidur's all_reduce.csv) read for one group size, or a ring over a link
// class; and which kernels of an iteration all-reduce.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

import slicesched.simulator.profile;
import slicesched.simulator.roofline_truth;
import slicesched.core.accel;
import slicesched.core.status;
import slicesched.models.work;

using namespace slicesched;

namespace {

const std::string kHeader =
    ",time_stats.all_reduce.min,time_stats.all_reduce.max,time_stats.all_reduce.mean,time_stats.all_reduce.median,"
    "time_stats.all_reduce.std,rank,num_workers,size,collective,devices_per_node,max_devices_per_node\n";

std::string row(double median_ms, int workers, std::int64_t size, int per_node) {
  return "0,0,0,0," + std::to_string(median_ms) + ",0,0," + std::to_string(workers) + "," + std::to_string(size) +
         ",all_reduce," + std::to_string(per_node) + ",8\n";
}

}  // namespace

TEST_CASE("all-reduce profile: the rows of one group size within a node, by size", "[profile][tp]") {
  const std::string csv = kHeader + row(0.04, 4, 2048, 4) + row(0.08, 4, 4096, 4) + row(0.5, 4, 2048, 2) +
                          row(0.01, 2, 2048, 2) + row(0.02, 2, 4096, 2);
  auto four = TransferProfile::parse_all_reduce(csv, "ar.csv", 4);
  REQUIRE(four.ok());
  CHECK(four->seconds(2048) == Approx(0.04e-3));
  CHECK(four->seconds(4096) == Approx(0.08e-3));
  CHECK(four->seconds(1) == Approx(0.04e-3));     // no faster than the smallest measured
  CHECK(four->seconds(8192) == Approx(0.16e-3));  // beyond: at the largest size's rate
  // Between two sizes, by log size: halfway in log is halfway in time.
  CHECK(four->seconds(2896) == Approx(0.06e-3).epsilon(0.01));
  auto two = TransferProfile::parse_all_reduce(csv, "ar.csv", 2);
  REQUIRE(two.ok());
  CHECK(two->seconds(4096) == Approx(0.02e-3));
  // The group of 4 across two nodes (devices_per_node 2) is not a group's.
  auto eight = TransferProfile::parse_all_reduce(csv, "ar.csv", 8);
  REQUIRE_FALSE(eight.ok());
  CHECK(eight.status().message() ==
        "ar.csv: no all-reduce rows of 8 GPUs in one node (num_workers = devices_per_node = 8; measured: 2, 4)");
  auto missing = TransferProfile::parse_all_reduce(",size,num_workers\n0,1,2\n", "bad.csv", 2);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("bad.csv") == 0);
  CHECK(missing.status().message().find("time_stats.all_reduce.median") != std::string::npos);
  // One size says nothing of how time grows with bytes (beyond it the
  // profile would scale at a latency-bound message's rate).
  auto one = TransferProfile::parse_all_reduce(kHeader + row(0.038, 4, 2048, 4) + row(0.040, 4, 2048, 4), "one.csv", 4);
  REQUIRE_FALSE(one.ok());
  CHECK(one.status().message() ==
        "one.csv: all-reduce rows of 4 GPUs measure one size only (2048 bytes): expected two or more, to "
        "interpolate between");
  // Checking a file no group plays: every row within a node is read.
  CHECK(TransferProfile::parse_all_reduce(csv, "ar.csv", 0).ok());
  CHECK_FALSE(TransferProfile::parse_all_reduce(kHeader + row(0.5, 4, 2048, 2), "x.csv", 0).ok());
  auto negative = TransferProfile::parse_all_reduce(kHeader + row(-1, 4, 2048, 4), "neg.csv", 4);
  REQUIRE_FALSE(negative.ok());
  CHECK(negative.status().message().find("neg.csv:2") == 0);
}

TEST_CASE("all-reduce over a ring: 2 (tp - 1) steps of latency and bytes / tp", "[profile][tp]") {
  const LinkClass link{"nvlink", 100e9, 5e-6};
  struct Case {
    int tp;
    double bytes, seconds;
  };
  for (const Case& c : std::vector<Case>{
           {1, 8e6, 0}, {2, 8e6, 2 * (5e-6 + 4e6 / 100e9)}, {4, 8e6, 6 * (5e-6 + 2e6 / 100e9)}, {8, 0, 14 * 5e-6}}) {
    INFO("tp " << c.tp << ", " << c.bytes << " bytes");
    CHECK(ring_all_reduce_seconds(link, c.tp, c.bytes) == Approx(c.seconds));
  }
}

TEST_CASE("tensor parallelism all-reduces after the embedding, attention output, MLP and LM head", "[profile][tp]") {
  DenseShape s;  // Llama-3-8B: hidden 4096, vocab 128256, bf16
  const std::vector<SublayerCall> calls = {
      {Sublayer::kEmbedding, 10, 2, 0, 1}, {Sublayer::kQProj, 10, 2, 0, 8},  {Sublayer::kAttn, 10, 2, 0, 8},
      {Sublayer::kOProj, 10, 2, 0, 8},     {Sublayer::kUpProj, 10, 2, 0, 8}, {Sublayer::kDownProj, 10, 2, 0, 8},
      {Sublayer::kInputNorm, 10, 2, 0, 8}, {Sublayer::kLmHead, 2, 2, 0, 1},  {Sublayer::kLmHead, 0, 0, 0, 1}};
  std::vector<double> sizes;
  const double s_total = tp_collectives_seconds(s, calls, [&](double bytes) {
    sizes.push_back(bytes);
    return 1.0;
  });
  // One for the embedding, one per layer after attention and after the
  // MLP (8 layers each), one for the logits of the two sequences.
  CHECK(s_total == 18);
  REQUIRE(sizes.size() == 4);
  CHECK(sizes[0] == 10 * 4096 * 2);
  CHECK(sizes[1] == 10 * 4096 * 2);
  CHECK(sizes[2] == 10 * 4096 * 2);
  CHECK(sizes[3] == 2 * 128256 * 2);
}
