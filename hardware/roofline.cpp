module;
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

module slicesched.hardware;

namespace slicesched {

bool AcceleratorType::answers_to(std::string_view n) const {
  return n == name || std::find(aliases.begin(), aliases.end(), n) != aliases.end();
}

const AcceleratorType* find_type(std::span<const AcceleratorType> types, std::string_view name) {
  for (const auto& t : types)
    if (t.answers_to(name)) return &t;
  return nullptr;
}

bool same_type(std::span<const AcceleratorType> types, std::string_view a, std::string_view b) {
  if (a == b) return true;
  const AcceleratorType* ta = find_type(types, a);
  return ta && ta == find_type(types, b);
}

std::string canonical_type(std::span<const AcceleratorType> types, std::string_view name) {
  const AcceleratorType* t = find_type(types, name);
  return t ? t->name : std::string(name);
}

namespace {

// The roofline time before the overhead; the KV-cache read at `kv`'s memory
// efficiency adds to the kernel's other HBM traffic.
double bound_seconds(const AcceleratorType& t, const KindEfficiency& e, const KindEfficiency& kv, const Work& w) {
  const double memory = w.bytes / (t.hbm_bytes_per_s * e.memory) +
                        (w.cache_bytes > 0 ? w.cache_bytes / (t.hbm_bytes_per_s * kv.memory) : 0.0);
  return std::max(w.flops / (t.peak_flops * e.compute), memory);
}

}  // namespace

double kernel_seconds(const AcceleratorType& t, const RooflineFit& f, const Work& w, double calls) {
  const KindEfficiency& e = f[w.kind];
  return bound_seconds(t, e, f[WorkKind::kKvRead], w) + calls * e.overhead_s;
}

double calls_seconds(const AcceleratorType& t, const RooflineFit& f, const DenseShape& s,
                     std::span<const SublayerCall> calls) {
  double sum = 0;
  for (const auto& c : calls) sum += kernel_seconds(t, f, sublayer_work(s, c), c.count);
  return sum;
}

Result<RooflineFit> fit_roofline(std::span<const ProfileRow> rows, std::span<const AcceleratorType> types,
                                 const RooflineFit& fallback) {
  RooflineFit fit = fallback;
  bool gemm_fitted = false;
  for (int k = 0; k < kWorkKinds; ++k) {
    const auto kind = static_cast<WorkKind>(k);
    if (kind == WorkKind::kKvRead) continue;  // derived below
    std::vector<const ProfileRow*> rs;
    std::vector<const AcceleratorType*> ts;
    bool any_flops = false;
    for (const auto& r : rows) {
      if (r.work.kind != kind || !(r.seconds > 0)) continue;
      const AcceleratorType* t = find_type(types, r.type);
      if (!t) return NotFound("roofline fit: no accelerator type '" + r.type + "' for profile row " + r.op);
      rs.push_back(&r);
      ts.push_back(t);
      // Elementwise and embedding kernels are memory-bound by nature: their
      // FLOPs are not fitted, so a slow kernel shows as low memory efficiency.
      any_flops = any_flops || (r.work.flops > 0 && (kind == WorkKind::kGemm || kind == WorkKind::kAttention));
    }
    if (rs.empty()) continue;
    gemm_fitted = gemm_fitted || kind == WorkKind::kGemm;
    // A grid of 1 % steps over both efficiencies; for each, the overhead that
    // minimises the squared relative error, (x + o) / y - 1, is closed form.
    double best = std::numeric_limits<double>::infinity();
    KindEfficiency chosen = fit.kinds[static_cast<std::size_t>(k)];
    std::vector<double> x(rs.size());
    for (int ci = any_flops ? 1 : 100; ci <= 100; ++ci) {
      for (int mi = 1; mi <= 100; ++mi) {
        const KindEfficiency e{ci / 100.0, mi / 100.0, 0};
        double num = 0, den = 0;
        for (std::size_t i = 0; i < rs.size(); ++i) {
          x[i] = bound_seconds(*ts[i], e, fit[WorkKind::kKvRead], rs[i]->work);
          const double y = rs[i]->seconds;
          num += (y - x[i]) * rs[i]->calls / (y * y);
          den += rs[i]->calls * rs[i]->calls / (y * y);
        }
        const double o = std::max(0.0, num / den);
        double err = 0;
        for (std::size_t i = 0; i < rs.size(); ++i) err += std::abs((x[i] + rs[i]->calls * o) / rs[i]->seconds - 1);
        if (err < best) {
          best = err;
          chosen = {e.compute, e.memory, o};
        }
      }
    }
    fit.kinds[static_cast<std::size_t>(k)] = chosen;
  }
  if (gemm_fitted) fit[WorkKind::kKvRead] = {1, fit[WorkKind::kGemm].memory, 0};
  return fit;
}

Result<RooflineError> roofline_error(std::span<const ProfileRow> rows, std::span<const AcceleratorType> types,
                                     const RooflineFit& fit) {
  RooflineError e;
  std::array<double, kWorkKinds> sum{};
  double total = 0;
  std::map<double, std::pair<double, double>> by_tokens;  // predicted, measured
  for (const auto& r : rows) {
    if (!(r.seconds > 0)) continue;
    const AcceleratorType* t = find_type(types, r.type);
    if (!t) return NotFound("roofline: no accelerator type '" + r.type + "' for profile row " + r.op);
    const double predicted = kernel_seconds(*t, fit, r.work, r.calls);
    const double ape = std::abs(predicted / r.seconds - 1);
    by_tokens[r.tokens].first += predicted;
    by_tokens[r.tokens].second += r.seconds;
    const auto k = static_cast<std::size_t>(r.work.kind);
    sum[k] += ape;
    ++e.kind_rows[k];
    total += ape;
    ++e.rows;
  }
  for (std::size_t k = 0; k < sum.size(); ++k)
    e.kind_pct[k] =
        e.kind_rows[k] ? 100 * sum[k] / static_cast<double>(e.kind_rows[k]) : std::numeric_limits<double>::quiet_NaN();
  double summed = 0;
  for (const auto& [n, pm] : by_tokens) summed += std::abs(pm.first / pm.second - 1);
  e.token_counts = by_tokens.size();
  e.summed_pct = e.token_counts ? 100 * summed / static_cast<double>(e.token_counts) : 0;
  e.overall_pct = e.rows ? 100 * total / static_cast<double>(e.rows) : std::numeric_limits<double>::quiet_NaN();
  return e;
}

}  // namespace slicesched
