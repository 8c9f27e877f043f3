// Differential test: the global simulator against its reference
// implementation (reference_simulator.cppm, the oracle). Every output must
// agree exactly over random snapshots: mid-run GMGs with done producers,
// landed and pending transfers, retained state, priorities, issue times
// after the inputs were done, zero-time operators, small HBM (OOM, with and
// without stop), horizons, and a reused simulator.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

import slicesched.simulator.bench_cluster;
import slicesched.simulator.global_simulator;
import slicesched.testing;
import slicesched.testing.reference_simulator;
import slicesched.core.accel;
import slicesched.core.estimator;
import slicesched.core.gmg;
import slicesched.core.graph;
import slicesched.core.ids;
import slicesched.core.priors;
import slicesched.core.shape;

using namespace slicesched;
using namespace slicesched::testing;

namespace {

// ---- random snapshots ----

// A random DAG template; op 0 may read a retained state ("kv"), one op
// retains one. Durations are whole microseconds, or zero.
GraphTemplate random_template(std::mt19937_64& rng, const std::string& name, std::int64_t kv_bytes) {
  TemplateBuilder b(name);
  b.port("kv", {{Expr::constant(kv_bytes)}, DType::kI8}, /*optional=*/true);
  const int n = std::uniform_int_distribution<int>(1, 8)(rng);
  const int retainer = std::uniform_int_distribution<int>(0, n - 1)(rng);
  for (int i = 0; i < n; ++i) {
    auto op = b.op("op" + std::to_string(i));
    if (i == 0) op.input("kv");
    for (int j = 0; j < i; ++j)
      if (std::uniform_int_distribution<int>(0, 2)(rng) == 0 || j == i - 1) op.input("op" + std::to_string(j));
    const std::int64_t out = std::uniform_int_distribution<std::int64_t>(1, 3'000'000)(rng);
    // Few distinct durations, so ties (simultaneous events) are common.
    const int pick = std::uniform_int_distribution<int>(0, 9)(rng);
    const double seconds = pick == 0 ? 0.0 : pick * 250e-6;
    op.output({{Expr::constant(out)}, DType::kI8})
        .workspace(Expr::constant(std::uniform_int_distribution<std::int64_t>(0, 100'000)(rng)))
        .features({Expr::constant(1)})
        .prior({seconds})
        .weights(std::uniform_int_distribution<std::int64_t>(0, 1 << 16)(rng));
    if (i == retainer) op.retain("kv", {{Expr::constant(kv_bytes)}, DType::kI8});
  }
  return std::move(b).build().value();
}

void require_same(const SimulationResult& want, const SimulationResult& got) {
  REQUIRE(got.ops == want.ops);
  REQUIRE(got.start == want.start);
  REQUIRE(got.finish == want.finish);
  REQUIRE(got.index_of == want.index_of);
  REQUIRE(got.busy == want.busy);
  REQUIRE(got.hbm_start == want.hbm_start);
  REQUIRE(got.hbm_peak == want.hbm_peak);
  REQUIRE(got.hbm_end == want.hbm_end);
  REQUIRE(got.finished == want.finished);
  REQUIRE(got.begin == want.begin);
  REQUIRE(got.end == want.end);
  REQUIRE(got.oom.has_value() == want.oom.has_value());
  if (want.oom) {
    REQUIRE(got.oom->t == want.oom->t);
    REQUIRE(got.oom->accel == want.oom->accel);
    REQUIRE(got.oom->op == want.oom->op);
    REQUIRE(got.oom->at_transfer == want.oom->at_transfer);
    REQUIRE(got.oom->needed == want.oom->needed);
    REQUIRE(got.oom->capacity == want.oom->capacity);
  }
  REQUIRE(got.transfers.size() == want.transfers.size());
  for (std::size_t k = 0; k < want.transfers.size(); ++k) {
    INFO("transfer " << k);
    const TransferRecord &a = want.transfers[k], &b = got.transfers[k];
    REQUIRE(b.src == a.src);
    REQUIRE(b.dst == a.dst);
    REQUIRE(b.from == a.from);
    REQUIRE(b.to == a.to);
    REQUIRE(b.bytes == a.bytes);
    REQUIRE(b.start == a.start);
    REQUIRE(b.finish == a.finish);
  }
  // Timelines are compared only for the accelerators the result has.
  for (std::size_t a = 0; a < want.busy.size(); ++a) {
    INFO("hbm timeline of accelerator " << a);
    REQUIRE(got.hbm_timeline[a].size() == want.hbm_timeline[a].size());
    for (std::size_t k = 0; k < want.hbm_timeline[a].size(); ++k) {
      REQUIRE(got.hbm_timeline[a][k].t == want.hbm_timeline[a][k].t);
      REQUIRE(got.hbm_timeline[a][k].bytes == want.hbm_timeline[a][k].bytes);
    }
  }
}

}  // namespace

TEST_CASE("the global simulator agrees exactly with its reference implementation", "[simulator][differential]") {
  std::mt19937_64 rng(20261123);
  GlobalSimulator reused;  // scratch buffers carried across very different snapshots
  int compared_ops = 0, with_oom = 0, with_ghosts = 0, tentative_trials = 0, scoped_trials = 0, dominated_trials = 0,
      focused_trials = 0;
  for (int trial = 0; trial < 600; ++trial) {
    INFO("trial " << trial);
    const int n_acc = std::uniform_int_distribution<int>(1, 5)(rng);
    const std::int64_t kv_bytes = std::uniform_int_distribution<std::int64_t>(1, 2'000'000)(rng);
    const bool small_hbm = std::uniform_int_distribution<int>(0, 3)(rng) == 0;
    const std::int64_t hbm =
        small_hbm ? std::uniform_int_distribution<std::int64_t>(2'000'000, 30'000'000)(rng) : 64 * kGiB;
    auto reg = std::make_shared<TemplateRegistry>();
    TemplateId ta = reg->add(random_template(rng, "a", kv_bytes)).value();
    TemplateId tb = reg->add(random_template(rng, "b", kv_bytes)).value();
    Gmg gmg(reg, cluster(n_acc, hbm));
    for (AccelId acc = 0; acc < static_cast<AccelId>(n_acc); ++acc) {
      REQUIRE(gmg.place_weights(ta, acc).ok());
      REQUIRE(gmg.place_weights(tb, acc).ok());
    }
    EstimatorSet est = estimators(*reg, std::uniform_int_distribution<int>(0, 1)(rng) ? 1e-9 : 1e-10);
    std::uniform_int_distribution<int> pick_acc(0, n_acc - 1);
    Nanos clock = 0;

    // Issues a few instances (decode-like chains through "kv"); the last
    // one may be issued only in part, so some outputs must be kept.
    OpId retainer = kNoOp;
    auto issue_some = [&](int count) {
      for (int k = 0; k < count; ++k) {
        TemplateId t = std::uniform_int_distribution<int>(0, 1)(rng) ? ta : tb;
        InstanceSpec spec{t, {}, {}, std::uniform_int_distribution<int>(0, 3)(rng), 0};
        if (retainer != kNoOp && gmg.contains(retainer) && !gmg.op(retainer).retained_attached &&
            (gmg.op(retainer).state != OpState::kDone || gmg.op(retainer).retained_held) &&
            std::uniform_int_distribution<int>(0, 2)(rng))
          spec.ports.push_back({"kv", retainer, true});
        auto inst = gmg.instantiate(spec);
        REQUIRE(inst.ok());
        const bool partial = k == count - 1 && std::uniform_int_distribution<int>(0, 3)(rng) == 0;
        const std::size_t n_issue =
            partial ? std::uniform_int_distribution<std::size_t>(0, inst->ops.size())(rng) : inst->ops.size();
        for (std::size_t i = 0; i < n_issue; ++i) {
          REQUIRE(gmg.issue(inst->ops[i], static_cast<AccelId>(pick_acc(rng)), clock).ok());
          if (std::uniform_int_distribution<int>(0, 3)(rng) == 0)
            clock += std::uniform_int_distribution<Nanos>(0, 3)(rng) * 250'000;
        }
        for (OpId op : inst->ops)
          if (gmg.op(op).retained_bytes > 0 && gmg.op(op).state != OpState::kUnscheduled) retainer = op;
      }
    };
    issue_some(std::uniform_int_distribution<int>(1, 4)(rng));

    // Sometimes replay part of the predicted timeline into the GMG (done
    // ops, landed transfers, a later clock) and issue more on top of it.
    if (std::uniform_int_distribution<int>(0, 1)(rng)) {
      auto full = reference_simulate(gmg, est, {.stop_at_oom = false, .record_transfers = true});
      if (full.end > 0) {
        const Nanos cut = std::uniform_int_distribution<Nanos>(0, full.end)(rng);
        std::vector<std::size_t> order;
        for (std::size_t i = 0; i < full.ops.size(); ++i)
          if (full.finish[i] >= 0 && full.finish[i] <= cut) order.push_back(i);
        std::sort(order.begin(), order.end(), [&](auto x, auto y) { return full.finish[x] < full.finish[y]; });
        for (std::size_t i : order)
          REQUIRE(gmg.complete(full.ops[i], full.finish[i], full.finish[i] - full.start[i]).ok());
        for (const auto& x : full.transfers)
          if (x.finish <= cut && gmg.op(x.src).state == OpState::kDone && std::uniform_int_distribution<int>(0, 3)(rng))
            REQUIRE(gmg.complete_transfer(x.src, x.dst, x.finish).ok());
        gmg.advance_clock(cut);
        clock = gmg.now();
        if (std::uniform_int_distribution<int>(0, 2)(rng)) gmg.retire();
        issue_some(std::uniform_int_distribution<int>(0, 3)(rng));
      }
    }
    if (gmg.issued_count() == 0) continue;

    SimOptions opt;
    opt.stop_at_oom = std::uniform_int_distribution<int>(0, 1)(rng);
    opt.record_hbm_timeline = std::uniform_int_distribution<int>(0, 1)(rng);
    opt.record_transfers = std::uniform_int_distribution<int>(0, 1)(rng);
    if (std::uniform_int_distribution<int>(0, 3)(rng) == 0)
      opt.horizon = std::uniform_int_distribution<Nanos>(0, 8)(rng) * 250'000;

    const SimulationResult want = reference_simulate(gmg, est, opt);
    with_oom += want.oom.has_value();
    for (std::size_t i = 0; i < gmg.slot_count(); ++i)
      with_ghosts += gmg.contains(static_cast<OpId>(i)) && gmg.op(static_cast<OpId>(i)).state == OpState::kDone;
    {
      INFO("a fresh simulator");
      require_same(want, simulate(gmg, est, opt));
    }
    {
      INFO("the reused simulator");
      require_same(want, reused.run(gmg, est, opt));
    }
    compared_ops += static_cast<int>(want.ops.size());

    // A tentative batch (the scheduler's what-if) gives exactly what a
    // clone with the batch issued gives.
    std::vector<OpId> batch;
    std::vector<AccelId> where;
    if (std::uniform_int_distribution<int>(0, 2)(rng)) {  // work that is not yet issued at all
      InstanceSpec spec{std::uniform_int_distribution<int>(0, 1)(rng) ? ta : tb,
                        {},
                        {},
                        std::uniform_int_distribution<int>(0, 3)(rng),
                        0};
      REQUIRE(gmg.instantiate(spec).ok());
    }
    for (bool grew = true; grew && batch.size() < 6;) {
      grew = false;
      for (OpId id = 0; id < gmg.slot_count() && batch.size() < 6; ++id) {
        if (!gmg.contains(id) || gmg.op(id).state != OpState::kUnscheduled) continue;
        if (std::find(batch.begin(), batch.end(), id) != batch.end()) continue;
        bool ready = true;
        for (std::uint32_t e = gmg.op(id).first_in; e != kNoEdge && ready; e = gmg.edge(e).next_in) {
          const OpId p = gmg.edge(e).src;
          ready = gmg.op(p).state != OpState::kUnscheduled || std::find(batch.begin(), batch.end(), p) != batch.end();
        }
        if (!ready || std::uniform_int_distribution<int>(0, 2)(rng) == 0) continue;
        batch.push_back(id);
        where.push_back(static_cast<AccelId>(pick_acc(rng)));
        grew = true;
      }
    }
    if (batch.empty()) continue;
    ++tentative_trials;
    REQUIRE(gmg.check_issue(batch, where).ok());
    const Nanos at = gmg.now() + std::uniform_int_distribution<int>(0, 1)(rng) * 250'000;
    Gmg copy = gmg.clone();
    for (std::size_t k = 0; k < batch.size(); ++k) REQUIRE(copy.issue(batch[k], where[k], at).ok());
    const SimulationResult with_clone = simulate(copy, est, opt);
    SimOptions overlay = opt;
    overlay.tentative = {.ops = batch, .accels = where, .at = at};
    {
      INFO("a tentative batch of " << batch.size());
      require_same(with_clone, reused.run(gmg, est, overlay));
      // and the snapshot itself is untouched, marks and all
      require_same(simulate(gmg, est, opt), reused.run(gmg, est, opt));
    }
    // Prepared once, placed many times (the scheduler's round): each
    // placement gives what a clone with that placement issued gives.
    {
      GlobalSimulator round;
      round.prepare(gmg, est, batch, at);
      for (int p = 0; p < 3; ++p) {
        std::vector<AccelId> there;
        for (std::size_t k = 0; k < batch.size(); ++k) there.push_back(static_cast<AccelId>(pick_acc(rng)));
        Gmg placed = gmg.clone();
        for (std::size_t k = 0; k < batch.size(); ++k) REQUIRE(placed.issue(batch[k], there[k], at).ok());
        INFO("placement " << p);
        const SimulationResult want_placed = simulate(placed, est, opt);
        require_same(want_placed, round.place(there, opt));
        // Given a bound on the batch's summed completion, a placement that
        // beats or ties it runs to the end exactly as without; one that
        // is stopped as dominated really is worse.
        if (!want_placed.feasible() || opt.horizon >= 0) continue;
        Nanos sum = 0;
        for (OpId op : batch) sum += want_placed.finish_of(op) - at;
        for (const Nanos slack : {Nanos{0}, Nanos{1}, std::uniform_int_distribution<Nanos>(2, 1'000'000)(rng)}) {
          SimOptions bounded = opt;
          bounded.dominated_above = sum + slack;
          const SimulationResult& kept = round.place(there, bounded);
          REQUIRE_FALSE(kept.dominated);
          require_same(want_placed, kept);
          bounded.dominated_above = std::max<Nanos>(0, sum - 1 - slack);
          if (bounded.dominated_above >= sum) continue;
          const SimulationResult& cut = round.place(there, bounded);
          if (cut.dominated)
            ++dominated_trials;
          else
            require_same(want_placed, cut);  // (it ran to the end: nothing to cut)
        }
      }
      CHECK_THROWS_AS(round.place(std::vector<AccelId>(batch.size() + 1, 0), opt), std::invalid_argument);
    }
    // Focused placements back to back, with whole-scope ones between (a
    // cluster-wide round): each gives the start and finish of every node
    // that the same focused placement gives on a freshly prepared
    // simulator; a reused one resets only what the last focus touched.
    {
      AccelComponents comps;
      comps.build(gmg);
      GlobalSimulator round;
      round.prepare(gmg, est, batch, at);
      for (int p = 0; p < 4; ++p) {
        std::vector<AccelId> there, focus;
        for (std::size_t k = 0; k < batch.size(); ++k) there.push_back(static_cast<AccelId>(pick_acc(rng)));
        comps.closure_of(gmg, there, batch, focus);
        SimOptions focused = opt;
        focused.focus = focus;
        if (p == 2) (void)round.place(there, opt);  // the whole scope written between two focused ones
        GlobalSimulator fresh;
        fresh.prepare(gmg, est, batch, at);
        const SimulationResult want_focused = fresh.place(there, focused);
        const SimulationResult& got = round.place(there, focused);
        INFO("focused placement " << p << " on " << focus.size() << " of " << n_acc << " accelerators");
        REQUIRE(got.ops == want_focused.ops);
        REQUIRE(got.start == want_focused.start);
        REQUIRE(got.finish == want_focused.finish);
        REQUIRE(got.oom.has_value() == want_focused.oom.has_value());
        for (AccelId a : focus) {
          REQUIRE(got.busy[a] == want_focused.busy[a]);
          REQUIRE(got.hbm_peak[a] == want_focused.hbm_peak[a]);
        }
        ++focused_trials;
      }
    }
    // Scoped to the closure of the batch's accelerators, the simulation
    // agrees with the whole cluster's inside the scope whenever nothing
    // outside could reach in: no transfer outside (the default rule
    // reserves the ports of the oldest intent anywhere) and no OOM outside.
    {
      AccelComponents comps;
      comps.build(gmg);
      std::vector<AccelId> scope;
      comps.closure(gmg, where, batch, scope);
      REQUIRE(std::is_sorted(scope.begin(), scope.end()));
      for (AccelId a : where) REQUIRE(std::find(scope.begin(), scope.end(), a) != scope.end());
      SimOptions scoped = overlay;
      scoped.record_transfers = true;
      scoped.record_hbm_timeline = false;
      const SimulationResult full = simulate(gmg, est,
                                             {.horizon = scoped.horizon,
                                              .stop_at_oom = scoped.stop_at_oom,
                                              .record_transfers = true,
                                              .tentative = overlay.tentative});
      auto inside = [&](AccelId a) { return std::find(scope.begin(), scope.end(), a) != scope.end(); };
      bool outside_reaches = full.oom && !inside(full.oom->accel);
      for (const TransferRecord& x : full.transfers) outside_reaches |= !inside(x.from) || !inside(x.to);
      if (scope.size() < static_cast<std::size_t>(n_acc) && !outside_reaches) {
        scoped.scope = scope;
        const SimulationResult& part = reused.run(gmg, est, scoped);
        ++scoped_trials;
        std::size_t in_scope_ops = 0;
        for (std::size_t i = 0; i < full.ops.size(); ++i) {
          const OpId op = full.ops[i];
          const AccelId a = copy.op(op).accel;
          if (!inside(a)) {
            REQUIRE(part.index_of[op] == kNotSimulated);
            continue;
          }
          ++in_scope_ops;
          INFO("op " << op);
          REQUIRE(part.start_of(op) == full.start[i]);
          REQUIRE(part.finish_of(op) == full.finish[i]);
        }
        REQUIRE(part.ops.size() == in_scope_ops);
        for (AccelId a : scope) {
          REQUIRE(part.busy[a] == full.busy[a]);
          REQUIRE(part.hbm_peak[a] == full.hbm_peak[a]);
          REQUIRE(part.hbm_end[a] == full.hbm_end[a]);
        }
        REQUIRE(part.oom.has_value() == full.oom.has_value());
        REQUIRE(part.transfers.size() == full.transfers.size());
        // Scoped runs back to back (as the scheduler makes them) reset what
        // the last one left: another scope, then this one again, agree.
        const SimulationResult first = part;
        std::vector<AccelId> other;
        for (AccelId a = 0; a < static_cast<AccelId>(n_acc); ++a)
          if (!inside(a)) other.push_back(a);
        comps.closure(gmg, std::vector<AccelId>{other.front()}, {}, other);
        SimOptions elsewhere = opt;
        elsewhere.scope = other;
        (void)reused.run(gmg, est, elsewhere);
        require_same(first, reused.run(gmg, est, scoped));
        // and the simulator is left as it was: a whole-cluster run after it agrees
        require_same(with_clone, reused.run(gmg, est, overlay));
      }
    }
    // Out of order, a batch is refused as issue() would refuse it.
    if (batch.size() > 1 && gmg.op(batch[1]).unscheduled_preds > 0) {
      std::vector<OpId> swapped{batch[1], batch[0]};
      std::vector<AccelId> swapped_where{where[1], where[0]};
      CHECK_FALSE(gmg.check_issue(swapped, swapped_where).ok());
    }
    CHECK_FALSE(gmg.check_issue(std::vector<OpId>{batch[0], batch[0]}, std::vector<AccelId>{0, 0}).ok());
  }
  CHECK(tentative_trials > 200);
  CHECK(scoped_trials > 25);
  CHECK(focused_trials > 800);
  CHECK(dominated_trials > 100);
  CHECK(compared_ops > 3000);
  CHECK(with_oom > 20);
  CHECK(with_ghosts > 100);
}

TEST_CASE("the global simulator agrees with its reference on the benchmark's Llama pipelines",
          "[simulator][differential]") {
  for (int n : {1, 3, 8, 64}) {
    INFO(n << " accelerators");
    auto reg = std::make_shared<TemplateRegistry>();
    TemplateId t = reg->add(testing::dense_template()).value();
    auto accels = std::make_shared<AcceleratorSet>();
    (void)accels->add_link_class("nvlink", 300e9, 5e-6);
    for (int i = 0; i < n; ++i) (void)accels->add("gpu" + std::to_string(i), "H100", 80ll << 30);
    Gmg gmg(reg, accels);
    for (AccelId a = 0; a < static_cast<AccelId>(n); ++a) REQUIRE(gmg.place_weights(t, a).ok());
    REQUIRE(bench::issue_pipelines(gmg, t, 4000, 2048, 15).ok());
    EstimatorSet est;
    REQUIRE(seed_priors(est, *reg, *accels).ok());
    const SimOptions opt{.stop_at_oom = false, .record_hbm_timeline = true, .record_transfers = true};
    require_same(reference_simulate(gmg, est, opt), simulate(gmg, est, opt));
    require_same(reference_simulate(gmg, est, {.horizon = 50'000'000}), simulate(gmg, est, {.horizon = 50'000'000}));
  }
}

TEST_CASE(
    "a placement that loses once its inputs' transfers are counted is cut before simulating, exactly where "
    "the simulation ends it dominated",
    "[simulator][differential]") {
  // Instances issued in part and run to completion, so the rest of each
  // (the batch) reads done producers' outputs and KV caches where they ran:
  // a placement elsewhere waits for their transfers, which the batch-alone
  // bound leaves out. With any bound on the summed completion the cut
  // placement must be one the simulation would have ended as dominated
  // (its simulated sum exceeds the bound), and a placement that runs out
  // of HBM is never cut that way (the simulation might have stopped there
  // first).
  std::mt19937_64 rng(20261126);
  std::size_t input_cuts = 0, bounded = 0, with_oom = 0, away = 0, substantial = 0;
  for (int trial = 0; trial < 300; ++trial) {
    INFO("trial " << trial);
    const int n_acc = std::uniform_int_distribution<int>(2, 5)(rng);
    const std::int64_t kv_bytes = std::uniform_int_distribution<std::int64_t>(1, 2'000'000)(rng);
    const bool small_hbm = std::uniform_int_distribution<int>(0, 3)(rng) == 0;
    const std::int64_t hbm =
        small_hbm ? std::uniform_int_distribution<std::int64_t>(2'000'000, 20'000'000)(rng) : 64 * kGiB;
    auto reg = std::make_shared<TemplateRegistry>();
    TemplateId ta = reg->add(random_template(rng, "a", kv_bytes)).value();
    Gmg gmg(reg, cluster(n_acc, hbm));
    for (AccelId acc = 0; acc < static_cast<AccelId>(n_acc); ++acc) REQUIRE(gmg.place_weights(ta, acc).ok());
    EstimatorSet est = estimators(*reg, std::uniform_int_distribution<int>(0, 1)(rng) ? 1e-9 : 1e-10);
    std::uniform_int_distribution<int> pick_acc(0, n_acc - 1);
    // A first instance run whole (it retains a KV cache), then one that
    // reads it, issued in part.
    OpId retainer = kNoOp;
    std::vector<OpId> rest;
    for (int k = 0; k < 2; ++k) {
      InstanceSpec spec{ta, {}, {}, 0, 0};
      if (retainer != kNoOp) spec.ports.push_back({"kv", retainer, true});
      auto inst = gmg.instantiate(spec);
      REQUIRE(inst.ok());
      const std::size_t n_issue =
          k == 0 ? inst->ops.size() : std::uniform_int_distribution<std::size_t>(0, inst->ops.size() - 1)(rng);
      for (std::size_t i = 0; i < n_issue; ++i)
        REQUIRE(gmg.issue(inst->ops[i], static_cast<AccelId>(pick_acc(rng)), gmg.now()).ok());
      const SimulationResult full = reference_simulate(gmg, est, {.stop_at_oom = false});
      std::vector<std::size_t> order(full.ops.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&](auto x, auto y) { return full.finish[x] < full.finish[y]; });
      for (std::size_t i : order)
        REQUIRE(gmg.complete(full.ops[i], full.finish[i], full.finish[i] - full.start[i]).ok());
      gmg.advance_clock(std::max(gmg.now(), full.end));
      for (OpId op : inst->ops)
        if (gmg.op(op).retained_bytes > 0 && gmg.op(op).state == OpState::kDone) retainer = op;
      if (k == 1) rest.assign(inst->ops.begin() + static_cast<std::ptrdiff_t>(n_issue), inst->ops.end());
    }
    // Sometimes a little issued work on the cluster too.
    if (std::uniform_int_distribution<int>(0, 1)(rng)) {
      auto inst = gmg.instantiate({ta, {}, {}, std::uniform_int_distribution<int>(0, 3)(rng), 0});
      REQUIRE(inst.ok());
      for (OpId op : inst->ops) REQUIRE(gmg.issue(op, static_cast<AccelId>(pick_acc(rng)), gmg.now()).ok());
    }
    const std::vector<OpId> batch(rest.begin(),
                                  rest.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(rest.size(), 6)));
    const Nanos at = gmg.now();
    GlobalSimulator round;
    round.prepare(gmg, est, batch, at);
    for (int p = 0; p < 4; ++p) {
      std::vector<AccelId> there;
      for (std::size_t k = 0; k < batch.size(); ++k) there.push_back(static_cast<AccelId>(pick_acc(rng)));
      Gmg placed = gmg.clone();
      for (std::size_t k = 0; k < batch.size(); ++k) REQUIRE(placed.issue(batch[k], there[k], at).ok());
      const SimulationResult want = reference_simulate(placed, est, {});
      INFO("placement " << p << " of " << batch.size() << " ops");
      Nanos sum = 0;
      for (OpId op : batch) sum += want.finish_of(op) - at;
      for (const Nanos above : {sum - 1, sum - 1 - std::uniform_int_distribution<Nanos>(1, 3'000'000)(rng), sum,
                                sum + std::uniform_int_distribution<Nanos>(0, 1'000'000)(rng)}) {
        if (above < 0) continue;
        const std::size_t before = round.cut_by_inputs();
        const SimulationResult& got = round.place(there, {.dominated_above = above});
        const bool cut = round.cut_by_inputs() > before;
        if (!want.feasible()) {
          ++with_oom;
          REQUIRE_FALSE(cut);
          continue;
        }
        ++bounded;
        REQUIRE(got.dominated == (sum > above));
        input_cuts += cut;
      }
      // The round's floor for placements away from the batch's inputs (no
      // batch op on an accelerator where one of its producers ran): at most
      // the simulated sum and latest completion, split by split.
      bool near = false;
      for (OpId op : batch)
        for (std::uint32_t e = gmg.op(op).first_in; e != kNoEdge; e = gmg.edge(e).next_in)
          near |= std::find(there.begin(), there.end(), gmg.op(gmg.edge(e).src).accel) != there.end();
      if (near || !want.feasible()) continue;
      Nanos latest = 0;
      for (OpId op : batch) latest = std::max(latest, want.finish_of(op) - at);
      const Nanos floor = round.away_floor(there, -1, false);
      REQUIRE(floor >= 0);
      REQUIRE(floor <= sum);
      REQUIRE(round.away_floor(there, -1, true) <= latest);
      CHECK(round.away_floor(there, 1'000'000, false) < 0);  // (no floor under a horizon)
      ++away;
      substantial += floor > sum / 2;
    }
  }
  INFO(input_cuts << " of " << bounded << " bounded placements cut from their inputs; " << with_oom << " with OOM");
  INFO(away << " placements away from the inputs, " << substantial << " with a floor over half their sum");
  CHECK(input_cuts > 50);
  CHECK(with_oom > 20);
  CHECK(away > 100);
  CHECK(substantial > away / 2);  // a bound worth having, not zero
}

TEST_CASE("the floor for placements away from the inputs is exact on idle accelerators, split by split",
          "[simulator][differential]") {
  // Three ops in a chain, 250 us each, 1 MB between them at 1 ns a byte:
  // on idle accelerators nothing queues, so every placement's summed and
  // latest completion is its floor, and the floor tells the splits apart.
  TemplateBuilder b("chain");
  for (int i = 0; i < 3; ++i) {
    auto op = b.op("op" + std::to_string(i));
    if (i > 0) op.input("op" + std::to_string(i - 1));
    op.output({{Expr::constant(1'000'000)}, DType::kI8}).features({Expr::constant(1)}).prior({250e-6});
  }
  auto reg = std::make_shared<TemplateRegistry>();
  const TemplateId t = reg->add(std::move(b).build().value()).value();
  Gmg gmg(reg, cluster(4));
  const EstimatorSet est = estimators(*reg, 1e-9);
  auto inst = gmg.instantiate({t, {}, {}, 0, 0});
  REQUIRE(inst.ok());
  GlobalSimulator round;
  round.prepare(gmg, est, inst->ops, gmg.now());
  struct Case {
    std::vector<AccelId> there;
    Nanos sum, latest;
  };
  for (const Case& c : {Case{{0, 0, 0}, 1'500'000, 750'000},     // 250 + 500 + 750 us
                        Case{{0, 0, 1}, 2'500'000, 1'750'000},   // the last op waits 1 ms for its input
                        Case{{2, 3, 2}, 4'500'000, 2'750'000}})  // two transfers
  {
    Gmg placed = gmg.clone();
    for (std::size_t k = 0; k < c.there.size(); ++k) REQUIRE(placed.issue(inst->ops[k], c.there[k], gmg.now()).ok());
    const SimulationResult want = reference_simulate(placed, est, {});
    Nanos sum = 0;
    for (OpId op : inst->ops) sum += want.finish_of(op) - gmg.now();
    REQUIRE(sum == c.sum);
    CHECK(round.away_floor(c.there, -1, false) == c.sum);
    CHECK(round.away_floor(c.there, -1, true) == c.latest);
  }
}

TEST_CASE(
    "work surely queued ahead on an accelerator cuts a placement before simulating, exactly where the simulation "
    "ends it dominated",
    "[simulator][differential]") {
  // Issued instances of several priorities, each on one accelerator (a
  // local chain: ready one after another) or spread (transfers between
  // its ops), and a batch of one priority placed at random. The work ahead
  // of a batch op (lower or equal key, sure to be ready when it could be
  // picked) is a floor on its start; with any bound on the summed
  // completion the placement is dominated exactly when its simulated sum
  // exceeds the bound, floors or not.
  std::mt19937_64 rng(20261127);
  std::size_t queue_cuts = 0, bounded = 0;
  for (int trial = 0; trial < 300; ++trial) {
    INFO("trial " << trial);
    const int n_acc = std::uniform_int_distribution<int>(1, 4)(rng);
    auto reg = std::make_shared<TemplateRegistry>();
    TemplateId ta = reg->add(random_template(rng, "a", 1000)).value();
    Gmg gmg(reg, cluster(n_acc, 64 * kGiB));
    for (AccelId acc = 0; acc < static_cast<AccelId>(n_acc); ++acc) REQUIRE(gmg.place_weights(ta, acc).ok());
    EstimatorSet est = estimators(*reg, std::uniform_int_distribution<int>(0, 1)(rng) ? 1e-9 : 1e-10);
    std::uniform_int_distribution<int> pick_acc(0, n_acc - 1), pick_priority(0, 3);
    const int n_inst = std::uniform_int_distribution<int>(1, 6)(rng);
    for (int i = 0; i < n_inst; ++i) {
      auto inst = gmg.instantiate({ta, {}, {}, pick_priority(rng), 0});
      REQUIRE(inst.ok());
      const bool one = std::uniform_int_distribution<int>(0, 2)(rng) != 0;
      const auto home = static_cast<AccelId>(pick_acc(rng));
      for (OpId op : inst->ops)
        REQUIRE(gmg.issue(op, one ? home : static_cast<AccelId>(pick_acc(rng)), gmg.now()).ok());
    }
    auto b = gmg.instantiate({ta, {}, {}, pick_priority(rng), 0});
    REQUIRE(b.ok());
    const std::vector<OpId> batch(
        b->ops.begin(), b->ops.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(b->ops.size(), 6)));
    const Nanos at = gmg.now();
    GlobalSimulator round;
    round.prepare(gmg, est, batch, at);
    for (int p = 0; p < 4; ++p) {
      std::vector<AccelId> there;
      for (std::size_t k = 0; k < batch.size(); ++k) there.push_back(static_cast<AccelId>(pick_acc(rng)));
      Gmg placed = gmg.clone();
      for (std::size_t k = 0; k < batch.size(); ++k) REQUIRE(placed.issue(batch[k], there[k], at).ok());
      const SimulationResult want = reference_simulate(placed, est, {});
      REQUIRE(want.feasible());
      INFO("placement " << p << " of " << batch.size() << " ops");
      Nanos sum = 0;
      for (OpId op : batch) sum += want.finish_of(op) - at;
      for (const Nanos above : {sum - 1, sum - 1 - std::uniform_int_distribution<Nanos>(1, 3'000'000)(rng), sum,
                                sum + std::uniform_int_distribution<Nanos>(0, 1'000'000)(rng)}) {
        if (above < 0) continue;
        const std::size_t before = round.cut_by_queues();
        const SimulationResult& got = round.place(there, {.dominated_above = above});
        ++bounded;
        REQUIRE(got.dominated == (sum > above));
        queue_cuts += round.cut_by_queues() > before;
      }
    }
  }
  INFO(queue_cuts << " of " << bounded << " bounded placements cut by the work queued ahead");
  CHECK(queue_cuts > bounded / 10);  // a floor worth having, not zero
}
