// The engine with its plugins: the transfer arbiter rules the emulated
// cluster (and the what-if predicts with the same rule), and an estimator
// without a linear form drives the scheduler through its virtual path with
// the same predictions as the fast path.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

import slicesched.core.plugin;
import slicesched.engine;
import slicesched.engine.recorders;
import slicesched.engine.union_partition_set;
import slicesched.plugins.builtin;
import slicesched.plugins.greedy_arbiter;
import slicesched.plugins.serial_arbiter;
import slicesched.simulator.emulated_cluster;
import slicesched.simulator.global_simulator;
import slicesched.workload.trace;
import slicesched.testing;
import slicesched.core.backend;
import slicesched.core.priors;
import slicesched.engine.observer;
import slicesched.engine.scheduler;
import slicesched.engine.tenant;
import slicesched.simulator.profile;
import slicesched.core.status;
import slicesched.core.ids;
import slicesched.core.shape;
import slicesched.core.graph;
import slicesched.core.accel;
import slicesched.core.gmg;
import slicesched.core.estimator;

using namespace slicesched;
using nlohmann::json;

namespace {

// A real estimator without a linear form: the online linear models behind
// the virtual interface only, so the simulator cannot take its fast path.
class Opaque final : public Estimator {
 public:
  // `calls` counts predictions (the what-if threads predict concurrently).
  Opaque(EstimatorSet set, std::atomic<std::size_t>& calls) : set_(std::move(set)), calls_(calls) {}
  double predict_op(OpKindId kind, AccelTypeId type, std::span<const double> features) const override {
    calls_.fetch_add(1, std::memory_order_relaxed);
    return set_.predict_op(kind, type, features);
  }
  double predict_transfer(AccelId src, AccelId dst, std::uint64_t bytes) const override {
    calls_.fetch_add(1, std::memory_order_relaxed);
    return set_.predict_transfer(src, dst, bytes);
  }
  Status observe_op(OpKindId kind, AccelTypeId type, std::span<const double> features, double seconds) override {
    return set_.observe_op(kind, type, features, seconds);
  }
  Status observe_transfer(AccelId src, AccelId dst, std::uint64_t bytes, double seconds) override {
    return set_.observe_transfer(src, dst, bytes, seconds);
  }

 private:
  EstimatorSet set_;
  std::atomic<std::size_t>& calls_;
};

struct Run {
  std::vector<RunRecord> log;
  std::vector<RequestRecord> requests;
  RoundStats scheduling;
  std::size_t lost_ops = 0, rebuilt = 0;
};

// n H100s on NVLink, each holding Llama-3-8B's weights, and their measured
// ground truth (exact profiles, noise seed 3).
struct H100Cluster {
  std::shared_ptr<AcceleratorSet> accels = std::make_shared<AcceleratorSet>();
  std::shared_ptr<TemplateRegistry> templates = std::make_shared<TemplateRegistry>();
  TemplateId tmpl = 0;
  std::optional<Gmg> gmg;
};

H100Cluster h100_cluster(int n, std::int64_t hbm = 80ll << 30) {
  H100Cluster c;
  REQUIRE(c.accels->add_link_class("nvlink", 300e9, 5e-6).ok());
  for (int i = 0; i < n; ++i) REQUIRE(c.accels->add("gpu" + std::to_string(i), "H100", hbm).ok());
  c.tmpl = c.templates->add(testing::dense_template()).value();
  c.gmg.emplace(c.templates, c.accels);
  for (AccelId a = 0; a < c.accels->size(); ++a) REQUIRE(c.gmg->place_weights(c.tmpl, a).ok());
  return c;
}

ProfileGroundTruth h100_truth() {
  const std::filesystem::path dir = std::filesystem::path(SLICESCHED_SOURCE_DIR) / "data" / "profiles";
  auto layers = LayerProfile::load(dir / "llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv");
  auto links = TransferProfile::load(dir / "vidur_network_h100_dgx_send_recv.csv");
  REQUIRE(layers.ok());
  REQUIRE(links.ok());
  return ProfileGroundTruth(std::move(layers).value(), std::move(links).value(), /*seed=*/3);
}

// Four H100s, one online tenant (four lanes) and one offline load (two)
// placed by simulation-guided over pairs and quads, with exact profile
// ground truth. The load is heavy enough that greedy moves several tensors
// at once and the serial arbiter makes requests wait.
// `estimator_of` makes the estimator from the seeded linear models. With
// `what_if_arbiter` false the scheduler gets no arbiter factory (the
// default rule).
// simulation-guided's choices from a policy that does not declare its
// objective, so the scheduler runs every what-if to the end.
class Undeclared final : public PlacementPolicy {
 public:
  explicit Undeclared(PluginPtr<PlacementPolicy> inner) : inner_(std::move(inner)) {}
  std::optional<std::size_t> choose(const Gmg& gmg, const Batch& batch, std::span<const Candidate> candidates,
                                    std::span<const Outcome> outcomes) override {
    return inner_->choose(gmg, batch, candidates, outcomes);
  }

