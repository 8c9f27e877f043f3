// The emulated cluster plays ground truth with the executor's rules. With a
// ground truth equal to the estimators' priors it must reproduce the global
// simulator's predictions exactly, with every transfer arbiter: the two
// share the rules, not the code.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

import slicesched.core.plugin;
import slicesched.simulator.global_simulator;
import slicesched.simulator.emulated_cluster;
import slicesched.plugins.greedy_arbiter;
import slicesched.plugins.serial_arbiter;
import slicesched.testing;
import slicesched.core.backend;
import slicesched.core.calibration;
import slicesched.core.priors;
import slicesched.simulator.profile;
import slicesched.core.status;
import slicesched.core.ids;
import slicesched.core.shape;
import slicesched.core.graph;
import slicesched.core.gmg;
import slicesched.core.estimator;

using namespace slicesched;
using namespace slicesched::testing;

namespace {

// Ground truth = the template priors (feature dot prior) and 1 ns per byte.
class PriorTruth final : public GroundTruth {
 public:
  Result<double> op_seconds(const Gmg& gmg, OpId op) override {
    const auto& top = gmg.templates().get(gmg.op(op).tmpl).ops()[gmg.op(op).tmpl_op];
    double s = 0;
    auto f = gmg.features(op);
    for (std::size_t i = 0; i < f.size(); ++i) s += f[i] * top.prior[i];
    return s;
  }
  double transfer_seconds(AccelId, AccelId, std::int64_t bytes) override { return static_cast<double>(bytes) * 1e-9; }
};

GraphTemplate random_dag(std::mt19937_64& rng, const std::string& name) {
  TemplateBuilder b(name);
  int n = std::uniform_int_distribution<int>(1, 8)(rng);
  for (int i = 0; i < n; ++i) {
    auto op = b.op("op" + std::to_string(i));
    for (int j = 0; j < i; ++j)
      if (std::uniform_int_distribution<int>(0, 2)(rng) == 0 || j == i - 1) op.input("op" + std::to_string(j));
    op.output({{Expr::constant(std::uniform_int_distribution<std::int64_t>(1, 3'000'000)(rng))}, DType::kI8})
        .features({Expr::constant(1)})
        .prior({std::uniform_int_distribution<int>(1, 4000)(rng) * 1e-6});
  }
  return std::move(b).build().value();
}

// Another arbiter's choices through select(): the global simulator cannot
// tell it is the default rule, so it calls select() instead of its inline
// copy of the rule.
class Forwarding final : public TransferArbiter {
 public:
  explicit Forwarding(std::unique_ptr<TransferArbiter> inner) : inner_(std::move(inner)) {}
  void select(std::span<const TransferIntent> pending, std::span<const std::uint8_t> src_busy,
              std::span<const std::uint8_t> dst_busy, std::vector<std::size_t>& out) override {
    inner_->select(pending, src_busy, dst_busy, out);
  }

 private:
  std::unique_ptr<TransferArbiter> inner_;
};

// Runs the cluster to completion, applying feedback to the GMG as an engine would.
std::vector<Feedback> run_all(EmulatedCluster& cluster, Gmg& gmg) {
  std::vector<Feedback> all, batch;
  for (Nanos t = cluster.next_event(); t >= 0; t = cluster.next_event()) {
    batch.clear();
    REQUIRE(cluster.advance_to(t, batch).ok());
    for (const Feedback& f : batch) {
      if (f.kind == Feedback::Kind::kOp)
        REQUIRE(gmg.complete(f.op, f.t, f.measured).ok());
      else
        REQUIRE(gmg.complete_transfer(f.src, f.op, f.t).ok());
    }
    all.insert(all.end(), batch.begin(), batch.end());
  }
  return all;
}

}  // namespace

