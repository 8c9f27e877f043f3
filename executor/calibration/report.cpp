// A calibration's table and its points as CSV.
module;
#include <cstdio>
#include <string>

module slicesched.executor.calibration;

namespace slicesched {

void print_calibration(const CalibrationResult& r, std::FILE* out) {
  std::fprintf(out, "%-14s %-12s %-22s %8s %8s %12s %12s\n", "model", "op", "type", "samples", "MAPE %", "min ms",
               "max ms");
  for (const auto& row : r.rows)
    std::fprintf(out, "%-14s %-12s %-22s %8llu %8.2f %12.4f %12.4f\n", row.transfer ? "-" : row.model.c_str(),
                 row.what.c_str(), row.type.c_str(), static_cast<unsigned long long>(row.samples), row.mape_pct,
                 row.min_s * 1e3, row.max_s * 1e3);
  for (const auto& f : r.profile.fixed_costs)
    std::fprintf(out, "fixed costs on %s: %.1f us per iteration, %.2f us per sequence (%llu whole iterations)\n",
                 f.type.c_str(), f.iteration_s * 1e6, f.sequence_s * 1e6, static_cast<unsigned long long>(f.samples));
}

std::string points_csv(const CalibrationResult& r) {
  std::string out =
      "model,what,type,seqs,tokens,context,prefill,bytes,features,seconds,predicted,host_seconds,spread_pct\n";
  char line[512];
  for (const auto& p : r.points) {
    std::string x;
    for (double v : p.x) x += (x.empty() ? "" : " ") + std::to_string(static_cast<long long>(v));
    std::snprintf(line, sizeof line, ",%lld,%lld,%lld,%lld,%lld,", static_cast<long long>(p.shape.seqs),
                  static_cast<long long>(p.shape.tokens), static_cast<long long>(p.shape.context),
                  static_cast<long long>(p.shape.prefill), static_cast<long long>(p.bytes));
    out += p.model + ',' + p.what + ',' + p.type + line + x;
    std::snprintf(line, sizeof line, ",%.9g,%.9g,%.9g,%.3f\n", p.seconds, p.predicted, p.host_seconds, p.spread_pct);
    out += line;
  }
  return out;
}

}  // namespace slicesched
