// Azure LLM inference traces (AzurePublicDataset): a CSV with TIMESTAMP,
// ContextTokens and GeneratedTokens, and the date-time format it uses.
module;
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

module slicesched.workload.trace;

namespace slicesched {
namespace {

// Days from 1970-01-01 to y-m-d, proleptic Gregorian (H. Hinnant's
// days_from_civil): eras of 400 years, years starting in March so that the
// leap day is the last day of the year.
constexpr std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);                 // [0, 399]
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;  // [0, 365]
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;            // [0, 146096]
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}
static_assert(days_from_civil(1970, 1, 1) == 0);
static_assert(days_from_civil(2000, 3, 1) == 11017);

constexpr bool is_leap(std::int64_t y) { return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0); }

constexpr unsigned days_in_month(std::int64_t y, unsigned m) {
  constexpr std::array<unsigned, 12> kDays = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : kDays[m - 1];
}

// The `n` digits at `pos`, or -1 when any is not a digit.
int digits(std::string_view s, std::size_t pos, std::size_t n) {
  int v = 0;
  for (std::size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

}  // namespace

Result<std::int64_t> parse_datetime_ticks(std::string_view text) {
  auto fail = [&](std::string_view why) {
    std::string message = "expected a date-time like 2023-11-16 18:17:03.9799600 (up to 7 fractional digits, no zone)";
    message += ", got " + trace_detail::quote(text);
    if (!why.empty()) message += " (" + std::string(why) + ")";
    return InvalidArgument(std::move(message));
  };
  const std::string_view s = text;
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') || s[13] != ':' || s[16] != ':')
    return fail("");
  const int y = digits(s, 0, 4), mo = digits(s, 5, 2), d = digits(s, 8, 2);
  const int h = digits(s, 11, 2), mi = digits(s, 14, 2), sec = digits(s, 17, 2);
  if (y < 0 || mo < 0 || d < 0 || h < 0 || mi < 0 || sec < 0) return fail("");
  std::int64_t frac = 0;
  // A zone ("Z", "+00:00") is refused as such: the trace's times are plain.
  if (const std::size_t z = s.find_first_of("Z+-", 19); z != std::string_view::npos)
    return fail("a time zone '" + std::string(s.substr(z)) + "': the times must be plain, all in one zone");
  if (s.size() > 19) {
    const std::size_t n = s.size() - 20;
    if (s[19] != '.' || n == 0) return fail("");
    if (n > 7) return fail("more than 7 fractional digits");
    const int f = digits(s, 20, n);
    if (f < 0) return fail("");
    frac = f;
    for (std::size_t i = n; i < 7; ++i) frac *= 10;  // exact: ".98" is 9,800,000 ticks
  }
  if (mo < 1 || mo > 12) return fail("month " + std::to_string(mo) + " is out of range");
  if (d < 1 || static_cast<unsigned>(d) > days_in_month(y, static_cast<unsigned>(mo))) {
    return fail(std::string(s.substr(0, 7)) + " has " + std::to_string(days_in_month(y, static_cast<unsigned>(mo))) +
                " days");
  }
  // 23:59:60 (a leap second) is refused: the traces have none, and counting
  // it would need a leap-second table.
  if (h > 23 || mi > 59 || sec > 59) return fail("time of day out of range");
  const std::int64_t days = days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  const std::int64_t seconds = days * 86400 + h * 3600 + mi * 60 + sec;
  return seconds * kTicksPerSecond + frac;
}

namespace trace_detail {

Status read_azure_csv(std::string_view text, Sink& sink) {
  return read_csv_trace(text, sink, {"", "TIMESTAMP", "ContextTokens", "GeneratedTokens", parse_datetime_ticks});
}

}  // namespace trace_detail
}  // namespace slicesched