TEST_CASE("emulated cluster: a chain with a transfer, exact times", "[emulated][golden]") {
  auto reg = std::make_shared<TemplateRegistry>();
  TemplateBuilder b("chain");
  b.op("x").output({{Expr::constant(2'000'000)}, DType::kI8}).features({Expr::constant(1)}).prior({0.001});
  b.op("y").input("x").output({{Expr::constant(1)}, DType::kI8}).features({Expr::constant(1)}).prior({0.003});
  TemplateId t = reg->add(std::move(b).build().value()).value();
  Gmg gmg(reg, cluster(2));
  auto inst = gmg.instantiate({t, {}, {}, 0, 0}).value();
  REQUIRE(gmg.issue(inst.ops[0], 0, 0).ok());
  REQUIRE(gmg.issue(inst.ops[1], 1, 0).ok());
  PriorTruth truth;
  plugins::GreedyArbiter arbiter;
  EmulatedCluster emu(2, truth, arbiter);
  REQUIRE(emu.submit(gmg, inst.ops[0]).ok());
  REQUIRE(emu.submit(gmg, inst.ops[1]).ok());
  CHECK(emu.submit(gmg, inst.ops[1]).message() == "emulated cluster: chain#1/y was already submitted");
  auto fb = run_all(emu, gmg);
  // x [0,1 ms] on a0; 2 MB move in 2 ms [1,3]; y [3,6] on a1.
  REQUIRE(fb.size() == 3);
  CHECK(fb[0].kind == Feedback::Kind::kOp);
  CHECK(fb[0].t == 1'000'000);
  CHECK(fb[1].kind == Feedback::Kind::kTransfer);
  CHECK(fb[1].t == 3'000'000);
  CHECK(fb[1].measured == 2'000'000);
  CHECK(fb[1].bytes == 2'000'000);
  CHECK(fb[2].t == 6'000'000);
  CHECK(fb[2].measured == 3'000'000);
  // Each interval's start comes with its completion.
  CHECK(fb[0].start == 0);
  CHECK(fb[1].start == 1'000'000);
  CHECK(fb[2].start == 3'000'000);
  CHECK(emu.idle());
}

// x (1 ms) on a0 -> 2 MB -> y (3 ms) on a1 -> 1 B -> z (2 ms) on a2.
struct LossChain {
  std::shared_ptr<TemplateRegistry> reg = std::make_shared<TemplateRegistry>();
  std::optional<Gmg> gmg;
  InstanceInfo inst;
  PriorTruth truth;
  plugins::GreedyArbiter arbiter;
  std::optional<EmulatedCluster> emu;
  LossChain() {
    TemplateBuilder b("chain");
    b.op("x").output({{Expr::constant(2'000'000)}, DType::kI8}).features({Expr::constant(1)}).prior({0.001});
    b.op("y").input("x").output({{Expr::constant(1)}, DType::kI8}).features({Expr::constant(1)}).prior({0.003});
    b.op("z").input("y").output({{Expr::constant(1)}, DType::kI8}).features({Expr::constant(1)}).prior({0.002});
    TemplateId t = reg->add(std::move(b).build().value()).value();
    gmg.emplace(reg, cluster(3));
    inst = gmg->instantiate({t, {}, {}, 0, 0}).value();
    emu.emplace(3, truth, arbiter);
  }
  void issue(std::size_t k, AccelId a) {
    REQUIRE(gmg->issue(inst.ops[k], a, emu->now()).ok());
    REQUIRE(emu->submit(*gmg, inst.ops[k]).ok());
  }
  std::vector<Feedback> advance(Nanos t) {
    std::vector<Feedback> out;
    REQUIRE(emu->advance_to(t, out).ok());
    apply(out);
    return out;
  }
  std::vector<Feedback> lose(AccelId a) {
    gmg->set_down(a, true);
    std::vector<Feedback> out;
    REQUIRE(emu->fail_accelerator(*gmg, a, out).ok());
    apply(out);
    return out;
  }
  void apply(const std::vector<Feedback>& out) {
    for (const Feedback& f : out) {
      if (f.kind == Feedback::Kind::kOp)
        REQUIRE(gmg->complete(f.op, f.t, f.measured).ok());
      else
        REQUIRE(gmg->complete_transfer(f.src, f.op, f.t).ok());
    }
  }
};

TEST_CASE("emulated cluster: a lost accelerator fails what runs there and what reads it, exact times",
          "[emulated][golden][faults]") {
  LossChain c;
  c.issue(0, 0);
  c.issue(1, 1);
  c.issue(2, 2);
  // x [0,1 ms]; x moves [1,3]; y runs from 3 ms on a1 ...
  auto before = c.advance(4'000'000);
  REQUIRE(before.size() == 2);
  CHECK(before[1].kind == Feedback::Kind::kTransfer);
  // ... until a1 is lost at 4 ms: y fails then (1 ms of it counts as busy),
  // and z, whose only input was y, fails at once without running.
  auto lost = c.lose(1);
  REQUIRE(lost.size() == 2);
  CHECK(lost[0].op == c.inst.ops[1]);
  CHECK((lost[0].failed && lost[0].lost));
  CHECK(lost[0].t == 4'000'000);
  CHECK(lost[0].measured == 1'000'000);
  CHECK(lost[1].op == c.inst.ops[2]);
  CHECK((lost[1].failed && lost[1].lost));
  CHECK(lost[1].t == 4'000'000);
  CHECK(lost[1].measured == 0);
  CHECK(lost[0].start == 3'000'000);  // y ran [3, 4 ms]: 1 ms of busy time
  CHECK(lost[1].start == -1);         // z never ran
  CHECK(c.emu->idle());
  CHECK(c.advance(10'000'000).empty());
  CHECK(c.emu->next_event() == -1);
  // Nothing more goes onto a lost accelerator, and it cannot be lost twice.
  std::vector<Feedback> out;
  CHECK_FALSE(c.emu->fail_accelerator(*c.gmg, 1, out).ok());
  CHECK(c.emu->restore_accelerator(1).ok());
  CHECK_FALSE(c.emu->restore_accelerator(1).ok());
}

