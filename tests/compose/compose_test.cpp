// The composition library (compose/) and the engine's observers, on the
// small end-to-end config (tests/cli/small.toml): one policy lookup, a
// policy's parts built once with errors naming the policy, a run watched by
// observers that see every issue, finish, decision and request event, and
// the engine's drain and cancel paths.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

import slicesched.compose.offline;
import slicesched.compose.experiment;
import slicesched.config;
import slicesched.config.accelerators;
import slicesched.compose.policy;
import slicesched.compose.run;
import slicesched.compose.setup;
import slicesched.core.backend;
import slicesched.core.calibration;
import slicesched.core.gmg;
import slicesched.core.graph;
import slicesched.core.ids;
import slicesched.core.plugin;
import slicesched.core.shape;
import slicesched.core.status;
import slicesched.engine;
import slicesched.engine.observer;
import slicesched.engine.progress;
import slicesched.engine.recorders;
import slicesched.engine.tenant;
import slicesched.hardware.roofline;
import slicesched.models.model;
import slicesched.models.work;
import slicesched.simulator.emulated_cluster;
import slicesched.simulator.roofline_truth;

using namespace slicesched;

namespace {

const std::string kSmall = std::string(SLICESCHED_SOURCE_DIR) + "/tests/cli/small.toml";

struct Small {
  ExperimentConfig cfg;
  PluginRegistries plugins;
  Truths truths;
  explicit Small(std::vector<ConfigOverride> sets = {}) {
    auto c = load_config(kSmall, sets);
    REQUIRE(c.ok());
    cfg = std::move(c).value();
    REQUIRE(load_plugins(cfg, plugins).ok());
    auto t = load_truths(cfg);
    REQUIRE(t.ok());
    truths = std::move(t).value();
  }
  std::unique_ptr<PolicyParts> build(const std::string& policy, BuildOptions opt = {}) {
    auto p = find_policy(cfg, policy);
    REQUIRE(p.ok());
    auto parts = build_policy(cfg, *p.value(), plugins, opt);
    if (!parts.ok()) FAIL(parts.status().message());
    return std::move(parts).value();
  }
  // `policy` built and run offline as simulate runs it (summary figures included).
  PolicyRun run_policy(const std::string& policy) {
    auto parts = build(policy);
    auto r = run_offline(cfg, *parts, truths);
    if (!r.ok()) FAIL(r.status().message());
    return std::move(r).value();
  }
  // Runs `parts` on the emulated cluster playing the config's ground truth.
  Result<EngineResult> run(PolicyParts& parts, std::span<EngineObserver* const> observers,
                           const std::atomic<int>* stop = nullptr) {
    auto truth = make_ground_truth(cfg, truths, *parts.accels);
    REQUIRE(truth.ok());
    EmulatedCluster cluster(parts.accels->size(), *truth.value(), *parts.plugins.arbiter);
    return slicesched::run(parts, cluster, observers, stop);
  }
};

// Counts every event and checks the order the contract promises.
class Counting final : public EngineObserver {
 public:
  void on_issue(const Gmg& gmg, OpId op, Nanos now) override {
    CHECK(gmg.op(op).state == OpState::kIssued);
    issued_at[op] = now;
    ++issues;
  }
  void on_finish(const RunRecord& r) override {
    CHECK(r.start <= r.finish);
    if (r.to != kNoAccel) {
      ++transfers;
      return;
    }
    ++ops;
    // Issued before it started, and the engine says when.
    REQUIRE(issued_at.count(r.op));
    CHECK(r.issued == issued_at[r.op]);
    CHECK(r.start >= r.issued);
    predicted += r.predicted_start >= 0 && r.predicted_finish >= r.predicted_start;
    issued_at.erase(r.op);
  }
  void on_feedback(const Gmg& gmg, const Feedback& f) override {
    CHECK(gmg.contains(f.op));  // shown before the engine applies it
    ++feedback;
  }
  void on_decision(const Gmg& /*gmg*/, const Decision& d) override {
    REQUIRE(d.batch != nullptr);
    CHECK(d.outcomes.size() == d.candidates.size());
    ++decisions;
    if (!d.pick) {
      ++deferred;
      return;
    }
    REQUIRE(*d.pick < d.candidates.size());
    picked_ops += d.batch->ops.size();
    if (d.simulated) CHECK(d.outcomes[*d.pick].feasible);
  }
  void on_request(const RequestEvent& e, const RequestRecord& r) override {
    ++by_kind[e.kind];
    if (e.kind == RequestEvent::Kind::kDone) CHECK(r.done == e.t);
    if (e.kind == RequestEvent::Kind::kFirstToken) CHECK(r.first_token == e.t);
    if (e.kind == RequestEvent::Kind::kArrived) CHECK(r.arrival == e.t);
  }
  bool iterations() const override { return true; }

  std::map<OpId, Nanos> issued_at;
  std::size_t issues = 0, ops = 0, transfers = 0, predicted = 0, feedback = 0, decisions = 0, deferred = 0,
              picked_ops = 0;
  std::map<RequestEvent::Kind, std::size_t> by_kind;
};

// Sets the stop flag to `level` at the first request event of `kind`, and
// remembers when.
class StopAt final : public EngineObserver {
 public:
  StopAt(std::atomic<int>& flag, RequestEvent::Kind kind, int level) : flag_(flag), kind_(kind), level_(level) {}
  void on_request(const RequestEvent& e, const RequestRecord& /*r*/) override {
    if (e.kind == RequestEvent::Kind::kArrived && at >= 0) ++arrivals_after;
    if (e.kind != kind_ || at >= 0) return;
    at = e.t;
    flag_.store(level_);
  }
  Nanos at = -1;
  std::size_t arrivals_after = 0;

 private:
  std::atomic<int>& flag_;
  RequestEvent::Kind kind_;
  int level_;
};

// Runs `policy` of `s` with the stop flag set to `level` at the first
// request event of `kind`; the run must end, interrupted, after the flag was set.
struct Stopped {
  EngineResult result;
  Nanos at = -1;  // when the flag was set
  std::size_t arrivals_after = 0;
};

Stopped run_stopped(Small& s, const std::string& policy, RequestEvent::Kind kind, int level) {
  auto parts = s.build(policy);
  std::atomic<int> stop{0};
  StopAt at(stop, kind, level);
  EngineObserver* observers[] = {&at};
  auto result = s.run(*parts, observers, &stop);
  REQUIRE(result.ok());
  REQUIRE(at.at > 0);
  CHECK(result->interrupted);
  return {std::move(result).value(), at.at, at.arrivals_after};
}

// Defers every batch.
class NeverPlace final : public PlacementPolicy {
 public:
  std::optional<std::size_t> choose(const Gmg&, const Batch&, std::span<const Candidate>,
                                    std::span<const Outcome>) override {
    return std::nullopt;
  }
};

}  // namespace

