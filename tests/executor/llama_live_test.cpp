// Live mode end to end on CPU virtual accelerators: the tenants' continuous
// batching, the scheduler, the live executor and the LibTorch Llama model
// together generate exactly the tokens of a plain single-device loop over
// the same weights and prompts, while layer groups and KV caches land on
// different accelerators and move between them.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "executor/torch/runtime.h"

import slicesched.core.plugin;
import slicesched.engine;
import slicesched.engine.recorders;
import slicesched.engine.union_partition_set;
import slicesched.executor.live_cluster;
import slicesched.executor.llama_runner;
import slicesched.models.dense;
import slicesched.plugins.builtin;
import slicesched.plugins.greedy_arbiter;
import slicesched.testing;
import slicesched.workload.trace;
import slicesched.core.priors;
import slicesched.engine.observer;
import slicesched.engine.scheduler;
import slicesched.engine.tenant;
import slicesched.core.ids;
import slicesched.core.graph;
import slicesched.core.accel;
import slicesched.core.gmg;
import slicesched.core.estimator;

using namespace slicesched;

namespace {

// Places every batch on the next candidate in turn, so consecutive
// iterations (and the ops of one iteration) move around the cluster.
class RoundRobin final : public PlacementPolicy {
 public:
  bool needs_simulation() const override { return false; }
  std::optional<std::size_t> choose(const Gmg&, const Batch&, std::span<const Candidate> c,
                                    std::span<const Outcome>) override {
    return next_++ % c.size();
  }