TEST_CASE("emulated cluster: a transfer from a lost accelerator is cut and its ports freed",
          "[emulated][golden][faults]") {
  LossChain c;
  c.issue(0, 0);
  c.issue(1, 1);
  REQUIRE(c.advance(2'000'000).size() == 1);  // x done at 1 ms; x moves [1,3]
  auto lost = c.lose(0);                      // the source, mid-move
  REQUIRE(lost.size() == 1);
  CHECK(lost[0].op == c.inst.ops[1]);  // y, on a1, never gets its input
  CHECK((lost[0].lost && lost[0].t == 2'000'000 && lost[0].measured == 0));
  // The move's old finish event (3 ms) is void; a1 is free at once.
  CHECK(c.advance(5'000'000).empty());
  CHECK(c.emu->idle());
  c.issue(2, 1);  // z reads y, which failed as lost: z fails too, at once
  CHECK(c.emu->next_event() == 5'000'000);
  auto z = c.advance(5'000'000);
  REQUIRE(z.size() == 1);
  CHECK((z[0].op == c.inst.ops[2] && z[0].lost && z[0].measured == 0));
}

TEST_CASE("emulated cluster: data held by an accelerator stays lost after it is back", "[emulated][golden][faults]") {
  LossChain c;
  c.issue(0, 1);  // x on a1, done at 1 ms, its output held there
  REQUIRE(c.advance(2'000'000).size() == 1);
  CHECK(c.lose(1).empty());  // nothing ran or waited there
  CHECK(c.emu->restore_accelerator(1).ok());
  c.gmg->set_down(1, false);
  c.issue(1, 1);  // y reads x on a1 itself: x's output died with the loss
  auto y = c.advance(2'000'000);
  REQUIRE(y.size() == 1);
  CHECK((y[0].op == c.inst.ops[1] && y[0].lost && y[0].t == 2'000'000));
  CHECK(y[0].start == -1);  // it never ran
  c.issue(2, 1);            // and what reads y
  auto z = c.advance(3'000'000);
  REQUIRE(z.size() == 1);
  CHECK(z[0].start == -1);  // only x ever ran
}

