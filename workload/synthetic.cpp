// Synthetic request streams: the paper's offline load (constant rate) and
// Poisson arrivals for sensitivity runs.
module;
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

module slicesched.workload.trace;

namespace slicesched {

using trace_detail::format_number;

namespace {

bool valid_synthetic(double rate, double duration, std::int64_t in, std::int64_t out) {
  return std::isfinite(rate) && rate > 0 && std::isfinite(duration) && duration >= 0 && in >= 0 && out >= 0;
}

std::string describe(std::string_view kind, double rate, double duration, std::int64_t in, std::int64_t out) {
  return std::string(kind) + "(" + format_number(rate) + " req/s, " + format_number(duration) + " s, " +
         std::to_string(in) + " in, " + std::to_string(out) + " out";
}

}  // namespace

Trace constant_rate(double rate_per_s, double duration_s, std::int64_t input_tokens, std::int64_t output_tokens) {
  const bool valid = valid_synthetic(rate_per_s, duration_s, input_tokens, output_tokens);
  assert(valid);
  Trace trace;
  trace.source = describe("constant_rate", rate_per_s, duration_s, input_tokens, output_tokens) + ")";
  if (!valid) return trace;
  trace.window_s = duration_s;
  trace.requests.reserve(static_cast<std::size_t>(std::ceil(rate_per_s * duration_s)));
  // k / rate, not a running sum: no drift over long streams.
  for (std::int64_t k = 0;; ++k) {
    const double t = static_cast<double>(k) / rate_per_s;
    if (!(t < duration_s)) break;
    trace.requests.push_back({t, input_tokens, output_tokens});
  }
  return trace;
}

Trace poisson(double rate_per_s, double duration_s, std::int64_t input_tokens, std::int64_t output_tokens,
              std::uint64_t seed) {
  const bool valid = valid_synthetic(rate_per_s, duration_s, input_tokens, output_tokens);
  assert(valid);
  Trace trace;
  trace.source =
      describe("poisson", rate_per_s, duration_s, input_tokens, output_tokens) + ", seed " + std::to_string(seed) + ")";
  if (!valid) return trace;
  trace.window_s = duration_s;
  std::mt19937_64 rng(seed);
  double t = 0;
  while (true) {
    // u uniform in [0, 1) with 53 random bits; -log(1 - u) is Exp(1).
    const double u = static_cast<double>(rng() >> 11) * 0x1p-53;
    t += -std::log1p(-u) / rate_per_s;
    if (!(t < duration_s)) break;
    trace.requests.push_back({t, input_tokens, output_tokens});
  }
  return trace;
}

}  // namespace slicesched
