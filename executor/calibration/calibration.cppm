// Calibration on real devices: every operator of a model template (embed,
// layers<g>, head) timed over a grid of iteration shapes on one device of
// each accelerator type, every ordered accelerator pair's copies over a
// range of sizes; a linear estimator set fitted to the medians with exactly
// the template's features, and snapshotted as a slicesched-calibration/2
// profile (simulate's ground truth or estimator prior). `slicesched
// calibrate` and `bench accuracy` run it (cli/calibrate.cppm derives the
// target from a config).
//
// The shape grid, from bounds the caller derives from what serving asks:
//   P = the longest prompt, O = the longest output, S = the most sequences
//   one iteration holds, T = the most tokens one iteration holds, K = the
//   most cached tokens (see GridBounds).
//   seqs    s in {1, 2, 4, ...} < S, and S
//   prefill s <= 4 sequences of t new tokens, t in {1, 4, 16, ...} < P and P, s*t <= T
//   decode  s sequences of 1 new token on c cached, c in {1, 4, 16, ...} < P+O-1 and P+O-1,
//           s*(c+1) <= K
//   mixed   s decodes on P cached each plus one prefill of t tokens (continuous batching),
//           s+t <= T
//   The head's cost follows the sequences (features {sequences, 1}); when
//   every shape above has one sequence, two one-token prompts are added
//   (T >= 2), so its fit sees two sequence counts and is identifiable.
//   copies  hidden states of t tokens, t in {1, 4, 16, ...} < T and T, and KV
//           caches of k tokens, k in {16, 64, ...} < K and K, between every ordered pair.
//   fixed   every shape without a fresh prefill: its whole iteration's median less its
//           operators' medians, fitted to {1, sequences} per accelerator type: the
//           profile's fixed_costs.
// Every shape is run whole, as the live executor runs an iteration (step
// plan, embed, every layer group, head with its sampling), `warmup` untimed
// times, then `repeats` timed ones, taken round robin over the shapes that
// share a KV cache; the median is the sample. Each operator is timed inside
// the iteration as the live executor times it: by CUDA events around it on
// its stream on a CUDA device, by the host's clock elsewhere. Layer groups of
// equal size pool their samples (the same computation). Copies are timed by
// the host's clock, each followed by a synchronize of both ends.
module;
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "executor/torch/runtime.h"

export module slicesched.executor.calibration;
import slicesched.core.calibration;
import slicesched.models.model;
import slicesched.core.accel;
import slicesched.core.estimator;
import slicesched.core.graph;
import slicesched.core.ids;
import slicesched.core.status;

export namespace slicesched {

struct CalibrateSettings {
  int warmup = 2;
  int repeats = 5;
  bool progress = true;  // a line per operator and per accelerator pair on stderr
};

// One iteration shape: `seqs` sequences, each with `tokens` new tokens on
// top of `context` cached ones, plus (when > 0) one fresh prefill of
// `prefill` tokens, as continuous batching mixes them.
struct GridShape {
  std::int64_t seqs = 1, tokens = 1, context = 0, prefill = 0;
  std::int64_t total_tokens() const { return seqs * tokens + prefill; }
  std::int64_t total_sequences() const { return seqs + (prefill > 0 ? 1 : 0); }
  std::int64_t total_context() const { return seqs * context; }
};

// What the grid covers (P, O, S, T, K above); each >= 1.
struct GridBounds {
  std::int64_t max_prompt = 1, max_output = 1, max_seqs = 1, max_tokens = 1, max_kv = 1;
};

struct ShapeGrid {
  std::vector<GridShape> shapes;
  std::vector<std::int64_t> hidden_tokens;  // copies of hidden states of this many tokens
  std::vector<std::int64_t> kv_tokens;      // copies of KV caches of this many tokens
  GridBounds bounds;                        // what it was derived from
};

// The grid above. Requires every bound >= 1.
ShapeGrid shape_grid(const GridBounds& bounds);
// A few lines: the bounds and the point counts.
std::string describe(const ShapeGrid& grid);

// What to measure: each served model's template on a cluster whose
// accelerator `a` runs on `devices[a]` (an rt device label).
struct CalibrationTarget {
  std::shared_ptr<AcceleratorSet> accels;
  std::vector<std::string> devices;  // one per accelerator
  std::shared_ptr<TemplateRegistry> templates;
  struct Served {
    TemplateId tmpl = 0;  // its ops are embed, layers<g> and head
    // The model contract behind tmpl: what each operator does (its role: the
    // embedding, which layer group, the head) comes from here, not its name.
    std::shared_ptr<const Model> model;
    // Where its weights are resident: its operators are timed on the first
    // of these of each accelerator type (a type that holds none is skipped).
    std::vector<AccelId> accels;
    std::uint64_t prompt_seed = 0;  // the synthetic prompts' seed
  };
  std::vector<Served> models;  // at least one; the copies are measured with the first's values
  ShapeGrid grid;
  std::string source;  // the profile's "source" line
};

struct CalibrationResult {
  std::shared_ptr<AcceleratorSet> accels;
  std::shared_ptr<TemplateRegistry> templates;
  EstimatorSet est;  // the fit (template priors, then the measurements)
  CalibrationProfile profile;
  struct Row {
    std::string model;       // the template (model) name; empty for copies
    std::string what, type;  // op and accelerator type, or "copy" and "src -> dst"
    std::uint64_t samples = 0;
    double mape_pct = 0;  // in-sample: the fit against the medians it was fitted to
    double min_s = 0, max_s = 0;
    bool transfer = false;
  };
  std::vector<Row> rows;
  // Every measurement: an operator at a grid shape, or a copy of `bytes`.
  struct Point {
    std::string model, what, type;  // as in Row
    GridShape shape;                // operators
    std::int64_t bytes = 0;         // copies
    std::vector<double> x;          // operators: the template's features
    double seconds = 0;             // the median (operators on CUDA: of the device's clock, as live reports them)
    double predicted = 0;           // by the final fit
    double host_seconds = 0;        // operators: the median of the whole iteration on the host's clock
    double spread_pct = 0;          // operators: (slowest - fastest) / median of the timed runs
  };
  std::vector<Point> points;
  double wall_s = 0;
};

// Measures and fits every served model. `runtimes[i]` runs
// target.models[i]'s template (same size); the devices must exist and each
// model's weights fit where it is resident (the caller checks both).
// Fails (one line, starting "calibrate: ") on a device or LibTorch
// failure, or an operator that is not embed, layers<g> or head.
Result<CalibrationResult> calibrate_models(const CalibrationTarget& target, std::span<rt::LlamaModel* const> runtimes,
                                           const CalibrateSettings& s);

// The table: model, op, type, samples, MAPE %, fastest and slowest median.
void print_calibration(const CalibrationResult& r, std::FILE* out);
// Every point as CSV text (model,what,type,seqs,tokens,context,prefill,bytes,features,seconds,predicted,
// host_seconds,spread_pct), for a caller to write with the profile
// (core/files' StagedFiles: both or neither).
std::string points_csv(const CalibrationResult& r);

// The features of template op `op` for an iteration of `tokens` new tokens
// over `sequences` sequences on `context` cached ones, exactly as the GMG
// evaluates them. Throws std::runtime_error if they do not evaluate.
std::vector<double> op_features(const GraphTemplate& t, const TemplateOp& op, std::int64_t tokens,
                                std::int64_t sequences, std::int64_t context);

}  // namespace slicesched
