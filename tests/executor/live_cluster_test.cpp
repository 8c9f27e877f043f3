// The live executor's queue, transfer and memory rules, on real threads
// with a runner that really allocates, computes and copies buffers: every
// operator's output is a buffer of its declared size holding a digest of
// its inputs, so a wrong, lost or duplicated value changes the result.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

import slicesched.executor.live_cluster;
import slicesched.plugins.greedy_arbiter;
import slicesched.plugins.serial_arbiter;
import slicesched.testing;
import slicesched.core.backend;
import slicesched.core.gmg;
import slicesched.core.graph;
import slicesched.core.ids;
import slicesched.core.shape;
import slicesched.core.status;
import slicesched.executor.runner;
import slicesched.core.plugin;

using namespace slicesched;
using namespace slicesched::testing;

namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

struct Buffer {
  std::uint64_t digest = 0;
  std::vector<char> bytes;
  AccelId at = kNoAccel;  // the accelerator it lives on
};

struct Prepared {
  std::uint64_t salt = 0;
  std::int64_t out = 0, retained = 0;
  std::string name;
  int sleep_ms = 0;
};

// Output digest = mix(salt, input digests in edge order); salt = the op's
// issue sequence. Copies are real copies.
class DigestRunner final : public OpRunner {
 public:
  std::string fail_op;                // an op name whose run throws
  std::map<std::string, int> sleeps;  // op name -> ms to sleep while running
  std::atomic<int> concurrent{0}, max_concurrent{0};
  std::atomic<int> started{0};  // runs begun
  std::mutex mu;
  std::map<std::uint64_t, std::uint64_t> seen;  // issue seq -> output digest
  // Copies in flight, seen from inside copy(): by source, by destination,
  // and the most of each at once (what NCCL's safety rests on: at most one
  // send per source and one receive per destination, docs/live.md).
  std::mutex copy_mu;
  std::map<AccelId, int> sending, receiving;
  int max_sending = 0, max_receiving = 0, max_copies = 0, copies_now = 0;
  int copy_sleep_us = 0;

  // Every operator's output digest, by OpId.
  std::map<OpId, std::uint64_t> outputs(const Gmg& gmg, const std::vector<OpId>& ops) {
    std::lock_guard lk(mu);
    std::map<OpId, std::uint64_t> out;
    for (OpId op : ops)
      if (auto it = seen.find(gmg.op(op).issue_seq); it != seen.end()) out[op] = it->second;
    return out;
  }

  Result<std::shared_ptr<const void>> prepare(const Gmg& gmg, OpId op) override {
    auto p = std::make_shared<Prepared>();
    const OpRecord& r = gmg.op(op);
    p->salt = r.issue_seq;
    p->out = r.out_bytes;
    p->retained = r.retained_bytes;
    p->name = gmg.templates().get(r.tmpl).ops()[r.tmpl_op].name;
    if (auto it = sleeps.find(p->name); it != sleeps.end()) p->sleep_ms = it->second;
    return std::shared_ptr<const void>(p);
  }
  Result<OpResult> run(AccelId accel, const void* prepared, std::span<const Payload> inputs) override {
    const auto& p = *static_cast<const Prepared*>(prepared);
    ++started;
    const int c = ++concurrent;
    int m = max_concurrent.load();
    while (c > m && !max_concurrent.compare_exchange_weak(m, c)) {
    }
    if (p.sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(p.sleep_ms));
    --concurrent;
    if (p.name == fail_op) throw std::runtime_error("boom in " + p.name);
    std::uint64_t d = mix(0, p.salt);
    for (const Payload& in : inputs) {
      if (!in) return InvalidArgument("missing input");
      d = mix(d, static_cast<const Buffer*>(in.value.get())->digest);
    }
    {
      std::lock_guard lk(mu);
      seen[p.salt] = d;
    }
    OpResult res;
    auto out = std::make_shared<Buffer>();
    out->digest = d;
    out->at = accel;
    out->bytes.assign(static_cast<std::size_t>(p.out), static_cast<char>(d));
    res.output = {out, p.out};
    if (p.retained) {
      auto kept = std::make_shared<Buffer>();
      kept->digest = mix(d, 1);
      kept->at = accel;
      kept->bytes.assign(static_cast<std::size_t>(p.retained), 1);
      res.retained = {kept, p.retained};
    }
    return res;
  }
  Result<CopyResult> copy(const Payload& v, AccelId to) override {
    const AccelId from = static_cast<const Buffer*>(v.value.get())->at;
    {
      std::lock_guard lk(copy_mu);
      max_sending = std::max(max_sending, ++sending[from]);
      max_receiving = std::max(max_receiving, ++receiving[to]);
      max_copies = std::max(max_copies, ++copies_now);
    }
    if (copy_sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(copy_sleep_us));
    auto b = std::make_shared<Buffer>(*static_cast<const Buffer*>(v.value.get()));
    b->at = to;
    {
      std::lock_guard lk(copy_mu);
      --sending[from], --receiving[to], --copies_now;
    }
    return CopyResult{Payload{b, static_cast<std::int64_t>(b->bytes.size())}};
  }
};

