// Replaying published single-GPU measurements (data/validation/) on the
// roofline ground truth, and the physical floors no simulated figure may
// beat. `slicesched validate` (cli/validate.cpp) prints them; docs/results.md
// ("Validation against published measurements") has the figures.
//
// A row is a static batch: `batch` requests all arriving at t = 0, each
// `input_tokens` in and exactly `output_tokens` out, the whole model on one
// GPU. It replays as one prefill iteration of every prompt, then
// output_tokens - 1 decode iterations of the whole batch, each costed by
// roofline_iteration_seconds (what the emulated cluster plays on a type
// without a measured profile, before noise), plus the fixed costs given.
//
// Pure functions and values: safe from any thread.
module;
#include <array>
#include <cstdint>
#include <string>
#include <vector>

export module slicesched.simulator.validation;
import slicesched.core.status;
import slicesched.hardware.roofline;
import slicesched.models.model;
import slicesched.models.work;

export namespace slicesched {

// One row of a published-measurements CSV (source, version, model,
// precision, gpu, batch, input_tokens, output_tokens, metric, value).
struct PublishedRow {
  std::string source, version, model, precision, gpu, metric;  // metric: "ttft_ms" or "output_tokens_per_s"
  std::int64_t batch = 1, input_tokens = 0, output_tokens = 0;
  double value = 0;
  int line = 0;  // in the file, for messages
};

// Reads the CSV; errors are one line naming the file, the line and the
// column ("x.csv:4: batch: expected a positive integer, got \"0\"").
Result<std::vector<PublishedRow>> read_published(const std::string& path);

// Engine-level fixed costs a static batch pays: per iteration (scheduling,
// sampling), per sequence in each iteration (its sampling and detokenizing,
// as [ground_truth] sequence_overhead_us charges it) and per request once
// (admission, tokenizing).
struct FixedCosts {
  double per_iteration_s = 0, per_request_s = 0, per_sequence_s = 0;
};

// One static batch on `played` with `fit`, and its physical floor on
// `datasheet` (the published GPU's peaks): each prefill at max(2 x
// parameters x tokens / peak FLOP/s, weights / HBM bandwidth), each decode
// step at max(weights + every sequence's KV cache) / HBM bandwidth and its
// FLOPs at peak. Requires batch >= 1, input_tokens >= 1, output_tokens >= 1.
struct StaticBatch {
  double prefill_s = 0, decode_s = 0;              // simulated, fixed costs included
  double floor_prefill_s = 0, floor_decode_s = 0;  // the physical floor
  std::int64_t decode_steps = 0;
  // Where the simulated time went: per kind of work (an attention kernel's
  // time beyond what it takes without its cached K and V is kv_read's), and
  // the fixed costs. They sum to total_s().
  std::array<double, kWorkKinds> kind_s{};
  double fixed_s = 0;
  double total_s() const { return prefill_s + decode_s; }
  double floor_total_s() const { return floor_prefill_s + floor_decode_s; }
};
StaticBatch replay_static_batch(const AcceleratorType& played, const RooflineFit& fit, const AcceleratorType& datasheet,
                                const Model& model, std::int64_t batch, std::int64_t input_tokens,
                                std::int64_t output_tokens, const FixedCosts& fixed = {});

// One decode iteration of `sequences` sequences holding `context` tokens
// between them: simulated on `played` and its floor on `datasheet`.
struct DecodeStep {
  double simulated_s = 0, floor_s = 0;
};
DecodeStep decode_step(const AcceleratorType& played, const RooflineFit& fit, const AcceleratorType& datasheet,
                       const Model& model, std::int64_t sequences, std::int64_t context);

// A row's figure from its replay: "ttft_ms" is the prefill (batch 1) in ms,
// "output_tokens_per_s" batch x output_tokens / the whole batch's time; and
// the same figure at the floor (the best any GPU of that datasheet could
// do). Unknown metric: NaN.
struct RowFigures {
  double simulated = 0, floor = 0;
  bool beats_floor = false;  // simulated better than physically possible
};
RowFigures row_figures(const PublishedRow& row, const StaticBatch& b);

}  // namespace slicesched