 private:
  PluginPtr<PlacementPolicy> inner_;
};

// The union of the named built-in partition sets, bound to `accels`.
UnionPartitionSet partition_sets(PluginRegistries& plugins, const AcceleratorSet& accels,
                                 std::initializer_list<const char*> names) {
  std::vector<PluginPtr<PartitionSet>> sets;
  for (const char* name : names) {
    auto made = plugins.partition.create(name);
    REQUIRE(made.ok());
    sets.push_back(std::move(made).value());
  }
  UnionPartitionSet partitions(std::move(sets));
  REQUIRE(partitions.bind(accels).ok());
  return partitions;
}

TEST_CASE("a union of partition sets writes over last round's candidates what it makes afresh", "[engine][partition]") {
  // The scheduler keeps its candidates between rounds and has the sets
  // overwrite them (their buffers reused): a round after a larger or
  // smaller batch, or after an accelerator was lost or came back, must see
  // exactly the candidates a fresh vector would get.
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  Gmg gmg(std::make_shared<TemplateRegistry>(), testing::cluster(10));
  UnionPartitionSet partitions = partition_sets(plugins, gmg.accels(), {"pairs", "quads", "singles"});
  std::vector<Candidate> kept;
  for (std::size_t ops : {6, 1, 4, 6})
    for (int lost : {-1, 5, 9, -1}) {
      for (AccelId a = 0; a < 10; ++a) gmg.set_down(a, static_cast<int>(a) == lost);
      Batch batch;
      for (std::size_t i = 0; i < ops; ++i) batch.ops.push_back(static_cast<OpId>(50 + i));
      INFO(ops << " ops, lost " << lost);
      partitions.candidates_into(gmg, batch, kept);
      const std::vector<Candidate> fresh = partitions.candidates(gmg, batch);
      CHECK(fresh.size() == 5 + 3 + 10);
      CHECK(kept == fresh);
    }
}

// What a run varies: whether the scheduler gets an arbiter factory (false:
// the default rule), whether the policy declares its objective, the
// cluster's size, parallel what-ifs, lost GPUs, the placement policy.
struct RunOptions {
  bool what_if_arbiter = true;
  bool declared_objective = true;
  int gpus = 4;
  bool parallel = true;
  bool prune = true;       // SchedulerOptions::prune
  Nanos prune_after = -1;  // SchedulerOptions::prune_after
  std::vector<FaultEvent> faults = {};
  const char* placement = "simulation-guided";
  std::string* error = nullptr;  // set: a failed run leaves its message here (else it fails the test)
  std::vector<std::pair<AccelId, bool>>* accelerators = nullptr;  // set: the on_accelerator events, in order
};

template <typename MakeEstimator>
Run run_engine(const std::string& arbiter, const json& arbiter_args, MakeEstimator estimator_of, RunOptions opt = {}) {
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  H100Cluster c = h100_cluster(opt.gpus);
  auto& accels = c.accels;
  auto& templates = c.templates;
  const TemplateId tmpl = c.tmpl;
  Gmg& gmg = *c.gmg;

  EstimatorSet seeded;
  REQUIRE(seed_priors(seeded, *templates, *accels).ok());
  auto estimator = estimator_of(std::move(seeded));

  std::vector<Tenant> tenants;
  TenantSpec online{.name = "online", .priority = 10, .requests = constant_rate(24, 2, 1024, 4), .lanes = 4};
  TenantSpec offline{.name = "offline", .online = false, .requests = constant_rate(16, 2, 2048, 4), .lanes = 2};
  tenants.emplace_back(0, std::move(online), tmpl);
  tenants.emplace_back(1, std::move(offline), tmpl);

  UnionPartitionSet partitions = partition_sets(plugins, *accels, {"pairs", "quads"});
  auto placement = plugins.placement.create(opt.placement);
  REQUIRE(placement.ok());
  auto backend_arbiter = plugins.arbiter.create(arbiter, arbiter_args);
  REQUIRE(backend_arbiter.ok());
  SchedulerOptions sopt{.issued_budget = 64, .batch_cap = 6, .parallel = opt.parallel};
  sopt.prune = opt.prune;
  sopt.prune_after = opt.prune_after;
  if (opt.what_if_arbiter) sopt.arbiter = [&] { return plugins.arbiter.create(arbiter, arbiter_args); };
  PluginPtr<PlacementPolicy> policy = std::move(placement).value();
  if (!opt.declared_objective) policy = PluginPtr<PlacementPolicy>(new Undeclared(std::move(policy)));
  Scheduler scheduler(*policy, partitions, *estimator, sopt);

  ProfileGroundTruth truth = h100_truth();
  EmulatedCluster cluster(accels->size(), truth, *backend_arbiter.value());
  Engine engine(gmg, tenants, scheduler, *estimator, cluster, {.faults = std::move(opt.faults)});
  TimelineRecorder timeline(std::numeric_limits<Nanos>::max());
  struct Accelerators final : EngineObserver {
    std::vector<std::pair<AccelId, bool>>* seen = nullptr;
    void on_accelerator(AccelId a, bool lost, Nanos, Nanos) override {
      if (seen) seen->emplace_back(a, lost);
    }
  } accelerators;
  accelerators.seen = opt.accelerators;
  EngineObserver* observers[] = {&timeline, &accelerators};
  auto result = engine.run(observers);
  if (opt.error && !result.ok()) {
    *opt.error = result.status().message();
    return {};
  }
  REQUIRE(result.ok());
  REQUIRE(result->complete);
  return {std::move(timeline.log()), result->requests, result->scheduling, result->lost_ops, result->rebuilt_sequences};
}

auto online_linear(PluginRegistries& plugins) {
  return [&plugins](EstimatorSet seeded) {
    auto made = plugins.estimator.create("online-linear");
    REQUIRE(made.ok());
    REQUIRE(made.value()
                ->seed_linear([&](EstimatorSet& set) {
                  set = std::move(seeded);
                  return Status::Ok();
                })
                .ok());
    return std::move(made).value();
  };
}

std::vector<RunRecord> transfers(const std::vector<RunRecord>& log) {
  std::vector<RunRecord> out;
  std::copy_if(log.begin(), log.end(), std::back_inserter(out), [](const RunRecord& r) { return r.to != kNoAccel; });
  std::sort(out.begin(), out.end(), [](const RunRecord& a, const RunRecord& b) { return a.start < b.start; });
  return out;
}

// The most transfers in flight at once.
std::size_t max_concurrent(const std::vector<RunRecord>& xs) {
  std::size_t most = 0;
  for (const RunRecord& x : xs) {
    std::size_t n = 0;
    for (const RunRecord& y : xs) n += y.start <= x.start && x.start < y.finish;
    most = std::max(most, n);
  }
  return most;
}

double mean_latency_s(const std::vector<RequestRecord>& requests) {
  double sum = 0;
  for (const RequestRecord& r : requests) sum += static_cast<double>(r.done - r.arrival) / 1e9;
  return sum / static_cast<double>(requests.size());
}

bool same(const RunRecord& a, const RunRecord& b) {
  return a.op == b.op && a.tenant == b.tenant && a.accel == b.accel && a.to == b.to && a.start == b.start &&
         a.finish == b.finish;
}

}  // namespace

