// read_trace's frame (options, file, format choice, window); the formats
// themselves are in azure_csv.cpp and mooncake_jsonl.cpp.
module;
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

module slicesched.workload.trace;
import slicesched.core.files;

namespace slicesched {
namespace trace_detail {

std::string Sink::where(std::size_t line, std::string_view what) const {
  return path_ + ":" + std::to_string(line) + ": " + std::string(what);
}

Status Sink::bad_line(std::size_t line, std::string_view what) {
  std::string message = where(line, what);
  if (!skip_bad_) return InvalidArgument(std::move(message));
  if (skipped++ == 0) first_skipped = std::move(message);
  return Status::Ok();
}

Status Sink::add(std::size_t line, const RawRequest& r, std::string_view time_field, std::string_view shown) {
  // Checked here rather than sorted away: a trace out of order is more likely
  // a broken export than a feature, and the caller should hear about it.
  if (!requests.empty() && r.ticks < requests.back().ticks) {
    return bad_line(line, std::string(time_field) + ": expected time order, got " + quote(shown) + " after " +
                              quote(prev_shown_) + " (line " + std::to_string(prev_line_) + ")");
  }
  requests.push_back(r);
  prev_line_ = line;
  prev_shown_.assign(shown);
  return Status::Ok();
}

bool next_line(std::string_view& rest, std::string_view& line) {
  if (rest.empty()) return false;
  const std::size_t nl = rest.find('\n');
  line = rest.substr(0, nl);
  rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
  return true;
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r";
  const std::size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

std::int64_t parse_count(std::string_view s) {
  std::int64_t v = -1;
  // from_chars would take a leading '-'; a count never has a sign.
  if (s.empty() || s[0] < '0' || s[0] > '9') return -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size()) return -1;
  return v;
}

std::string quote(std::string_view s) {
  // Bytes that are not printable ASCII (a binary file, a stray \r) are
  // shown as \xNN, so the message stays one readable line.
  constexpr std::size_t kMax = 80;
  std::string shown;
  std::size_t cut = 0;  // where the first kMax - 3 characters end, on an escape's boundary
  for (std::size_t i = 0; i < s.size() && shown.size() <= kMax; ++i) {
    if (shown.size() <= kMax - 3) cut = shown.size();
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      shown += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      shown += "\\x";
      shown += kHex[c >> 4];
      shown += kHex[c & 15];
    }
  }
  if (shown.size() <= kMax) return "'" + shown + "'";
  return "'" + shown.substr(0, cut) + "...'";
}

std::string format_number(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc{} ? std::string(buf, end) : std::string("?");
}

}  // namespace trace_detail

namespace {

using trace_detail::format_number;
using trace_detail::RawRequest;

// Options far beyond any trace (3,000 years) would overflow the tick count.
constexpr double kMaxOptionSeconds = 1e11;

std::int64_t ticks_of(double seconds) { return std::llround(seconds * static_cast<double>(kTicksPerSecond)); }

Status check_options(const std::string& path, const TraceOptions& opt) {
  auto bad = [&](std::string_view option, std::string_view want, double got) {
    return InvalidArgument(path + ": option " + std::string(option) + " must be " + std::string(want) + ", got " +
                           format_number(got));
  };
  if (!(std::isfinite(opt.start_offset_s) && opt.start_offset_s >= 0 && opt.start_offset_s <= kMaxOptionSeconds))
    return bad("start_offset_s", "a number of seconds in [0, 1e11]", opt.start_offset_s);
  if (!(std::isfinite(opt.duration_s) && opt.duration_s != 0 && std::fabs(opt.duration_s) <= kMaxOptionSeconds))
    return bad("duration_s", "a number of seconds in (0, 1e11], or < 0 for the rest of the trace", opt.duration_s);
  if (opt.duration_s > 0 && ticks_of(opt.duration_s) == 0)
    return bad("duration_s", "at least 1e-07 (one 100 ns tick)", opt.duration_s);
  if (!(std::isfinite(opt.rate_scale) && opt.rate_scale > 0))
    return bad("rate_scale", "a finite number > 0", opt.rate_scale);
  if (!(std::isfinite(opt.time_shift_s) && std::fabs(opt.time_shift_s) <= kMaxOptionSeconds))
    return bad("time_shift_s", "a number of seconds in [-1e11, 1e11]", opt.time_shift_s);
  return Status::Ok();
}

Result<std::string> read_file(const std::string& path) {
  if (Status s = refuse_special_file(path, "a trace file"); !s.ok()) return s;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    std::string message = path + ": cannot open (" + std::generic_category().message(err) + ")";
    if (err == ENOENT) return NotFound(std::move(message));
    return InvalidArgument(std::move(message));
  }
  std::string text;
  char buf[1 << 16];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const int err = errno;
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  // A directory opens fine on Linux and fails here (EISDIR).
  if (failed) return InvalidArgument(path + ": cannot read (" + std::generic_category().message(err) + ")");
  return text;
}