// What the runner computes, evaluated sequentially from the GMG.
std::map<OpId, std::uint64_t> reference(const Gmg& gmg, const std::vector<OpId>& ops) {
  std::map<OpId, std::uint64_t> d;
  for (OpId op : ops) {
    std::uint64_t h = mix(0, gmg.op(op).issue_seq);
    for (std::uint32_t e = gmg.op(op).first_in; e != kNoEdge; e = gmg.edge(e).next_in)
      h = mix(h, gmg.edge(e).retained ? mix(d.at(gmg.edge(e).src), 1) : d.at(gmg.edge(e).src));
    d[op] = h;
  }
  return d;
}

// Hands the cluster what the GMG let go of, the way the engine does.
void release(Gmg& gmg, LiveCluster& lc) {
  lc.release(gmg.releases());
  gmg.clear_releases();
}

// Runs the cluster dry the way the engine does: completions go into the
// GMG after each advance, and what it lets go of back to the cluster.
std::vector<Feedback> drive(Gmg& gmg, LiveCluster& lc) {
  std::vector<Feedback> all;
  for (;;) {
    release(gmg, lc);
    const Nanos next = lc.next_event();
    if (next < 0) break;
    std::vector<Feedback> fb;
    REQUIRE(lc.advance_to(next, fb).ok());
    for (const Feedback& f : fb) {
      if (f.kind == Feedback::Kind::kTransfer)
        REQUIRE(gmg.complete_transfer(f.src, f.op, f.t).ok());
      else
        REQUIRE(gmg.complete(f.op, f.t, f.measured).ok());
      all.push_back(f);
    }
  }
  return all;
}

// A random DAG template: op i reads 1-3 earlier ops (op 0 reads none).
GraphTemplate random_dag(std::mt19937_64& rng, int n, std::int64_t max_bytes) {
  TemplateBuilder b("dag");
  for (int i = 0; i < n; ++i) {
    auto op = b.op("o" + std::to_string(i));
    if (i > 0) {
      std::vector<int> from;
      const int k = 1 + static_cast<int>(rng() % 3);
      for (int j = 0; j < k; ++j) from.push_back(static_cast<int>(rng() % i));
      std::sort(from.begin(), from.end());
      from.erase(std::unique(from.begin(), from.end()), from.end());
      for (int f : from) op.input("o" + std::to_string(f));
    }
    const std::int64_t bytes = 1024 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(max_bytes));
    op.output({{Expr::constant(bytes)}, DType::kI8}).features({Expr::constant(1)}).prior({1e-4});
  }
  return std::move(b).build().value();
}

// The intervals the cluster reported (each completion carries its start).
struct Interval {
  OpId op = kNoOp;
  AccelId accel = kNoAccel, to = kNoAccel;
  Nanos start = 0, finish = 0;
};

