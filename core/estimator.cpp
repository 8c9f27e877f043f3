module;
#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <vector>

module slicesched.core.estimator;

namespace slicesched {

namespace {

// Ridge strength in scaled units, where one sample's row has O(1) entries
// and target 1. Column j's penalty is kRidge / max(|g0_j|, kRidgeFloor) *
// (g_j - g0_j)^2: dividing by the prior's own contribution g0_j makes a
// single sample rescale all coefficients by the same factor (rather than
// adding the same seconds to each, which would inflate a small constant
// term), and the floor caps the ridge at kRidge / kRidgeFloor = 1e-5 of a
// sample, so even a prior that is off by orders of magnitude loses to data.
constexpr double kRidge = 1e-8;
constexpr double kRidgeFloor = 1e-3;

bool all_finite(std::span<const double> v) {
  return std::all_of(v.begin(), v.end(), [](double d) { return std::isfinite(d); });
}

}  // namespace

LinearEstimator::LinearEstimator(std::span<const double> prior) {
  assert(!prior.empty() && prior.size() <= static_cast<std::size_t>(kMaxFeatures));
  n_ = std::min(prior.size(), static_cast<std::size_t>(kMaxFeatures));
  std::copy_n(prior.begin(), n_, prior_.begin());
  beta_ = prior_;
}

void LinearEstimator::open_column(std::size_t j, double scale) {
  // Until now column j had no data, so row j and column j of R are zero and
  // setting them is exactly "the ridge row was there all along".
  scale_[j] = scale;
  const double g0 = prior_[j] * scale;
  const double w = std::sqrt(kRidge / std::max(std::abs(g0), kRidgeFloor));
  r(j, j) = w;
  z_[j] = w * g0;
}

void LinearEstimator::observe(std::span<const double> x, double y) {
  assert(x.size() == n_);
  if (x.size() != n_ || !std::isfinite(y) || y <= 0 || !all_finite(x)) return;

  for (std::size_t j = 0; j < n_; ++j) xmax_[j] = std::max(xmax_[j], x[j]);
  // Score before learning: that is what makes the MAPE prequential.
  const double err = std::abs(predict(x) - y) / y;
  err_sum_ += err;
  recent_err_[samples_ % kRecentWindow] = static_cast<float>(err);
  ++samples_;

  // The row weighted by 1/y (relative error) in scaled units; target 1.
  std::array<double, kMaxFeatures> u{};
  for (std::size_t j = 0; j < n_; ++j) {
    if (x[j] == 0) continue;
    if (scale_[j] == 0) open_column(j, std::abs(x[j]) / y);
    u[j] = (x[j] / y) / scale_[j];
  }
  double t = 1.0;

  // Rotate the row into R. Givens keeps R's condition that of the scaled
  // data, where normal equations would square it.
  for (std::size_t k = 0; k < n_; ++k) {
    if (u[k] == 0) continue;  // also every column not yet opened
    const double rkk = r(k, k);
    // (sqrt, not hypot: rows are scaled to about 1, so the squares cannot
    // overflow, and glibc's hypot costs several times as much.)
    const double h = std::sqrt(rkk * rkk + u[k] * u[k]);
    const double c = rkk / h, s = u[k] / h;
    r(k, k) = h;
    for (std::size_t j = k + 1; j < n_; ++j) {
      const double a = r(k, j), b = u[j];
      r(k, j) = c * a + s * b;
      u[j] = c * b - s * a;
    }
    const double a = z_[k];
    z_[k] = c * a + s * t;
    t = c * t - s * a;
  }
  solve();
}

void LinearEstimator::solve() {
  std::array<double, kMaxFeatures> g{};
  for (std::size_t i = n_; i-- > 0;) {
    if (scale_[i] == 0) {  // never seen nonzero: nothing to fit, keep the prior
      beta_[i] = prior_[i];
      continue;  // g[i] = 0 is harmless: R's column i is zero above the diagonal
    }
    double s = z_[i];
    for (std::size_t j = i + 1; j < n_; ++j) s -= r_[i * kMaxFeatures + j] * g[j];
    g[i] = s / r_[i * kMaxFeatures + i];
    beta_[i] = g[i] / scale_[i];
  }
}

double LinearEstimator::mape_pct() const {
  return samples_ == 0 ? 0.0 : 100.0 * err_sum_ / static_cast<double>(samples_);
}

double LinearEstimator::recent_mape_pct() const {
  const std::size_t count = static_cast<std::size_t>(std::min<std::uint64_t>(samples_, kRecentWindow));
  if (count == 0) return 0.0;
  double sum = 0;
  for (std::size_t i = 0; i < count; ++i) sum += recent_err_[i];
  return 100.0 * sum / static_cast<double>(count);
}

// ---------------------------------------------------------------------------

namespace {

Status check_prior(std::span<const double> prior, const std::string& what) {
  if (prior.empty() || prior.size() > static_cast<std::size_t>(kMaxFeatures))
    return InvalidArgument(what + ": a prior needs 1.." + std::to_string(kMaxFeatures) + " coefficients, got " +
                           std::to_string(prior.size()));
  if (!all_finite(prior)) return InvalidArgument(what + ": prior has a non-finite coefficient");
  return Status::Ok();
}

Status check_transfer_prior(double sec_per_byte, double fixed_sec, const std::string& what) {
  if (!std::isfinite(sec_per_byte) || !std::isfinite(fixed_sec) || sec_per_byte < 0 || fixed_sec < 0)
    return InvalidArgument(what + ": transfer prior must be finite and non-negative, got " +
                           std::to_string(sec_per_byte) + " s/byte + " + std::to_string(fixed_sec) + " s");
  return Status::Ok();
}

std::string op_name(OpKindId kind, AccelTypeId type) {
  return "op kind " + std::to_string(kind) + " on type " + std::to_string(type);
}

std::string pair_name(AccelId src, AccelId dst) {
  return "transfer " + std::to_string(src) + "->" + std::to_string(dst);
}

}  // namespace

void EstimatorSet::grow_ops(std::size_t kinds, std::size_t type_stride) {
  const std::size_t old_kinds = kind_priors_.size(), old_stride = type_stride_;
  kinds = std::max(kinds, old_kinds);
  type_stride = std::max(type_stride, old_stride);
  if (kinds == old_kinds && type_stride == old_stride) return;
  kind_priors_.resize(kinds);
  std::vector<OpSlot> next(kinds * type_stride);
  for (std::size_t k = 0; k < kinds; ++k) {
    for (std::size_t t = 0; t < type_stride; ++t) {
      OpSlot& s = next[k * type_stride + t];
      if (k < old_kinds && t < old_stride) {
        s = ops_[k * old_stride + t];
      } else {
        s = kind_priors_[k];
        s.est = -1;
        s.source = s.n ? Source::kInherited : Source::kNone;
      }
    }
  }
  ops_ = std::move(next);
  type_stride_ = type_stride;
}

void EstimatorSet::reprior(OpSlot& slot, const OpSlot& prior, Source source) {
  slot.n = prior.n;
  slot.coef = prior.coef;
  slot.source = source;
  if (slot.est >= 0) ests_[static_cast<std::size_t>(slot.est)] = LinearEstimator({slot.coef.data(), slot.n});
}

Status EstimatorSet::set_op_prior(OpKindId kind, std::span<const double> prior) {
  if (kind >= kMaxOpKinds) return InvalidArgument("op kind " + std::to_string(kind) + " is beyond the table bound");
  if (Status s = check_prior(prior, "op kind " + std::to_string(kind)); !s.ok()) return s;
  grow_ops(std::size_t{kind} + 1, type_stride_);
  OpSlot& kp = kind_priors_[kind];
  kp.n = static_cast<std::uint8_t>(prior.size());
  kp.coef = {};
  std::copy(prior.begin(), prior.end(), kp.coef.begin());
  kp.source = Source::kOwn;
  for (std::size_t t = 0; t < type_stride_; ++t) {
    OpSlot& s = ops_[kind * type_stride_ + t];
    if (s.source != Source::kOwn) reprior(s, kp, Source::kInherited);
  }
  return Status::Ok();
}

Status EstimatorSet::set_op_prior_for_type(OpKindId kind, AccelTypeId type, std::span<const double> prior) {
  if (kind >= kMaxOpKinds || type >= kMaxAccelTypes)
    return InvalidArgument(op_name(kind, type) + " is beyond the table bounds");
  if (Status s = check_prior(prior, op_name(kind, type)); !s.ok()) return s;
  grow_ops(std::size_t{kind} + 1, std::size_t{type} + 1);
  OpSlot p;
  p.n = static_cast<std::uint8_t>(prior.size());
  std::copy(prior.begin(), prior.end(), p.coef.begin());
  reprior(ops_[kind * type_stride_ + type], p, Source::kOwn);
  return Status::Ok();
}

Status EstimatorSet::observe_op(OpKindId kind, AccelTypeId type, std::span<const double> x, double seconds) {
  std::size_t n = 0;  // the prior's feature count; 0 = none yet
  if (kind < kind_priors_.size()) n = type < type_stride_ ? ops_[kind * type_stride_ + type].n : kind_priors_[kind].n;
  if (n == 0 && (x.empty() || x.size() > static_cast<std::size_t>(kMaxFeatures)))
    return InvalidArgument(op_name(kind, type) + ": got " + std::to_string(x.size()) + " features, at most " +
                           std::to_string(kMaxFeatures) + " are supported");
  if (n != 0 && x.size() != n)
    return InvalidArgument(op_name(kind, type) + ": got " + std::to_string(x.size()) + " features, its prior has " +
                           std::to_string(n));
  if (!all_finite(x)) return InvalidArgument(op_name(kind, type) + ": a feature is not finite");
  if (kind >= kMaxOpKinds || type >= kMaxAccelTypes)
    return InvalidArgument(op_name(kind, type) + " is beyond the table bounds");
  if (!std::isfinite(seconds) || seconds <= 0) return Status::Ok();

  grow_ops(std::size_t{kind} + 1, std::size_t{type} + 1);
  OpSlot& s = ops_[kind * type_stride_ + type];
  if (s.n == 0) {  // no prior anywhere: learn from zeros (source stays kNone)
    s.n = static_cast<std::uint8_t>(x.size());
    s.coef = {};
  }
  if (s.est < 0) {
    s.est = static_cast<std::int32_t>(ests_.size());
    ests_.emplace_back(std::span<const double>(s.coef.data(), s.n));
  }
  LinearEstimator& e = ests_[static_cast<std::size_t>(s.est)];
  e.observe(x, seconds);
  std::copy_n(e.coefficients().begin(), s.n, s.coef.begin());
  return Status::Ok();
}

void EstimatorSet::grow_transfers(std::size_t accel_stride) {
  if (accel_stride <= accel_stride_) return;
  // At least doubling: a cluster's priors set pair by pair grow the table
  // one accelerator at a time, and copying it each step was quadratic per
  // step (a tenth of a second at 1,024 accelerators). A slot past the
  // pairs set reads the default prior, as a pair outside the table does.
  accel_stride = std::max(accel_stride, std::min<std::size_t>(2 * accel_stride_, kMaxAccelerators));
  std::vector<TransferSlot> next(accel_stride * accel_stride);
  for (std::size_t i = 0; i < accel_stride; ++i) {
    for (std::size_t j = 0; j < accel_stride; ++j) {
      TransferSlot& s = next[i * accel_stride + j];
      if (i < accel_stride_ && j < accel_stride_) {
        s = transfers_[i * accel_stride_ + j];
      } else {
        s.sec_per_byte = default_sec_per_byte_;
        s.fixed_sec = default_fixed_sec_;
      }
    }
  }
  transfers_ = std::move(next);
  accel_stride_ = accel_stride;
}

EstimatorSet::TransferSlot& EstimatorSet::transfer_slot(AccelId src, AccelId dst) {
  if (src < kMaxAccelerators && dst < kMaxAccelerators) {
    grow_transfers(std::size_t{std::max(src, dst)} + 1);
    return transfers_[src * accel_stride_ + dst];
  }
  TransferSlot fresh;
  fresh.sec_per_byte = default_sec_per_byte_;
  fresh.fixed_sec = default_fixed_sec_;
  const std::uint64_t key = far_key(src, dst);
  if (key == kNoFar) {  // kNoAccel to itself: not a pair a cluster has; kept nowhere
    unstored_ = fresh;
    return unstored_;
  }
  if (2 * (far_count_ + 1) > far_.size()) {  // at most half full, or probes grow long
    std::vector<FarSlot> old(std::max<std::size_t>(1024, 2 * far_.size()));
    old.swap(far_);
    for (const FarSlot& f : old)
      if (f.key != kNoFar) far_[far_probe(f.key)] = f;
  }
  const std::size_t i = far_probe(key);
  if (far_[i].key == kNoFar) {
    far_[i] = {key, fresh};
    ++far_count_;
  }
  return far_[i].slot;
}

void EstimatorSet::reprior(TransferSlot& slot, double sec_per_byte, double fixed_sec, bool own) {
  note_transfer(sec_per_byte, fixed_sec);
  slot.sec_per_byte = sec_per_byte;
  slot.fixed_sec = fixed_sec;
  slot.own_prior = own;
  if (slot.est >= 0) {
    const std::array<double, 2> p{sec_per_byte, fixed_sec};
    ests_[static_cast<std::size_t>(slot.est)] = LinearEstimator(p);
  }
}

Status EstimatorSet::set_transfer_prior(AccelId src, AccelId dst, double sec_per_byte, double fixed_sec) {
  if (Status s = check_transfer_prior(sec_per_byte, fixed_sec, pair_name(src, dst)); !s.ok()) return s;
  reprior(transfer_slot(src, dst), sec_per_byte, fixed_sec, true);
  return Status::Ok();
}

Status EstimatorSet::set_default_transfer_prior(double sec_per_byte, double fixed_sec) {
  if (Status s = check_transfer_prior(sec_per_byte, fixed_sec, "default transfer prior"); !s.ok()) return s;
  default_sec_per_byte_ = sec_per_byte;
  default_fixed_sec_ = fixed_sec;
  for (TransferSlot& s : transfers_)
    if (!s.own_prior) reprior(s, sec_per_byte, fixed_sec, false);
  for (FarSlot& f : far_)
    if (f.key != kNoFar && !f.slot.own_prior) reprior(f.slot, sec_per_byte, fixed_sec, false);
  // Every slot the old default filled now holds the new one: the floor is
  // taken again from what the slots hold (a default is set once, at setup).
  least_sec_per_byte_ = sec_per_byte;
  least_fixed_sec_ = fixed_sec;
  for (const TransferSlot& s : transfers_) note_transfer(s.sec_per_byte, s.fixed_sec);
  for (const FarSlot& f : far_)
    if (f.key != kNoFar) note_transfer(f.slot.sec_per_byte, f.slot.fixed_sec);
  return Status::Ok();
}

Status EstimatorSet::observe_transfer(AccelId src, AccelId dst, std::uint64_t bytes, double seconds) {
  if (!std::isfinite(seconds) || seconds <= 0) return Status::Ok();
  TransferSlot& s = transfer_slot(src, dst);
  if (s.est < 0) {
    s.est = static_cast<std::int32_t>(ests_.size());
    const std::array<double, 2> p{s.sec_per_byte, s.fixed_sec};
    ests_.emplace_back(p);
  }
  LinearEstimator& e = ests_[static_cast<std::size_t>(s.est)];
  const std::array<double, 2> x{static_cast<double>(bytes), 1.0};
  e.observe(x, seconds);
  s.sec_per_byte = e.coefficients()[0];
  s.fixed_sec = e.coefficients()[1];
  note_transfer(s.sec_per_byte, s.fixed_sec);
  return Status::Ok();
}

std::vector<EstimatorSet::ReportRow> EstimatorSet::report() const {
  std::vector<ReportRow> rows;
  auto add = [&](std::int32_t est, std::string what) -> ReportRow* {
    if (est < 0) return nullptr;
    const LinearEstimator& e = ests_[static_cast<std::size_t>(est)];
    if (e.samples() == 0) return nullptr;
    rows.push_back({std::move(what), e.samples(), e.mape_pct(),
                    std::vector<double>(e.coefficients().begin(), e.coefficients().end()), e.recent_mape_pct(),
                    std::vector<double>(e.feature_max().begin(), e.feature_max().end())});
    return &rows.back();
  };
  for (std::size_t k = 0; k < kind_priors_.size(); ++k)
    for (std::size_t t = 0; t < type_stride_; ++t)
      if (ReportRow* r =
              add(ops_[k * type_stride_ + t].est, op_name(static_cast<OpKindId>(k), static_cast<AccelTypeId>(t)))) {
        r->kind = static_cast<OpKindId>(k);
        r->type = static_cast<AccelTypeId>(t);
      }
  for (std::size_t i = 0; i < accel_stride_; ++i)
    for (std::size_t j = 0; j < accel_stride_; ++j)
      if (ReportRow* r =
              add(transfers_[i * accel_stride_ + j].est, pair_name(static_cast<AccelId>(i), static_cast<AccelId>(j)))) {
        r->transfer = true;
        r->src = static_cast<AccelId>(i);
        r->dst = static_cast<AccelId>(j);
      }
  // Pairs beyond the flat table, merged into the (src, dst) order.
  const std::size_t dense_end = rows.size();
  for (const FarSlot& f : far_) {
    if (f.key == kNoFar) continue;
    const auto src = static_cast<AccelId>(f.key >> 32), dst = static_cast<AccelId>(f.key);
    if (ReportRow* r = add(f.slot.est, pair_name(src, dst))) {
      r->transfer = true;
      r->src = src;
      r->dst = dst;
    }
  }
  if (rows.size() > dense_end) {
    const auto first_transfer = std::find_if(rows.begin(), rows.end(), [](const ReportRow& r) { return r.transfer; });
    std::sort(first_transfer, rows.end(),
              [](const ReportRow& a, const ReportRow& b) { return std::tie(a.src, a.dst) < std::tie(b.src, b.dst); });
  }
  return rows;
}

}  // namespace slicesched