Status parse(const std::string& path, std::string_view text, trace_detail::Sink& sink) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  std::string_view rest = text, line;
  while (trace_detail::next_line(rest, line)) {
    line = trace_detail::trim(line);
    if (line.empty()) continue;
    if (line.front() == '{') return trace_detail::read_mooncake_jsonl(text, sink);
    if (line.front() == '[')
      return InvalidArgument(path + ":" + std::to_string(1 + std::count(text.data(), line.data(), '\n')) +
                             ": a JSON array: expected JSON lines (one object per line, as Mooncake's trace) or a CSV "
                             "with a header");
    return trace_detail::is_burstgpt_header(line) ? trace_detail::read_burstgpt_csv(text, sink)
                                                  : trace_detail::read_azure_csv(text, sink);
  }
  return InvalidArgument(path + ": empty file, expected a CSV header or JSON lines");
}

}  // namespace

Result<Trace> read_trace(const std::string& path, const TraceOptions& opt) {
  if (Status s = check_options(path, opt); !s.ok()) return s;
  Result<std::string> text = read_file(path);
  if (!text.ok()) return text.status();
  trace_detail::Sink sink(path, opt.skip_bad_lines);
  if (Status s = parse(path, *text, sink); !s.ok()) return s;
  if (sink.requests.empty()) {
    if (sink.skipped == 0) return InvalidArgument(path + ": no requests in the file");
    return InvalidArgument(path + ": no valid requests (" + std::to_string(sink.skipped) +
                           " corrupt lines skipped; first: " + sink.first_skipped + ")");
  }

  const std::int64_t first = sink.requests.front().ticks;
  const std::int64_t offset = ticks_of(opt.start_offset_s);
  const std::int64_t duration = opt.duration_s > 0 ? ticks_of(opt.duration_s) : -1;
  std::vector<RawRequest> kept;  // ticks relative to the window start
  for (const RawRequest& r : sink.requests) {
    const std::int64_t rel = r.ticks - first - offset;
    if (rel >= 0 && (duration < 0 || rel < duration)) kept.push_back({rel, r.input_tokens, r.output_tokens});
  }
  if (kept.empty()) {
    return InvalidArgument(
        path + ": no requests in the window (start_offset_s " + format_number(opt.start_offset_s) + ", duration_s " +
        format_number(opt.duration_s) + "); the trace has " + std::to_string(sink.requests.size()) + " requests over " +
        format_number(static_cast<double>(sink.requests.back().ticks - first) / kTicksPerSecond) + " s");
  }

  // Input is in time order, so the last kept request ends the span.
  std::int64_t window = duration > 0 ? duration : kept.back().ticks;
  if (const std::int64_t shift = ticks_of(opt.time_shift_s); shift != 0) {
    if (window == 0) {
      return InvalidArgument(path + ": option time_shift_s needs a window longer than 0 s, but every kept request is " +
                             "at the same instant");
    }
    // The whole trace repeats after its span and one mean gap between
    // arrivals: rotated by its span alone, the last request landed on the
    // first (requests 10 s apart arrived together).
    if (duration <= 0) window += window / static_cast<std::int64_t>(kept.size() - 1);
    if (const std::int64_t s = (shift % window + window) % window; s != 0) {
      // Rotation leaves two runs, each still in file order: the requests
      // that stay (moved later by s) and those that wrap to the front. A
      // merge that prefers the first run on ties keeps file order overall.
      const auto wraps =
          std::partition_point(kept.begin(), kept.end(), [&](const RawRequest& r) { return r.ticks + s < window; });
      for (auto it = kept.begin(); it != wraps; ++it) it->ticks += s;
      for (auto it = wraps; it != kept.end(); ++it) it->ticks += s - window;
      std::vector<RawRequest> rotated;
      rotated.reserve(kept.size());
      std::merge(kept.begin(), wraps, wraps, kept.end(), std::back_inserter(rotated),
                 [](const RawRequest& a, const RawRequest& b) { return a.ticks < b.ticks; });
      kept = std::move(rotated);
    }
  }

  Trace trace;
  trace.source = path;
  trace.skipped_lines = sink.skipped;
  trace.first_skipped = std::move(sink.first_skipped);
  trace.window_s = static_cast<double>(window) / kTicksPerSecond / opt.rate_scale;
  trace.requests.reserve(kept.size());
  for (const RawRequest& r : kept) {
    trace.requests.push_back(
        {static_cast<double>(r.ticks) / kTicksPerSecond / opt.rate_scale, r.input_tokens, r.output_tokens});
  }
  return trace;
}

}  // namespace slicesched
