// BurstGPT traces (HPMLL/BurstGPT, GPT-3.5 and GPT-4 served on Azure): a CSV
// with Timestamp (seconds from the trace start), Model, Request tokens,
// Response tokens, Total tokens and Log Type, columns found by name (exports
// reorder them). Model and Log Type are not used: every line is a request.
module;
#include <array>
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

// A decimal number of seconds >= 0 filling all of `s`, in ticks; -1 when
// it is not one.
std::int64_t ticks_of_seconds(std::string_view s) {
  s = trim(s);
  if (s.empty() || s.size() > 64) return -1;
  const std::string text(s);
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v) || v < 0 || v > kMaxSeconds) return -1;
  // (strtod reads "nan", "inf" and hex floats too: refused by the checks
  // above, or a plain number)
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
  std::vector<std::string_view> fields;
  std::string_view rest = text, line;
  std::size_t line_no = 0;
  std::size_t columns = 0;  // fields per line, from the header; 0 until it is read
  std::size_t ts_col = 0, in_col = 0, out_col = 0;
  while (next_line(rest, line)) {
    ++line_no;
    if (trim(line).empty()) continue;
    csv::split_fields(line, fields);
    if (columns == 0) {
      const std::array<std::string_view, 3> names = {kTimestampColumn, kInputColumn, kOutputColumn};
      std::array<std::size_t*, 3> cols = {&ts_col, &in_col, &out_col};
      for (std::size_t k = 0; k < names.size(); ++k) {
        std::size_t found = 0;
        for (std::size_t i = 0; i < fields.size(); ++i) {
          if (trim(fields[i]) != names[k]) continue;
          if (found++ == 0) *cols[k] = i;
        }
        if (found == 0)
          return InvalidArgument(sink.where(line_no, "BurstGPT CSV header lacks column " + std::string(names[k]) +
                                                         " (needs Timestamp, Request tokens, Response tokens)"));
        if (found > 1)
          return InvalidArgument(sink.where(line_no, "CSV header has column " + std::string(names[k]) + " twice"));
      }
      columns = fields.size();
      continue;
    }
    if (fields.size() != columns) {
      Status s = sink.bad_line(line_no, "expected " + std::to_string(columns) + " comma-separated fields as in the " +
                                            "header, got " + std::to_string(fields.size()));
      if (!s.ok()) return s;
      continue;
    }
    const std::int64_t ticks = ticks_of_seconds(fields[ts_col]);
    const std::int64_t in = parse_count(trim(fields[in_col]));
    const std::int64_t out = parse_count(trim(fields[out_col]));
    Status s;
    if (ticks < 0) {
      s = sink.bad_line(line_no, std::string(kTimestampColumn) + ": expected a number of seconds in [0, 1e11], got " +
                                     quote(fields[ts_col]));
    } else if (in < 1) {
      // (a prompt has at least one token; 0 made a prefill of nothing)
      s = sink.bad_line(line_no,
                        std::string(kInputColumn) + ": expected an integer >= 1, got " + quote(fields[in_col]));
    } else if (out < 0) {
      s = sink.bad_line(
          line_no, std::string(kOutputColumn) + ": expected a non-negative integer, got " + quote(fields[out_col]));
    } else {
      s = sink.add(line_no, {ticks, in, out}, kTimestampColumn, trim(fields[ts_col]));
    }
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace slicesched::trace_detail
