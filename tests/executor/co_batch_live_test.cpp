// Cross-tenant batches live (tests/cli/live_co_batch.toml): a fused
// operator is one LibTorch forward over the concatenated sequences of both
// tenants (riders of lower priority, or peers seated as the host's own), and
// each tenant gets exactly the tokens it gets alone, which are the plain
// single-device reference loop's.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "executor/torch/runtime.h"

import slicesched.compose.policy;
import slicesched.compose.run;
import slicesched.config;
import slicesched.core.plugin;
import slicesched.executor.live_cluster;
import slicesched.executor.llama_runner;
import slicesched.engine.tenant;
import slicesched.core.ids;

using namespace slicesched;

namespace {

struct LiveRun {
  std::map<std::string, std::vector<std::vector<std::int64_t>>> tokens;  // by tenant, by request
  std::size_t rider_steps = 0;
};

LiveRun run_live(const ExperimentConfig& cfg, const std::string& policy, const rt::LlamaConfig& model_cfg) {
  PluginRegistries plugins;
  REQUIRE(load_plugins(cfg, plugins).ok());
  auto p = find_policy(cfg, policy);
  REQUIRE(p.ok());
  auto built = build_policy(cfg, *p.value(), plugins);
  if (!built.ok()) FAIL(built.status().message());
  PolicyParts& parts = *built.value();
  for (Tenant& t : parts.tenants)
    t.set_prompts([c = model_cfg, seed = cfg.seed + t.id()](std::uint64_t r, std::int64_t n) {
      return rt::synthetic_prompt(c, seed, r, n);
    });
  rt::LlamaModel runtime(model_cfg);
  std::vector<std::string> devices;
  std::vector<std::int64_t> budgets;
  for (const auto& a : cfg.accelerators) {
    devices.push_back(a.device);
    budgets.push_back(a.hbm_bytes);
  }
  ServedModel m{parts.tmpl, &runtime, parts.models.shared(parts.tmpl), {}};
  for (AccelId a = 0; a < devices.size(); ++a) m.accels.push_back(a);
  std::vector<ServedModel> served;
  served.push_back(std::move(m));
  LlamaRunner runner(std::move(served), devices);
  auto weights = runner.load_weights();
  REQUIRE(weights.ok());
  // One copy of the weights per accelerator, whatever the tenants.
  for (AccelId a = 0; a < devices.size(); ++a) CHECK(parts.gmg->hbm(a).weights == weights.value()[a]);
  LiveCluster cluster(budgets, runner, *parts.plugins.arbiter);
  for (AccelId a = 0; a < devices.size(); ++a) REQUIRE(cluster.reserve_resident(a, weights.value()[a]).ok());
  auto run = run_recorded(cfg, parts, cluster, RecordOptions{});
  if (!run.ok()) FAIL(run.status().message());
  LiveRun out;
  for (const Tenant& t : parts.tenants) {
    out.rider_steps += t.rider_steps();
    for (const RequestRecord& r : t.records()) {
      INFO(policy << ": " << t.spec().name);
      CHECK(r.error.empty());
      out.tokens[t.spec().name].push_back(r.tokens);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("live co-batch: two tenants on one model, fused and apart, generate the reference tokens",
          "[executor][torch][co_batch]") {
  auto loaded = load_config(std::string(SLICESCHED_SOURCE_DIR) + "/tests/cli/live_co_batch.toml");
  REQUIRE(loaded.ok());
  const ExperimentConfig& cfg = loaded.value();
  auto c = runtime_config(*make_model(cfg.models.front()).value(), cfg.models.front().weights_seed);
  REQUIRE(c.ok());
  const LiveRun fused = run_live(cfg, "Fused", c.value());
  const LiveRun apart = run_live(cfg, "Apart", c.value());
  const LiveRun peers = run_live(cfg, "Peers", c.value());
  CHECK(fused.rider_steps > 0);  // offline sequences did ride in online batches
  CHECK(apart.rider_steps == 0);
  CHECK(peers.rider_steps > 0);  // online sequences were seated in offline's iterations
  CHECK(fused.tokens == apart.tokens);
  CHECK(peers.tokens == apart.tokens);
  // Each tenant's tokens are the plain loop's over its own prompts (the
  // prompt seed is the tenant's id: both policies give the same ids).
  std::size_t checked = 0;
  for (const auto& [name, per_request] : fused.tokens) {
    const std::uint32_t id = name == "online0" ? 0 : 1;
    const std::int64_t in = name == "online0" ? 16 : 12;
    const int max_new = name == "online0" ? 4 : 5;
    std::vector<std::vector<std::int64_t>> prompts;
    for (std::size_t r = 0; r < per_request.size(); ++r)
      prompts.push_back(rt::synthetic_prompt(c.value(), cfg.seed + id, r, in));
    rt::LlamaModel reference(c.value());
    const auto want = reference.generate_reference(prompts, max_new, "cpu");
    for (std::size_t r = 0; r < per_request.size(); ++r) {
      INFO(name << " request " << r);
      CHECK(per_request[r] == want[r]);
      ++checked;
    }
  }
  CHECK(checked > 10);
}
