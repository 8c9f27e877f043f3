module;
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "executor/torch/runtime.h"

module slicesched.cli.calibrate;

import slicesched.core.gmg;
import slicesched.config;
import slicesched.compose.setup;
import slicesched.compose.live;
import slicesched.executor.calibration;
import slicesched.cli.fail;
import slicesched.core.graph;
import slicesched.core.ids;
import slicesched.workload.trace;

namespace slicesched::cli {

GridBounds grid_bounds(const ExperimentConfig& cfg) {
  if (cfg.tenants.empty()) return GridBounds{};
  GridBounds g{0, 0, 0, 0, 0};
  for (std::size_t i = 0; i < cfg.tenants.size(); ++i) {
    const TenantConfig& t = cfg.tenants[i];
    // What the window replays, as build_policy does.
    const Trace trace = value_or_fail(make_stream(t, cfg.seed + i, cfg.duration_s > 0 ? cfg.duration_s : -1));
    std::int64_t p = 1, o = 1;
    for (const Request& r : trace.requests) {
      p = std::max(p, r.input_tokens);
      o = std::max(o, r.output_tokens);
    }
    const auto n = std::max<std::int64_t>(1, static_cast<std::int64_t>(trace.requests.size()));
    g.max_prompt = std::max(g.max_prompt, p);
    g.max_output = std::max(g.max_output, o);
    g.max_seqs = std::max(g.max_seqs, std::min(t.max_seqs, n));
    g.max_tokens = std::max(g.max_tokens, std::min(std::max(t.token_budget, p), n * p));
    g.max_kv = std::max(g.max_kv, std::min(t.kv_budget_tokens, n * (p + o)));
  }
  return g;
}

ShapeGrid shape_grid(const ExperimentConfig& cfg) { return slicesched::shape_grid(grid_bounds(cfg)); }

CalibrationTarget calibration_target(const ExperimentConfig& cfg) {
  CalibrationTarget t;
  t.accels = value_or_fail(make_cluster(cfg));
  for (const auto& a : cfg.accelerators) t.devices.push_back(a.device);
  t.templates = std::make_shared<TemplateRegistry>();
  const auto held = residency(cfg);
  for (std::size_t i = 0; i < cfg.models.size(); ++i) {
    CalibrationTarget::Served m;
    m.model = value_or_fail(build_model(cfg.models[i]));
    m.tmpl = t.templates->add(m.model->make_template()).value();
    for (AccelId a = 0; a < held.size(); ++a)
      if (std::find(held[a].begin(), held[a].end(), i) != held[a].end()) m.accels.push_back(a);
    m.prompt_seed = cfg.models[i].weights_seed + 17;
    t.models.push_back(std::move(m));
  }
  t.grid = shape_grid(cfg);
  std::string devices;
  for (const std::string& d : t.devices)
    if (devices.find(d) == std::string::npos) devices += (devices.empty() ? "" : ", ") + d;
  t.source = "calibrate " + cfg.path + " on " + devices;
  return t;
}

Result<CalibrationResult> calibrate_config(const ExperimentConfig& cfg, const CalibrateSettings& s) {
  std::vector<std::unique_ptr<rt::LlamaModel>> runtimes;
  std::vector<rt::LlamaModel*> views;
  for (const ModelConfig& m : cfg.models) {
    auto c = runtime_model(m);
    if (!c.ok()) return c.status();
    auto model = load_runtime_model(m, c.value());
    if (!model.ok()) return model.status();
    runtimes.push_back(std::move(model).value());
    views.push_back(runtimes.back().get());
  }
  return slicesched::calibrate_models(calibration_target(cfg), views, s);
}

}  // namespace slicesched::cli
