// Two models on one live cluster (configs/live/two-models-cpu.toml): each
// tenant gets exactly the tokens of its own model's plain single-device
// loop, while the scheduler spreads both models' operators over the
// accelerators that hold them.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "executor/torch/runtime.h"

import slicesched.compose.policy;
import slicesched.compose.run;
import slicesched.config;
import slicesched.core.plugin;
import slicesched.executor.live_cluster;
import slicesched.executor.llama_runner;
import slicesched.engine.observer;
import slicesched.engine.tenant;
import slicesched.core.ids;

using namespace slicesched;

TEST_CASE("live: two models serve their own tenants with their reference tokens", "[executor][torch][models]") {
  auto loaded = load_config(std::string(SLICESCHED_SOURCE_DIR) + "/configs/live/two-models-cpu.toml");
  REQUIRE(loaded.ok());
  const ExperimentConfig& cfg = loaded.value();
  REQUIRE(cfg.models.size() == 2);
  PluginRegistries plugins;
  REQUIRE(load_plugins(cfg, plugins).ok());
  auto built = build_policy(cfg, cfg.policies.front(), plugins);
  REQUIRE(built.ok());
  PolicyParts& parts = *built.value();

  // As `serve` does (cli/live.cpp): a runtime per model, loaded where it is held.
  std::vector<rt::LlamaConfig> model_cfgs;
  std::vector<std::unique_ptr<rt::LlamaModel>> runtimes;
  std::vector<ServedModel> served;
  const auto held = residency(cfg);
  for (std::size_t i = 0; i < cfg.models.size(); ++i) {
    auto c = runtime_config(*make_model(cfg.models[i]).value(), cfg.models[i].weights_seed);
    REQUIRE(c.ok());
    model_cfgs.push_back(c.value());
    runtimes.push_back(std::make_unique<rt::LlamaModel>(c.value()));
    ServedModel m{parts.tmpls[i], runtimes.back().get(), parts.models.shared(parts.tmpls[i]), {}};
    for (AccelId a = 0; a < held.size(); ++a)
      if (std::find(held[a].begin(), held[a].end(), i) != held[a].end()) m.accels.push_back(a);
    served.push_back(std::move(m));
  }
  CHECK(served[0].accels == std::vector<AccelId>{0, 1, 2});
  CHECK(served[1].accels == std::vector<AccelId>{0, 1, 3});
  auto model_of_tenant = [&](const Tenant& t) {
    return static_cast<std::size_t>(std::find(parts.tmpls.begin(), parts.tmpls.end(), t.tmpl()) - parts.tmpls.begin());
  };
  for (Tenant& t : parts.tenants)
    t.set_prompts([c = model_cfgs[model_of_tenant(t)], seed = cfg.seed + t.id()](std::uint64_t r, std::int64_t n) {
      return rt::synthetic_prompt(c, seed, r, n);
    });
  std::vector<std::string> devices;
  std::vector<std::int64_t> budgets;
  for (const auto& a : cfg.accelerators) {
    devices.push_back(a.device);
    budgets.push_back(a.hbm_bytes);
  }
  LlamaRunner runner(std::move(served), devices);
  auto weights = runner.load_weights();
  REQUIRE(weights.ok());
  // Each accelerator is charged exactly its resident models' weights.
  const std::int64_t a_bytes = make_model(cfg.models[0]).value()->weight_bytes();
  const std::int64_t b_bytes = make_model(cfg.models[1]).value()->weight_bytes();
  CHECK(weights.value() == std::vector<std::int64_t>{a_bytes + b_bytes, a_bytes + b_bytes, a_bytes, b_bytes});
  for (AccelId a = 0; a < devices.size(); ++a) CHECK(parts.gmg->hbm(a).weights == weights.value()[a]);
  LiveCluster cluster(budgets, runner, *parts.plugins.arbiter);
  for (AccelId a = 0; a < devices.size(); ++a) REQUIRE(cluster.reserve_resident(a, weights.value()[a]).ok());

  RecordOptions ro;
  ro.timeline_s = 1e9;
  auto run = run_recorded(cfg, parts, cluster, ro);
  if (!run.ok()) FAIL(run.status().message());

  // Every request of each tenant: its own model's reference tokens.
  std::size_t checked = 0;
  for (const Tenant& t : parts.tenants) {
    const std::size_t m = model_of_tenant(t);
    std::vector<std::vector<std::int64_t>> prompts;
    for (std::size_t r = 0; r < t.records().size(); ++r)
      prompts.push_back(rt::synthetic_prompt(model_cfgs[m], cfg.seed + t.id(), r, t.records()[r].input_tokens));
    const int max_new = static_cast<int>(t.records().front().output_tokens);
    rt::LlamaModel reference(model_cfgs[m]);
    const auto want = reference.generate_reference(prompts, max_new, "cpu");
    for (std::size_t r = 0; r < t.records().size(); ++r) {
      INFO(t.spec().name << " request " << r);
      CHECK(t.records()[r].error.empty());
      CHECK(t.records()[r].tokens == want[r]);
      ++checked;
    }
  }
  CHECK(checked == 16);
  // Operators ran only where their model's weights are: tiny-a never on
  // b-only (3), tiny-b never on a-only (2).
  std::size_t ops = 0;
  for (const RunRecord& rec : run->log) {
    if (rec.to != kNoAccel) continue;  // a transfer
    ++ops;
    const std::string name = parts.templates->kind_name(rec.kind);
    if (name.rfind("tiny-a/", 0) == 0) CHECK(rec.accel != 3);
    if (name.rfind("tiny-b/", 0) == 0) CHECK(rec.accel != 2);
  }
  CHECK(ops > 0);
}
