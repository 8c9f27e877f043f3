// BurstGPT traces (HPMLL/BurstGPT, GPT-3.5 and GPT-4 served on Azure): a CSV
// with Timestamp (seconds from the trace start), Model, Request tokens,
// Response tokens, Total tokens and Log Type, columns found by name (exports
// reorder them). Model and Log Type are not used: every line is a request.
module;
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
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

// A decimal number of seconds in [0, kMaxSeconds] filling all of `s`, in
// ticks.
Result<std::int64_t> ticks_of_seconds(std::string_view s) {
  const std::string text(trim(s));
  errno = 0;
  char* end = nullptr;
  const double v = text.empty() || text.size() > 64 ? -1 : std::strtod(text.c_str(), &end);
  // (strtod reads "nan", "inf" and hex floats too: refused here, or a plain number)
  if (text.empty() || text.size() > 64 || end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v) ||
      v < 0 || v > kMaxSeconds)
    return InvalidArgument("expected a number of seconds in [0, 1e11], got " + quote(s));
  return std::llround(v * static_cast<double>(kTicksPerSecond));
}

}  // namespace

bool is_burstgpt_header(std::string_view line) {
  std::vector<std::string_view> fields;
  csv::split_fields(line, fields);
  bool in = false, out = false;
  for (std::string_view f : fields) {
    in = in || trim(f) == kInputColumn;
    out = out || trim(f) == kOutputColumn;
  }
  return in && out;
}

Status read_burstgpt_csv(std::string_view text, Sink& sink) {
  return read_csv_trace(text, sink, {"BurstGPT ", kTimestampColumn, kInputColumn, kOutputColumn, ticks_of_seconds});
}

}  // namespace slicesched::trace_detail
