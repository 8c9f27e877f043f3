// Offline runs: a policy's parts on the emulated cluster, playing a ground
// truth (measured profiles or a calibration profile). Used by `simulate`,
// `sweep`, `plan` and `bench accuracy`. Failures are Statuses with one line
// naming the config or the policy.
module;
#include <memory>
#include <optional>
#include <string>
#include <vector>

export module slicesched.compose.offline;
import slicesched.compose.run;
import slicesched.simulator.emulated_cluster;
import slicesched.simulator.profile;
import slicesched.simulator.roofline_truth;
import slicesched.compose.policy;
import slicesched.config;
import slicesched.core.accel;
import slicesched.core.calibration;
import slicesched.core.plugin;
import slicesched.core.status;
import slicesched.hardware.roofline;
import slicesched.models.model;

export namespace slicesched {

// The ground truth a run plays, and the estimators' prior. Read once per
// config; shared read-only by runs on any thread.
struct Truths {
  std::optional<LayerProfile> layers;
  std::optional<TransferProfile> transfers;
  std::optional<CalibrationProfile> calibrated;
  std::optional<CalibrationProfile> prior;
  // Per accelerator type, measured or roofline (a config with a type the
  // profile does not cover, or no transfers profile); layers and transfers
  // above are then empty.
  std::optional<TypedTruthOptions> typed;
};

// Reads what `cfg`'s [ground_truth] and [estimators] name; fails when the
// config has no [ground_truth].
Result<Truths> load_truths(const ExperimentConfig& cfg);

// Which ground truth accelerators of one type play: "profile" (the measured
// layers profile `source`), "calibrated" (the calibration profile
// `source`) or "roofline" (the type's datasheet `datasheet` with the
// efficiencies `fit`, read from `source`). Types are those of the config's
// cluster as written there, in order of first appearance.
struct TruthPlayed {
  std::string type;       // as the cluster names it ("H100")
  std::string datasheet;  // the type's own name where a table knows it ("H100-SXM"), else the name
  std::string truth;      // "profile", "calibrated" or "roofline"
  std::string source;     // the file behind it (file name only: summaries stay the same across checkouts)
  // The roofline's efficiencies where it plays: "roofline", or "profile"
  // with roofline_models.
  std::optional<RooflineFit> fit;
  // "profile" only: models the profile did not measure (their shape is not
  // ground_truth.layers_model's), which play the roofline here too, with
  // `fit` from `roofline_source`.
  std::vector<std::string> roofline_models;
  std::string roofline_source;
  // "roofline" on a type the profile measured, because no model of the
  // config is the one it measured: the profile's file name.
  std::string profile_unplayed;
  // A tensor-parallel group (tp > 1, type "NAME/tpN"): what its all-reduces
  // play (the profile's file name, or "ring over link class 'L'").
  int tp = 1;
  std::string all_reduce;
};
// What each type of `cfg`'s cluster plays with `truths` (load_truths(cfg)):
// the decision TypedGroundTruth makes (plays_profile), so a report says what
// really ran.
std::vector<TruthPlayed> truth_played(const ExperimentConfig& cfg, const Truths& truths);
// One line for the types in `played` that fell back to the roofline while a
// measured profile was given, or every type when no profile was ("" when
// none plays the roofline): "ground truth: A100 plays the roofline ...".
// `profile_given`: the configured layers profile's file name ("" for none),
// named even where no type of the cluster plays it.
std::string roofline_fallback_line(const std::vector<TruthPlayed>& played, const std::string& profile_given = "");
// The lines saying which models and types a layers profile was taken to
// measure: models of another shape than ground_truth.layers_model's play
// the roofline ("ground truth: model 'qwen' plays the roofline ..."), and
// without layers_model or layers_type the profile plays every model or
// every type, which is said too. Empty without a layers profile.
std::vector<std::string> profile_scope_lines(const ExperimentConfig& cfg);
// One line per tensor-parallel group type in `played`: what it plays (the
// roofline at one rank's shapes, or a rank's measured layers) and what its
// all-reduces play.
std::vector<std::string> tp_group_lines(const std::vector<TruthPlayed>& played);
// All of the above for `cfg`, whose accelerators play `played`
// (truth_played): what `simulate` prints before it runs.
std::vector<std::string> ground_truth_lines(const ExperimentConfig& cfg, const std::vector<TruthPlayed>& played);

// The serving engine's fixed costs on one accelerator type, per iteration
// and per sequence of an iteration (charged to the operator that samples).
struct TypeFixedCosts {
  double iteration_s = 0, sequence_s = 0;
  double request_s = 0;  // once per request, at its first iteration
};
// Each type of `accels` (indexed by AccelTypeId): [ground_truth]'s
// iteration_overhead_us / sequence_overhead_us where given, else what the
// calibration profile (truths.calibrated) measured on the type (matched by
// name or alias), else 0.
std::vector<TypeFixedCosts> fixed_costs_per_type(const ExperimentConfig& cfg, const Truths& truths,
                                                 const AcceleratorSet& accels);

// The ground truth `truths` describes for the cluster `accels`, with the
// config's seed and noise; a profile ground truth costs each template's
// operators through its model in `models` (PolicyParts::models). The truths
// must outlive it.
Result<std::unique_ptr<GroundTruth>> make_ground_truth(const ExperimentConfig& cfg, const Truths& truths,
                                                       const AcceleratorSet& accels, const ModelSet& models = {});

// Creates (and drops) the plugins of every policy `filter` admits (all when
// empty), so a bad name or argument stops a command before anything runs;
// and checks that the model's weights fit every accelerator. For commands
// that build their policies later, one run at a time (sweep, plan).
Status check_policies(const ExperimentConfig& cfg, const PluginRegistries& plugins,
                      const std::optional<std::string>& filter = std::nullopt);

// Runs `parts` (built from `cfg`) to the end of the window on an emulated
// cluster playing `truths`. Thread-safe for distinct parts; `truths` is
// only read.
Result<PolicyRun> run_offline(const ExperimentConfig& cfg, PolicyParts& parts, const Truths& truths,
                              const RecordOptions& opt = {});

}  // namespace slicesched