TEST_CASE("compose: one policy lookup, one message", "[compose]") {
  Small s;
  struct Row {
    std::optional<std::string> name;
    bool first_by_default;
    std::string found;  // or the error
  };
  const std::string path = s.cfg.path;
  const Row rows[] = {
      {"SliceScheduler", false, "SliceScheduler"},
      {"Static-Online", true, "Static-Online"},
      {std::nullopt, true, "Static-Online"},
      {"Nope", false, "no policy named 'Nope' in " + path + " (policies: Static-Online, SliceScheduler)"},
      {std::nullopt, false, path + " has 2 policies; pick one with --policy (Static-Online, SliceScheduler)"},
  };
  for (const Row& row : rows) {
    auto p = find_policy(s.cfg, row.name, row.first_by_default);
    INFO(row.found);
    CHECK((p.ok() ? p.value()->name : p.status().message()) == row.found);
  }
}

TEST_CASE("compose: a config opens one way: read, its policy found, its prior read, plugins loaded", "[compose]") {
  auto e = open_experiment(
      kSmall, {.overrides = {{"duration_s", "3"}}, .seed = 99, .one_policy = true, .policy = "SliceScheduler"});
  if (!e.ok()) FAIL(e.status().message());
  const Experiment& x = *e.value();
  CHECK(x.cfg.duration_s == 3);
  CHECK(x.cfg.seed == 99);
  REQUIRE(x.policy != nullptr);
  CHECK(x.policy == &x.cfg.policies[1]);  // points into the config it owns
  CHECK(x.prior_or_null() == nullptr);    // small.toml names no prior
  // The plugins are loaded: the policy builds from them.
  auto parts = build_policy(x.cfg, *x.policy, x.plugins);
  CHECK(parts.ok());
  // Several policies and none named: the lookup's one line; with no lookup
  // asked, no policy.
  auto many = open_experiment(kSmall, {.one_policy = true});
  REQUIRE_FALSE(many.ok());
  CHECK(many.status().message().find("has 2 policies; pick one with --policy") != std::string::npos);
  auto all = open_experiment(kSmall);
  REQUIRE(all.ok());
  CHECK(all.value()->policy == nullptr);
  // Each step fails with its own line: the config, then the lookup.
  auto missing = open_experiment(kSmall + ".nope", {.one_policy = true, .policy = "Nope"});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("small.toml.nope") != std::string::npos);
  auto nope = open_experiment(kSmall, {.one_policy = true, .policy = "Nope"});
  REQUIRE_FALSE(nope.ok());
  CHECK(nope.status().message().rfind("no policy named 'Nope' in ", 0) == 0);
}

TEST_CASE("compose: the setup steps fail as Statuses naming what is wrong", "[compose]") {
  Small s;
  REQUIRE(check_weights_fit(s.cfg).ok());
  s.cfg.accelerators[0].hbm_bytes = 1 << 20;
  const Status fit = check_weights_fit(s.cfg);
  REQUIRE_FALSE(fit.ok());
  CHECK(fit.message().find(": cluster: accelerator '" + s.cfg.accelerators[0].name + "' has 1.00 MiB of HBM; ") !=
        std::string::npos);
  auto nobody = tenant_config(s.cfg, "nobody");
  REQUIRE_FALSE(nobody.ok());
  CHECK(nobody.status().message() == s.cfg.path + ": no tenant named 'nobody'");
  REQUIRE(tenant_config(s.cfg, "online0").ok());
  CHECK(tenant_config(s.cfg, "online0").value()->name == "online0");
}

TEST_CASE("compose: a bad plugin fails the build with one line naming the policy", "[compose]") {
  Small s;
  s.cfg.policies[1].placement.name = "nope";
  auto parts = build_policy(s.cfg, s.cfg.policies[1], s.plugins);
  REQUIRE_FALSE(parts.ok());
  CHECK(parts.status().message().rfind("policy 'SliceScheduler': unknown placement policy 'nope' (available: ", 0) ==
        0);
  s.cfg.policies[1].placement.name = "simulation-guided";
  s.cfg.policies[1].arbiter.args = nlohmann::json{{"bogus", 1}};
  parts = build_policy(s.cfg, s.cfg.policies[1], s.plugins);
  REQUIRE_FALSE(parts.ok());
  CHECK(parts.status().message().rfind("policy 'SliceScheduler': transfer arbiter 'greedy': ", 0) == 0);
}

