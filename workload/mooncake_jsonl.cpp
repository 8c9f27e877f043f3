// Mooncake traces (kvcache-ai/Mooncake, FAST'25): one JSON object a line with
// `timestamp` (ms from the trace start), `input_length` and `output_length`.
// Other keys (`hash_ids`, the prefix-cache blocks) are not used here.
module;
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

module slicesched.workload.trace;

namespace slicesched::trace_detail {
namespace {

using nlohmann::json;

constexpr std::int64_t kTicksPerMs = kTicksPerSecond / 1000;

// Ticks for a millisecond timestamp, or -1 when it is not a non-negative
// number or does not fit.
std::int64_t ticks_of_ms(const json& v) {
  constexpr std::int64_t kMaxMs = std::numeric_limits<std::int64_t>::max() / kTicksPerMs;
  if (v.is_number_unsigned()) {
    const auto ms = v.get<std::uint64_t>();
    return ms <= static_cast<std::uint64_t>(kMaxMs) ? static_cast<std::int64_t>(ms) * kTicksPerMs : -1;
  }
  if (v.is_number_integer()) {  // signed: only negatives get here
    const auto ms = v.get<std::int64_t>();
    return ms >= 0 && ms <= kMaxMs ? ms * kTicksPerMs : -1;
  }
  if (v.is_number_float()) {
    const double ms = v.get<double>();
    if (!(ms >= 0 && ms <= static_cast<double>(kMaxMs))) return -1;
    return std::llround(ms * static_cast<double>(kTicksPerMs));
  }
  return -1;
}

// A non-negative integer token count, or -1. 12.0 is refused: a count
// written as a float is a sign that the column is not what we think it is.
std::int64_t count_of(const json& v) {
  if (v.is_number_unsigned()) {
    const auto n = v.get<std::uint64_t>();
    return n <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ? static_cast<std::int64_t>(n)
                                                                                     : -1;
  }
  if (v.is_number_integer()) {
    const auto n = v.get<std::int64_t>();
    return n >= 0 ? n : -1;
  }
  return -1;
}

// What one line says, or the reason it is corrupt (empty when fine).
std::string parse_line(std::string_view line, RawRequest& r, std::string& shown_time) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::parse_error& e) {
    // e.byte is 1-based, one past the end when the line stops mid-value.
    const std::string where = e.byte > line.size() ? " (the line ends early)" : " at column " + std::to_string(e.byte);
    return "expected a JSON object, got invalid JSON" + where + ": " + quote(line);
  } catch (const json::exception& e) {  // e.g. a number too large for a double
    return std::string("expected a JSON object, got ") + e.what() + ": " + quote(line);
  }
  if (!j.is_object()) return "expected a JSON object, got " + std::string(j.type_name()) + " " + quote(line);
  constexpr std::string_view kKeys = "timestamp, input_length, output_length";
  for (const char* key : {"timestamp", "input_length", "output_length"}) {
    if (!j.contains(key)) return "missing key " + std::string(key) + " (needs " + std::string(kKeys) + ")";
  }
  const json& ts = j.at("timestamp");
  shown_time = ts.dump();
  r.ticks = ticks_of_ms(ts);
  if (r.ticks < 0) return "timestamp: expected a non-negative number of milliseconds, got " + quote(shown_time);
  r.input_tokens = count_of(j.at("input_length"));
  // (a prompt has at least one token; 0 made a prefill of nothing)
  if (r.input_tokens < 1) return "input_length: expected an integer >= 1, got " + quote(j.at("input_length").dump());
  r.output_tokens = count_of(j.at("output_length"));
  if (r.output_tokens < 0)
    return "output_length: expected a non-negative integer, got " + quote(j.at("output_length").dump());
  for (const char* key : {"input_length", "output_length"})
    if (count_of(j.at(key)) > kMaxTraceTokens)
      return std::string(key) + ": expected at most " + std::to_string(kMaxTraceTokens) +
             " tokens (more than any context), got " + quote(j.at(key).dump());
  return {};
}

}  // namespace

Status read_mooncake_jsonl(std::string_view text, Sink& sink) {
  std::string_view rest = text, line;
  std::size_t line_no = 0;
  std::string shown_time;
  while (next_line(rest, line)) {
    ++line_no;
    line = trim(line);
    if (line.empty()) continue;
    RawRequest r{};
    const std::string error = parse_line(line, r, shown_time);
    Status s = error.empty() ? sink.add(line_no, r, "timestamp", shown_time) : sink.bad_line(line_no, error);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace slicesched::trace_detail
