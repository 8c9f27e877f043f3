module;
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "executor/torch/runtime.h"

module slicesched.cli.calibrate;

namespace slicesched::cli {

GridBounds grid_bounds(const ExperimentConfig& cfg) {
  if (cfg.tenants.empty()) return GridBounds{};
  GridBounds g{0, 0, 0, 0, 0};
  for (std::size_t i = 0; i < cfg.tenants.size(); ++i) {
    const TenantConfig& t = cfg.tenants[i];
    // What the window replays, as build_policy does.
    const Trace trace = make_stream(t, cfg.seed + i, cfg.duration_s > 0 ? cfg.duration_s : -1);
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
  t.accels = make_cluster(cfg);
  for (const auto& a : cfg.accelerators) t.devices.push_back(a.device);
  t.templates = std::make_shared<TemplateRegistry>();
  t.model = build_model(cfg.models.front());
  t.tmpl = t.templates->add(t.model->make_template()).value();
  t.grid = shape_grid(cfg);
  t.prompt_seed = cfg.models.front().weights_seed + 17;
  std::string devices;
  for (const std::string& d : t.devices)
    if (devices.find(d) == std::string::npos) devices += (devices.empty() ? "" : ", ") + d;
  t.source = "calibrate " + cfg.path + " on " + devices;
  return t;
}

CalibrationResult calibrate_model(const ExperimentConfig& cfg, rt::LlamaModel& model, const CalibrateSettings& s) {
  return slicesched::calibrate_model(calibration_target(cfg), model, s);
}

}  // namespace slicesched::cli