TEST_CASE("emulated cluster agrees with the global simulator when truth equals the estimators",
          "[emulated][property]") {
  // Each rule twice: one instance for the cluster, one for the simulator.
  // A null simulator arbiter is the default rule, run inline.
  using Make = std::function<std::unique_ptr<TransferArbiter>()>;
  auto greedy = [](bool reserve) { return [reserve] { return std::make_unique<plugins::GreedyArbiter>(reserve); }; };
  struct Rule {
    const char* name;
    Make emulated, predicted;
  };
  const std::vector<Rule> rules = {
      {"greedy (default, inline in the simulator)", greedy(true), [] { return nullptr; }},
      {"greedy, its own instance (inline in the simulator)", greedy(true), greedy(true)},
      {"greedy through select() in the simulator", greedy(true),
       [] { return std::make_unique<Forwarding>(std::make_unique<plugins::GreedyArbiter>(true)); }},
      {"greedy, reserve_oldest = false", greedy(false), greedy(false)},
      {"serial", [] { return std::make_unique<plugins::SerialArbiter>(); },
       [] { return std::make_unique<plugins::SerialArbiter>(); }},
  };
  // Trials in which a rule's timeline differs from the default's: each rule
  // must make a difference somewhere, or the test would not tell them apart.
  std::vector<int> differs(rules.size(), 0);
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    INFO("trial " << trial);
    const int n_acc = std::uniform_int_distribution<int>(1, 4)(rng);
    auto reg = std::make_shared<TemplateRegistry>();
    TemplateId t = reg->add(random_dag(rng, "g")).value();
    Gmg base(reg, cluster(n_acc));
    std::vector<OpId> ops;
    for (int k = std::uniform_int_distribution<int>(1, 5)(rng); k > 0; --k) {
      auto inst = base.instantiate({t, {}, {}, std::uniform_int_distribution<int>(0, 2)(rng), 0}).value();
      for (OpId op : inst.ops) {
        REQUIRE(base.issue(op, std::uniform_int_distribution<AccelId>(0, n_acc - 1)(rng), 0).ok());
        ops.push_back(op);
      }
    }
    std::vector<Nanos> default_finish;
    for (std::size_t k = 0; k < rules.size(); ++k) {
      INFO("rule: " << rules[k].name);
      Gmg gmg = base.clone();
      auto sim_arbiter = rules[k].predicted();
      auto predicted = simulate(gmg, estimators(*reg), {.record_transfers = true, .arbiter = sim_arbiter.get()});
      PriorTruth truth;
      auto arbiter = rules[k].emulated();
      EmulatedCluster emu(n_acc, truth, *arbiter);
      for (OpId op : ops) REQUIRE(emu.submit(gmg, op).ok());
      auto fb = run_all(emu, gmg);
      std::size_t done = 0, moved = 0;
      std::vector<Nanos> finish;
      for (const Feedback& f : fb) {
        if (f.kind == Feedback::Kind::kOp) {
          ++done;
          REQUIRE(f.t == predicted.finish_of(f.op));
          REQUIRE(f.t - f.measured == predicted.start_of(f.op));
          finish.push_back(f.t);
          continue;
        }
        ++moved;
        auto it = std::find_if(predicted.transfers.begin(), predicted.transfers.end(),
                               [&](const TransferRecord& r) { return r.src == f.src && r.dst == f.op; });
        REQUIRE(it != predicted.transfers.end());
        REQUIRE(it->start == f.t - f.measured);
        REQUIRE(it->finish == f.t);
      }
      REQUIRE(done == ops.size());
      REQUIRE(moved == predicted.transfers.size());
      if (k == 0) default_finish = finish;
      differs[k] += finish != default_finish;
    }
  }
  CHECK(differs[1] == 0);  // the same rule
  CHECK(differs[2] == 0);
  CHECK(differs[3] > 0);  // no reservation: sometimes another timeline
  CHECK(differs[4] > 0);  // one transfer at a time: often another timeline
}

TEST_CASE("a transfer from a done producer starts when its consumer is issued, in both", "[emulated][golden]") {
  // x on a0 is done at 1 ms; y on a1, which reads x's 2 MB, is issued only
  // at 5 ms. The copy starts at 5 (not at 1: nobody asked for it before),
  // lands at 7, and y runs [7,10].
  auto reg = std::make_shared<TemplateRegistry>();
  TemplateBuilder b("late");
  b.op("x").output({{Expr::constant(2'000'000)}, DType::kI8}).features({Expr::constant(1)}).prior({0.001});
  b.op("y").input("x").output({{Expr::constant(1)}, DType::kI8}).features({Expr::constant(1)}).prior({0.003});
  TemplateId t = reg->add(std::move(b).build().value()).value();
  Gmg gmg(reg, cluster(2));
  auto inst = gmg.instantiate({t, {}, {}, 0, 0}).value();
  const OpId x = inst.ops[0], y = inst.ops[1];
  PriorTruth truth;
  plugins::GreedyArbiter arbiter;
  EmulatedCluster emu(2, truth, arbiter);
  REQUIRE(gmg.issue(x, 0, 0).ok());
  REQUIRE(emu.submit(gmg, x).ok());
  run_all(emu, gmg);
  std::vector<Feedback> none;
  REQUIRE(emu.advance_to(5'000'000, none).ok());
  gmg.advance_clock(5'000'000);
  REQUIRE(gmg.issue(y, 1, 5'000'000).ok());
  auto predicted = simulate(gmg, estimators(*reg), {.record_transfers = true});
  REQUIRE(predicted.transfers.size() == 1);
  CHECK(predicted.transfers[0].start == 5'000'000);
  CHECK(predicted.transfers[0].finish == 7'000'000);
  CHECK(predicted.start_of(y) == 7'000'000);
  CHECK(predicted.finish_of(y) == 10'000'000);
  REQUIRE(emu.submit(gmg, y).ok());
  auto fb = run_all(emu, gmg);
  REQUIRE(fb.size() == 2);
  CHECK(fb[0].kind == Feedback::Kind::kTransfer);
  CHECK(fb[0].t - fb[0].measured == 5'000'000);
  CHECK(fb[1].t == predicted.finish_of(y));
}