void check_timeline(const Gmg& gmg, const std::vector<Feedback>& fb, std::size_t accels, bool serial) {
  std::vector<Interval> log;
  for (const Feedback& f : fb) {
    REQUIRE(f.start >= 0);
    REQUIRE(f.start <= f.t);
    log.push_back({f.op, f.from, f.kind == Feedback::Kind::kTransfer ? f.to : kNoAccel, f.start, f.t});
  }
  // No two operators overlap on one accelerator; no two transfers share a
  // source or a destination at once (none at all overlap when serial).
  std::vector<Interval> ops, xfers;
  for (const Interval& r : log) (r.to == kNoAccel ? ops : xfers).push_back(r);
  for (AccelId a = 0; a < accels; ++a) {
    std::vector<std::pair<Nanos, Nanos>> iv;
    for (const Interval& r : ops)
      if (r.accel == a) iv.push_back({r.start, r.finish});
    std::sort(iv.begin(), iv.end());
    for (std::size_t i = 1; i < iv.size(); ++i) CHECK(iv[i].first >= iv[i - 1].second);
  }
  for (std::size_t i = 0; i < xfers.size(); ++i)
    for (std::size_t j = i + 1; j < xfers.size(); ++j) {
      const Interval &x = xfers[i], &y = xfers[j];
      const bool overlap = x.start < y.finish && y.start < x.finish;
      if (!overlap) continue;
      CHECK_FALSE(serial);
      CHECK(x.accel != y.accel);
      CHECK(x.to != y.to);
    }
  // Every operator starts after its inputs are there.
  std::map<OpId, Interval> by_op;
  for (const Interval& r : ops) by_op[r.op] = r;
  for (const Interval& r : ops)
    for (std::uint32_t e = gmg.op(r.op).first_in; e != kNoEdge; e = gmg.edge(e).next_in) {
      const OpId src = gmg.edge(e).src;
      if (by_op.count(src)) CHECK(r.start >= by_op[src].finish);
    }
}

}  // namespace

TEST_CASE("live cluster: values flow through local and remote edges", "[executor]") {
  auto reg = std::make_shared<TemplateRegistry>();
  TemplateBuilder b("fj");
  b.op("a").output({{Expr::constant(4096)}, DType::kI8}).features({Expr::constant(1)}).prior({1e-4});
  b.op("b").input("a").output({{Expr::constant(2048)}, DType::kI8}).features({Expr::constant(1)}).prior({1e-4});
  b.op("c").input("a").output({{Expr::constant(2048)}, DType::kI8}).features({Expr::constant(1)}).prior({1e-4});
  b.op("d").input("b").input("c").output({{Expr::constant(8)}, DType::kI8}).features({Expr::constant(1)}).prior({1e-4});
  const TemplateId t = reg->add(std::move(b).build().value()).value();
  Gmg gmg(reg, cluster(3));
  auto inst = gmg.instantiate({t, {}, {}, 0, 0}).value();
  const AccelId place[] = {0, 1, 2, 0};
  for (std::size_t i = 0; i < 4; ++i) REQUIRE(gmg.issue(inst.ops[i], place[i], 0).ok());
  DigestRunner runner;
  plugins::GreedyArbiter arbiter;
  LiveCluster lc({1 << 20, 1 << 20, 1 << 20}, runner, arbiter);
  for (OpId op : inst.ops) REQUIRE(lc.submit(gmg, op).ok());
  auto fb = drive(gmg, lc);
  std::size_t ops = 0, transfers = 0;
  for (const Feedback& f : fb) (f.kind == Feedback::Kind::kOp ? ops : transfers)++;
  CHECK(ops == 4);
  CHECK(transfers == 4);  // a -> 1, a -> 2, b -> 0, c -> 0
  for (const Feedback& f : fb) CHECK_FALSE(f.failed);
  check_timeline(gmg, fb, 3, false);
  // Everything is freed once the GMG lets go (drive() handed it over).
  for (AccelId a = 0; a < 3; ++a) CHECK(lc.used(a) == 0);
}

