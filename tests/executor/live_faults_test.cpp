// Live and simulated faults follow one rule set (Backend::fail_accelerator):
// the same graph, the same placements and the same lost accelerator give
// the same operators failed as lost in the emulated cluster (virtual
// time, ground truth) and in the live cluster (real threads, real values).
// So a planner's what-if of a lost GPU predicts what live serving redoes.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

import slicesched.core.plugin;
import slicesched.simulator.emulated_cluster;
import slicesched.executor.live_cluster;
import slicesched.plugins.greedy_arbiter;
import slicesched.testing;
import slicesched.core.backend;
import slicesched.executor.runner;
import slicesched.core.status;
import slicesched.core.ids;
import slicesched.core.shape;
import slicesched.core.graph;
import slicesched.core.gmg;

using namespace slicesched;
using namespace slicesched::testing;

namespace {

class PriorTruth final : public GroundTruth {
 public:
  Result<double> op_seconds(const Gmg& gmg, OpId op) override {
    const auto& top = gmg.templates().get(gmg.op(op).tmpl).ops()[gmg.op(op).tmpl_op];
    return top.prior[0];
  }
  double transfer_seconds(AccelId, AccelId, std::int64_t bytes) override { return static_cast<double>(bytes) * 1e-9; }
};

// Real buffers. "y" waits for the gate, which the test opens once the
// loss is in: whether y is queued or running then, the outcome is one
// (no race with the loss, whatever the machine's load).
class BufferRunner final : public OpRunner {
 public:
  std::atomic<bool> gate{false};
  Result<std::shared_ptr<const void>> prepare(const Gmg& gmg, OpId op) override {
    const OpRecord& r = gmg.op(op);
    auto name = std::make_shared<std::pair<std::string, std::int64_t>>(
        gmg.templates().get(r.tmpl).ops()[r.tmpl_op].name, r.out_bytes);
    return std::shared_ptr<const void>(name);
  }
  Result<OpResult> run(AccelId, const void* prepared, std::span<const Payload> inputs) override {
    const auto& p = *static_cast<const std::pair<std::string, std::int64_t>*>(prepared);
    for (const Payload& in : inputs)
      if (!in) return InvalidArgument("missing input");
    if (p.first == "y")
      while (!gate.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    OpResult r;
    r.output = {std::make_shared<std::vector<char>>(static_cast<std::size_t>(p.second)), p.second};
    return r;
  }
  Result<CopyResult> copy(const Payload& v, AccelId) override {
    return CopyResult{
        Payload{std::make_shared<std::vector<char>>(*static_cast<const std::vector<char>*>(v.value.get())), v.bytes}};
  }
};

// One backend driven the way the engine drives it; outcome per op name:
// "ok", "failed" or "lost".
struct Drive {
  std::shared_ptr<TemplateRegistry> reg = std::make_shared<TemplateRegistry>();
  std::unique_ptr<Gmg> gmg;
  InstanceInfo inst;
  Backend* b = nullptr;
  std::atomic<bool>* gate = nullptr;  // opened after each loss (live only)
  std::map<std::string, std::string> outcome;