TEST_CASE("emulated cluster refuses misuse", "[emulated][bad-input]") {
  auto reg = std::make_shared<TemplateRegistry>();
  TemplateId t = reg->add(unit_op("unit", 0.001, 1)).value();
  Gmg gmg(reg, cluster(2));
  OpId op = gmg.instantiate({t, {}, {}, 0, 0}).value().ops[0];
  PriorTruth truth;
  plugins::GreedyArbiter arbiter;
  EmulatedCluster emu(1, truth, arbiter);
  CHECK(emu.submit(gmg, op).message() == "emulated cluster: unit#1/op is not issued");
  REQUIRE(gmg.issue(op, 1, 0).ok());
  CHECK(emu.submit(gmg, op).message() ==
        "emulated cluster: unit#1/op is on accelerator 1, which the cluster does not have");
  std::vector<Feedback> out;
  REQUIRE(emu.advance_to(10, out).ok());
  CHECK(emu.advance_to(5, out).message() == "emulated cluster: cannot go back from 10 ns to 5 ns");
}

TEST_CASE("profile ground truth times the Llama template from the measured tables", "[emulated]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(SLICESCHED_SOURCE_DIR) / "data" / "profiles";
  auto layers = LayerProfile::load(dir / "llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv");
  auto links = TransferProfile::load(dir / "vidur_network_h100_dgx_send_recv.csv");
  REQUIRE(layers.ok());
  REQUIRE(links.ok());
  auto reg = std::make_shared<TemplateRegistry>();
  TemplateId t = reg->add(testing::dense_template()).value();
  auto accels = cluster(2);
  Gmg gmg(reg, accels);
  REQUIRE(gmg.place_weights(t, 0).ok());
  REQUIRE(gmg.place_weights(t, 1).ok());
  auto inst = gmg.instantiate({t, {{"tokens", 128}, {"sequences", 4}, {"context", 0}}, {}, 0, 0}).value();
  for (std::size_t i = 0; i < inst.ops.size(); ++i) REQUIRE(gmg.issue(inst.ops[i], i < 3 ? 0 : 1, 0).ok());
  ProfileGroundTruth truth(layers.value(), links.value(), /*seed=*/1, /*op_cv=*/0.0, /*transfer_cv=*/0.0);
  plugins::GreedyArbiter arbiter;
  EmulatedCluster emu(2, truth, arbiter);
  for (OpId op : inst.ops) REQUIRE(emu.submit(gmg, op).ok());
  auto fb = run_all(emu, gmg);
  auto ns = [](double s) { return static_cast<Nanos>(s * 1e9 + 0.5); };
  std::vector<Nanos> measured_ops;
  Nanos transfer = -1;
  for (const auto& f : fb)
    if (f.kind == Feedback::Kind::kOp)
      measured_ops.push_back(f.measured);
    else
      transfer = f.measured;
  REQUIRE(measured_ops.size() == 6);
  CHECK(measured_ops[0] == ns(layers->embed_seconds(128)));
  CHECK(measured_ops[1] == ns(layers->group_seconds(128, 0)));
  // Four prompts of 32 tokens: the head computes logits for each one's
  // last token only, four positions of the table's head, not 128.
  CHECK(measured_ops[5] == ns(layers->head_seconds(4)));
  CHECK(layers->head_seconds(4) < layers->head_seconds(128));
  // layers1 -> layers2 crosses a0 -> a1: 128 x 4096 bf16 activations.
  CHECK(transfer == ns(links->seconds(128 * 4096 * 2)));
}

