// Online cost models: how long an operator or a transfer takes, learned from
// measurements while the scheduler runs.
//
// Every model is linear in a handful of features (for a matmul: b*m*n*k,
// b*m*k, ..., 1) and starts from a prior. Features span a dozen orders of
// magnitude, so the fit is a square-root information filter (Givens QR of the
// relative-error-weighted, column-scaled rows), never normal equations.
module;
#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

export module slicesched.core.estimator;
import slicesched.core.ids;
import slicesched.core.status;

export namespace slicesched {

// t = sum_j beta_j * x_j, fitted online to minimise sum ((x.beta - y) / y)^2:
// relative error, because timing noise is multiplicative and a 10 us op
// matters as much as a 10 ms one.
//
// The prior is a weak ridge: with fewer informative samples than features,
// the unidentified directions stay at the prior (one sample scales every
// coefficient by about the same factor, observed / predicted); with plenty
// of samples the data dominates completely (the ridge weighs about 1e-5 of
// one sample).
//
// A plain value (about 1.2 KB, no heap). Not thread-safe for writers; const
// members are safe for concurrent callers while no observe() runs.
class LinearEstimator {
 public:
  // Window of recent_mape_pct().
  static constexpr int kRecentWindow = 64;

  // `prior` gives the coefficients used until data says otherwise; its size
  // (1..kMaxFeatures) is the number of features. Any other size is a
  // programming error: asserts, and release builds keep at most
  // kMaxFeatures coefficients.
  explicit LinearEstimator(std::span<const double> prior);

  std::size_t num_features() const { return n_; }

  // Predicted seconds for `x` (x.size() == num_features(), asserted; release
  // builds read only the common prefix). Never negative. Hot path: no
  // allocation, no locking.
  inline double predict(std::span<const double> x) const;

  // Folds in one measurement: `y` seconds for features `x`. A non-finite or
  // non-positive `y`, or a non-finite feature, is ignored (a glitched timer
  // must not poison the fit for the rest of the run). A wrong x.size() is a
  // programming error: asserts, ignored in release builds. O(p^2), no
  // allocation.
  void observe(std::span<const double> x, double y);

  // Current coefficients (the prior until the first sample). Invalidated by
  // observe() only in value, never in address.
  std::span<const double> coefficients() const { return {beta_.data(), n_}; }
  std::span<const double> prior() const { return {prior_.data(), n_}; }
  std::uint64_t samples() const { return samples_; }
  // The largest value of each feature among the samples learnt from (0
  // for one never seen): the edge of what the fit was measured on.
  std::span<const double> feature_max() const { return {xmax_.data(), n_}; }
  // Prequential mean absolute percentage error: each sample is scored
  // against the model *before* it learns from that sample, so this is an
  // honest out-of-sample figure (the first sample is scored against the
  // prior). 0 with no samples.
  double mape_pct() const;
  // The same over the last kRecentWindow samples: what the model is worth
  // now, not averaged with its cold start.
  double recent_mape_pct() const;

 private:
  void open_column(std::size_t j, double scale);
  void solve();
  double& r(std::size_t i, std::size_t j) { return r_[i * kMaxFeatures + j]; }

  std::size_t n_ = 0;
  std::array<double, kMaxFeatures> beta_{};
  std::array<double, kMaxFeatures> xmax_{};
  std::array<double, kMaxFeatures> prior_{};
  // Column j is fitted as g_j = beta_j * scale_[j], with scale_[j] = |x_j|/y
  // of the first sample where x_j != 0, so that sample's scaled row is all
  // +-1 and every column is O(1) in the units of the data. 0 = not yet seen:
  // the column is then untouched by data and beta_j stays at the prior.
  std::array<double, kMaxFeatures> scale_{};
  // Upper-triangular R and z with R g = z the least-squares solution over
  // the ridge rows and every sample so far (row-major, kMaxFeatures stride).
  std::array<double, kMaxFeatures * kMaxFeatures> r_{};
  std::array<double, kMaxFeatures> z_{};
  std::uint64_t samples_ = 0;
  double err_sum_ = 0;  // sum of prequential |pred - y| / y
  std::array<float, kRecentWindow> recent_err_{};
};

inline double LinearEstimator::predict(std::span<const double> x) const {
  assert(x.size() == n_);
  const std::size_t n = x.size() < n_ ? x.size() : n_;
  double t = 0;
  for (std::size_t j = 0; j < n; ++j) t += beta_[j] * x[j];
  return t > 0 ? t : 0.0;  // also maps NaN to 0
}

// Per (op kind, accelerator type) op estimators and per ordered (src, dst)
// accelerator-pair transfer estimators (t = sec_per_byte * bytes + fixed).
//
// Lookups are flat tables indexed by dense ids (kind * type_stride + type,
// src * accel_stride + dst), and each slot carries the coefficients in
// effect for it (fitted, else its own prior, else the inherited one), so a
// prediction is one index and a dot product.
//
// Priors are configuration: setting one discards the samples of every
// estimator it governs (they were fitted against the old prior, possibly a
// different feature layout). An estimator is created from its prior on the
// first valid observe.
//
// Not thread-safe for writers (set_*, observe_*); predict_* and report()
// are const and safe for concurrent readers while no writer runs.
class EstimatorSet {
 public:
  // What predict_op returns for a (kind, type) with no prior and no samples:
  // a flat 1 ms, whatever the features. Deliberately pessimistic-ish so a forgotten
  // prior shows up as a slow op rather than a free one.
  static constexpr double kDefaultOpSeconds = 1e-3;
  // The default transfer prior until set_default_transfer_prior: PCIe Gen4
  // x16 order of magnitude (25 GB/s, 10 us per transfer).
  static constexpr double kDefaultTransferSecPerByte = 1.0 / 25e9;
  static constexpr double kDefaultTransferFixedSec = 10e-6;
  // Ids are dense indices; these bounds turn a garbage id into an error
  // instead of a huge table. Larger ids predict from the defaults.
  static constexpr OpKindId kMaxOpKinds = OpKindId{1} << 20;
  static constexpr AccelTypeId kMaxAccelTypes = 1024;
  // Transfer pairs of accelerators below this id live in a flat table (at
  // most 1024^2 slots); a pair with a larger id lives in a hash map, so a
  // cluster of 100,000 costs what its pairs use, not n^2.
  static constexpr AccelId kMaxAccelerators = 1024;

