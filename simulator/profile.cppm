// Ground truth for the offline emulated cluster: how long an operator or a
// transfer really takes, from latencies measured on real GPUs (shipped under
// data/profiles/, see NOTICE and docs/ground-truth.md), plus seeded noise.
// The scheduler never reads these; its estimators only see what the
// emulated cluster reports back.
module;
#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

export module slicesched.simulator.profile;
import slicesched.core.status;

namespace slicesched::profile_detail {

// Piecewise-linear y(x) through ascending, distinct knots: clamped to y[0]
// below x[0], and a straight line of slope `slope_beyond` past x.back().
struct Curve {
  std::vector<double> x, y;
  double slope_beyond = 0;
  double at(double v) const;
};

}  // namespace slicesched::profile_detail

export namespace slicesched {

// The model shape behind the attention-over-cache term and the template op
// names. Defaults are Llama-3-8B in bf16 on an H100.
struct LayerProfileOptions {
  double hbm_bytes_per_s = 3.35e12;
  std::int64_t kv_heads = 8;
  std::int64_t head_dim = 128;
  std::int64_t kv_bytes_per_element = 2;
  int layers_per_group = 8;  // "layersN" of the llama template
  int groups = 4;            // layers0 .. layers{groups-1}
};

struct OpLatency {
  std::string template_op;
  double seconds = 0;
};

// Per-layer-op latencies of one model on one GPU type, from an
// LLMServingSim `layers.csv` (columns layer_name, input, kv_cache, tp_size,
// latency(ns); `input` is the number of tokens in the batch).
//
// Each op is a curve over tokens: measured points as they are, linear in
// between, the first point's latency below it (a launch-bound kernel does
// not get faster with fewer tokens), and past the last point a line whose
// slope is the secant from the last point back to the largest point at or
// below half of it, never negative. A secant over a whole octave, not over
// the last two points: the LLMServingSim table is measured at every token
// count and is jittery (its last two points give lm_head +91 us/token and
// the layer sum -10 us/token), so the last step says nothing about slope.
// On a doubling grid the two rules coincide.
//
// The table is measured with an empty KV cache (kv_cache = 0 everywhere), so
// attention over cached context is added as a model: reading the cached K and
// V of `context` tokens once from HBM, per layer. Rows with kv_cache != 0 are
// ignored, as are ops this class does not use.
//
// Immutable after load; const members are safe for concurrent callers.
class LayerProfile {
 public:
  // Ops that make one decoder layer, the embedding, and the head.
  static std::span<const std::string_view> layer_ops();
  static std::span<const std::string_view> embed_ops();
  static std::span<const std::string_view> head_ops();

  // Reads `path` and keeps the rows whose tp_size is `tp_size` (>= 1), or,
  // with tp_size 0, the file's rows, which must all have one tp_size.
  // Errors (one line, "file[:line]: what was expected"): missing file, missing
  // column, a malformed field, no row for `tp_size`, an op of layer_ops(),
  // embed_ops() or head_ops() without rows. `options` must be positive.
  static Result<LayerProfile> load(const std::filesystem::path& path, int tp_size = 1,
                                   const LayerProfileOptions& options = {});
  // The same from CSV text; `source` names it in errors.
  static Result<LayerProfile> parse(std::string_view csv, std::string_view source, int tp_size = 1,
                                    const LayerProfileOptions& options = {});

  // One decoder layer: the table's ops at `tokens` (>= 1) plus
  // kv_read_seconds(context) (context >= 0: cached tokens the batch attends
  // to, summed over its sequences).
  double layer_seconds(std::int64_t tokens, std::int64_t context) const;
  // Reading the K and V of `context` cached tokens from HBM in one layer:
  // context * 2 * kv_heads_per_rank * head_dim * bytes / hbm_bytes_per_s,
  // where a rank holds ceil(kv_heads / tp_size) heads. Linear in context.
  double kv_read_seconds(std::int64_t context) const;
  // `layers` (>= 0) consecutive decoder layers.
  double group_seconds(std::int64_t tokens, std::int64_t context, int layers = 8) const;
  double embed_seconds(std::int64_t tokens) const;
  // final_layernorm + lm_head over `tokens` positions: pass the number of
  // positions whose logits are computed (a serving engine computes only the
  // sampled ones; the table's lm_head at 2,048 tokens is 2.9 ms).
  double head_seconds(std::int64_t tokens) const;

