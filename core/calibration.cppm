// Calibration profiles: what the estimators learned, by name, in a JSON file.
// `slicesched calibrate` (live) writes one from measurements on real
// devices and `simulate --out` writes one per policy; `simulate` reads one
// as ground truth ([ground_truth] calibrated = ...) or as estimator prior.
//
// Format "slicesched-calibration/2":
//   { "format": "slicesched-calibration/2", "source": "...",
//     "ops": [ { "template": "llama3-8b", "op": "head", "type": "H100",
//                "features": ["sequences", "1"], "coefficients": [...],
//                "samples": 120, "mape_pct": 0.4 } ],
//     "transfers": [ { "src": "gpu0", "dst": "gpu1", "sec_per_byte": 3.3e-12,
//                      "fixed_s": 5e-6, "samples": 40, "mape_pct": 0.9 } ],
//     "fixed_costs": [ { "type": "H100", "iteration_overhead_us": 120,
//                        "sequence_overhead_us": 3, "samples": 12 } ],
//     "models": [ { "template": "llama3-8b", "shape": "dense-decoder: ..." } ] }
// `fixed_costs` (optional: older /2 profiles have none) is the serving
// engine's own time per iteration and per sequence in an iteration, beyond
// its operators', that calibrate measured on each accelerator type.
// `models` (optional too) says what each template's model was.
// Coefficients multiply the features in order; `features` are the template
// operator's feature expressions as the fit saw them (Expr::to_string), so a
// profile fitted to other features than the template's now is refused
// instead of misread. /1 profiles had no features (and the Llama head's
// were `tokens` then, `sequences` now): they are refused, naming the cure.
module;
#include <cstdint>
#include <string>
#include <vector>

export module slicesched.core.calibration;
import slicesched.core.graph;
import slicesched.core.accel;
import slicesched.core.estimator;
import slicesched.core.files;
import slicesched.core.status;

export namespace slicesched {

struct CalibrationProfile {
  struct Op {
    std::string tmpl, op, type;
    std::vector<std::string> features;  // what the coefficients multiply, in order
    std::vector<double> coefficients;
    std::uint64_t samples = 0;
    double mape_pct = 0;
    // The largest value of each feature the fit was measured at (empty:
    // not recorded, a profile written before it was). Past it a term with a
    // negative coefficient would make a larger operator faster, so the
    // calibrated ground truth holds such a term at its value here.
    std::vector<double> feature_max;
  };
  struct Transfer {
    std::string src, dst;
    double sec_per_byte = 0, fixed_s = 0;
    std::uint64_t samples = 0;
    double mape_pct = 0;
  };
  struct FixedCost {
    std::string type;
    double iteration_s = 0, sequence_s = 0;  // each >= 0
    std::uint64_t samples = 0;               // iteration shapes it was fitted to
    // Once per request (admission, tokenizing, the reply), >= 0; optional
    // in the file (calibrate does not measure it: it is the serving front
    // end's, not the executor's).
    double request_s = 0;
  };
  // The model behind a template when its fits were made (shape_text in
  // models/model.cppm): read for a model of that name but another shape,
  // the profile is refused, not played at the other model's speed.
  // Optional in the file: profiles written before have none.
  struct ModelShape {
    std::string tmpl, shape;
  };
  std::string source;
  std::vector<Op> ops;
  std::vector<Transfer> transfers;
  std::vector<FixedCost> fixed_costs;  // at most one per type
  std::vector<ModelShape> models;      // at most one per template

  // Lookups by name; nullptr when absent.
  const Op* find_op(const std::string& tmpl, const std::string& op, const std::string& type) const;
  const Transfer* find_transfer(const std::string& src, const std::string& dst) const;
  const FixedCost* find_fixed_cost(const std::string& type) const;
  const ModelShape* find_model(const std::string& tmpl) const;
};

// Every estimator with samples, named through the registry and the set.
CalibrationProfile snapshot(const EstimatorSet& est, const TemplateRegistry& templates, const AcceleratorSet& accels,
                            std::string source);

// The profile as its JSON file's text.
std::string calibration_text(const CalibrationProfile& profile);
// Writes calibration_text atomically (temporary file + rename). Fails
// naming the path.
Status write_calibration(const CalibrationProfile& profile, const std::string& path);

// Reads and checks a profile; errors name the file and the entry.
Result<CalibrationProfile> read_calibration(const std::string& path);

// The feature expressions of a template operator, as profiles record them.
std::vector<std::string> feature_names(const GraphTemplate& t, const TemplateOp& op);

// Checks that every op fit naming a template operator of `templates` was
// fitted to that operator's features; fails naming the first that was not
// (entries naming nothing here are not checked).
Status check_features(const CalibrationProfile& profile, const TemplateRegistry& templates);

// Uses the profile's fits as priors: ops by (template, op, type name),
// transfers by accelerator names. Entries naming nothing here are ignored;
// fails as check_features does.
Status apply_as_prior(const CalibrationProfile& profile, EstimatorSet& est, const TemplateRegistry& templates,
                      const AcceleratorSet& accels);

}  // namespace slicesched
