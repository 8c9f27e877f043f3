// Synthetic request streams: the paper's offline load (constant rate) and
// Poisson arrivals for sensitivity runs.
module;
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
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

// How many k >= 0 have k / rate < t: ceil(rate * t), stepped to the exact
// boundary of that test (rate * t is rounded), as the generator applies it.
// Beyond 2^53 a step would not change the double, and the rounding is the
// count's own precision anyway.
double arrivals_before(double rate, double t) {
  if (!(t > 0)) return 0;
  double n = std::ceil(rate * t);
  if (n >= 0x1p53) return n;
  while (n > 0 && (n - 1) / rate >= t) --n;
  while (n / rate < t) ++n;
  return n;
}

std::size_t count_of(double n) {
  // A size_t holds 1.8e19; a stream of 1e9 req/s for 1e12 s has 1e21.
  return n >= 0x1p64 ? std::numeric_limits<std::size_t>::max() : static_cast<std::size_t>(n);
}

// Where generation stops: the cut when it falls inside the stream.
double generate_until(double duration_s, double cut_s) { return cut_s >= 0 ? std::min(duration_s, cut_s) : duration_s; }

}  // namespace

Trace constant_rate(double rate_per_s, double duration_s, std::int64_t input_tokens, std::int64_t output_tokens,
                    double cut_s) {
  const bool valid = valid_synthetic(rate_per_s, duration_s, input_tokens, output_tokens);
  assert(valid);
  Trace trace;
  trace.source = describe("constant_rate", rate_per_s, duration_s, input_tokens, output_tokens) + ")";
  if (!valid) return trace;
  trace.window_s = duration_s;
  const double until = generate_until(duration_s, cut_s);
  const double kept = arrivals_before(rate_per_s, until);
  trace.beyond_cut = count_of(arrivals_before(rate_per_s, duration_s) - kept);
  trace.requests.reserve(count_of(kept));
  // k / rate, not a running sum: no drift over long streams.
  for (std::int64_t k = 0;; ++k) {
    const double t = static_cast<double>(k) / rate_per_s;
    if (!(t < until)) break;
    trace.requests.push_back({t, input_tokens, output_tokens});
  }
  return trace;
}

Trace poisson(double rate_per_s, double duration_s, std::int64_t input_tokens, std::int64_t output_tokens,
              std::uint64_t seed, double cut_s) {
  const bool valid = valid_synthetic(rate_per_s, duration_s, input_tokens, output_tokens);
  assert(valid);
  Trace trace;
  trace.source =
      describe("poisson", rate_per_s, duration_s, input_tokens, output_tokens) + ", seed " + std::to_string(seed) + ")";
  if (!valid) return trace;
  trace.window_s = duration_s;
  std::mt19937_64 rng(seed);
  // u uniform in [0, 1) with 53 random bits; -log(1 - u) is Exp(1).
  auto gap = [&] { return -std::log1p(-static_cast<double>(rng() >> 11) * 0x1p-53) / rate_per_s; };
  const double until = generate_until(duration_s, cut_s);
  double t = 0;
  while (true) {
    t += gap();
    if (!(t < until)) break;
    trace.requests.push_back({t, input_tokens, output_tokens});
  }
  if (until < duration_s) {  // t is the first arrival at or after the cut
    const double expected = rate_per_s * (duration_s - until);
    if (expected <= kCountedArrivals)
      for (; t < duration_s; t += gap()) ++trace.beyond_cut;
    else
      trace.beyond_cut = count_of(std::round(expected));
  }
  return trace;
}

}  // namespace slicesched