 private:
  std::size_t next_ = 0;
};

struct Run {
  std::vector<RequestRecord> records;
  std::vector<RunRecord> log;
  std::vector<std::int64_t> peak, budget;
  std::size_t handed_off = 0, host_left = 0;
};

// With `peer`, the odd requests are a second tenant's, seated in the first
// one's iterations as its own (co_batch peers); records come back in
// request order either way.
Run serve(const std::vector<std::int64_t>& prompt_lengths, int output_tokens, int lanes, int accels,
          std::int64_t budget, bool round_robin, rt::LlamaModel& model, int prefill_lanes = 0, bool peer = false) {
  auto templates = std::make_shared<TemplateRegistry>();
  const TemplateId tmpl = templates->add(testing::template_of(model.config())).value();
  auto cluster = std::make_shared<AcceleratorSet>();
  (void)cluster->add_link_class("host", 10e9, 0);
  std::vector<std::string> devices;
  for (int a = 0; a < accels; ++a) {
    REQUIRE(cluster->add("cpu" + std::to_string(a), "cpu", budget).ok());
    devices.push_back("cpu:" + std::to_string(a));
  }
  Gmg gmg(templates, cluster);
  for (AccelId a = 0; a < cluster->size(); ++a) REQUIRE(gmg.place_weights(tmpl, a).ok());
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  auto estimator = plugins.estimator.create("online-linear").value();
  Estimator& est = *estimator;
  REQUIRE(est.seed_linear([&](EstimatorSet& set) { return seed_priors(set, *templates, *cluster); }).ok());
  std::vector<PluginPtr<PartitionSet>> sets;
  sets.push_back(std::move(plugins.partition.create("singles").value()));
  UnionPartitionSet partitions(std::move(sets));
  REQUIRE(partitions.bind(*cluster).ok());
  RoundRobin rr;
  auto guided = plugins.placement.create("simulation-guided").value();
  PlacementPolicy& placement = round_robin ? static_cast<PlacementPolicy&>(rr) : *guided;
  SchedulerOptions sopt;
  sopt.batch_cap = 2;  // a layer group or two per batch: one iteration spans accelerators
  Scheduler scheduler(placement, partitions, est, sopt);

  TenantSpec spec;
  spec.name = "t";
  spec.lanes = lanes;
  spec.prefill_lanes = prefill_lanes;
  spec.token_budget = 64;
  TenantSpec second = spec;
  second.name = "peer";
  const std::uint64_t stride = peer ? 2 : 1;
  for (std::size_t i = 0; i < prompt_lengths.size(); ++i)
    (peer && i % 2 ? second : spec)
        .requests.requests.push_back({0.001 * static_cast<double>(i), prompt_lengths[i], output_tokens});
  std::vector<Tenant> tenants;
  tenants.reserve(2);
  tenants.emplace_back(0, std::move(spec), tmpl);
  const rt::LlamaConfig cfg = model.config();
  tenants[0].set_prompts(
      [cfg, stride](std::uint64_t seq, std::int64_t n) { return rt::synthetic_prompt(cfg, 11, seq * stride, n); });
  if (peer) {
    tenants.emplace_back(1, std::move(second), tmpl);
    tenants[1].set_prompts(
        [cfg](std::uint64_t seq, std::int64_t n) { return rt::synthetic_prompt(cfg, 11, seq * 2 + 1, n); });
    tenants[1].set_rides_only(true);
    tenants[0].add_rider_source(&tenants[1]);
  }

  LlamaRunner runner(model, devices);
  plugins::GreedyArbiter arbiter;
  LiveCluster live(std::vector<std::int64_t>(static_cast<std::size_t>(accels), budget), runner, arbiter);
  auto weights = runner.load_weights();
  REQUIRE(weights.ok());
  for (AccelId a = 0; a < cluster->size(); ++a) REQUIRE(live.reserve_resident(a, weights.value()[a]).ok());
  Engine engine(gmg, tenants, scheduler, est, live);
  TimelineRecorder timeline(std::numeric_limits<Nanos>::max());
  EngineObserver* observers[] = {&timeline};
  auto result = engine.run(observers);
  if (!result.ok()) FAIL(result.status().message());
  REQUIRE(result->complete);
  Run run;
  if (peer) {  // (tenant by tenant: the evens', then the odds')
    const std::size_t evens = (prompt_lengths.size() + 1) / 2;
    for (std::size_t i = 0; i < prompt_lengths.size(); ++i)
      run.records.push_back(result->requests[i % 2 ? evens + i / 2 : i / 2]);
  } else {
    run.records = result->requests;
  }
  run.handed_off = result->handed_off;
  run.host_left = runner.host_sequences();
  run.log = std::move(timeline.log());
  for (AccelId a = 0; a < cluster->size(); ++a) {
    run.peak.push_back(live.peak(a));
    run.budget.push_back(live.budget(a));
  }
  return run;
}

std::vector<std::vector<std::int64_t>> prompts(const rt::LlamaConfig& cfg, const std::vector<std::int64_t>& lengths) {
  std::vector<std::vector<std::int64_t>> out;
  for (std::size_t i = 0; i < lengths.size(); ++i) out.push_back(rt::synthetic_prompt(cfg, 11, i, lengths[i]));
  return out;
}

}  // namespace