TEST_CASE("engine: the serial arbiter never overlaps two transfers, greedy does", "[engine][arbiter]") {
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  const Run greedy = run_engine("greedy", json::object(), online_linear(plugins));
  const Run serial = run_engine("serial", json::object(), online_linear(plugins));
  const auto g = transfers(greedy.log), s = transfers(serial.log);
  REQUIRE(!g.empty());
  REQUIRE(!s.empty());
  CHECK(max_concurrent(g) >= 2);  // the cluster does move several tensors at once
  for (std::size_t i = 1; i < s.size(); ++i) {
    INFO("transfer " << i << " of " << s.size());
    REQUIRE(s[i].start >= s[i - 1].finish);
  }
  CHECK(max_concurrent(s) == 1);
  // Transfers that wait for each other make this load's requests slower.
  CHECK(mean_latency_s(serial.requests) > mean_latency_s(greedy.requests));
}

TEST_CASE("engine: a scheduler without an arbiter factory predicts with the default greedy rule", "[engine][arbiter]") {
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  const Run with = run_engine("greedy", json{{"reserve_oldest", true}}, online_linear(plugins));
  const Run without = run_engine("greedy", json::object(), online_linear(plugins), {.what_if_arbiter = false});
  REQUIRE(with.log.size() == without.log.size());
  for (std::size_t i = 0; i < with.log.size(); ++i) REQUIRE(same(with.log[i], without.log[i]));
}

TEST_CASE("engine: what-ifs cut short as dominated leave every pick as it was", "[engine][scheduler]") {
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  for (const char* arbiter : {"greedy", "serial"}) {
    INFO(arbiter);
    const Run cut = run_engine(arbiter, json::object(), online_linear(plugins));
    const Run whole = run_engine(arbiter, json::object(), online_linear(plugins), {.declared_objective = false});
    CHECK(cut.scheduling.dominated > cut.scheduling.simulations / 10);  // it does cut
    CHECK(whole.scheduling.dominated == 0);
    CHECK(cut.scheduling.simulations == whole.scheduling.simulations);
    REQUIRE(cut.log.size() == whole.log.size());
    for (std::size_t i = 0; i < cut.log.size(); ++i) REQUIRE(same(cut.log[i], whole.log[i]));
  }
}