  // Prior for one op kind, for every accelerator type without its own
  // (set_op_prior_for_type). prior.size() is the feature count. Fails on a
  // size outside 1..kMaxFeatures, a non-finite value, or an id beyond the
  // bounds above.
  Status set_op_prior(OpKindId kind, std::span<const double> prior);
  Status set_op_prior_for_type(OpKindId kind, AccelTypeId type, std::span<const double> prior);
  // Prior for the ordered pair src -> dst. Fails on a negative or non-finite
  // value.
  Status set_transfer_prior(AccelId src, AccelId dst, double sec_per_byte, double fixed_sec);
  // Prior for every pair without its own. Fails on a negative or non-finite
  // value.
  Status set_default_transfer_prior(double sec_per_byte, double fixed_sec);

  // Predicted seconds, never negative; kDefaultOpSeconds when (kind, type)
  // has neither a prior nor samples. Otherwise x.size() must equal the
  // prior's size (asserted).
  // Hot path: no allocation, no locking, creates nothing.
  inline double predict_op(OpKindId kind, AccelTypeId type, std::span<const double> x) const;
  // Predicted seconds for `bytes` from src to dst, never negative. src ==
  // dst is not special-cased: it is a pair like any other. Hot path.
  inline double predict_transfer(AccelId src, AccelId dst, std::uint64_t bytes) const;
  // At most predict_transfer(src, dst, bytes) for every pair: from the
  // least per-byte and fixed coefficients any pair or the default holds
  // (noted as they are written; only a new default prior, which rewrites
  // the slots, takes them again from the slots). What lets a round bound
  // the transfers of thousands of placements it does not try.
  inline double transfer_floor(std::uint64_t bytes) const;

  // Learns from one measurement. A non-finite or non-positive `seconds` is
  // ignored (Ok). Fails with InvalidArgument (naming kind, type and both
  // sizes) when x.size() differs from the prior's size, or when a feature is
  // not finite. A (kind, type) with no prior still learns, from an all-zero
  // prior of x.size() features (1..kMaxFeatures): templates may leave priors
  // out, and such ops should not stay at the 1 ms default forever.
  Status observe_op(OpKindId kind, AccelTypeId type, std::span<const double> x, double seconds);
  // Never fails (Status kept for the interface's callers).
  Status observe_transfer(AccelId src, AccelId dst, std::uint64_t bytes, double seconds);

  // One row per estimator that has samples, ops (by kind, then type) before
  // transfers (by src, then dst). `what` reads "op kind 3 on type 1" or
  // "transfer 0->2"; transfer coefficients are {sec_per_byte, fixed_sec}.
  struct ReportRow {
    std::string what;
    std::uint64_t samples;
    double mape_pct;
    std::vector<double> coefficients;  // ops: per feature; transfers: {sec_per_byte, fixed_sec}
    double recent_mape_pct;
    std::vector<double> feature_max;  // ops: LinearEstimator::feature_max
    bool transfer = false;
    OpKindId kind = 0;         // ops
    AccelTypeId type = 0;      // ops
    AccelId src = 0, dst = 0;  // transfers
  };
  std::vector<ReportRow> report() const;

 private:
  enum class Source : std::uint8_t { kNone, kInherited, kOwn };
  // The coefficients in effect for one (kind, type), or a kind's prior.
  struct OpSlot {
    std::uint8_t n = 0;  // feature count; 0 = no prior
    Source source = Source::kNone;
    std::int32_t est = -1;  // index into ests_ once observed
    std::array<double, kMaxFeatures> coef{};
  };
  struct TransferSlot {
    bool own_prior = false;
    std::int32_t est = -1;
    double sec_per_byte = kDefaultTransferSecPerByte;
    double fixed_sec = kDefaultTransferFixedSec;
  };