TEST_CASE("live llama: scheduled over virtual accelerators equals a plain single-device run", "[executor][torch]") {
  rt::set_cpu_threads(1);
  rt::LlamaModel model(testing::llama_tiny_rt());
  const std::vector<std::int64_t> lengths{5, 9, 3, 12, 7};
  const int out = 6;
  auto expect = model.generate_reference(prompts(model.config(), lengths), out, "cpu");

  SECTION("round robin over three accelerators, two lanes") {
    Run run = serve(lengths, out, 2, 3, 64 << 20, true, model);
    REQUIRE(run.records.size() == lengths.size());
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      INFO("request " << i);
      CHECK(run.records[i].error.empty());
      CHECK(run.records[i].tokens == expect[i]);
    }
    // Layer groups ran on every accelerator, and values crossed between
    // them: each iteration is two batches placed on different accelerators,
    // so at least one transfer per iteration (whether a KV cache also moves
    // depends on how the lanes' batches interleave).
    std::set<AccelId> used;
    std::size_t transfers = 0;
    for (const RunRecord& r : run.log) {
      if (r.to == kNoAccel)
        used.insert(r.accel);
      else
        ++transfers;
    }
    CHECK(used.size() == 3);
    CHECK(transfers >= static_cast<std::size_t>(out));
    for (std::size_t a = 0; a < run.peak.size(); ++a) CHECK(run.peak[a] <= run.budget[a]);
  }
  SECTION("simulation-guided placement over two accelerators") {
    Run run = serve(lengths, out, 2, 2, 64 << 20, false, model);
    for (std::size_t i = 0; i < lengths.size(); ++i) CHECK(run.records[i].tokens == expect[i]);
  }
  // Disaggregated prefill: every prompt prefills in the prefill lane, its
  // part of that lane's KV cache goes to host memory and joins a decode
  // lane's, wherever that lane's next layer groups run; a peer's sequences
  // too (their plan ids are apart from the host's own).
  SECTION("a prefill lane hands every sequence to the decode lanes, round robin over three accelerators") {
    const bool peer = GENERATE(false, true);
    INFO((peer ? "with a peer" : "one tenant"));
    Run run = serve(lengths, out, 2, 3, 64 << 20, true, model, 1, peer);
    REQUIRE(run.records.size() == lengths.size());
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      INFO("request " << i);
      CHECK(run.records[i].error.empty());
      CHECK(run.records[i].tokens == expect[i]);
    }
    CHECK(run.handed_off == lengths.size());
    CHECK(run.host_left == 0);
  }
}

