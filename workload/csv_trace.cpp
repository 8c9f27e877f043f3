// What the CSV trace formats share (azure_csv.cpp, burstgpt_csv.cpp): three
// columns found by name in the header, in any order among others, and one
// request a data line, each line as wide as the header.
module;
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

module slicesched.workload.trace;
import slicesched.core.csv;

namespace slicesched::trace_detail {
namespace {

std::string join(const std::vector<std::string_view>& fields) {
  std::string out;
  for (std::string_view f : fields) out += (out.empty() ? "" : ",") + std::string(f);
  return out;
}

}  // namespace

Status read_csv_trace(std::string_view text, Sink& sink, const CsvTraceFormat& format) {
  std::vector<std::string_view> fields;
  std::string_view rest = text, line;
  std::size_t line_no = 0;
  std::size_t columns = 0;  // fields per line, from the header; 0 until it is read
  std::size_t ts_col = 0, in_col = 0, out_col = 0;
  const std::array<std::string_view, 3> names = {format.time, format.input, format.output};
  while (next_line(rest, line)) {
    ++line_no;
    if (trim(line).empty()) continue;
    csv::split_fields(line, fields);
    if (columns == 0) {
      std::array<std::size_t*, 3> cols = {&ts_col, &in_col, &out_col};
      for (std::size_t k = 0; k < names.size(); ++k) {
        std::size_t found = 0;
        for (std::size_t i = 0; i < fields.size(); ++i) {
          if (fields[i] != names[k]) continue;
          if (found++ == 0) *cols[k] = i;
        }
        if (found == 0) {
          return InvalidArgument(sink.where(line_no, std::string(format.name) + "CSV header lacks column " +
                                                         std::string(names[k]) + " (needs " + std::string(names[0]) +
                                                         ", " + std::string(names[1]) + ", " + std::string(names[2]) +
                                                         "; found " + quote(join(fields)) + ")"));
        }
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
    Result<std::int64_t> ticks = format.ticks(fields[ts_col]);
    const std::int64_t in = parse_count(fields[in_col]);
    const std::int64_t out = parse_count(fields[out_col]);
    Status s;
    if (!ticks.ok()) {
      s = sink.bad_line(line_no, std::string(format.time) + ": " + ticks.status().message());
    } else if (in < 1) {
      // (a prompt has at least one token; 0 made a prefill of nothing)
      s = sink.bad_line(line_no,
                        std::string(format.input) + ": expected an integer >= 1, got " + quote(fields[in_col]));
    } else if (out < 0) {
      s = sink.bad_line(
          line_no, std::string(format.output) + ": expected a non-negative integer, got " + quote(fields[out_col]));
    } else if (in > kMaxTraceTokens || out > kMaxTraceTokens) {
      const bool input = in > kMaxTraceTokens;
      s = sink.bad_line(line_no, std::string(input ? format.input : format.output) + ": expected at most " +
                                     std::to_string(kMaxTraceTokens) + " tokens (more than any context), got " +
                                     quote(fields[input ? in_col : out_col]));
    } else {
      s = sink.add(line_no, {*ticks, in, out}, format.time, fields[ts_col]);
    }
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace slicesched::trace_detail