  static inline double dot(const OpSlot& s, std::span<const double> x);
  void grow_ops(std::size_t kinds, std::size_t type_stride);
  void grow_transfers(std::size_t accel_stride);
  // The slot of src -> dst, created (from the default prior) when absent;
  // valid until the next call (either table may grow and move its slots).
  TransferSlot& transfer_slot(AccelId src, AccelId dst);
  static std::uint64_t far_key(AccelId src, AccelId dst) { return (std::uint64_t{src} << 32) | dst; }
  // The far pairs: open addressing over far_key (linear probing, at most
  // half full). A node-based map cost two cache misses a look-up, and a
  // 10,000-accelerator round looks up a far pair for every input and edge
  // of each of its thousands of candidates, most of them never observed.
  struct FarSlot {
    std::uint64_t key = kNoFar;
    TransferSlot slot;
  };
  static constexpr std::uint64_t kNoFar = ~std::uint64_t{0};  // an empty slot (pair kNoAccel -> kNoAccel)
  static std::size_t far_hash(std::uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<std::size_t>(k);
  }
  // The slot holding `key`, or the empty one where it would go (far_ not empty).
  std::size_t far_probe(std::uint64_t key) const {
    const std::size_t mask = far_.size() - 1;
    std::size_t i = far_hash(key) & mask;
    while (far_[i].key != key && far_[i].key != kNoFar) i = (i + 1) & mask;
    return i;
  }
  // Points the slot (and its estimator, if any) at `prior`, dropping samples.
  void reprior(OpSlot& slot, const OpSlot& prior, Source source);
  void reprior(TransferSlot& slot, double sec_per_byte, double fixed_sec, bool own);

  std::vector<OpSlot> kind_priors_;  // by kind; source kOwn or kNone
  std::vector<OpSlot> ops_;          // kind_priors_.size() * type_stride_
  std::size_t type_stride_ = 0;
  std::vector<TransferSlot> transfers_;  // accel_stride_^2
  std::size_t accel_stride_ = 0;
  std::vector<FarSlot> far_;   // pairs with an id >= kMaxAccelerators; size 0 or a power of two
  std::size_t far_count_ = 0;  // slots of far_ in use
  TransferSlot unstored_;      // what transfer_slot() gives the one pair far_ cannot hold
  double default_sec_per_byte_ = kDefaultTransferSecPerByte;
  double default_fixed_sec_ = kDefaultTransferFixedSec;
  // transfer_floor()'s coefficients: the least written to any slot or default.
  double least_sec_per_byte_ = kDefaultTransferSecPerByte;
  double least_fixed_sec_ = kDefaultTransferFixedSec;
  void note_transfer(double sec_per_byte, double fixed_sec) {
    least_sec_per_byte_ = sec_per_byte < least_sec_per_byte_ ? sec_per_byte : least_sec_per_byte_;
    least_fixed_sec_ = fixed_sec < least_fixed_sec_ ? fixed_sec : least_fixed_sec_;
  }
  std::vector<LinearEstimator> ests_;
};

inline double EstimatorSet::dot(const OpSlot& s, std::span<const double> x) {
  assert(x.size() == s.n);
  const std::size_t n = x.size() < s.n ? x.size() : s.n;
  double t = 0;
  for (std::size_t j = 0; j < n; ++j) t += s.coef[j] * x[j];
  return t > 0 ? t : 0.0;
}

inline double EstimatorSet::predict_op(OpKindId kind, AccelTypeId type, std::span<const double> x) const {
  if (kind >= kind_priors_.size()) return kDefaultOpSeconds;
  // A type the table has not grown to yet can only have the kind's prior.
  const OpSlot& s = type < type_stride_ ? ops_[kind * type_stride_ + type] : kind_priors_[kind];
  return s.n == 0 ? kDefaultOpSeconds : dot(s, x);
}

inline double EstimatorSet::predict_transfer(AccelId src, AccelId dst, std::uint64_t bytes) const {
  double a = default_sec_per_byte_, c = default_fixed_sec_;
  if (src < accel_stride_ && dst < accel_stride_) {
    const TransferSlot& s = transfers_[src * accel_stride_ + dst];
    a = s.sec_per_byte;
    c = s.fixed_sec;
  } else if (const std::uint64_t key = far_key(src, dst); far_count_ && key != kNoFar) {
    const FarSlot& f = far_[far_probe(key)];
    if (f.key == key) {
      a = f.slot.sec_per_byte;
      c = f.slot.fixed_sec;
    }
  }
  const double t = a * static_cast<double>(bytes) + c;
  return t > 0 ? t : 0.0;
}

inline double EstimatorSet::transfer_floor(std::uint64_t bytes) const {
  const double t = least_sec_per_byte_ * static_cast<double>(bytes) + least_fixed_sec_;
  return t > 0 ? t : 0.0;
}

}  // namespace slicesched
