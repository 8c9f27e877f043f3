// What `slicesched calibrate` and `bench accuracy` derive from a config for
// the calibration library (executor/calibration): the shape grid's bounds
// from the tenants' streams, the cluster and its devices, the models'
// templates, the synthetic prompts' seeds and the profile's source line.
module;
#include <string>

#include "executor/torch/runtime.h"

export module slicesched.cli.calibrate;
import slicesched.core.status;
import slicesched.executor.calibration;
import slicesched.config;

export namespace slicesched::cli {

// The grid's bounds, from what the measurement window replays of each
// tenant's stream (as build_policy makes it):
//   P = the longest prompt, O = the longest output of any tenant's stream,
//   S = the most sequences one iteration can hold (max_seqs, capped by the
//       tenant's requests), T = the most tokens one iteration can hold
//       (max(token_budget, P), capped by requests * P), K = the most cached
//       tokens (kv_budget_tokens, capped by requests * (P + O)).
// 1 for each when there are no tenants. Throws CommandError (cli/fail)
// when a trace cannot be read.
GridBounds grid_bounds(const ExperimentConfig& cfg);
ShapeGrid shape_grid(const ExperimentConfig& cfg);

// The config's models, each where its weights are resident (residency()),
// on its cluster (accelerator devices from the config) over its shape grid.
CalibrationTarget calibration_target(const ExperimentConfig& cfg);

// slicesched::calibrate_models of calibration_target(cfg), each model's
// runtime built from its [[models]] table (random weights from its seed),
// with its contract: the devices must exist (check_devices) and the weights
// fit (check_weights_fit). Fails (one line) on a model the runtime cannot
// build, or as calibrate_models does.
Result<CalibrationResult> calibrate_config(const ExperimentConfig& cfg, const CalibrateSettings& s);

}  // namespace slicesched::cli