namespace {

// The smallest HBM (bytes, weights included) one accelerator needs for a
// prefill iteration of `prompt` tokens alone: what Gmg::check_memory asks.
std::int64_t alone_need(std::shared_ptr<TemplateRegistry> templates, TemplateId tmpl, std::int64_t prompt) {
  std::int64_t lo = 1, hi = std::int64_t{1} << 34;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    auto accels = std::make_shared<AcceleratorSet>();
    REQUIRE(accels->add("cpu0", "cpu", mid).ok());
    Gmg gmg(templates, accels);
    REQUIRE(gmg.place_weights(tmpl, 0).ok());
    Tenant t(0, TenantSpec{.name = "probe", .requests = {.requests = {{0.0, prompt, 2}}}}, tmpl);
    t.deliver_arrivals(0);
    REQUIRE(t.start_iterations(gmg).ok());
    // The whole iteration, in template order: every live op.
    std::vector<OpId> ops;
    for (OpId id = 0; id < gmg.slot_count(); ++id)
      if (gmg.contains(id)) ops.push_back(id);
    const std::vector<AccelId> where(ops.size(), 0);
    if (gmg.check_memory(ops, where, nullptr, true).ok())
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

}  // namespace

TEST_CASE("live llama: a preempted sequence, recomputed or swapped to host memory, keeps every token",
          "[executor][torch][memory]") {
  const auto mode = GENERATE(TenantSpec::Preemption::kRecompute, TenantSpec::Preemption::kSwap);
  const bool swap = mode == TenantSpec::Preemption::kSwap;
  INFO((swap ? "swap" : "recompute"));
  rt::set_cpu_threads(1);
  rt::LlamaModel model(testing::llama_tiny_rt());
  const rt::LlamaConfig cfg = model.config();
  const std::int64_t offline_prompt = 16, online_prompt = 256;
  const int offline_out = 200, online_out = 4;
  const auto offline_ids = rt::synthetic_prompt(cfg, 11, 0, offline_prompt);
  const auto online_ids = rt::synthetic_prompt(cfg, 13, 0, online_prompt);
  const auto expect_offline = model.generate_reference({offline_ids}, offline_out, "cpu").front();
  const auto expect_online = model.generate_reference({online_ids}, online_out, "cpu").front();

  auto templates = std::make_shared<TemplateRegistry>();
  const TemplateId tmpl = templates->add(testing::template_of(cfg)).value();
  // One CPU accelerator whose memory holds the online prompt's prefill
  // alone with 4 KiB to spare: less than the offline sequence's KV cache
  // (16 tokens and more, 1 KiB each), so the online request cannot start
  // while offline holds its cache, and the offline one must be preempted.
  LlamaRunner runner(model, {"cpu:0"});
  auto weights = runner.load_weights();
  REQUIRE(weights.ok());
  std::int64_t budget = alone_need(templates, tmpl, online_prompt) + 4096;
  auto cluster = std::make_shared<AcceleratorSet>();
  (void)cluster->add_link_class("host", 10e9, 0);
  REQUIRE(cluster->add("cpu0", "cpu", budget).ok());
  Gmg gmg(templates, cluster);
  REQUIRE(gmg.place_weights(tmpl, 0).ok());
  // The live budget holds the real weights where the GMG counts the template's.
  const std::int64_t live_budget = budget + std::max<std::int64_t>(0, weights.value()[0] - gmg.hbm(0).weights);

  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  auto estimator = plugins.estimator.create("online-linear").value();
  REQUIRE(estimator->seed_linear([&](EstimatorSet& set) { return seed_priors(set, *templates, *cluster); }).ok());
  std::vector<PluginPtr<PartitionSet>> sets;
  sets.push_back(std::move(plugins.partition.create("singles").value()));
  UnionPartitionSet partitions(std::move(sets));
  REQUIRE(partitions.bind(*cluster).ok());
  auto placement = plugins.placement.create("static").value();
  Scheduler scheduler(*placement, partitions, *estimator, SchedulerOptions{});

  std::vector<Tenant> tenants;
  tenants.emplace_back(0,
                       TenantSpec{.name = "offline",
                                  .online = false,
                                  .requests = {.requests = {{0.0, offline_prompt, offline_out}}},
                                  .preemption = mode},
                       tmpl);
  tenants.emplace_back(1,
                       TenantSpec{.name = "online",
                                  .priority = 10,
                                  .requests = {.requests = {{0.02, online_prompt, online_out}}},
                                  .token_budget = 256},
                       tmpl);
  tenants[0].set_prompts([cfg](std::uint64_t seq, std::int64_t n) { return rt::synthetic_prompt(cfg, 11, seq, n); });
  tenants[1].set_prompts([cfg](std::uint64_t seq, std::int64_t n) { return rt::synthetic_prompt(cfg, 13, seq, n); });

  plugins::GreedyArbiter arbiter;
  LiveCluster live({live_budget}, runner, arbiter);
  REQUIRE(live.reserve_resident(0, weights.value()[0]).ok());
  Engine engine(gmg, tenants, scheduler, *estimator, live);
  auto result = engine.run();
  if (!result.ok()) FAIL(result.status().message());
  REQUIRE(result->complete);
  INFO("offline done at " << result->requests[0].done << " ns, online arrived at " << result->requests[1].arrival
                          << " ns, first token at " << result->requests[1].first_token << " ns");
  CHECK(result->preemptions >= 1);
  CHECK(result->oom_failed_requests == 0);
  // Swapped, the decoding sequence's cache went to host memory and came
  // back (nothing of it recomputed); nothing is left there at the end.
  if (swap) {
    CHECK(result->swapped_sequences >= 1);
    CHECK(result->swapped_bytes >= 16 * rt::kv_bytes_per_token(cfg));
  } else {
    CHECK(result->swapped_sequences == 0);
  }
  CHECK(runner.host_sequences() == 0);
  REQUIRE(result->requests.size() == 2);
  // Every token of the preempted sequence, recomputed from its prompt and
  // what it had generated or joined back from host memory, is the
  // reference's; the online one's too.
  CHECK(result->requests[0].error.empty());
  CHECK(result->requests[0].tokens == expect_offline);
  CHECK(result->requests[1].error.empty());
  CHECK(result->requests[1].tokens == expect_online);
  CHECK(live.peak(0) <= live.budget(0));
  // The preempted iteration's plan was dropped with it: nothing is left
  // behind once every iteration ran (it leaked before).
  CHECK(runner.pending_plans() == 0);
}