TEST_CASE("calibration profiles round-trip and drive a calibrated ground truth", "[emulated][calibration]") {
  auto reg = std::make_shared<TemplateRegistry>();
  TemplateBuilder b("mm");
  b.op("x").output({{Expr::constant(8)}, DType::kI8}).features({b.dim("n"), Expr::constant(1)}).prior({1e-6, 1e-3});
  TemplateId t = reg->add(std::move(b).build().value()).value();
  auto accels = cluster(2);
  EstimatorSet est;
  REQUIRE(seed_priors(est, *reg, *accels).ok());
  const OpKindId kind = reg->get(t).ops()[0].kind;
  for (int n = 1; n <= 50; ++n) {
    const double x[2] = {static_cast<double>(n), 1.0};
    REQUIRE(est.observe_op(kind, 0, x, 2e-6 * n + 5e-4).ok());
    REQUIRE(est.observe_transfer(0, 1, static_cast<std::uint64_t>(n) * 1000, 1e-9 * n * 1000 + 2e-6).ok());
  }
  auto profile = snapshot(est, *reg, *accels, "test");
  const auto path = (std::filesystem::temp_directory_path() / "slicesched_calibration_test.json").string();
  REQUIRE(write_calibration(profile, path).ok());
  auto back = read_calibration(path);
  REQUIRE(back.ok());
  const auto* op = back->find_op("mm", "x", "gpu");
  REQUIRE(op);
  CHECK(op->coefficients[0] == Approx(2e-6).epsilon(1e-6));
  CHECK(op->coefficients[1] == Approx(5e-4).epsilon(1e-6));
  CHECK(op->samples == 50);
  CHECK(op->features == std::vector<std::string>{"n", "1"});
  CHECK(op->feature_max == std::vector<double>{50, 1});  // the largest n it was measured at
  const auto* link = back->find_transfer("a0", "a1");
  REQUIRE(link);
  CHECK(link->sec_per_byte == Approx(1e-9).epsilon(1e-6));
  REQUIRE(back->find_transfer("*", "*"));  // stands in for pairs that moved nothing

  Gmg gmg(reg, accels);
  OpId x = gmg.instantiate({t, {{"n", 100}}, {}, 0, 0}).value().ops[0];
  REQUIRE(gmg.issue(x, 1, 0).ok());
  CalibratedGroundTruth truth(back.value(), *accels, 1, 0.0, 0.0);
  REQUIRE(truth.check_transfers().ok());
  CHECK(truth.op_seconds(gmg, x).value() == Approx(2e-6 * 100 + 5e-4).epsilon(1e-6));
  CHECK(truth.transfer_seconds(1, 0, 1000) == Approx(1e-6 + 2e-6).epsilon(1e-3));  // via "*" -> "*"

  std::ofstream(path) << R"({"format": "other"})";
  CHECK(read_calibration(path).status().message() == path + ": expected \"format\": \"slicesched-calibration/2\"");
  std::filesystem::remove(path);
}

TEST_CASE("a calibrated fit past the sizes it was measured at never makes a larger operator faster",
          "[emulated][calibration]") {
  // An outside probe: calibrate fitted llama-tiny's layers on prompts of up
  // to 64 tokens with a negative tokens x context coefficient, and simulate
  // played 8,000-token prompts at 0.1 ms. Past feature_max such a term
  // holds its value there; within it, the fit is played as it is.
  auto reg = std::make_shared<TemplateRegistry>();
  TemplateBuilder b("mm");
  b.op("x")
      .output({{Expr::constant(8)}, DType::kI8})
      .features({b.dim("n"), b.dim("n") * b.dim("n"), Expr::constant(1)})
      .prior({1e-6, 1e-9, 1e-3});
  const TemplateId t = reg->add(std::move(b).build().value()).value();
  auto accels = cluster(1);
  CalibrationProfile profile;
  profile.ops.push_back({"mm", "x", "gpu", {"n", "n*n", "1"}, {1e-6, -1e-9, 1e-5}, 10, 1.0, {64, 4096, 1}});
  CalibratedGroundTruth truth(profile, *accels, 1, 0.0, 0.0);
  Gmg gmg(reg, accels);
  auto seconds = [&](std::int64_t n) {
    const OpId x = gmg.instantiate({t, {{"n", n}}, {}, 0, 0}).value().ops[0];
    REQUIRE(gmg.issue(x, 0, 0).ok());
    return truth.op_seconds(gmg, x).value();
  };
  CHECK(seconds(32) == Approx(1e-6 * 32 - 1e-9 * 32 * 32 + 1e-5).epsilon(1e-12));  // within: as fitted
  double before = seconds(64);
  for (std::int64_t n : {128, 1000, 2000, 8000, 100000}) {
    const double now = seconds(n);
    CHECK(now == Approx(1e-6 * static_cast<double>(n) - 1e-9 * 4096 + 1e-5).epsilon(1e-12));
    CHECK(now > before);
    before = now;
  }
  // A profile without feature_max (written before it was recorded) is
  // played as it is.
  profile.ops[0].feature_max.clear();
  CalibratedGroundTruth old(profile, *accels, 1, 0.0, 0.0);
  const OpId x = gmg.instantiate({t, {{"n", 1000}}, {}, 0, 0}).value().ops[0];
  REQUIRE(gmg.issue(x, 0, 0).ok());
  CHECK(old.op_seconds(gmg, x).value() == Approx(1e-6 * 1000 - 1e-9 * 1e6 + 1e-5).epsilon(1e-12));
}