TEST_CASE("compose: the parts hold the tenants, the window's end on the run's clock and the faults in order",
          "[compose]") {
  Small s;
  auto parts = s.build("SliceScheduler");
  REQUIRE(parts->tenants.size() == 2);
  CHECK(parts->tenants[0].spec().name == "online0");
  CHECK(parts->online == std::vector<bool>{true, false});
  CHECK(parts->engine.stop_at == 60'000'000'000);
  CHECK(parts->requests() == parts->tenants[0].records().size() + parts->tenants[1].records().size());
  // Live mode replays time_scale times faster: the window ends sooner.
  CHECK(s.build("SliceScheduler", {.time_scale = 4})->engine.stop_at == 15'000'000'000);
  s.cfg.faults = {{"gpu2", 30, 0}, {"gpu1", 10, 5}};
  auto faulty = s.build("SliceScheduler");
  REQUIRE(faulty->engine.faults.size() == 3);
  CHECK(faulty->engine.faults[0].at == 10'000'000'000);
  CHECK(faulty->engine.faults[1].at == 15'000'000'000);
  CHECK_FALSE(faulty->engine.faults[1].down);
  CHECK(faulty->engine.faults[2].accel == 2);
}

TEST_CASE("observers: every issued operator finishes once, predicted, every request arrives and ends", "[observer]") {
  Small s;
  auto parts = s.build("SliceScheduler");
  const std::size_t requests = parts->requests();
  Counting count;
  PredictionRecorder predictions;
  EngineObserver* observers[] = {&count, &predictions};
  auto result = s.run(*parts, observers);
  REQUIRE(result.ok());
  CHECK(count.issues > 0);
  CHECK(count.ops == count.issues);  // no faults: every issue runs once
  CHECK(count.issued_at.empty());
  CHECK(count.picked_ops == count.issues);
  CHECK(count.predicted == count.ops);  // simulation-guided predicts every pick (no horizon)
  CHECK(count.feedback == count.ops + count.transfers);
  CHECK(count.decisions == result->scheduling.batches);
  CHECK(count.deferred == result->scheduling.deferred);
  // Inside the 60 s window every request arrives; those that end, end once.
  CHECK(count.by_kind[RequestEvent::Kind::kArrived] == requests);
  std::size_t done = 0;
  for (const RequestRecord& r : result->requests) done += r.done >= 0;
  CHECK(count.by_kind[RequestEvent::Kind::kDone] == done);
  CHECK(count.by_kind[RequestEvent::Kind::kFirstToken] >= done);
  CHECK(count.by_kind[RequestEvent::Kind::kIteration] > done);
  const auto errors = predictions.errors(*parts->templates);
  REQUIRE(errors.size() == 7);  // embed, four layer groups, head, all
  CHECK(errors.back().kind == "all");
  CHECK(errors.back().ops == count.ops);
  CHECK(errors.back().duration_mape_pct > 0);
}

TEST_CASE("observers: a static policy predicts nothing", "[observer]") {
  Small s;
  auto parts = s.build("Static-Online");
  Counting count;
  PredictionRecorder predictions;
  EngineObserver* observers[] = {&count, &predictions};
  REQUIRE(s.run(*parts, observers).ok());
  CHECK(count.ops > 0);
  CHECK(count.predicted == 0);
  CHECK(predictions.errors(*parts->templates).empty());
}

TEST_CASE("engine: a drain admits no more arrivals and lets what was admitted finish", "[engine][stop]") {
  Small s({{"duration_s", "-1"}});
  const Stopped drain = run_stopped(s, "SliceScheduler", RequestEvent::Kind::kDone, 1);
  CHECK_FALSE(drain.result.complete);
  CHECK(drain.arrivals_after == 0);
  std::size_t finished = 0, never_admitted = 0;
  for (const RequestRecord& r : drain.result.requests) {
    if (r.arrival <= drain.at) {
      CHECK(r.done >= 0);  // admitted before the drain: finished
      ++finished;
    } else {
      CHECK(r.first_token < 0);  // after it: never delivered
      ++never_admitted;
    }
  }
  CHECK(finished > 0);
  CHECK(never_admitted > 0);
}

TEST_CASE("engine: a cancel stops at once, leaving what runs unfinished", "[engine][stop]") {
  Small s;
  const Stopped cancel = run_stopped(s, "SliceScheduler", RequestEvent::Kind::kFirstToken, 2);
  CHECK(cancel.result.end == cancel.at);
  std::size_t unfinished = 0;
  for (const RequestRecord& r : cancel.result.requests) {
    CHECK(r.done <= cancel.at);
    unfinished += r.done < 0;
  }
  CHECK(unfinished > 0);
}

TEST_CASE("scheduler: a policy that defers every batch is a decision without a pick, then a deadlock naming it",
          "[engine][scheduler][deadlock]") {
  Small s;
  REQUIRE(s.plugins.placement.add("never", [](const PluginArgs&) { return std::make_unique<NeverPlace>(); }).ok());
  s.cfg.policies[1].placement.name = "never";
  auto parts = s.build("SliceScheduler");
  Counting count;
  EngineObserver* observers[] = {&count};
  auto result = s.run(*parts, observers);
  REQUIRE_FALSE(result.ok());
  CHECK(result.status().message().rfind("policy 'SliceScheduler' (placement 'never'): engine: deadlock at ", 0) == 0);
  CHECK(count.decisions > 0);
  CHECK(count.deferred == count.decisions);
  CHECK(count.issues == 0);
}

TEST_CASE("decision log: every round of the window, with each candidate's verdict and the pick",
          "[observer][explain]") {
  Small s;
  auto parts = s.build("SliceScheduler", {.explain = true});
  std::vector<std::string> names;
  std::vector<std::size_t> counts;
  for (const Tenant& t : parts->tenants) {
    names.push_back(t.spec().name);
    counts.push_back(t.records().size());
  }
  DecisionLog log("SliceScheduler", names, counts, 5'000'000'000);
  EngineObserver* observers[] = {&log};
  auto result = s.run(*parts, observers);
  REQUIRE(result.ok());
  REQUIRE_FALSE(log.lines().empty());
  CHECK(log.lines().size() < result->scheduling.batches);  // only the first 5 s
  std::set<std::uint64_t> requests;
  for (const auto& line : log.lines()) {
    CHECK(line.t < 5'000'000'000);
    const auto j = nlohmann::json::parse(line.json);
    CHECK(j["policy"] == "SliceScheduler");
    CHECK(j["simulated"] == true);
    bool picked = false;
    for (const auto& c : j["candidates"]) {
      // --explain simulates every candidate to the end: none is dominated.
      CHECK((c.contains("mean_completion_s") || c["infeasible"].get<std::string>().rfind("dominated", 0) != 0));
      picked |= j["pick"].is_string() && c["label"] == j["pick"];
    }
    CHECK(picked);
    for (const auto& q : j["requests"]) requests.insert(q.get<std::uint64_t>());
  }
  CHECK(requests.count(0));  // the first request's rounds are there
}

TEST_CASE("decision log: a label or reason that is not UTF-8 is written with U+FFFD, not an exception",
          "[observer][explain][bad-input]") {
  Small s;
  auto parts = s.build("SliceScheduler", {.explain = true});
  DecisionLog log("SliceScheduler", {"on"}, {1}, 5'000'000'000);
  const Batch batch;
  const std::vector<Candidate> cands = {Candidate{"p\"\\\n\xff\xc3", {}}};
  const std::vector<Outcome> outs(1);
  log.on_decision(*parts->gmg, {.now = 1, .batch = &batch, .candidates = cands, .outcomes = outs, .pick = 0});
  REQUIRE(log.lines().size() == 1);
  const auto j = nlohmann::json::parse(log.lines()[0].json);  // (throws on bad UTF-8)
  CHECK(j["pick"] == "p\"\\\n\xef\xbf\xbd\xef\xbf\xbd");
}

TEST_CASE("decision log: the pick is named by its index too, since two candidates may share a label",
          "[observer][explain]") {
  Small s;
  auto parts = s.build("SliceScheduler", {.explain = true});
  DecisionLog log("SliceScheduler", {"on"}, {1}, 5'000'000'000);
  const Batch batch;
  const std::vector<Candidate> cands = {Candidate{"gpu0", {}}, Candidate{"gpu0", {}}};
  const std::vector<Outcome> outs(2);
  log.on_decision(*parts->gmg, {.now = 1, .batch = &batch, .candidates = cands, .outcomes = outs, .pick = 1});
  log.on_decision(*parts->gmg, {.now = 2, .batch = &batch, .candidates = cands, .outcomes = outs});
  REQUIRE(log.lines().size() == 2);
  const auto picked = nlohmann::json::parse(log.lines()[0].json);
  CHECK(picked["pick"] == "gpu0");
  CHECK(picked["pick_index"] == 1);
  const auto deferred = nlohmann::json::parse(log.lines()[1].json);
  CHECK(deferred["pick"].is_null());
  CHECK_FALSE(deferred.contains("pick_index"));
}

TEST_CASE("prediction error: MAPE and bias per kind, of duration and completion", "[observer][metrics]") {
  constexpr Nanos kMs = 1'000'000;
  PredictionRecorder p;
  auto op = [](OpKindId kind, Nanos issued, Nanos ps, Nanos pf, Nanos s, Nanos f, bool failed = false) {
    RunRecord r;
    r.kind = kind, r.accel = 0, r.issued = issued, r.predicted_start = ps, r.predicted_finish = pf, r.start = s,
    r.finish = f, r.failed = failed;
    return r;
  };
  // kind 0: predicted [0,10] ran [0,8]: duration and completion both 25 % over, bias -25 %;
  //         predicted [5,10] ran [4,14]: duration 50 % under (bias +50 %), completion 10 vs 14.
  p.on_finish(op(0, 0, 0, 10 * kMs, 0, 8 * kMs));
  p.on_finish(op(0, 0, 5 * kMs, 10 * kMs, 4 * kMs, 14 * kMs));
  // kind 1: exact. Ignored: failed, unpredicted, and transfers.
  p.on_finish(op(1, kMs, 2 * kMs, 3 * kMs, 2 * kMs, 3 * kMs));
  p.on_finish(op(1, 0, 0, kMs, 0, 9 * kMs, /*failed=*/true));
  p.on_finish(op(1, 0, -1, -1, 0, 9 * kMs));
  RunRecord transfer = op(1, 0, 0, kMs, 0, 9 * kMs);
  transfer.to = 1;
  p.on_finish(transfer);

  TemplateRegistry templates;
  TemplateBuilder a("a"), b("b");
  a.op("x").output({{Expr::constant(1)}, DType::kI8});
  b.op("y").output({{Expr::constant(1)}, DType::kI8});
  REQUIRE(templates.add(std::move(a).build().value()).ok());
  REQUIRE(templates.add(std::move(b).build().value()).ok());
  const auto e = p.errors(templates);
  REQUIRE(e.size() == 3);
  CHECK(e[0].kind == "a/x");
  CHECK(e[0].ops == 2);
  CHECK(e[0].duration_mape_pct == Approx(37.5));
  CHECK(e[0].duration_bias_pct == Approx(12.5));
  CHECK(e[0].completion_mape_pct == Approx((25.0 + 400.0 / 14) / 2));
  CHECK(e[0].completion_bias_pct == Approx((-25.0 + 400.0 / 14) / 2));
  CHECK(e[1].kind == "b/y");
  CHECK(e[1].ops == 1);
  CHECK(e[1].duration_mape_pct == 0);
  CHECK(e[1].completion_bias_pct == 0);
  CHECK(e[2].kind == "all");
  CHECK(e[2].ops == 3);
  CHECK(e[2].duration_mape_pct == Approx(25.0));
}

TEST_CASE("progress: a call per 1 % of requests ended, and at the last", "[observer]") {
  std::vector<std::size_t> calls;
  ProgressObserver p(
      [&](Nanos, std::size_t done, std::size_t total) {
        CHECK(total == 250);
        calls.push_back(done);
      },
      250);
  RequestRecord r;
  for (std::uint32_t i = 0; i < 250; ++i) {
    p.on_request({RequestEvent::Kind::kArrived, 0, i, 0}, r);
    p.on_request({i % 10 == 0 ? RequestEvent::Kind::kFailed : RequestEvent::Kind::kDone, 0, i, 0}, r);
  }
  REQUIRE(calls.size() == 84);  // every 3rd of 250 (3 * 100 >= 250), and the last
  CHECK(calls.front() == 3);
  CHECK(calls.back() == 250);
}

namespace {

// small.toml with its cluster and [ground_truth] replaced, written beside
// the build's working directory (its data paths made absolute).
ExperimentConfig small_with(const std::string& accelerators, const std::string& layers_type) {
  std::ifstream in(kSmall);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  const std::string data = std::string(SLICESCHED_SOURCE_DIR) + "/data/";
  for (std::size_t at; (at = s.find("../../data/")) != std::string::npos;) s.replace(at, 11, data);
  const std::string old_accels = "accelerators = [{ name_prefix = \"gpu\", count = 4, type = \"H100\", hbm_gib = 80 }]";
  REQUIRE(s.find(old_accels) != std::string::npos);
  s.replace(s.find(old_accels), old_accels.size(), "accelerators = [" + accelerators + "]");
  const std::string gt = "[ground_truth]\n", own_type = "layers_type = \"H100\"\n";
  if (const auto at = s.find(own_type); at != std::string::npos) s.erase(at, own_type.size());
  s.insert(s.find(gt) + gt.size(), "layers_type = \"" + layers_type + "\"\n");
  const auto path = std::filesystem::temp_directory_path() /
                    ("slicesched_truth_" + std::to_string(std::hash<std::string>{}(s)) + ".toml");
  std::ofstream(path) << s;
  auto cfg = load_config(path.string());
  std::filesystem::remove(path);
  INFO((cfg.ok() ? std::string() : cfg.status().message()));
  REQUIRE(cfg.ok());
  return std::move(cfg).value();
}

std::vector<TruthPlayed> played(const ExperimentConfig& cfg) {
  auto t = load_truths(cfg);
  REQUIRE(t.ok());
  return truth_played(cfg, t.value());
}

}  // namespace

TEST_CASE("a type name and its alias play the same measured profile", "[compose][ground_truth]") {
  // The profile says H100-SXM, the cluster says H100 (an alias), and the reverse.
  for (const auto& [cluster, profile] :
       std::vector<std::pair<std::string, std::string>>{{"H100", "H100-SXM"}, {"H100-SXM", "H100"}, {"H100", "H100"}}) {
    const ExperimentConfig cfg =
        small_with("{ name_prefix = \"gpu\", count = 4, type = \"" + cluster + "\" }", profile);
    const auto p = played(cfg);
    REQUIRE(p.size() == 1);
    CHECK(p[0].type == cluster);
    CHECK(p[0].datasheet == "H100-SXM");
    CHECK(p[0].truth == "profile");
    CHECK(p[0].source == "llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv");
    CHECK(roofline_fallback_line(p).empty());
  }
}

TEST_CASE("a profile that no type of the cluster plays is named in the fallback line", "[compose][ground_truth]") {
  const ExperimentConfig cfg = small_with("{ name_prefix = \"gpu\", count = 2, type = \"A100\" }", "H100-SXM");
  const auto p = played(cfg);
  REQUIRE(p.size() == 1);
  CHECK(p[0].truth == "roofline");
  const std::string profile = std::filesystem::path(cfg.ground_truth.layers_csv).filename().string();
  CHECK(profile == "llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv");
  CHECK(roofline_fallback_line(p, profile) ==
        "ground truth: A100 (A100-80GB) plays the roofline (datasheet peaks, efficiencies from "
        "roofline-fit-a100.toml), not the measured profile llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv "
        "(ground_truth.layers_type names another type)");
  // A tensor-parallel group that plays its own profile (layers_tp) is not
  // the profile the A100 skipped: the line names the tp-1 one (an outside
  // probe saw the tp-2 file named).
  auto with_tp = p;
  with_tp.push_back(TruthPlayed{.type = "H100/tp2",
                                .datasheet = "H100-SXM",
                                .truth = "profile",
                                .source = "llmservingsim_H100_Llama-3.1-8B_tp2_layers.csv",
                                .tp = 2});
  CHECK(roofline_fallback_line(with_tp) == roofline_fallback_line(p));
}

TEST_CASE("a type named by its table's file plays what its name would", "[compose][ground_truth]") {
  // `type = "A100-80GB.toml"` (config.md): its roofline, and the H100
  // profile through the file's name too.
  const auto a100 = played(small_with("{ name_prefix = \"gpu\", count = 2, type = \"A100-80GB.toml\" }", "H100-SXM"));
  REQUIRE(a100.size() == 1);
  CHECK(a100[0].truth == "roofline");
  CHECK(a100[0].datasheet == "A100-80GB");
  const auto h100 = played(small_with("{ name_prefix = \"gpu\", count = 2, type = \"H100-SXM.toml\" }", "H100"));
  REQUIRE(h100.size() == 1);
  CHECK(h100[0].truth == "profile");
}

TEST_CASE("a model of another shape than the profile's plays the roofline, said in one line",
          "[compose][ground_truth]") {
  // two-models.toml: the profile measured llama3-8b on an H100; Qwen2.5-7B
  // is another shape, so its operators play the roofline there.
  const std::string two = std::string(SLICESCHED_SOURCE_DIR) + "/configs/experiments/two-models.toml";
  auto cfg = load_config(two);
  REQUIRE(cfg.ok());
  CHECK(cfg->ground_truth.off_profile_models == std::vector<std::string>{"qwen"});
  const auto p = played(*cfg);
  REQUIRE(p.size() == 1);
  CHECK(p[0].truth == "profile");
  CHECK(p[0].roofline_models == std::vector<std::string>{"qwen"});
  CHECK(p[0].roofline_source == "roofline-fit.toml");  // and the efficiencies qwen plays
  CHECK(p[0].fit.has_value());
  CHECK(profile_scope_lines(*cfg) ==
        std::vector<std::string>{
            "ground truth: model 'qwen' plays the roofline on every type (efficiencies from roofline-fit.toml or the "
            "type's own fit), not llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv, which measured 'llama3-8b' "
            "(ground_truth.layers_model): another shape"});
  // A config's model that takes the preset's name but changes its shape is
  // not what the profile measured (the name means the preset).
  auto renamed = load_config(std::string(SLICESCHED_SOURCE_DIR) + "/configs/experiments/colocation.toml",
                             {{"model.hidden", "2048"}});
  REQUIRE(renamed.ok());
  CHECK(renamed->ground_truth.off_profile_models == std::vector<std::string>{"llama3-8b"});
  // Then no model plays the profile: the H100 plays the roofline, and says
  // which fit and that the profile went unplayed (it said "profile").
  const auto all_off = played(*renamed);
  REQUIRE(all_off.size() == 1);
  CHECK(all_off[0].truth == "roofline");
  CHECK(all_off[0].source == "roofline-fit.toml");
  CHECK(all_off[0].profile_unplayed == "llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv");
  CHECK(all_off[0].roofline_models.empty());
  REQUIRE(all_off[0].fit);
  CHECK(roofline_fallback_line(all_off, "llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv").empty());
  // An empty name is not a model.
  auto bare = load_config(two, {{"ground_truth.layers_model", "\"\""}});
  REQUIRE_FALSE(bare.ok());
  CHECK(bare.status().message() ==
        "--set ground_truth.layers_model=\"\": ground_truth.layers_model: expected the "
        "name of the model the layers profile measured (a model of this config or a preset)");
  // A name that is no model nor preset is refused where it is written.
  auto nope = load_config(two, {{"ground_truth.layers_model", "\"llama-9b\""}});
  REQUIRE_FALSE(nope.ok());
  CHECK(
      nope.status().message().starts_with("--set ground_truth.layers_model=\"llama-9b\": ground_truth.layers_model: no "
                                          "model or preset named 'llama-9b' (models: llama, qwen; presets: "));
}

TEST_CASE("without layers_model and layers_type the profile plays every model and type, said in one line",
          "[compose][ground_truth]") {
  std::ifstream in(kSmall);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  for (const std::string line : {"layers_model = \"llama3-8b\"", "layers_type = \"H100\""}) {
    const auto at = s.find(line);
    REQUIRE(at != std::string::npos);
    s.erase(at, s.find('\n', at) - at + 1);
  }
  const auto path = std::filesystem::path(kSmall).parent_path() / "small_unscoped.toml";
  std::ofstream(path) << s;
  auto cfg = load_config(path.string());
  std::filesystem::remove(path);
  REQUIRE(cfg.ok());
  CHECK(cfg->ground_truth.off_profile_models.empty());
  CHECK(profile_scope_lines(*cfg) ==
        std::vector<std::string>{"ground truth: llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv is taken to measure "
                                 "model 'llama3-8b' on type 'H100' (set ground_truth.layers_model and layers_type to "
                                 "what it measured: any other then plays the roofline)"});
}

TEST_CASE("a type without a profile falls back to the roofline, said in one line", "[compose][ground_truth]") {
  const ExperimentConfig cfg = small_with(
      "{ name_prefix = \"gpu\", count = 2, type = \"H100\" }, "
      "{ name_prefix = \"gpu\", count = 2, first_index = 2, type = \"A100\" }",
      "H100-SXM");
  const auto p = played(cfg);
  REQUIRE(p.size() == 2);
  CHECK(p[0].truth == "profile");
  CHECK(p[1].type == "A100");
  CHECK(p[1].datasheet == "A100-80GB");
  CHECK(p[1].truth == "roofline");
  // The A100's table names a fit made on its own kernels: it plays that one.
  CHECK(p[1].source == "roofline-fit-a100.toml");
  REQUIRE(p[1].fit.has_value());
  // The KV-cache read has its own efficiency, from the A100's fit.
  CHECK((*p[1].fit)[WorkKind::kKvRead].memory > 0.5);
  CHECK(roofline_fallback_line(p) ==
        "ground truth: A100 (A100-80GB) plays the roofline (datasheet peaks, efficiencies from "
        "roofline-fit-a100.toml), not the measured profile llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv "
        "(ground_truth.layers_type names another type)");
}

TEST_CASE("a type plays its own roofline fit unless the config names one fit for every type",
          "[compose][ground_truth]") {
  const std::string dir = std::string(SLICESCHED_SOURCE_DIR) + "/configs/accelerators/";
  auto own = load_roofline_fit(dir + "roofline-fit-a100.toml");
  auto general = load_roofline_fit(dir + "roofline-fit.toml");
  REQUIRE(own.ok());
  REQUIRE(general.ok());
  REQUIRE((*own)[WorkKind::kGemm].overlap_p != (*general)[WorkKind::kGemm].overlap_p);
  // Two roofline types: the A100 has its own fit, the A40 none.
  ExperimentConfig cfg = small_with(
      "{ name_prefix = \"gpu\", count = 2, type = \"A100\" }, "
      "{ name_prefix = \"gpu\", count = 2, first_index = 2, type = \"A40\" }",
      "H100-SXM");
  auto t = load_truths(cfg);
  REQUIRE(t.ok());
  REQUIRE(t->typed.has_value());
  // By name or alias, as everywhere.
  CHECK(fit_for(*t->typed, "A100")[WorkKind::kGemm].overlap_p == (*own)[WorkKind::kGemm].overlap_p);
  CHECK(fit_for(*t->typed, "A100-80GB")[WorkKind::kGemm].overlap_p == (*own)[WorkKind::kGemm].overlap_p);
  CHECK(fit_for(*t->typed, "A40")[WorkKind::kGemm].overlap_p == (*general)[WorkKind::kGemm].overlap_p);
  auto p = truth_played(cfg, *t);
  REQUIRE(p.size() == 2);
  CHECK(p[0].source == "roofline-fit-a100.toml");
  CHECK(p[1].source == "roofline-fit.toml");
  CHECK(roofline_fallback_line(p) ==
        "ground truth: A100 (A100-80GB), A40 play the roofline (datasheet peaks, efficiencies from "
        "roofline-fit-a100.toml for A100, roofline-fit.toml for A40), no measured profile given");
  // [ground_truth] roofline named: every type plays it.
  cfg.ground_truth.roofline_given = true;
  auto t2 = load_truths(cfg);
  REQUIRE(t2.ok());
  CHECK(t2->typed->type_fits.empty());
  CHECK(fit_for(*t2->typed, "A100")[WorkKind::kGemm].overlap_p == (*general)[WorkKind::kGemm].overlap_p);
  for (const auto& q : truth_played(cfg, *t2)) CHECK(q.source == "roofline-fit.toml");
}

TEST_CASE("the engine's fixed cost per iteration is charged to each sampling operator and reported apart",
          "[compose][fixed_costs]") {
  Small none;
  Small fixed({{"ground_truth.iteration_overhead_us", "2000"}});
  REQUIRE(fixed.cfg.ground_truth.iteration_overhead_s == 0.002);
  const PolicyRun without = none.run_policy("Static-Online");
  const PolicyRun with = fixed.run_policy("Static-Online");
  // Every iteration's head is counted; without a cost it is charged nothing.
  CHECK(without.fixed_costs.iterations > 100);
  CHECK(without.fixed_costs.seconds == 0);
  CHECK(with.fixed_costs.per_iteration_s == 0.002);
  CHECK_FALSE(with.fixed_costs.per_sequence_s.has_value());
  CHECK(with.fixed_costs.iterations > 100);
  CHECK_THAT(with.fixed_costs.seconds,
             Catch::Matchers::WithinRel(0.002 * static_cast<double>(with.fixed_costs.iterations), 1e-12));
  CHECK(with.fixed_costs.sequence_seconds == 0);
  // Each first token waits for at least one iteration's cost.
  CHECK(with.metrics.ttft_p50_s > without.metrics.ttft_p50_s + 0.0015);
}

TEST_CASE("the engine's fixed cost per sequence is charged for every sequence of every iteration, apart",
          "[compose][fixed_costs]") {
  Small fixed({{"ground_truth.iteration_overhead_us", "1000"}, {"ground_truth.sequence_overhead_us", "250"}});
  REQUIRE(fixed.cfg.ground_truth.sequence_overhead_s == 0.00025);
  const PolicyRun run = fixed.run_policy("Static-Online");
  const auto& f = run.fixed_costs;
  CHECK(f.per_sequence_s == 0.00025);
  // Every iteration holds at least one sequence, and batches hold several.
  CHECK(f.iterations > 100);
  CHECK(f.sequence_iterations > f.iterations);
  CHECK_THAT(f.iteration_seconds, Catch::Matchers::WithinRel(0.001 * static_cast<double>(f.iterations), 1e-12));
  CHECK_THAT(f.sequence_seconds,
             Catch::Matchers::WithinRel(0.00025 * static_cast<double>(f.sequence_iterations), 1e-12));
  CHECK_THAT(f.seconds, Catch::Matchers::WithinRel(f.iteration_seconds + f.sequence_seconds, 1e-12));
  // A request that finishes sat in one iteration per token it generated (its
  // prefill samples the first), so the sequences charged are at least the
  // tokens of the requests done.
  CHECK(f.sequence_iterations >= run.metrics.tokens_generated);
}

TEST_CASE("the engine's fixed cost per request is charged once, at the request's first iteration, and reported apart",
          "[compose][fixed_costs]") {
  Small none;
  Small fixed({{"ground_truth.request_overhead_us", "5000"}});
  REQUIRE(fixed.cfg.ground_truth.request_overhead_s == 0.005);
  const PolicyRun without = none.run_policy("Static-Online");
  const PolicyRun with = fixed.run_policy("Static-Online");
  CHECK(without.fixed_costs.requests == 0);
  CHECK(without.fixed_costs.seconds == 0);
  const auto& f = with.fixed_costs;
  CHECK(f.per_request_s == 0.005);
  CHECK_FALSE(f.per_iteration_s.has_value());
  // Every request that finished ran, so it was charged; none twice (there
  // are no more charges than requests).
  CHECK(f.requests >= with.metrics.requests_done);
  CHECK(f.requests <= with.metrics.requests_total);
  CHECK(f.requests > 10);
  CHECK_THAT(f.request_seconds, Catch::Matchers::WithinRel(0.005 * static_cast<double>(f.requests), 1e-12));
  CHECK(f.iteration_seconds == 0);
  CHECK(f.sequence_seconds == 0);
  CHECK(f.seconds == f.request_seconds);
  // The iterations are the same work: only their heads pay more.
  CHECK(f.iterations > 100);
  // A first token waits for its own request's cost at least.
  CHECK(with.metrics.ttft_p50_s > without.metrics.ttft_p50_s + 0.004);
}

TEST_CASE("without [ground_truth] fixed costs, each type pays what calibrate measured on it",
          "[compose][fixed_costs]") {
  // The cluster says H100; calibrate measured "H100-SXM" (an alias of it).
  const ExperimentConfig cfg = small_with("{ name_prefix = \"gpu\", count = 4, type = \"H100\" }", "H100");
  REQUIRE_FALSE(cfg.ground_truth.iteration_overhead_s.has_value());
  REQUIRE_FALSE(cfg.ground_truth.sequence_overhead_s.has_value());
  const auto accels = make_cluster(cfg).value();
  REQUIRE(accels->type_count() == 1);
  Truths truths;
  CHECK(fixed_costs_per_type(cfg, truths, *accels)[0].iteration_s == 0);  // nothing measured, nothing configured
  CalibrationProfile cal;
  cal.fixed_costs.push_back({"A100", 0.009, 0.009, 3});
  cal.fixed_costs.push_back({"H100-SXM", 0.0005, 0.0001, 12});
  truths.calibrated = cal;
  const auto measured = fixed_costs_per_type(cfg, truths, *accels);
  CHECK(measured[0].iteration_s == 0.0005);
  CHECK(measured[0].sequence_s == 0.0001);
  CHECK(measured[0].request_s == 0);  // not in the profile
  truths.calibrated->fixed_costs[1].request_s = 0.002;
  CHECK(fixed_costs_per_type(cfg, truths, *accels)[0].request_s == 0.002);
  // Given in [ground_truth], a cost holds on every type, over the measurement.
  ExperimentConfig given = cfg;
  given.ground_truth.sequence_overhead_s = 0.00002;
  const auto mixed = fixed_costs_per_type(given, truths, *accels);
  CHECK(mixed[0].iteration_s == 0.0005);
  CHECK(mixed[0].sequence_s == 0.00002);
  given.ground_truth.request_overhead_s = 0.0001;
  CHECK(fixed_costs_per_type(given, truths, *accels)[0].request_s == 0.0001);
}

TEST_CASE("Llama-2-70B spread over four H100s holds a quarter of its weights on each, and runs", "[compose][spread]") {
  auto c = load_config(std::string(SLICESCHED_SOURCE_DIR) + "/configs/experiments/llama2-70b.toml",
                       {{"duration_s", "20"}, {"tenants.*.stream.duration_s", "20"}});
  REQUIRE(c.ok());
  const ExperimentConfig& cfg = c.value();
  PluginRegistries plugins;
  REQUIRE(load_plugins(cfg, plugins).ok());
  auto truths = load_truths(cfg);
  REQUIRE(truths.ok());
  auto policy = find_policy(cfg, "SliceScheduler");
  REQUIRE(policy.ok());
  auto parts = build_policy(cfg, *policy.value(), plugins, {});
  REQUIRE(parts.ok());
  const Gmg& gmg = *parts.value()->gmg;
  const std::int64_t whole = parts.value()->models.of(parts.value()->tmpl)->weight_bytes();
  const double gib = 1073741824.0;
  // 69B parameters in bf16: more than one 80 GiB H100 holds.
  CHECK(static_cast<double>(whole) / gib > 120);
  CHECK(static_cast<double>(whole) / gib < 130);
  REQUIRE(gmg.accels().size() == 4);
  std::int64_t sum = 0;
  for (AccelId a = 0; a < 4; ++a) {
    const std::int64_t w = gmg.hbm(a).weights;
    sum += w;
    // Two groups of ten layers each, 1.59 GiB a layer: 31.9 GiB, and the
    // embedding (0.49 GiB) on the first, the LM head on the last.
    INFO("gpu" << a << ": " << static_cast<double>(w) / gib << " GiB");
    CHECK(static_cast<double>(w) / gib > 31.8);
    CHECK(static_cast<double>(w) / gib < 32.4);
  }
  CHECK(gmg.hbm(0).weights > gmg.hbm(1).weights);
  CHECK(gmg.hbm(1).weights == gmg.hbm(2).weights);
  CHECK(gmg.hbm(3).weights > gmg.hbm(2).weights);
  CHECK(sum == whole);
  // It runs, each GPU's HBM holding its share and its layers' KV caches,
  // never more than the GPU has.
  auto run = run_offline(cfg, *parts.value(), truths.value());
  REQUIRE(run.ok());
  CHECK(run->metrics.requests_done > 5);
  REQUIRE(run->memory.peak.size() == 4);
  for (AccelId a = 0; a < 4; ++a) {
    CHECK(run->memory.peak[a] > gmg.hbm(a).weights);
    CHECK(run->memory.peak[a] <= run->memory.budget[a]);
  }
}

TEST_CASE("a spread model with tied embeddings holds the matrix on its last share too", "[compose][spread]") {
  // The head runs on the last share and reads the embedding's matrix: a
  // pipeline keeps a copy there (it was charged to the first share only).
  const std::string path = std::string(SLICESCHED_SOURCE_DIR) + "/configs/experiments/llama2-70b.toml";
  auto untied = load_config(path);
  auto tied = load_config(path, {{"model.tied_embeddings", "true"}});
  REQUIRE(untied.ok());
  REQUIRE(tied.ok());
  PluginRegistries plugins;
  REQUIRE(load_plugins(*tied, plugins).ok());
  auto a = build_policy(*untied, untied->policies.front(), plugins, {});
  auto b = build_policy(*tied, tied->policies.front(), plugins, {});
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  for (AccelId g = 0; g < 4; ++g) CHECK(b.value()->gmg->hbm(g).weights == a.value()->gmg->hbm(g).weights);
  const std::int64_t matrix = 32000ll * 8192 * 2;
  CHECK(b.value()->gmg->hbm(3).weights - b.value()->gmg->hbm(2).weights == matrix + 8192 * 2);
}

TEST_CASE("a spread model is refused where a share does not fit or a name is not an accelerator", "[compose][spread]") {
  const std::string path = std::string(SLICESCHED_SOURCE_DIR) + "/configs/experiments/llama2-70b.toml";
  // H100s cut to 24 GiB: a quarter of 128 GiB does not fit.
  auto small = load_config(path, {{"cluster.accelerators.0.hbm_gib", "24"}});
  REQUIRE_FALSE(small.ok());
  CHECK_THAT(small.status().message(), Catch::Matchers::Contains("model.spread: accelerator 'gpu0' has 24.00 GiB"));
  auto unknown = load_config(path, {{"model.spread", "[\"gpu0\", \"gpu9\"]"}});
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.status().message(), Catch::Matchers::Contains("model.spread: no accelerator named 'gpu9'"));
}

TEST_CASE("each accelerator type starts from priors scaled by its datasheet, term by term", "[compose][estimator]") {
  // Written for an H100, the templates' priors made an A100 predict as an
  // H100 until the estimator learnt, and a mixed cluster's first what-ifs
  // chose by the order its accelerators were listed in. Each term now
  // scales by the type's peak (compute) or HBM bandwidth (memory).
  auto c = load_config(std::string(SLICESCHED_SOURCE_DIR) + "/configs/experiments/heterogeneous.toml");
  REQUIRE(c.ok());
  const ExperimentConfig& cfg = c.value();
  PluginRegistries plugins;
  REQUIRE(load_plugins(cfg, plugins).ok());
  auto policy = find_policy(cfg, "SliceScheduler");
  REQUIRE(policy.ok());
  auto parts = build_policy(cfg, *policy.value(), plugins, {});
  REQUIRE(parts.ok());
  const PolicyParts& p = *parts.value();
  constexpr AccelTypeId kNone = 0xffff;
  AccelTypeId h100 = kNone, a100 = kNone;
  for (AccelTypeId t = 0; t < p.accels->type_count(); ++t) {
    const AcceleratorType* sheet = find_type(cfg.accelerator_types, p.accels->type_name(t));
    REQUIRE(sheet != nullptr);
    (sheet->name == "H100-SXM" ? h100 : a100) = t;
  }
  REQUIRE(h100 != kNone);
  REQUIRE(a100 != kNone);
  const AcceleratorType& a100_sheet = *find_type(cfg.accelerator_types, p.accels->type_name(a100));
  const TemplateOp& layers = p.templates->get(p.tmpl).ops()[1];
  REQUIRE(layers.prior_terms.size() == 4);
  for (const std::array<double, 4>& x : {std::array<double, 4>{2048, 2048.0 * 2048, 2048, 1},  // a prefill
                                         std::array<double, 4>{1, 1025, 1025, 1}}) {           // a decode step
    double want_h100 = 0, want_a100 = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      const double scale = layers.prior_terms[i] == PriorTerm::kCompute  ? kPriorPeakFlops / a100_sheet.peak_flops
                           : layers.prior_terms[i] == PriorTerm::kMemory ? kPriorBytesPerS / a100_sheet.hbm_bytes_per_s
                                                                         : 1.0;
      want_h100 += layers.prior[i] * x[i];
      want_a100 += layers.prior[i] * scale * x[i];
    }
    const double got_h100 = p.plugins.estimator->predict_op(layers.kind, h100, x);
    const double got_a100 = p.plugins.estimator->predict_op(layers.kind, a100, x);
    CHECK(got_h100 == Approx(want_h100).epsilon(1e-12));
    CHECK(got_a100 == Approx(want_a100).epsilon(1e-12));
    // 989 against 312 TFLOP/s, 3.35 against 2.04 TB/s: between the two ratios.
    CHECK(got_a100 / got_h100 > 1.5);
    CHECK(got_a100 / got_h100 < 3.2);
  }
}

TEST_CASE("a calibration profile names the model it measured, and is refused for another of that name",
          "[compose][calibration]") {
  auto loaded = load_config(kSmall);
  REQUIRE(loaded.ok());
  const ExperimentConfig& cfg = loaded.value();
  const ModelConfig& mc = cfg.models.front();
  const std::string ours = shape_text(*make_model(mc).value());
  ModelConfig bigger = mc;
  bigger.preset = "llama2-70b", bigger.layers = 80, bigger.hidden = 8192, bigger.heads = 64, bigger.mlp = 28672;
  bigger.vocab = 32000;
  const std::string theirs = shape_text(*make_model(bigger).value());
  REQUIRE(theirs != ours);
  const auto path = (std::filesystem::temp_directory_path() / "slicesched_shape_profile.json").string();
  CalibrationProfile p;
  p.source = "test";
  p.models.push_back({mc.name, theirs});
  REQUIRE(write_calibration(p, path).ok());
  // Written and read back as it was.
  auto back = read_calibration(path);
  REQUIRE(back.ok());
  REQUIRE(back->find_model(mc.name));
  CHECK(back->find_model(mc.name)->shape == theirs);
  // Measured on another model of this name: refused, as ground truth and as prior.
  auto refused = read_profile(cfg, "ground_truth.calibrated", path);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message() == cfg.path + ": ground_truth.calibrated: " + path + ": model '" + mc.name +
                                          "' was measured as " + theirs + "; the config's is " + ours +
                                          " (measure it again, or give the model another name)");
  ExperimentConfig with_prior = cfg;
  with_prior.estimator_prior = path;
  CHECK_FALSE(read_prior(with_prior).ok());
  // The same shape, or a profile that does not say (written before), is read.
  p.models.front().shape = ours;
  REQUIRE(write_calibration(p, path).ok());
  CHECK(read_profile(cfg, "ground_truth.calibrated", path).ok());
  p.models.clear();
  REQUIRE(write_calibration(p, path).ok());
  CHECK(read_profile(cfg, "ground_truth.calibrated", path).ok());
  // Shapes given for other models only, fits for this one: refused too.
  p.models = {{"another", ours}};
  p.ops.push_back({mc.name, "head", "H100", {"sequences", "1"}, {1e-6, 1e-4}, 3, 0});
  REQUIRE(write_calibration(p, path).ok());
  auto unshaped = read_profile(cfg, "ground_truth.calibrated", path);
  REQUIRE_FALSE(unshaped.ok());
  CHECK(unshaped.status().message() == cfg.path + ": ground_truth.calibrated: " + path + ": has fits for model '" +
                                           mc.name +
                                           "' but no shape for it in models (the shapes it gives: 1); "
                                           "measure it again");
  // What the shape says.
  CHECK(ours.find("dense-decoder: layers ") == 0);
  CHECK(theirs.find("hidden 8192, heads 64 (8 KV) of 128, MLP 28672, vocabulary 32000, 2-byte elements") !=
        std::string::npos);
  // A malformed entry is one line naming it.
  for (const char* bad : {R"("models": 3)", R"("models": [{"template": "m"}])",
                          R"("models": [{"template": "m", "shape": "a"}, {"template": "m", "shape": "b"}])"}) {
    INFO(bad);
    std::ofstream(path) << R"({"format": "slicesched-calibration/2", "ops": [], "transfers": [], )" << bad << "}";
    auto r = read_calibration(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find(path + ": models") == 0);
  }
  std::filesystem::remove(path);
}
