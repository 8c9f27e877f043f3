module;
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

module slicesched.hardware.roofline;

namespace slicesched {

bool AcceleratorType::answers_to(std::string_view n) const {
  if (n == name || std::find(aliases.begin(), aliases.end(), n) != aliases.end()) return true;
  // `type = "H100-SXM.toml"` names the table's file (config.md): the type
  // read from it answers to that too.
  return n.ends_with(".toml") && !source.empty() &&
         (source == n ||
          (source.size() > n.size() && source.ends_with(n) && source[source.size() - n.size() - 1] == '/'));
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
double bound_seconds(const AcceleratorType& t, const KindEfficiency& e, const KindEfficiency& kv, const Work& w,
                     double peak_flops) {
  double memory = w.bytes / (t.hbm_bytes_per_s * e.memory) +
                  (w.cache_bytes > 0 ? w.cache_bytes / (t.hbm_bytes_per_s * kv.memory) : 0.0);
  if (e.sm_bytes_per_cycle > 0 && t.sm_cycles_per_s() > 0)
    memory = std::max(memory, (w.bytes + w.cache_bytes) / (t.sm_cycles_per_s() * e.sm_bytes_per_cycle));
  double compute = w.flops / (peak_flops * e.compute);
  if (e.sm_flops_per_cycle > 0 && t.sm_cycles_per_s() > 0)
    compute = std::max(compute, w.flops / (t.sm_cycles_per_s() * e.sm_flops_per_cycle));
  if (!std::isfinite(e.overlap_p)) return std::max(compute, memory);
  // The p-norm, scaled by the larger term so that no power overflows.
  const double hi = std::max(compute, memory);
  if (!(hi > 0)) return 0;
  const double p = e.overlap_p;
  return hi * std::pow(std::pow(compute / hi, p) + std::pow(memory / hi, p), 1 / p);
}

// The overlap exponents a fit tries: infinity (the plain roofline) and a
// range from no overlap (1) to nearly perfect (8).
constexpr std::array<double, 10> kOverlapGrid{1,   1.25, 1.5, 1.75, 2,
                                              2.5, 3,    4,   8,    std::numeric_limits<double>::infinity()};

double bound_seconds(const AcceleratorType& t, const KindEfficiency& e, const KindEfficiency& kv, const Work& w) {
  return bound_seconds(t, e, kv, w, t.peak_flops);
}

double kernel_seconds_at(const AcceleratorType& t, const RooflineFit& f, const Work& w, double calls,
                         double peak_flops) {
  const KindEfficiency& e = f[w.kind];
  return bound_seconds(t, e, f[WorkKind::kKvRead], w, peak_flops) + calls * e.overhead_s;
}

}  // namespace

double kernel_seconds(const AcceleratorType& t, const RooflineFit& f, const Work& w, double calls) {
  return kernel_seconds_at(t, f, w, calls, t.peak_flops);
}

DenseShape tp_rank_shape(DenseShape s, int tp) {
  const auto share = [tp](std::int64_t n) { return std::max<std::int64_t>(1, (n + tp - 1) / tp); };
  s.heads = share(s.heads);
  s.kv_heads = share(s.kv_heads);
  s.mlp = share(s.mlp);
  s.vocab = share(s.vocab);
  return s;
}

double calls_seconds(const AcceleratorType& t, const RooflineFit& f, const DenseShape& s,
                     std::span<const SublayerCall> calls) {
  // (a kind's SM FLOP ceiling still holds: the slower of the two binds)
  const double peak = s.elem_bytes >= 4 ? t.fp32_flops : t.peak_flops;
  double sum = 0;
  for (const auto& c : calls) sum += kernel_seconds_at(t, f, sublayer_work(s, c), c.count, peak);
  return sum;
}

Result<RooflineFit> fit_roofline(std::span<const ProfileRow> rows, std::span<const AcceleratorType> types,
                                 const RooflineFit& fallback) {
  RooflineFit fit = fallback;
  bool gemm_fitted = false;
  int stream_pct = 0;  // the streaming kind's memory efficiency, % (0: not fitted)
  // Streaming before the kinds whose single-type fit leans on it (below).
  constexpr std::array<WorkKind, kWorkKinds - 1> kOrder{WorkKind::kGemm, WorkKind::kAttention, WorkKind::kStreaming,
                                                        WorkKind::kElementwise, WorkKind::kEmbedding};
  for (const WorkKind kind : kOrder) {
    const int k = static_cast<int>(kind);
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
    // Without fitted FLOPs the overlap is moot: the plain roofline only.
    double best = std::numeric_limits<double>::infinity();
    KindEfficiency chosen = fit.kinds[static_cast<std::size_t>(k)];
    std::vector<double> x(rs.size());
    auto score = [&](int ci, int mi, double p, double q = 0) {
      const KindEfficiency e{ci / 100.0, mi / 100.0, 0, p, q};
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
        chosen = {e.compute, e.memory, o, p, q};
      }
      return err;
    };
    // Whether the rows come from several types, and whether every row's type
    // gives its SMs: what the SM-ceiling rules below may use.
    const bool types_differ = std::any_of(ts.begin(), ts.end(), [&](const auto* t) { return t != ts.front(); });
    const bool sms = std::all_of(ts.begin(), ts.end(), [](const auto* t) { return t->sm_cycles_per_s() > 0; });
    for (double p : kOverlapGrid) {
      if (!any_flops && std::isfinite(p)) continue;
      if (!std::isfinite(p)) {  // the plain roofline: every 1 % step, as before overlap_p
        for (int ci = any_flops ? 1 : 100; ci <= 100; ++ci)
          for (int mi = 1; mi <= 100; ++mi) score(ci, mi, p);
        // A memory-bound kind may instead be held by its SMs: a ceiling of
        // 0.25 to 32 bytes per SM cycle, where every row's type gives its SMs.
        // Rows of one type cannot tell the two ceilings apart (both scale
        // its time alike): only rows of several types try it.
        if (!any_flops && types_differ && sms)
          for (int qi = 1; qi <= 128; ++qi)
            for (int mi = 1; mi <= 100; ++mi) score(100, mi, p, qi / 4.0);
        // On one type, where a plain stream's rate is known (the streaming
        // kind), a memory-bound kind slower than it is held by its SMs, not
        // by HBM: such a kernel is short of loads in flight, and moves bytes
        // at a rate per SM cycle, whatever the HBM (Vidur's gather: 2 bytes
        // per SM cycle on three GPUs). Its memory efficiency is then the
        // stream's, its shortfall an SM ceiling, which carries to a type with
        // other SMs and HBM where one memory efficiency would not. Faster
        // than the stream, it stays an HBM efficiency.
        if (!any_flops && !types_differ && sms && stream_pct > 0 && kind != WorkKind::kStreaming) {
          best = std::numeric_limits<double>::infinity();
          for (int mi = stream_pct + 1; mi <= 100; ++mi) score(100, mi, p);
          for (int qi = 1; qi <= 128; ++qi) score(100, stream_pct, p, qi / 4.0);
        }
        continue;
      }
      // A finite p costs powers: 5 % steps, then 1 % steps around the best.
      double coarse = std::numeric_limits<double>::infinity();
      int bc = 100, bm = 100;
      for (int ci = 5; ci <= 100; ci += 5)
        for (int mi = 5; mi <= 100; mi += 5)
          if (const double err = score(ci, mi, p); err < coarse) {
            coarse = err;
            bc = ci;
            bm = mi;
          }
      for (int ci = std::max(1, bc - 4); ci <= std::min(100, bc + 4); ++ci)
        for (int mi = std::max(1, bm - 4); mi <= std::min(100, bm + 4); ++mi) score(ci, mi, p);
    }
    // The compute-side twin of the rule above. A compute kind fitted on one
    // type that reaches less of the tensor peak than that fit's GEMMs do is
    // held by work the tensor peak does not measure (attention's softmax
    // exponentials and mma.sync tiles, which its SMs issue at a rate per
    // cycle: FlashAttention-2 reaches 50-73 % of an A100's peak but about
    // 35 % of an H100's, whose peak is wgmma's). Its compute efficiency is
    // then the GEMMs' and its shortfall an SM ceiling in FLOPs per SM cycle:
    // the same time on the fitted type, and a rate that carries by SMs and
    // clock, not by tensor peak, to a type it was not fitted on.
    if (any_flops && kind != WorkKind::kGemm && !types_differ && sms && chosen.compute < fit[WorkKind::kGemm].compute) {
      chosen.sm_flops_per_cycle = chosen.compute * ts.front()->peak_flops / ts.front()->sm_cycles_per_s();
      chosen.compute = fit[WorkKind::kGemm].compute;
    }
    fit.kinds[static_cast<std::size_t>(k)] = chosen;
    if (kind == WorkKind::kStreaming) stream_pct = static_cast<int>(std::lround(chosen.memory * 100));
  }
  if (gemm_fitted) {
    // A least-squares line through the matrix-vector rows, time against
    // their bytes at peak bandwidth: its slope is 1 / the streaming
    // efficiency, its intercept the launch (fitted here, not the GEMM
    // kind's, which also absorbs what the grid's shape cannot say).
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const auto& r : rows) {
      if (r.work.kind != WorkKind::kGemm || !(r.seconds > 0) || !(r.work.bytes > 0)) continue;
      const AcceleratorType* t = find_type(types, r.type);
      const double ridge = t->peak_flops / t->hbm_bytes_per_s;  // FLOPs per byte
      if (r.work.flops / r.work.bytes >= ridge / 8) continue;
      const double x = r.work.bytes / t->hbm_bytes_per_s, y = r.seconds / r.calls;
      n += 1;
      sx += x;
      sy += y;
      sxx += x * x;
      sxy += x * y;
    }
    const double var = n * sxx - sx * sx;
    const double slope = var > 0 ? (n * sxy - sx * sy) / var : 0;
    const double streamed = slope > 0 ? std::min(1.0, 1 / slope) : fit[WorkKind::kGemm].memory;
    fit[WorkKind::kKvRead] = {1, std::round(streamed * 100) / 100, 0};
  }
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