TEST_CASE("live cluster: device memory is freed exactly when the engine releases it", "[executor]") {
  // x (on a0) feeds y (on a1); y retains a 256-byte state that a later
  // instance's z (on a1) takes over.
  auto reg = std::make_shared<TemplateRegistry>();
  TemplateBuilder b("xy");
  b.op("x").output({{Expr::constant(4096)}, DType::kI8}).features({Expr::constant(1)}).prior({1e-4});
  b.op("y")
      .input("x")
      .output({{Expr::constant(1024)}, DType::kI8})
      .retain("state", {{Expr::constant(256)}, DType::kI8})
      .features({Expr::constant(1)})
      .prior({1e-4});
  const TemplateId xy = reg->add(std::move(b).build().value()).value();
  const TemplateId z = reg->add(unit_op("z", 1e-4, 64, {"state"}, 256)).value();
  Gmg gmg(reg, cluster(2));
  auto ops = gmg.instantiate({xy, {}, {}, 0, 0}).value().ops;
  REQUIRE(gmg.issue(ops[0], 0, 0).ok());
  REQUIRE(gmg.issue(ops[1], 1, 0).ok());
  DigestRunner runner;
  plugins::GreedyArbiter arbiter;
  LiveCluster lc({1 << 20, 1 << 20}, runner, arbiter);
  for (OpId op : ops) REQUIRE(lc.submit(gmg, op).ok());

  // Run to completion, feeding the GMG but holding the releases back: the
  // cluster keeps every value, whatever the GMG thinks.
  std::vector<Feedback> fb;
  for (Nanos next = lc.next_event(); next >= 0; next = lc.next_event()) {
    fb.clear();
    REQUIRE(lc.advance_to(next, fb).ok());
    for (const Feedback& f : fb)
      REQUIRE((f.kind == Feedback::Kind::kTransfer ? gmg.complete_transfer(f.src, f.op, f.t)
                                                   : gmg.complete(f.op, f.t, f.measured))
                  .ok());
  }
  CHECK(lc.used(0) == 4096);
  CHECK(lc.used(1) == 1024 + 256);
  // x's output (every reader done) and y's output (no reader), in order.
  const std::uint64_t sx = gmg.op(ops[0]).issue_seq, sy = gmg.op(ops[1]).issue_seq;
  REQUIRE(
      std::vector<Release>(gmg.releases().begin(), gmg.releases().end()) ==
      std::vector<Release>{{ops[0], sx, Release::Value::kOutput, true}, {ops[1], sy, Release::Value::kOutput, false}});

  // A release for another issue of the slot, or for an operator never
  // held, changes nothing.
  const Release stale[] = {{ops[0], sx + 100, Release::Value::kOutput, true}, {999, 1, Release::Value::kOutput, true}};
  lc.release(stale);
  CHECK(lc.used(0) == 4096);

  // Only the first: x's output goes, y's stays.
  lc.release(gmg.releases().first(1));
  CHECK(lc.used(0) == 0);
  CHECK(lc.used(1) == 1024 + 256);
  lc.release(gmg.releases().subspan(1));
  gmg.clear_releases();
  CHECK(lc.used(1) == 256);

  // y's retained state stays resident for z, which attaches to it; once z
  // has taken it over and the GMG says so, it is freed too.
  auto later = gmg.instantiate({z, {}, {{"state", ops[1], true}}, 0, 0}).value().ops[0];
  REQUIRE(gmg.issue(later, 1, 0).ok());
  REQUIRE(lc.submit(gmg, later).ok());
  drive(gmg, lc);
  CHECK(lc.used(1) == 0);
  CHECK(lc.peak(1) <= (1 << 20));
}