  // By llama template op name: "embed", "layers0" .. "layers{groups-1}"
  // (layers_per_group layers each), "head". An unknown name is NotFound,
  // naming the known ones.
  Result<double> op_seconds(std::string_view op, std::int64_t tokens, std::int64_t context) const;
  // Every template op in template order, for one instance's dims.
  std::vector<OpLatency> op_latencies(std::int64_t tokens, std::int64_t context) const;

  int tp_size() const { return tp_size_; }
  const LayerProfileOptions& options() const { return options_; }
  // The largest token count the table measured (past it the curves are
  // extended as above).
  std::int64_t largest_tokens() const { return layer_.x.empty() ? 0 : static_cast<std::int64_t>(layer_.x.back()); }

 private:
  LayerProfile() = default;
  int tp_size_ = 1;
  LayerProfileOptions options_;
  double kv_seconds_per_token_ = 0;
  profile_detail::Curve layer_, embed_, head_;
};

// Point-to-point GPU transfer time from a Vidur `send_recv.csv`
// (time_stats.send_recv.median in ms, size in bytes, devices_per_node:
// 1 = the two GPUs are on different nodes, more = same node).
//
// The medians have 1 us resolution and jitter (on the H100 DGX, 45 of 992
// steps between neighbouring sizes go down within a node, 316 across nodes),
// but a bigger message is never faster, so the curve is their least-squares
// non-decreasing fit (pool adjacent violators, a repeated size averaged and
// weighted by its rows): a median that is not out of order stays exactly as
// measured. Between sizes the time is linear in
// log(size), as the sizes span 2 KB .. 64 MiB; below the smallest size it is
// the smallest size's time (latency-bound); past the largest it grows at the
// largest size's bandwidth.
//
// Immutable after load; const members are safe for concurrent callers.
class TransferProfile {
 public:
  // Errors as LayerProfile::load; no rows for the chosen side is an error.
  static Result<TransferProfile> load(const std::filesystem::path& path, bool within_node = true);
  static Result<TransferProfile> parse(std::string_view csv, std::string_view source, bool within_node = true);
  // An all-reduce profile (Vidur's all_reduce.csv: time_stats.all_reduce.*
  // in ms, `size`, `num_workers`, `devices_per_node`, `collective`): the
  // rows of `workers` GPUs in one node, size read as bytes (as Vidur's own
  // predictor reads it). No such rows, or rows of one size only, is an
  // error naming what is there. `workers` <= 0 reads every row in one node
  // (to check a file no group plays).
  static Result<TransferProfile> load_all_reduce(const std::filesystem::path& path, int workers);
  static Result<TransferProfile> parse_all_reduce(std::string_view csv, std::string_view source, int workers);

  // Seconds to move `bytes` (>= 0) between two GPUs.
  double seconds(std::int64_t bytes) const;
  // bytes / seconds at the largest measured size (after the monotone fit).
  double peak_bytes_per_s() const;
  std::int64_t min_bytes() const { return min_bytes_; }
  std::int64_t max_bytes() const { return max_bytes_; }

 private:
  TransferProfile() = default;
  // From (bytes, seconds) points, at least one.
  static TransferProfile from_points(std::vector<std::pair<std::int64_t, double>> pts);
  std::int64_t min_bytes_ = 0, max_bytes_ = 0;
  profile_detail::Curve by_log_size_;
};

// Multiplicative timing noise: sample(t) = t * X with X lognormal, E[X] = 1
// and sd(X) = cv, so means are kept and a time is never negative. The draws
// are a function of the seed and the call sequence alone: std::mt19937_64 is
// specified bit for bit, and the normal deviates are computed here rather
// than by std::normal_distribution, whose algorithm differs between standard
// libraries. The default 0.6 % is the paper's measured operator stability.
//
// Not thread-safe: one per emulated cluster (or per accelerator).
class NoisyClock {
 public:
  // `cv` >= 0 and finite; 0 returns times unchanged.
  explicit NoisyClock(std::uint64_t seed, double cv = 0.006);
  // `seconds` >= 0 and finite (negative asserts; release builds return 0).
  double sample(double seconds);
  double cv() const { return cv_; }

 private:
  double standard_normal();
  std::mt19937_64 rng_;
  double cv_, mu_, sigma_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace slicesched
