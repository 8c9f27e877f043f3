// Properties of the global simulator over random DAGs and placements.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

import slicesched.simulator.global_simulator;
import slicesched.testing;
import slicesched.core.estimator;
import slicesched.core.gmg;
import slicesched.core.graph;
import slicesched.core.ids;
import slicesched.core.shape;

using namespace slicesched;
using namespace slicesched::testing;

namespace {

// A random DAG template: op i reads from a random subset of earlier ops;
// the first op may read a port "kv" (a retained state of an earlier
// instance); a random op retains a state. Durations are whole microseconds.
GraphTemplate random_template(std::mt19937_64& rng, const std::string& name, std::int64_t kv_bytes) {
  TemplateBuilder b(name);
  b.port("kv", {{Expr::constant(kv_bytes)}, DType::kI8}, /*optional=*/true);
  int n = std::uniform_int_distribution<int>(1, 10)(rng);
  int retainer = std::uniform_int_distribution<int>(0, n - 1)(rng);
  for (int i = 0; i < n; ++i) {
    auto op = b.op("op" + std::to_string(i));
    if (i == 0) op.input("kv");
    for (int j = 0; j < i; ++j)
      if (std::uniform_int_distribution<int>(0, 2)(rng) == 0 || j == i - 1) op.input("op" + std::to_string(j));
    std::int64_t out = std::uniform_int_distribution<std::int64_t>(1, 4'000'000)(rng);
    double seconds = std::uniform_int_distribution<int>(1, 5000)(rng) * 1e-6;
    op.output({{Expr::constant(out)}, DType::kI8})
        .workspace(Expr::constant(std::uniform_int_distribution<std::int64_t>(0, 1000)(rng)))
        .features({Expr::constant(1)})
        .prior({seconds})
        .weights(std::uniform_int_distribution<std::int64_t>(0, 1 << 20)(rng));
    if (i == retainer) op.retain("kv", {{Expr::constant(kv_bytes)}, DType::kI8});
  }
  return std::move(b).build().value();
}

struct Interval {
  Nanos start, finish;
};

void check_no_overlap(std::vector<Interval> v, const char* what) {
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.start < b.start; });
  for (std::size_t i = 1; i < v.size(); ++i) {
    INFO(what);
    REQUIRE(v[i].start >= v[i - 1].finish);
  }
}

}  // namespace