  Drive() {
    TemplateBuilder t("chain");
    t.op("x").output({{Expr::constant(4096)}, DType::kI8}).features({Expr::constant(1)}).prior({0.001});
    t.op("y").input("x").output({{Expr::constant(1024)}, DType::kI8}).features({Expr::constant(1)}).prior({0.003});
    t.op("z").input("y").output({{Expr::constant(16)}, DType::kI8}).features({Expr::constant(1)}).prior({0.002});
    const TemplateId id = reg->add(std::move(t).build().value()).value();
    gmg = std::make_unique<Gmg>(reg, cluster(3));
    inst = gmg->instantiate({id, {}, {}, 0, 0}).value();
  }
  std::string name(OpId op) const {
    for (std::size_t k = 0; k < inst.ops.size(); ++k)
      if (inst.ops[k] == op) return std::string(1, "xyz"[k]);
    return "?";
  }
  void apply(const std::vector<Feedback>& fb) {
    for (const Feedback& f : fb) {
      if (f.kind == Feedback::Kind::kTransfer) {
        REQUIRE(gmg->complete_transfer(f.src, f.op, f.t).ok());
        continue;
      }
      REQUIRE(gmg->complete(f.op, f.t, f.measured).ok());
      outcome[name(f.op)] = f.lost ? "lost" : f.failed ? "failed" : "ok";
    }
  }
  void issue(std::size_t k, AccelId a) {
    REQUIRE(gmg->issue(inst.ops[k], a, b->now()).ok());
    REQUIRE(b->submit(*gmg, inst.ops[k]).ok());
  }
  // Until idle, or until `until` has an outcome.
  void run(const std::string& until = "") {
    for (;;) {
      b->release(gmg->releases());
      gmg->clear_releases();
      if (!until.empty() && outcome.count(until)) return;
      const Nanos next = b->next_event();
      if (next < 0) return;
      std::vector<Feedback> fb;
      REQUIRE(b->advance_to(next, fb).ok());
      apply(fb);
    }
  }
  void lose(AccelId a) {
    gmg->set_down(a, true);
    std::vector<Feedback> fb;
    REQUIRE(b->fail_accelerator(*gmg, a, fb).ok());
    apply(fb);
    if (gate) *gate = true;
  }
};

struct Scenario {
  const char* name;
  std::function<void(Drive&)> play;
};

const Scenario kScenarios[] = {
    // y and z wait on a1 for x (on a0) when a1 is lost.
    {"queued work on the lost accelerator",
     [](Drive& d) {
       d.issue(0, 0);
       d.issue(1, 1);
       d.issue(2, 1);
       d.lose(1);
       d.run();
     }},
    // x is done on a1 and its output held there; a1 is lost and comes back
    // empty: y (reading x) and z fail as lost wherever they are placed.
    {"data held by the lost accelerator",
     [](Drive& d) {
       d.issue(0, 1);
       d.run();
       d.lose(1);
       d.gmg->set_down(1, false);
       REQUIRE(d.b->restore_accelerator(1).ok());
       d.issue(1, 0);
       d.issue(2, 2);
       d.run();
     }},
    // x done on a0; y on a2 reads it (a transfer to a2); a2 is lost: y
    // fails as lost, and so does z on a1 that reads y.
    {"a transfer into the lost accelerator",
     [](Drive& d) {
       d.issue(0, 0);
       d.run("x");
       d.issue(1, 2);
       d.issue(2, 1);
       d.lose(2);
       d.run();
     }},
};

}  // namespace

TEST_CASE("faults: the live cluster loses exactly what the emulated cluster loses", "[executor][faults]") {
  for (const Scenario& s : kScenarios) {
    INFO(s.name);
    PriorTruth truth;
    plugins::GreedyArbiter arbiter;
    Drive sim;
    EmulatedCluster emu(3, truth, arbiter);
    sim.b = &emu;
    s.play(sim);

    BufferRunner runner;
    Drive live;
    LiveCluster lc({1 << 20, 1 << 20, 1 << 20}, runner, arbiter);
    live.b = &lc;
    live.gate = &runner.gate;
    s.play(live);

    CHECK(sim.outcome.size() == 3);
    CHECK(live.outcome == sim.outcome);
    CHECK(sim.outcome["z"] == "lost");
    // Nothing leaks: what the lost accelerator held is no longer charged.
    for (AccelId a = 0; a < 3; ++a) CHECK(lc.used(a) >= 0);
  }
}

TEST_CASE("faults: a loss the live cluster finds itself reaches the engine through take_lost", "[executor][faults]") {
  BufferRunner runner;
  plugins::GreedyArbiter arbiter;
  LiveCluster lc({1 << 20, 1 << 20}, runner, arbiter);
  CHECK(lc.take_lost().empty());
  lc.lose(1);
  lc.lose(1);                   // once
  CHECK(lc.next_event() >= 0);  // the engine wakes for it
  CHECK(lc.take_lost() == std::vector<AccelId>{1});
  CHECK(lc.take_lost().empty());
}