TEST_CASE("a profile of a run that moved nothing stands in its links' prior for every pair",
          "[emulated][calibration]") {
  // (simulate --out on a cluster whose policy never moved a tensor: the
  // profile could not be played as ground truth on that same cluster)
  auto reg = std::make_shared<TemplateRegistry>();
  TemplateBuilder b("mm");
  b.op("x").output({{Expr::constant(8)}, DType::kI8}).features({b.dim("n"), Expr::constant(1)}).prior({1e-6, 1e-3});
  REQUIRE(reg->add(std::move(b).build().value()).ok());
  auto accels = cluster(3);
  EstimatorSet est;
  REQUIRE(seed_priors(est, *reg, *accels).ok());
  const CalibrationProfile profile = snapshot(est, *reg, *accels, "test");
  REQUIRE(profile.transfers.size() == 1);
  const auto* any = profile.find_transfer("*", "*");
  REQUIRE(any);
  CHECK(any->samples == 0);  // the prior, not a measurement
  CHECK(any->sec_per_byte == Approx(est.predict_transfer(0, 1, 1 << 20) / (1 << 20)).epsilon(1e-9));
  CalibratedGroundTruth truth(profile, *accels, 1, 0.0, 0.0);
  CHECK(truth.check_transfers().ok());
  CHECK(truth.transfer_seconds(2, 1, 4096) == Approx(est.predict_transfer(2, 1, 4096)).epsilon(1e-6));
  // One accelerator has no pair: nothing stands in.
  auto one = cluster(1);
  EstimatorSet alone;
  REQUIRE(seed_priors(alone, *reg, *one).ok());
  CHECK(snapshot(alone, *reg, *one, "test").transfers.empty());
}

TEST_CASE("calibration profiles say which features their fits multiply", "[emulated][calibration]") {
  const auto path = (std::filesystem::temp_directory_path() / "slicesched_calibration_features.json").string();
  auto read = [&](const std::string& text) {
    std::ofstream(path) << text;
    return read_calibration(path);
  };
  // A /1 profile (no feature names; the head's feature was tokens then).
  auto old = read(R"({"format": "slicesched-calibration/1", "ops": [], "transfers": []})");
  REQUIRE(!old.ok());
  CHECK(old.status().message() == path +
                                      ": a slicesched-calibration/1 profile, fitted before the LM head's features "
                                      "became {sequences, 1} (its fits do not say which features they multiply); "
                                      "write it again with slicesched calibrate or simulate --out");
  auto unnamed = read(R"({"format": "slicesched-calibration/2", "transfers": [],
    "ops": [{"template": "llama3-8b", "op": "head", "type": "gpu", "coefficients": [1e-6, 1e-4]}]})");
  REQUIRE(!unnamed.ok());
  CHECK(unnamed.status().message() == path + ": ops[0].features: expected one name per coefficient (2)");
  auto bad_max = read(R"({"format": "slicesched-calibration/2", "transfers": [],
    "ops": [{"template": "llama3-8b", "op": "head", "type": "gpu", "features": ["sequences", "1"],
             "coefficients": [1e-6, 1e-4], "feature_max": [-3, 1]}]})");
  REQUIRE(!bad_max.ok());
  CHECK(bad_max.status().message() == path + ": ops[0].feature_max: expected finite numbers >= 0");
  auto short_max = read(R"({"format": "slicesched-calibration/2", "transfers": [],
    "ops": [{"template": "llama3-8b", "op": "head", "type": "gpu", "features": ["sequences", "1"],
             "coefficients": [1e-6, 1e-4], "feature_max": [3]}]})");
  REQUIRE(!short_max.ok());
  CHECK(short_max.status().message() == path + ": ops[0].feature_max: expected one number per coefficient (2)");
  auto short_names = read(R"({"format": "slicesched-calibration/2", "transfers": [],
    "ops": [{"template": "llama3-8b", "op": "head", "type": "gpu", "features": ["sequences"],
             "coefficients": [1e-6, 1e-4]}]})");
  REQUIRE(!short_names.ok());
  CHECK(short_names.status().message() == path + ": ops[0].features: expected one name per coefficient (2)");
  // Found by tests/fuzz/calibration_fuzz: a number beyond a double, and a
  // format that is not a string, are errors, not exceptions.
  auto huge = read(R"({"source": 3e999, "format": "slicesched-calibration/2", "ops": [], "transfers": []})");
  REQUIRE(!huge.ok());
  CHECK(huge.status().message().starts_with(path + ": not JSON ("));
  auto numeric = read(R"({"format": 3, "ops": [], "transfers": []})");
  REQUIRE(!numeric.ok());
  CHECK(numeric.status().message() == path + ": expected \"format\": \"slicesched-calibration/2\"");

  // A head fitted to tokens is refused as a prior for the template whose
  // head follows the sequences; one fitted to sequences is taken.
  auto reg = std::make_shared<TemplateRegistry>();
  const TemplateId t = reg->add(testing::dense_template()).value();
  auto accels = cluster(1);
  auto stale = read(R"({"format": "slicesched-calibration/2", "transfers": [],
    "ops": [{"template": "llama3-8b", "op": "head", "type": "gpu", "features": ["tokens", "1"],
             "coefficients": [1e-6, 1e-4]}]})");
  REQUIRE(stale.ok());
  EstimatorSet est;
  REQUIRE(seed_priors(est, *reg, *accels).ok());
  const std::string why =
      "ops[0] (llama3-8b/head on gpu) was fitted to features {tokens, 1}, the template's are {sequences, 1}; "
      "measure it again";
  CHECK(check_features(stale.value(), *reg).message() == why);
  CHECK(apply_as_prior(stale.value(), est, *reg, *accels).message() == why);

  auto fresh = read(R"({"format": "slicesched-calibration/2", "transfers": [],
    "ops": [{"template": "llama3-8b", "op": "head", "type": "gpu", "features": ["sequences", "1"],
             "coefficients": [1e-6, 1e-4]}]})");
  REQUIRE(fresh.ok());
  REQUIRE(apply_as_prior(fresh.value(), est, *reg, *accels).ok());
  const TemplateOp& head = reg->get(t).ops().back();
  const double x[2] = {4, 1};
  CHECK(est.predict_op(head.kind, 0, x) == Approx(4e-6 + 1e-4));
  std::filesystem::remove(path);
}