TEST_CASE("random DAGs and placements keep the simulator's invariants", "[simulator][property]") {
  std::mt19937_64 rng(20261122);
  int checked_ops = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    INFO("trial " << trial);
    const int n_acc = std::uniform_int_distribution<int>(1, 4)(rng);
    const std::int64_t kv_bytes = std::uniform_int_distribution<std::int64_t>(1, 2'000'000)(rng);
    auto reg = std::make_shared<TemplateRegistry>();
    TemplateId a = reg->add(random_template(rng, "a", kv_bytes)).value();
    TemplateId b = reg->add(random_template(rng, "b", kv_bytes)).value();
    auto accels = cluster(n_acc, 64 * kGiB);
    Gmg gmg(reg, accels);
    for (AccelId acc = 0; acc < static_cast<AccelId>(n_acc); ++acc) {
      REQUIRE(gmg.place_weights(a, acc).ok());
      REQUIRE(gmg.place_weights(b, acc).ok());
    }
    std::uniform_int_distribution<int> pick_acc(0, n_acc - 1);
    std::uniform_int_distribution<int> pick_prio(0, 3);
    Nanos clock = 0;

    // A first instance, then up to three more that may attach to the
    // retained state of the previous one (a decode chain).
    std::vector<InstanceInfo> instances;
    OpId retainer = kNoOp;
    int count = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int k = 0; k < count; ++k) {
      TemplateId t = (k % 2 == 0) ? a : b;
      InstanceSpec spec{t, {}, {}, pick_prio(rng), 0};
      if (retainer != kNoOp && std::uniform_int_distribution<int>(0, 1)(rng))
        spec.ports.push_back({"kv", retainer, true});
      auto inst = gmg.instantiate(spec);
      REQUIRE(inst.ok());
      for (OpId op : inst->ops) {
        REQUIRE(gmg.issue(op, static_cast<AccelId>(pick_acc(rng)), clock).ok());
        clock += std::uniform_int_distribution<Nanos>(0, 200'000)(rng);
      }
      retainer = kNoOp;
      for (OpId op : inst->ops)
        if (gmg.op(op).retained_bytes > 0) retainer = op;
      instances.push_back(std::move(inst).value());
    }

    EstimatorSet est = estimators(*reg);
    auto r = simulate(gmg, est, {.stop_at_oom = false, .record_hbm_timeline = true, .record_transfers = true});
    REQUIRE(r.feasible());

    // Every op finishes exactly once, not before it was issued.
    REQUIRE(r.finished == r.ops.size());
    std::vector<std::vector<Interval>> per_acc(n_acc), sends(n_acc), recvs(n_acc);
    for (std::size_t i = 0; i < r.ops.size(); ++i) {
      const OpRecord& op = gmg.op(r.ops[i]);
      REQUIRE(r.start[i] >= op.issue_t);
      REQUIRE(r.finish[i] >= r.start[i]);
      per_acc[op.accel].push_back({r.start[i], r.finish[i]});
      ++checked_ops;
    }
    // One op at a time per accelerator; one transfer per source and per
    // destination at a time.
    for (int acc = 0; acc < n_acc; ++acc) check_no_overlap(per_acc[acc], "ops on one accelerator");
    std::map<std::pair<OpId, OpId>, TransferRecord> transfer_of;
    for (const auto& x : r.transfers) {
      sends[x.from].push_back({x.start, x.finish});
      recvs[x.to].push_back({x.start, x.finish});
      REQUIRE(transfer_of.emplace(std::pair{x.src, x.dst}, x).second);
    }
    for (int acc = 0; acc < n_acc; ++acc) {
      check_no_overlap(sends[acc], "transfers from one accelerator");
      check_no_overlap(recvs[acc], "transfers into one accelerator");
    }
    // Dependencies: local inputs before start, remote ones after their
    // transfer, which starts after the producer.
    for (std::size_t i = 0; i < r.ops.size(); ++i) {
      OpId v = r.ops[i];
      for (std::uint32_t e = gmg.op(v).first_in; e != kNoEdge; e = gmg.edge(e).next_in) {
        OpId u = gmg.edge(e).src;
        if (gmg.op(u).accel == gmg.op(v).accel) {
          REQUIRE(r.start[i] >= r.finish_of(u));
        } else {
          auto it = transfer_of.find({u, v});
          REQUIRE(it != transfer_of.end());
          REQUIRE(it->second.start >= r.finish_of(u));
          REQUIRE(it->second.bytes == gmg.edge(e).bytes);
          REQUIRE(r.start[i] >= it->second.finish);
        }
      }
    }
    // HBM never negative; at the end only weights and unattached retained
    // states remain.
    std::vector<std::int64_t> resident(n_acc, 0);
    for (int acc = 0; acc < n_acc; ++acc) resident[acc] = gmg.hbm(acc).weights;
    for (const auto& inst : instances)
      for (OpId op : inst.ops)
        if (gmg.op(op).retained_bytes > 0 && !gmg.op(op).retained_attached)
          resident[gmg.op(op).accel] += gmg.op(op).retained_bytes;
    for (int acc = 0; acc < n_acc; ++acc) {
      for (const auto& p : r.hbm_timeline[acc]) REQUIRE(p.bytes >= 0);
      REQUIRE(r.hbm_end[acc] == resident[acc]);
    }

    // Replaying the predicted timeline into the GMG agrees with it: HBM
    // accounting returns to the same baseline and everything retires.
    std::vector<std::size_t> order(r.ops.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](auto x, auto y) { return r.finish[x] < r.finish[y]; });
    for (std::size_t i : order) REQUIRE(gmg.complete(r.ops[i], r.finish[i], r.finish[i] - r.start[i]).ok());
    for (int acc = 0; acc < n_acc; ++acc) {
      REQUIRE(gmg.hbm(acc).transient == 0);
      REQUIRE(gmg.hbm(acc).total() == resident[acc]);
    }
    for (const auto& inst : instances)
      for (OpId op : inst.ops)
        if (gmg.op(op).retained_held) REQUIRE(gmg.release_retained(op).ok());
    gmg.retire();
    REQUIRE(gmg.live_count() == 0);
    for (int acc = 0; acc < n_acc; ++acc) REQUIRE(gmg.hbm(acc).total() == gmg.hbm(acc).weights);
  }
  CHECK(checked_ops > 5000);
}

TEST_CASE("the simulator is deterministic", "[simulator][property]") {
  std::mt19937_64 rng(7);
  auto reg = std::make_shared<TemplateRegistry>();
  TemplateId t = reg->add(random_template(rng, "t", 1000)).value();
  Gmg gmg(reg, cluster(3));
  for (AccelId acc = 0; acc < 3; ++acc) REQUIRE(gmg.place_weights(t, acc).ok());
  for (int k = 0; k < 50; ++k) {
    auto inst = gmg.instantiate({t, {}, {}, k % 3, 0}).value();
    for (OpId op : inst.ops) REQUIRE(gmg.issue(op, static_cast<AccelId>(k % 3), 0).ok());
  }
  EstimatorSet est = estimators(*reg);
  auto first = simulate(gmg, est);
  GlobalSimulator reused;
  for (int run = 0; run < 3; ++run) {
    const auto& again = reused.run(gmg, est);
    CHECK(again.start == first.start);
    CHECK(again.finish == first.finish);
  }
}