TEST_CASE("live cluster: the higher priority ready operator runs first, no preemption", "[executor]") {
  auto reg = std::make_shared<TemplateRegistry>();
  const TemplateId t = reg->add(unit_op("long", 1e-3, 64)).value();
  const TemplateId u = reg->add(unit_op("short", 1e-3, 64)).value();
  Gmg gmg(reg, cluster(1));
  DigestRunner runner;
  runner.sleeps["op"] = 0;
  plugins::GreedyArbiter arbiter;
  LiveCluster lc({1 << 20}, runner, arbiter);
  // A long operator occupies the accelerator while a low then a high
  // priority operator queue behind it.
  auto first = gmg.instantiate({t, {}, {}, 0, 0}).value().ops[0];
  REQUIRE(gmg.issue(first, 0, 0).ok());
  runner.sleeps["op"] = 300;
  REQUIRE(lc.submit(gmg, first).ok());
  // Until it runs (a fixed 20 ms was not always enough on a loaded
  // machine: the three then queued together and the high one ran first).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (runner.started.load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(runner.started.load() == 1);
  runner.sleeps["op"] = 0;
  auto low = gmg.instantiate({u, {}, {}, 0, 0}).value().ops[0];
  auto high = gmg.instantiate({u, {}, {}, 5, 0}).value().ops[0];
  REQUIRE(gmg.issue(low, 0, 0).ok());
  REQUIRE(gmg.issue(high, 0, 0).ok());
  REQUIRE(lc.submit(gmg, low).ok());
  REQUIRE(lc.submit(gmg, high).ok());
  auto fb = drive(gmg, lc);
  REQUIRE(fb.size() == 3);
  CHECK(fb[0].op == first);
  CHECK(fb[1].op == high);
  CHECK(fb[2].op == low);
  CHECK(fb[0].measured >= 300'000'000);
}

TEST_CASE("live cluster: random transfer storms finish without deadlock and with the right values", "[executor]") {
  std::mt19937_64 rng(42);
  int max_parallel_copies = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const bool serial = trial % 3 == 2;
    const bool reserve = trial % 2 == 0;
    auto reg = std::make_shared<TemplateRegistry>();
    const TemplateId t = reg->add(random_dag(rng, 24, 64 * 1024)).value();
    const int accels = 4;
    Gmg gmg(reg, cluster(accels));
    std::vector<OpId> all;
    for (int i = 0; i < 3; ++i) {
      auto inst = gmg.instantiate({t, {}, {}, static_cast<std::int32_t>(rng() % 3), 0}).value();
      for (OpId op : inst.ops) {
        REQUIRE(gmg.issue(op, static_cast<AccelId>(rng() % accels), 0).ok());
        all.push_back(op);
      }
    }
    auto expect = reference(gmg, all);
    DigestRunner runner;
    runner.copy_sleep_us = 200;  // long enough for copies to overlap
    std::unique_ptr<TransferArbiter> arbiter;
    if (serial)
      arbiter = std::make_unique<plugins::SerialArbiter>();
    else
      arbiter = std::make_unique<plugins::GreedyArbiter>(reserve);
    LiveCluster lc(std::vector<std::int64_t>(accels, 64 << 20), runner, *arbiter);
    // Submit in a random order that respects dependencies (issue order
    // is topological; interleave instances).
    for (OpId op : all) REQUIRE(lc.submit(gmg, op).ok());
    auto fb = drive(gmg, lc);
    std::map<OpId, int> finished;
    for (const Feedback& f : fb)
      if (f.kind == Feedback::Kind::kOp) {
        CHECK_FALSE(f.failed);
        ++finished[f.op];
      }
    REQUIRE(finished.size() == all.size());
    for (auto& [op, n] : finished) CHECK(n == 1);
    for (OpId op : all) CHECK(gmg.op(op).state == OpState::kDone);
    check_timeline(gmg, fb, accels, serial);
    CHECK(runner.outputs(gmg, all) == expect);
    // The rule NCCL transfers rely on, seen from inside the copies.
    CHECK(runner.max_sending <= 1);
    CHECK(runner.max_receiving <= 1);
    if (serial) CHECK(runner.max_copies <= 1);
    max_parallel_copies = std::max(max_parallel_copies, runner.max_copies);
  }
  // ... while copies did run side by side: the checks above could fail.
  CHECK(max_parallel_copies >= 2);
}

TEST_CASE("live cluster: values computed across accelerators equal a sequential evaluation", "[executor]") {
  // The digest of every sink depends on every value upstream; compare the
  // head outputs through a final local op reading every sink.
  std::mt19937_64 rng(7);
  auto reg = std::make_shared<TemplateRegistry>();
  const TemplateId t = reg->add(random_dag(rng, 30, 16 * 1024)).value();
  Gmg gmg(reg, cluster(4));
  auto inst = gmg.instantiate({t, {}, {}, 0, 0}).value();
  for (OpId op : inst.ops) REQUIRE(gmg.issue(op, static_cast<AccelId>(rng() % 4), 0).ok());
  auto expect = reference(gmg, inst.ops);
  DigestRunner runner;
  plugins::GreedyArbiter arbiter;
  LiveCluster lc(std::vector<std::int64_t>(4, 64 << 20), runner, arbiter);
  for (OpId op : inst.ops) REQUIRE(lc.submit(gmg, op).ok());
  drive(gmg, lc);
  CHECK(runner.outputs(gmg, inst.ops) == expect);
}

