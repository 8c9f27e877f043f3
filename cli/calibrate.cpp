// `slicesched calibrate CONFIG --out PROFILE`: times every model's
// operators on one device of each accelerator type and the copies between
// every accelerator pair, fits the estimators to them and writes a
// slicesched-calibration/2 profile that simulate takes as ground truth
// ([ground_truth] calibrated) or as estimator prior ([estimators] prior).
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "executor/torch/runtime.h"

import slicesched.core.graph;
import slicesched.core.estimator;
import slicesched.config;
import slicesched.compose.setup;
import slicesched.compose.live;
import slicesched.executor.calibration;
import slicesched.cli.calibrate;
import slicesched.cli.fail;
import slicesched.core.calibration;
import slicesched.core.files;

namespace slicesched::cli {

int calibrate(const CalibrateOptions& opt) {
  auto cfg = load_config(opt.config);
  if (!cfg.ok()) fail(cfg.status().message());
  // It times every accelerator in this process: a config's executors are
  // not reached, and its copies between hosts (ZeroMQ pulls) would be fitted
  // as in-process copies, silently (an outside probe).
  if (!cfg->hosts.empty())
    fail_in(cfg->path,
            "[[hosts]]: calibrate times operators and copies in this process, not on the config's "
            "executors; calibrate with a config without [[hosts]] on a machine like theirs, and give "
            "serve the profile ([estimators] prior)");
  {
    check_in(cfg->path, check_weights_fit(cfg.value()));
    std::string names;
    for (const ModelConfig& m : cfg->models) {
      (void)value_or_fail_in(cfg->path, validated_runtime_model(m));
      names += (names.empty() ? "" : ", ") + m.name;
    }
    if (opt.dry_run) {
      std::printf("%s: %s, %zu accelerator(s)\n%s", cfg->path.c_str(), names.c_str(), cfg->accelerators.size(),
                  describe(shape_grid(cfg.value())).c_str());
      return 0;
    }
    check_in(cfg->path, check_devices(cfg.value()));
    if (opt.out.empty()) fail_in(cfg->path, "calibrate: --out PROFILE is required");
    // Before minutes of timing: where the results go can take them.
    std::vector<std::pair<std::string, std::string>> outputs{{opt.out, "--out"}};
    if (opt.samples) outputs.push_back({*opt.samples, "--samples"});
    check_in(cfg->path, check_result_paths(outputs));
    rt::set_cpu_threads(cfg->live.threads);
    CalibrateSettings s;
    s.warmup = opt.warmup;
    s.repeats = opt.repeats;
    std::fprintf(stderr, "calibrating %s on %zu accelerator(s); %s", names.c_str(), cfg->accelerators.size(),
                 describe(shape_grid(cfg.value())).c_str());
    CalibrationResult r = value_or_fail_in(cfg->path, calibrate_config(cfg.value(), s));
    print_calibration(r, stdout);
    // The profile and its samples appear together or not at all.
    StagedFiles files;
    check_in(cfg->path, files.add(opt.out, calibration_text(r.profile)));
    if (opt.samples) check_in(cfg->path, files.add(*opt.samples, points_csv(r)));
    check_in(cfg->path, files.commit());
    std::printf("wrote %s (%zu op fits, %zu transfer fits) in %.1f s\n", opt.out.c_str(), r.profile.ops.size(),
                r.profile.transfers.size(), r.wall_s);
  }
  return 0;
}

}  // namespace slicesched::cli