TEST_CASE("engine: --explain simulates every candidate of its window to the end, and cuts short after it",
          "[engine][scheduler]") {
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  const Run cut = run_engine("greedy", json::object(), online_linear(plugins));
  const Run whole = run_engine("greedy", json::object(), online_linear(plugins), {.prune = false});
  // The requests arrive over 2 s: the first second's rounds whole, the rest cut.
  const Run window =
      run_engine("greedy", json::object(), online_linear(plugins), {.prune = false, .prune_after = 1'000'000'000});
  CHECK(whole.scheduling.dominated == 0);
  CHECK(window.scheduling.dominated > cut.scheduling.dominated / 4);
  CHECK(window.scheduling.dominated < cut.scheduling.dominated);
  REQUIRE(window.log.size() == cut.log.size());
  REQUIRE(window.log.size() == whole.log.size());
  for (std::size_t i = 0; i < cut.log.size(); ++i) {
    REQUIRE(same(window.log[i], cut.log[i]));
    REQUIRE(same(window.log[i], whole.log[i]));
  }
}

TEST_CASE("engine: what-ifs fanned out to oneTBB workers pick as serial ones do", "[engine][scheduler][parallel]") {
  // Sixteen GPUs give twelve candidates (eight pairs, four quads), enough
  // for the scheduler to hand a round's what-ifs to oneTBB workers; each
  // worker cuts its own dominated ones short.
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  const Run parallel = run_engine("greedy", json::object(), online_linear(plugins), {.gpus = 16});
  const Run serial = run_engine("greedy", json::object(), online_linear(plugins), {.gpus = 16, .parallel = false});
  const Run whole =
      run_engine("greedy", json::object(), online_linear(plugins), {.declared_objective = false, .gpus = 16});
  CHECK(parallel.scheduling.dominated > 0);
  CHECK(whole.scheduling.dominated == 0);
  REQUIRE(parallel.log.size() == serial.log.size());
  REQUIRE(parallel.log.size() == whole.log.size());
  for (std::size_t i = 0; i < parallel.log.size(); ++i) {
    REQUIRE(same(parallel.log[i], serial.log[i]));
    REQUIRE(same(parallel.log[i], whole.log[i]));
  }
}

TEST_CASE("engine: ties behind the best candidate are cut at once, and every pick stays the exhaustive one",
          "[engine][scheduler]") {
  // Thirty-two GPUs under a light load: most pairs and quads are idle, so
  // many candidates tie with the best. Those after it in the partition
  // set's order lose the tie and are cut before simulating; the picks are
  // the exhaustive search's, serial and fanned out alike.
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  for (const bool parallel : {false, true}) {
    INFO("parallel " << parallel);
    const Run cut = run_engine("greedy", json::object(), online_linear(plugins), {.gpus = 32, .parallel = parallel});
    const Run whole = run_engine("greedy", json::object(), online_linear(plugins),
                                 {.declared_objective = false, .gpus = 32, .parallel = parallel});
    CHECK(cut.scheduling.dominated > cut.scheduling.simulations / 2);
    // Some are cut without a what-if at all, by the round's floor for
    // placements away from the batch's inputs (GlobalSimulator::away_floor).
    CHECK(cut.scheduling.cut_away > 0);
    CHECK(cut.scheduling.cut_away < cut.scheduling.dominated);
    CHECK(whole.scheduling.dominated == 0);
    CHECK(whole.scheduling.cut_away == 0);
    REQUIRE(cut.log.size() == whole.log.size());
    for (std::size_t i = 0; i < cut.log.size(); ++i) REQUIRE(same(cut.log[i], whole.log[i]));
  }
}

TEST_CASE("engine: a lost GPU's work is placed again and every request completes", "[engine][faults]") {
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  const Run healthy = run_engine("greedy", json::object(), online_linear(plugins));
  // gpu1 is lost while the load is in full swing, for good; then gpu2 for
  // a while, and back.
  const Nanos lost_at = healthy.log[healthy.log.size() / 3].start, back = lost_at + 200'000'000;
  const Run faulty = run_engine("greedy", json::object(), online_linear(plugins),
                                {.faults = {{lost_at, 1, true}, {lost_at + 50'000'000, 2, true}, {back, 2, false}}});
  CHECK(faulty.lost_ops > 0);
  CHECK(faulty.rebuilt > 0);  // decodes whose KV cache died with gpu1 prefilled again
  REQUIRE(faulty.requests.size() == healthy.requests.size());
  for (std::size_t i = 0; i < faulty.requests.size(); ++i) {
    INFO("request " << i);
    const RequestRecord& r = faulty.requests[i];
    CHECK(r.error.empty());
    CHECK(r.done >= 0);
    CHECK(r.generated == r.output_tokens);  // every token, none twice
    CHECK(r.first_token >= r.arrival);
  }
  // Nothing runs on a GPU while it is lost: what ran there was cut short.
  const Nanos lost2 = lost_at + 50'000'000;
  for (const RunRecord& x : faulty.log) {
    if (x.accel == 1 || x.to == 1) CHECK(x.finish <= lost_at);
    if (x.accel == 2 || x.to == 2) CHECK((x.finish <= lost2 || x.start >= back));
  }
  // Lost work costs time: the run ends later than the healthy one.
  CHECK(faulty.log.back().finish > healthy.log.back().finish);
}

TEST_CASE("engine: a static placement pinned to a lost GPU waits for it, or fails its requests with the reason",
          "[engine][faults]") {
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  // "static" takes the first candidate: gpu0-gpu1 (pairs come first).
  const Run healthy = run_engine("greedy", json::object(), online_linear(plugins), {.placement = "static"});
  const Nanos lost_at = healthy.log[healthy.log.size() / 4].start;
  const Run back =
      run_engine("greedy", json::object(), online_linear(plugins),
                 {.faults = {{lost_at, 0, true}, {lost_at + 300'000'000, 0, false}}, .placement = "static"});
  for (const RequestRecord& r : back.requests) CHECK((r.error.empty() && r.generated == r.output_tokens));
  for (const RunRecord& x : back.log)  // nothing touches gpu0 while it is lost
    if (x.accel == 0 || x.to == 0) CHECK((x.start <= lost_at || x.start >= lost_at + 300'000'000));
  const Run gone = run_engine("greedy", json::object(), online_linear(plugins),
                              {.faults = {{lost_at, 0, true}}, .placement = "static"});
  std::size_t failed = 0;
  for (const RequestRecord& r : gone.requests)
    if (!r.error.empty()) {
      ++failed;
      CHECK(r.error.find("no placement left that can run it (lost: gpu0 at ") == 0);
    }
  CHECK(failed > 0);
  CHECK(failed < gone.requests.size());  // what finished before the loss stays finished
}

TEST_CASE("engine: observers hear each loss and return, every GPU lost for good ends the run, saying so",
          "[engine][faults]") {
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  const Run healthy = run_engine("greedy", json::object(), online_linear(plugins));
  const Nanos at = healthy.log[healthy.log.size() / 3].start;
  // gpu1 lost and back, then all four lost with gpu2 and gpu3 coming back:
  // the run goes on (and completes on that pair).
  std::vector<std::pair<AccelId, bool>> seen;
  std::string error;
  const Run back = run_engine("greedy", json::object(), online_linear(plugins),
                              {.faults = {{at, 1, true},
                                          {at + 10'000'000, 1, false},
                                          {at + 20'000'000, 0, true},
                                          {at + 20'000'000, 1, true},
                                          {at + 20'000'000, 2, true},
                                          {at + 20'000'000, 3, true},
                                          {at + 200'000'000, 2, false},
                                          {at + 200'000'000, 3, false}},
                               .error = &error,
                               .accelerators = &seen});
  CHECK(error.empty());
  const std::vector<std::pair<AccelId, bool>> want = {{1, true}, {1, false}, {0, true},  {1, true},
                                                      {2, true}, {3, true},  {2, false}, {3, false}};
  CHECK(seen == want);
  for (const RequestRecord& r : back.requests) CHECK((r.error.empty() && r.generated == r.output_tokens));
  // The same four lost for good: the run fails, naming each once (gpu1's
  // first loss is over).
  const Run gone = run_engine("greedy", json::object(), online_linear(plugins),
                              {.faults = {{at, 1, true},
                                          {at + 10'000'000, 1, false},
                                          {at + 20'000'000, 0, true},
                                          {at + 20'000'000, 1, true},
                                          {at + 20'000'000, 2, true},
                                          {at + 20'000'000, 3, true}},
                               .error = &error});
  INFO(error);
  CHECK(error.starts_with("every accelerator is lost (gpu0 at "));
  CHECK(error.find(", gpu1 at ") != std::string::npos);
  CHECK(error.find("gpu1") == error.rfind("gpu1"));
  CHECK(error.ends_with("); nothing is left to run on"));
}

TEST_CASE("engine: an estimator without a linear form gives the fast path's run", "[engine][estimator]") {
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  for (const char* arbiter : {"greedy", "serial"}) {  // the simulator's inline rule, and select()
    INFO(arbiter);
    const Run fast = run_engine(arbiter, json::object(), online_linear(plugins));
    std::atomic<std::size_t> calls{0};
    const Run slow = run_engine(arbiter, json::object(), [&](EstimatorSet seeded) {
      return std::make_unique<Opaque>(std::move(seeded), calls);
    });
    CHECK(calls.load() > 0);  // the what-if predicted through the virtual interface
    CHECK(fast.scheduling.simulations == slow.scheduling.simulations);
    REQUIRE(fast.log.size() == slow.log.size());
    for (std::size_t i = 0; i < fast.log.size(); ++i) REQUIRE(same(fast.log[i], slow.log[i]));
  }
}

TEST_CASE("global simulator: the virtual estimator path predicts exactly the fast path", "[simulator][estimator]") {
  // Random DAGs over up to four accelerators, each rule: every start, finish
  // and transfer the same.
  std::mt19937_64 rng(7);
  plugins::GreedyArbiter greedy;
  plugins::SerialArbiter serial;
  for (int trial = 0; trial < 100; ++trial) {
    INFO("trial " << trial);
    const int n = std::uniform_int_distribution<int>(1, 4)(rng);
    auto reg = std::make_shared<TemplateRegistry>();
    TemplateBuilder b("g");
    const int ops = std::uniform_int_distribution<int>(1, 8)(rng);
    for (int i = 0; i < ops; ++i) {
      auto op = b.op("op" + std::to_string(i));
      if (i > 0) op.input("op" + std::to_string(std::uniform_int_distribution<int>(0, i - 1)(rng)));
      op.output({{Expr::constant(std::uniform_int_distribution<std::int64_t>(1, 3'000'000)(rng))}, DType::kI8})
          .features({Expr::constant(1)})
          .prior({std::uniform_int_distribution<int>(1, 4000)(rng) * 1e-6});
    }
    const TemplateId t = reg->add(std::move(b).build().value()).value();
    Gmg gmg(reg, testing::cluster(n));
    for (int k = std::uniform_int_distribution<int>(1, 4)(rng); k > 0; --k) {
      const InstanceInfo inst = gmg.instantiate({t, {}, {}, 0, 0}).value();
      for (OpId op : inst.ops) REQUIRE(gmg.issue(op, std::uniform_int_distribution<AccelId>(0, n - 1)(rng), 0).ok());
    }
    for (TransferArbiter* arbiter : {static_cast<TransferArbiter*>(&greedy), static_cast<TransferArbiter*>(&serial)}) {
      const SimOptions opt{.record_hbm_timeline = true, .record_transfers = true, .arbiter = arbiter};
      const EstimatorSet set = testing::estimators(*reg);
      std::atomic<std::size_t> calls{0};
      const Opaque opaque(set, calls);
      const SimulationResult fast = simulate(gmg, set, opt);
      const SimulationResult slow = simulate(gmg, static_cast<const Estimator&>(opaque), opt);
      CHECK(calls.load() > 0);
      REQUIRE(fast.ops == slow.ops);
      REQUIRE(fast.start == slow.start);
      REQUIRE(fast.finish == slow.finish);
      REQUIRE(fast.hbm_peak == slow.hbm_peak);
      REQUIRE(fast.end == slow.end);
      REQUIRE(fast.transfers.size() == slow.transfers.size());
      for (std::size_t i = 0; i < fast.transfers.size(); ++i) {
        REQUIRE(fast.transfers[i].start == slow.transfers[i].start);
        REQUIRE(fast.transfers[i].finish == slow.transfers[i].finish);
      }
    }
  }
}

TEST_CASE("tenant: an iteration binds its sequences, so the head's features follow them", "[engine][tenant][llama]") {
  auto templates = std::make_shared<TemplateRegistry>();
  const TemplateId tmpl = templates->add(testing::dense_template()).value();
  auto accels = std::make_shared<AcceleratorSet>();
  REQUIRE(accels->add_link_class("nvlink", 300e9, 5e-6).ok());
  REQUIRE(accels->add("gpu0", "H100", 80ll << 30).ok());
  Gmg gmg(templates, accels);
  REQUIRE(gmg.place_weights(tmpl, 0).ok());
  // Four 16-token prompts at t = 0, a fifth of 8 tokens at t = 1 s.
  Trace trace;
  for (int i = 0; i < 4; ++i) trace.requests.push_back({0.0, 16, 3});
  trace.requests.push_back({1.0, 8, 3});
  trace.window_s = 2;
  Tenant tenant(0, TenantSpec{.name = "t", .requests = trace}, tmpl);

  // The new iteration's last operator (its head).
  std::vector<OpId> seen;
  auto head_of_new_iteration = [&]() {
    auto started = tenant.start_iterations(gmg);
    REQUIRE(started.ok());
    REQUIRE(started.value() == 1);
    OpId head = kNoOp;
    for (OpId op = 0; op < gmg.slot_count(); ++op)
      if (gmg.contains(op) && gmg.op_name(op).ends_with("/head") &&
          std::find(seen.begin(), seen.end(), op) == seen.end())
        head = op;
    REQUIRE(head != kNoOp);
    seen.push_back(head);
    return head;
  };
  auto features = [&](OpId op) {
    auto x = gmg.features(op);
    return std::vector<double>(x.begin(), x.end());
  };
  auto dim = [&](OpId op, const char* name) { return gmg.dims(op)[templates->get(tmpl).dims().find(name)]; };
  auto finish = [&](OpId head, Nanos t) {
    Feedback f;
    f.op = head;
    f.t = t;
    tenant.on_op_done(f, gmg);
  };

  tenant.deliver_arrivals(0);
  const OpId prefill = head_of_new_iteration();
  CHECK(dim(prefill, "tokens") == 64);
  CHECK(dim(prefill, "sequences") == 4);
  CHECK(features(prefill) == std::vector<double>{4, 1});
  finish(prefill, 1'000'000);

  const OpId decode = head_of_new_iteration();  // four decodes of one token each
  CHECK(dim(decode, "tokens") == 4);
  CHECK(dim(decode, "sequences") == 4);
  CHECK(features(decode) == std::vector<double>{4, 1});
  finish(decode, 2'000'000);

  tenant.deliver_arrivals(1'000'000'000);
  const OpId mixed = head_of_new_iteration();  // four decodes and the fifth prompt
  CHECK(dim(mixed, "tokens") == 4 + 8);
  CHECK(dim(mixed, "sequences") == 5);
  CHECK(features(mixed) == std::vector<double>{5, 1});
}

namespace {

// Defers every batch: what a policy does when no candidate is feasible.
class NeverPlace final : public PlacementPolicy {
 public:
  bool needs_simulation() const override { return false; }
  std::optional<std::size_t> choose(const Gmg&, const Batch&, std::span<const Candidate>,
                                    std::span<const Outcome>) override {
    ++calls;
    return std::nullopt;
  }
  std::size_t calls = 0;
};

}  // namespace

TEST_CASE("engine: a policy that defers every batch ends in a deadlock naming what waits", "[engine][deadlock]") {
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  H100Cluster c = h100_cluster(2);
  auto& accels = c.accels;
  const TemplateId tmpl = c.tmpl;
  Gmg& gmg = *c.gmg;
  EstimatorSet seeded;
  auto& templates = c.templates;
  REQUIRE(seed_priors(seeded, *templates, *accels).ok());
  auto estimator = online_linear(plugins)(std::move(seeded));
  Estimator& est = *estimator;

  std::vector<Tenant> tenants;
  tenants.emplace_back(
      0, TenantSpec{.name = "online", .priority = 10, .requests = constant_rate(2, 1, 128, 2), .lanes = 1}, tmpl);
  UnionPartitionSet partitions = partition_sets(plugins, *accels, {"pairs"});
  NeverPlace policy;
  Scheduler scheduler(policy, partitions, est, SchedulerOptions{.issued_budget = 64, .batch_cap = 6});

  ProfileGroundTruth truth = h100_truth();
  auto arbiter = plugins.arbiter.create("greedy");
  REQUIRE(arbiter.ok());
  EmulatedCluster cluster(accels->size(), truth, *arbiter.value());
  Engine engine(gmg, tenants, scheduler, est, cluster);
  auto result = engine.run();
  // The first request's iteration (its one lane) waits for a placement
  // that never comes; once the second request has arrived (0.5 s) nothing
  // else can happen: the engine says so instead of spinning, blames the
  // policy (not HBM), and the batch was deferred at every round, not
  // dropped.
  REQUIRE(!result.ok());
  CHECK(result.status().message() ==
        "engine: deadlock at 0.500000 s: 1 operator(s) wait for a placement and nothing else can run, with 2 "
        "request(s) unfinished (the placement "
        "policy deferred every batch: 1 in the last round, " +
            std::to_string(policy.calls) + " deferral(s) in all)");
  CHECK(policy.calls > 0);
  CHECK(scheduler.stats().deferred == policy.calls);
  CHECK(scheduler.stats().batches == policy.calls);
  CHECK(gmg.issued_count() == 0);
}

TEST_CASE("engine: a request whose iteration fits on no accelerator fails as out of memory, alone",
          "[engine][memory]") {
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  H100Cluster c = h100_cluster(2);
  auto& accels = c.accels;
  Gmg& gmg = *c.gmg;
  EstimatorSet seeded;
  REQUIRE(seed_priors(seeded, *c.templates, *accels).ok());
  auto estimator = online_linear(plugins)(std::move(seeded));

  // A 4M-token prompt: a layer group's KV cache alone (128 GiB) exceeds
  // what an H100 has left beside the weights, however the batch is placed.
  std::vector<Tenant> tenants;
  tenants.emplace_back(0,
                       TenantSpec{.name = "huge",
                                  .requests = constant_rate(1, 1, 4'000'000, 2),
                                  .token_budget = 1 << 23,
                                  .kv_budget_tokens = 1 << 23},
                       c.tmpl);
  UnionPartitionSet partitions = partition_sets(plugins, *accels, {"pairs"});
  auto policy = plugins.placement.create("simulation-guided");
  REQUIRE(policy.ok());
  Scheduler scheduler(*policy.value(), partitions, *estimator, SchedulerOptions{.issued_budget = 64, .batch_cap = 6});

  ProfileGroundTruth truth = h100_truth();
  auto arbiter = plugins.arbiter.create("greedy");
  REQUIRE(arbiter.ok());
  EmulatedCluster cluster(accels->size(), truth, *arbiter.value());
  Engine engine(gmg, tenants, scheduler, *estimator, cluster);
  auto result = engine.run();
  // Not a deadlock: the request fails as out of memory, saying why, and
  // the run ends.
  REQUIRE(result.ok());
  CHECK(result->complete);
  REQUIRE(result->requests.size() == 1);
  CHECK(result->requests[0].error ==
        "out of memory: its iteration needs more HBM than any of its 1 candidate placement(s) has beside the weights");
  CHECK(result->oom_failed_requests == 1);
  CHECK(scheduler.stats().oom_waits == 1);
  CHECK(gmg.live_count() == 0);
}

TEST_CASE("engine: an online batch short of HBM preempts offline, which is recomputed and finishes",
          "[engine][memory]") {
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  // Two H100s of 15.3 GiB: about 0.34 GiB beside Llama-3-8B's weights.
  H100Cluster c = h100_cluster(2, static_cast<std::int64_t>(15.3 * (1ll << 30)));
  auto& accels = c.accels;
  Gmg& gmg = *c.gmg;
  EstimatorSet seeded;
  REQUIRE(seed_priors(seeded, *c.templates, *accels).ok());
  auto estimator = online_linear(plugins)(std::move(seeded));
  // An offline request decoding 300 tokens holds its KV cache when a
  // 2,048-token online prompt arrives that fits only without it.
  Trace offline_stream, online_stream;
  offline_stream.requests = {{0.0, 1024, 300}};
  online_stream.requests = {{0.5, 2048, 4}};
  std::vector<Tenant> tenants;
  tenants.emplace_back(0, TenantSpec{.name = "offline", .online = false, .requests = offline_stream}, c.tmpl);
  tenants.emplace_back(1, TenantSpec{.name = "online", .priority = 10, .requests = online_stream}, c.tmpl);
  UnionPartitionSet partitions = partition_sets(plugins, *accels, {"pairs"});
  auto policy = plugins.placement.create("static");
  REQUIRE(policy.ok());
  Scheduler scheduler(*policy.value(), partitions, *estimator, SchedulerOptions{.issued_budget = 64});
  ProfileGroundTruth truth = h100_truth();
  auto arbiter = plugins.arbiter.create("greedy");
  REQUIRE(arbiter.ok());
  EmulatedCluster cluster(accels->size(), truth, *arbiter.value());
  std::vector<std::int64_t> budgets, weights;
  for (AccelId a = 0; a < accels->size(); ++a) {
    budgets.push_back(accels->hbm_bytes(a));
    weights.push_back(gmg.hbm(a).weights);
  }
  REQUIRE(cluster.set_memory(budgets, weights).ok());
  Engine engine(gmg, tenants, scheduler, *estimator, cluster);
  auto result = engine.run();
  REQUIRE(result.ok());
  CHECK(result->complete);
  // The offline iteration was preempted (lower priority, holding the cache
  // where the online batch was short), recomputed, and every one of its
  // tokens was still generated; the online request ran meanwhile.
  CHECK(result->preemptions >= 1);
  CHECK(result->preempted_sequences == result->preemptions);
  CHECK(result->oom_failed_requests == 0);
  REQUIRE(result->requests.size() == 2);
  for (const RequestRecord& r : result->requests) {
    CHECK(r.error.empty());
    CHECK(r.generated == r.output_tokens);
  }
  const RequestRecord& offline = result->requests[0];
  const RequestRecord& online = result->requests[1];
  CHECK(online.done < offline.done);
  CHECK(scheduler.stats().oom_waits >= 1);
  // The ground truth never held more than the HBM.
  const MemoryStats m = cluster.memory_stats();
  REQUIRE(m.peak.size() == 2);
  for (std::size_t a = 0; a < 2; ++a) CHECK(m.peak[a] <= m.budget[a]);
  CHECK(m.waits == 0);
}

namespace {

// The scenario above (an offline decode holding its KV cache when an online
// prompt arrives that fits only without it), with the offline tenant's
// preemption mode and host link as given.
struct SwapRun {
  EngineResult result;
  std::size_t swapped = 0;
  std::int64_t swapped_bytes = 0, recomputed = 0;
};
SwapRun memory_pressure_run(TenantSpec::Preemption mode, double host_bytes_per_s) {
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  H100Cluster c = h100_cluster(2, static_cast<std::int64_t>(15.3 * (1ll << 30)));
  EstimatorSet seeded;
  REQUIRE(seed_priors(seeded, *c.templates, *c.accels).ok());
  auto estimator = online_linear(plugins)(std::move(seeded));
  Trace offline_stream, online_stream;
  offline_stream.requests = {{0.0, 1024, 300}};
  online_stream.requests = {{0.5, 2048, 4}};
  std::vector<Tenant> tenants;
  tenants.emplace_back(0,
                       TenantSpec{.name = "offline",
                                  .online = false,
                                  .requests = offline_stream,
                                  .preemption = mode,
                                  .host_link_bytes_per_s = host_bytes_per_s,
                                  .host_link_latency = 10'000},
                       c.tmpl);
  tenants.emplace_back(1, TenantSpec{.name = "online", .priority = 10, .requests = online_stream}, c.tmpl);
  UnionPartitionSet partitions = partition_sets(plugins, *c.accels, {"pairs"});
  auto policy = plugins.placement.create("static");
  REQUIRE(policy.ok());
  Scheduler scheduler(*policy.value(), partitions, *estimator, SchedulerOptions{.issued_budget = 64});
  ProfileGroundTruth truth = h100_truth();
  auto arbiter = plugins.arbiter.create("greedy");
  REQUIRE(arbiter.ok());
  EmulatedCluster cluster(c.accels->size(), truth, *arbiter.value());
  std::vector<std::int64_t> budgets, weights;
  for (AccelId a = 0; a < c.accels->size(); ++a) {
    budgets.push_back(c.accels->hbm_bytes(a));
    weights.push_back(c.gmg->hbm(a).weights);
  }
  REQUIRE(cluster.set_memory(budgets, weights).ok());
  Engine engine(*c.gmg, tenants, scheduler, *estimator, cluster);
  auto result = engine.run();
  REQUIRE(result.ok());
  const MemoryStats m = cluster.memory_stats();
  for (std::size_t a = 0; a < m.peak.size(); ++a) CHECK(m.peak[a] <= m.budget[a]);
  return {std::move(result).value(), tenants[0].swapped_sequences(), tenants[0].swapped_bytes(),
          tenants[0].recomputed_tokens()};
}

}  // namespace

TEST_CASE("engine: a swapped KV cache goes to host memory and back, costed on the host link, and is not recomputed",
          "[engine][memory]") {
  const SwapRun recompute = memory_pressure_run(TenantSpec::Preemption::kRecompute, 16e9);
  const SwapRun fast = memory_pressure_run(TenantSpec::Preemption::kSwap, 1e9);
  const SwapRun slow = memory_pressure_run(TenantSpec::Preemption::kSwap, 0.5e9);
  for (const SwapRun* r : {&recompute, &fast, &slow}) {
    CHECK(r->result.complete);
    CHECK(r->result.preemptions >= 1);
    CHECK(r->result.oom_failed_requests == 0);
    REQUIRE(r->result.requests.size() == 2);
    for (const RequestRecord& q : r->result.requests) {
      CHECK(q.error.empty());
      CHECK(q.generated == q.output_tokens);
    }
  }
  // Recompute prefills prompt and output again; a swapped sequence comes
  // back with its cache and recomputes nothing.
  CHECK(recompute.swapped == 0);
  CHECK(recompute.recomputed >= 1024);
  CHECK(fast.recomputed == 0);
  REQUIRE(fast.swapped == fast.result.preempted_sequences);
  CHECK(fast.result.swapped_sequences == fast.swapped);
  // Llama-3-8B's KV cache is 128 KiB a token: the sequence's prompt and
  // the tokens it generated before the online prompt arrived (at 0.5 s).
  const std::int64_t per_token = 128 << 10;
  CHECK(fast.swapped_bytes % per_token == 0);
  const std::int64_t tokens = fast.swapped_bytes / per_token / static_cast<std::int64_t>(fast.swapped);
  CHECK(tokens > 1024);
  CHECK(tokens < 1024 + 300);
  // Costed in time: the same run over a 0.5 GB/s host link instead of 1
  // GB/s finishes the offline request later by both copies' difference
  // (about 0.27 s: the online request is done before either cache is back,
  // so nothing else moves).
  REQUIRE(slow.swapped == fast.swapped);
  REQUIRE(slow.swapped_bytes == fast.swapped_bytes);
  const double extra_s = 2.0 * static_cast<double>(fast.swapped_bytes) * (1 / 0.5e9 - 1 / 1e9);
  const double later_s = static_cast<double>(slow.result.requests[0].done - fast.result.requests[0].done) / 1e9;
  CHECK(later_s == Approx(extra_s).epsilon(0.02));
  CHECK(slow.result.requests[1].done == fast.result.requests[1].done);
}