TEST_CASE("live cluster: a tight memory budget is never exceeded", "[executor]") {
  // Budgets of 3 MiB. On a1, `w` holds 2.5 MiB of workspace for 100 ms, so
  // the receive of p0's 1 MiB output is refused and retried. On a0, `q`
  // needs 2.5 MiB while p0's output is still held, so it waits for p1 to
  // finish; then p1's output cannot land on a0 while q runs.
  constexpr std::int64_t MiB = 1 << 20;
  auto reg = std::make_shared<TemplateRegistry>();
  auto one = [](TemplateBuilder& b, const std::string& name, std::vector<std::string> in, std::int64_t out,
                std::int64_t ws) {
    auto op = b.op(name);
    for (auto& i : in) op.input(i);
    op.output({{Expr::constant(out)}, DType::kI8})
        .workspace(Expr::constant(ws))
        .features({Expr::constant(1)})
        .prior({1e-4});
  };
  TemplateBuilder pb("pp");
  one(pb, "p0", {}, MiB, 0);
  one(pb, "p1", {"p0"}, MiB, 0);
  one(pb, "p2", {"p1"}, MiB, 0);
  const TemplateId pp = reg->add(std::move(pb).build().value()).value();
  TemplateBuilder wb("w");
  one(wb, "w", {}, 64, 5 * MiB / 2);
  const TemplateId w = reg->add(std::move(wb).build().value()).value();
  TemplateBuilder qb("q");
  one(qb, "q", {}, 64, 5 * MiB / 2);
  const TemplateId q = reg->add(std::move(qb).build().value()).value();

  Gmg gmg(reg, cluster(2));
  std::vector<std::pair<OpId, AccelId>> plan;
  plan.push_back({gmg.instantiate({w, {}, {}, 0, 0}).value().ops[0], 1});
  auto p = gmg.instantiate({pp, {}, {}, 0, 0}).value().ops;
  plan.push_back({p[0], 0});
  plan.push_back({p[1], 1});
  plan.push_back({p[2], 0});
  plan.push_back({gmg.instantiate({q, {}, {}, 0, 0}).value().ops[0], 0});
  for (auto [op, a] : plan) REQUIRE(gmg.issue(op, a, 0).ok());

  DigestRunner runner;
  runner.sleeps["w"] = 100;
  runner.sleeps["q"] = 50;
  plugins::GreedyArbiter arbiter;
  const std::int64_t budget = 3 * MiB;
  LiveCluster lc({budget, budget}, runner, arbiter);
  CHECK_FALSE(lc.reserve_resident(1, 4 * MiB).ok());
  // w first, and running, before the rest arrive.
  REQUIRE(lc.submit(gmg, plan[0].first).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  for (std::size_t i = 1; i < plan.size(); ++i) REQUIRE(lc.submit(gmg, plan[i].first).ok());
  auto fb = drive(gmg, lc);
  std::size_t ops = 0;
  for (const Feedback& f : fb) ops += f.kind == Feedback::Kind::kOp && !f.failed;
  CHECK(ops == plan.size());
  for (AccelId a = 0; a < 2; ++a) CHECK(lc.peak(a) <= budget);
  CHECK(lc.peak(1) > 5 * MiB / 2);
  CHECK(lc.refused_receives() >= 1);
  CHECK(lc.memory_waits() >= 1);
}

TEST_CASE("live cluster: work that can never fit is reported as a stall, not a hang", "[executor]") {
  // a1 keeps 2 MiB resident; a's 2 MiB output can never land there.
  constexpr std::int64_t MiB = 1 << 20;
  auto reg = std::make_shared<TemplateRegistry>();
  TemplateBuilder b("x");
  b.op("a").output({{Expr::constant(2 * MiB)}, DType::kI8}).features({Expr::constant(1)}).prior({1e-4});
  b.op("b").input("a").output({{Expr::constant(64)}, DType::kI8}).features({Expr::constant(1)}).prior({1e-4});
  const TemplateId t = reg->add(std::move(b).build().value()).value();
  Gmg gmg(reg, cluster(2));
  auto ops = gmg.instantiate({t, {}, {}, 0, 0}).value().ops;
  REQUIRE(gmg.issue(ops[0], 0, 0).ok());
  REQUIRE(gmg.issue(ops[1], 1, 0).ok());
  DigestRunner runner;
  plugins::GreedyArbiter arbiter;
  LiveCluster lc({3 * MiB, 3 * MiB}, runner, arbiter);
  REQUIRE(lc.reserve_resident(1, 2 * MiB).ok());
  for (OpId op : ops) REQUIRE(lc.submit(gmg, op).ok());
  drive(gmg, lc);
  CHECK(gmg.op(ops[0]).state == OpState::kDone);
  CHECK(gmg.op(ops[1]).state == OpState::kIssued);
  CHECK(lc.stall_reason() == "1 operator(s) wait; 1 transfer(s) refused for memory");
  CHECK(lc.peak(1) == 2 * MiB);
}

TEST_CASE("live cluster: a throwing operator fails its dependents only", "[executor]") {
  auto reg = std::make_shared<TemplateRegistry>();
  TemplateBuilder b("pair");
  b.op("x").output({{Expr::constant(64)}, DType::kI8}).features({Expr::constant(1)}).prior({1e-4});
  b.op("y").input("x").output({{Expr::constant(64)}, DType::kI8}).features({Expr::constant(1)}).prior({1e-4});
  const TemplateId bad = reg->add(std::move(b).build().value()).value();
  const TemplateId good = reg->add(unit_op("fine", 1e-4, 64)).value();
  Gmg gmg(reg, cluster(2));
  auto broken = gmg.instantiate({bad, {}, {}, 0, 0}).value();
  auto ok = gmg.instantiate({good, {}, {}, 0, 0}).value();
  REQUIRE(gmg.issue(broken.ops[0], 0, 0).ok());
  REQUIRE(gmg.issue(broken.ops[1], 1, 0).ok());
  REQUIRE(gmg.issue(ok.ops[0], 0, 0).ok());
  DigestRunner runner;
  runner.fail_op = "x";
  plugins::GreedyArbiter arbiter;
  LiveCluster lc({1 << 20, 1 << 20}, runner, arbiter);
  for (OpId op : {broken.ops[0], broken.ops[1], ok.ops[0]}) REQUIRE(lc.submit(gmg, op).ok());
  auto fb = drive(gmg, lc);
  std::map<OpId, const Feedback*> by;
  for (const Feedback& f : fb) by[f.op] = &f;
  REQUIRE(by.size() == 3);
  CHECK(by[broken.ops[0]]->failed);
  CHECK(by[broken.ops[0]]->error == "operator threw: boom in x");
  CHECK(by[broken.ops[1]]->failed);  // never ran: its input failed
  CHECK(by[broken.ops[1]]->error == "operator threw: boom in x");
  CHECK_FALSE(by[ok.ops[0]]->failed);
}

TEST_CASE("live cluster: bad submissions are refused without side effects", "[executor]") {
  auto reg = std::make_shared<TemplateRegistry>();
  const TemplateId t = reg->add(unit_op("u", 1e-4, 64)).value();
  Gmg gmg(reg, cluster(1));
  auto op = gmg.instantiate({t, {}, {}, 0, 0}).value().ops[0];
  DigestRunner runner;
  plugins::GreedyArbiter arbiter;
  LiveCluster lc({1 << 20}, runner, arbiter);
  Status s = lc.submit(gmg, op);
  CHECK(s.message().find("is not issued") != std::string::npos);
  REQUIRE(gmg.issue(op, 0, 0).ok());
  REQUIRE(lc.submit(gmg, op).ok());
  CHECK(lc.submit(gmg, op).message().find("already submitted") != std::string::npos);
  drive(gmg, lc);
}