TEST_CASE("emulated cluster: an operator that does not fit waits until memory is released", "[emulated][memory]") {
  auto reg = std::make_shared<TemplateRegistry>();
  TemplateBuilder b("one");
  b.op("p").output({{Expr::constant(600)}, DType::kI8}).features({Expr::constant(1)}).prior({0.001});
  TemplateId t = reg->add(std::move(b).build().value()).value();
  Gmg gmg(reg, cluster(1));
  auto first = gmg.instantiate({t, {}, {}, 0, 0}).value();
  auto second = gmg.instantiate({t, {}, {}, 0, 0}).value();
  REQUIRE(gmg.issue(first.ops[0], 0, 0).ok());
  REQUIRE(gmg.issue(second.ops[0], 0, 0).ok());
  PriorTruth truth;
  plugins::GreedyArbiter arbiter;
  EmulatedCluster emu(1, truth, arbiter);
  const std::vector<std::int64_t> resident{100};
  CHECK(emu.set_memory({50}, resident).code() == StatusCode::kResourceExhausted);  // weights over budget
  REQUIRE(emu.set_memory({1000}, resident).ok());
  REQUIRE(emu.submit(gmg, first.ops[0]).ok());
  REQUIRE(emu.submit(gmg, second.ops[0]).ok());
  std::vector<Feedback> fb;
  REQUIRE(emu.advance_to(emu.next_event(), fb).ok());
  REQUIRE(emu.next_event() == 1'000'000);
  REQUIRE(emu.advance_to(1'000'000, fb).ok());
  REQUIRE(fb.size() == 1);
  CHECK(fb[0].op == first.ops[0]);
  // 100 of weights + 600 held by the first output: the second (600) waits,
  // and nothing else can happen until the output is released.
  CHECK(emu.memory_stats().waits == 1);
  CHECK(emu.next_event() == -1);
  CHECK(emu.stall_reason().find("out of memory in the emulated cluster") != std::string::npos);
  REQUIRE(gmg.complete(fb[0].op, fb[0].t, fb[0].measured).ok());
  emu.release(gmg.releases());  // (it has no reader: its output goes at once)
  gmg.clear_releases();
  REQUIRE(emu.next_event() == 1'000'000);
  fb.clear();
  REQUIRE(emu.advance_to(2'000'000, fb).ok());
  REQUIRE(fb.size() == 1);
  CHECK(fb[0].op == second.ops[0]);
  CHECK(fb[0].start == 1'000'000);
  const MemoryStats m = emu.memory_stats();
  CHECK(m.budget == std::vector<std::int64_t>{1000});
  CHECK(m.peak == std::vector<std::int64_t>{700});  // never both outputs at once
  CHECK(m.waits == 1);
}
