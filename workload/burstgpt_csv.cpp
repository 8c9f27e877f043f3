// BurstGPT traces (HPMLL/BurstGPT, GPT-3.5 and GPT-4 served on Azure): a CSV
// with Timestamp (seconds from the trace start), Model, Request tokens,
// Response tokens, Total tokens and Log Type, columns found by name (exports
// reorder them). Model and Log Type are not used: every line is a request.
module;
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

module slicesched.workload.trace;
import slicesched.core.csv;

namespace slicesched::trace_detail {
namespace {

constexpr std::string_view kTimestampColumn = "Timestamp";
constexpr std::string_view kInputColumn = "Request tokens";
constexpr std::string_view kOutputColumn = "Response tokens";
// (1e11 s, as the trace options' bound: ticks stay far inside 64 bits)
constexpr double kMaxSeconds = 1e11;

// A decimal number of seconds in [0, kMaxSeconds] filling all of `s` (a
// field split_fields trimmed), in ticks.
Result<std::int64_t> ticks_of_seconds(std::string_view s) {
  double v = -1;
  // (from_chars reads plain decimals and exponents, not strtod's hex floats;
  // "inf" and "nan", which it reads, are refused as not finite)
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::general);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v < 0 || v > kMaxSeconds)
    return InvalidArgument("expected a number of seconds in [0, 1e11], got " + quote(s));
  return std::llround(v * static_cast<double>(kTicksPerSecond));
}

}  // namespace

bool is_burstgpt_header(std::string_view line) {
  std::vector<std::string_view> fields;
  csv::split_fields(line, fields);
  // Either token column: a header lacking the other is then told so as
  // BurstGPT's, not as an Azure header lacking TIMESTAMP.
  for (std::string_view f : fields)  // (trimmed by split_fields)
    if (f == kInputColumn || f == kOutputColumn) return true;
  return false;
}

Status read_burstgpt_csv(std::string_view text, Sink& sink) {
  return read_csv_trace(text, sink, {"BurstGPT ", kTimestampColumn, kInputColumn, kOutputColumn, ticks_of_seconds});
}

}  // namespace slicesched::trace_detail
