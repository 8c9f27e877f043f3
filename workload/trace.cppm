// Request streams for tenants: recorded traces (Azure CSV, BurstGPT CSV,
// Mooncake JSONL) cut to a window and reshaped, and synthetic streams (the paper's offline
// load is constant_rate(1, T, 2048, 15)).
//
// Times are kept as integer 100 ns ticks until the very end, so that window
// edges and wrap-around are exact and a trace read twice gives bit-identical
// arrivals; only the final arrival is a double.
module;
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

export module slicesched.workload.trace;
import slicesched.core.status;

export namespace slicesched {

struct Request {
  double arrival_s;  // from the start of the stream's window, >= 0
  std::int64_t input_tokens;
  std::int64_t output_tokens;
};

// How to cut and reshape a recorded trace. Offset, duration and shift are
// seconds of *trace* time; rate_scale is applied last:
//   rel     = t - (t_first + start_offset_s), kept when 0 <= rel < duration_s
//   rotated = (rel + time_shift_s) mod window
//   arrival = rotated / rate_scale
// where window is duration_s, or with duration_s < 0 the span from the
// offset to the last request (which then lands on the same instant as a
// request at the offset: the window is [0, span) and the last request is on
// its end). Each is rounded to a whole 100 ns tick first.
struct TraceOptions {
  double start_offset_s = 0;    // >= 0: skip requests before this offset from the trace's first request
  double duration_s = -1;       // > 0: keep this many seconds after the offset; < 0: all; 0 is an error
  double rate_scale = 1.0;      // > 0; > 1 compresses inter-arrival times (more load)
  double time_shift_s = 0;      // any finite value; rotates the window with wrap-around
  bool skip_bad_lines = false;  // skip corrupt data lines and count them instead of failing
};

struct Trace {
  std::vector<Request> requests;  // sorted by arrival_s; ties keep file order
  // Seconds the stream covers (duration_s / rate_scale, or the span when
  // reading to the end): every arrival_s lies in [0, window_s], and a
  // replay that wants to loop the stream should loop with this period.
  double window_s = 0;
  // Synthetic streams cut at `cut_s`: requests at or after the cut, counted
  // and not generated (not in `requests`).
  std::size_t beyond_cut = 0;
  std::size_t skipped_lines = 0;  // corrupt lines skipped (skip_bad_lines only)
  std::string first_skipped;      // the error the first skipped line would have given
  std::string source;             // the path read, or a description of the generator
};

inline constexpr std::int64_t kTicksPerSecond = 10'000'000;  // 100 ns, the Azure timestamp resolution

// Reads an Azure-format CSV, a BurstGPT CSV or a Mooncake JSONL trace, chosen
// by content: when the first non-empty line starts with '{' the file is
// JSONL, else it is a CSV whose first non-empty line is the header, BurstGPT's
// when it names "Request tokens" or "Response tokens", else Azure's.
//  - Azure CSV: header names TIMESTAMP, ContextTokens, GeneratedTokens in any
//    order (other columns ignored); TIMESTAMP as parse_datetime_ticks reads
//    it; every data line has as many fields as the header. No quoting.
//  - BurstGPT CSV: the same with Timestamp (seconds from the trace start, a
//    number in [0, 1e11]), Request tokens and Response tokens (Model, Total
//    tokens and Log Type ignored).
//  - JSONL: one object a line with `timestamp` (ms, non-negative number),
//    `input_length` and `output_length` (non-negative integers); other keys
//    are ignored.
// Blank lines are ignored; fields are trimmed of spaces, tabs and CR; a UTF-8
// byte-order mark is skipped. Requests must be in non-decreasing time order.
//
// Fails (InvalidArgument unless noted, one line naming the file, the 1-based
// line and what was expected) on: an option out of range (names the option);
// a missing or unreadable file ("path: cannot open (reason)", NotFound when
// it does not exist); a header lacking a column; a corrupt data line or a
// request out of time order (unless skip_bad_lines: then the line is skipped
// and counted); a file with no valid requests; a window that keeps none.
//
// Reads the whole file into memory. Thread-safe: shares no state between
// calls.
Result<Trace> read_trace(const std::string& path, const TraceOptions& opt = {});

// Parses `YYYY-MM-DD HH:MM:SS[.f...]` (or with 'T' for the space; 1 to 7
// fractional digits; no zone) as 100 ns ticks since 1970-01-01 00:00:00 of
// the same, unspecified, zone: exact integer calendar arithmetic (proleptic
// Gregorian), no locale, no time-zone database. Fails with the text and what
// was wrong (InvalidArgument, no file context).
Result<std::int64_t> parse_datetime_ticks(std::string_view text);

// `rate_per_s` requests a second, the k-th at exactly k / rate_per_s, for
// every k with arrival < duration_s (so ceil(rate * duration) requests).
// With cut_s >= 0 (a measurement window) only arrivals before cut_s are
// generated; those from cut_s to duration_s are counted in beyond_cut,
// arithmetically (a 1e6 s stream cut at 30 s costs 30 s of requests).
// Preconditions: rate_per_s > 0 and duration_s >= 0, both finite, token
// counts >= 0; a violation is a programming error: asserts, and release
// builds return an empty trace. Allocates one Request per generated arrival.
Trace constant_rate(double rate_per_s, double duration_s, std::int64_t input_tokens, std::int64_t output_tokens,
                    double cut_s = -1);

// A Poisson process of `rate_per_s` on [0, duration_s): exponential gaps
// from a std::mt19937_64 seeded with `seed` and inverse-CDF sampling done
// here (not std::exponential_distribution, whose algorithm differs between
// standard libraries), so a seed gives the same stream on every platform.
// Same preconditions as constant_rate, and the same cut: the requests
// before cut_s are those of the uncut stream; beyond_cut is the exact count
// of the rest (drawn on without storing them) when at most
// kCountedArrivals are expected there, else that expectation, rounded
// (drawing a billion arrivals nobody replays would take minutes).
inline constexpr double kCountedArrivals = 1e7;
Trace poisson(double rate_per_s, double duration_s, std::int64_t input_tokens, std::int64_t output_tokens,
              std::uint64_t seed, double cut_s = -1);

}  // namespace slicesched

// Module-internal: the format readers in azure_csv.cpp, burstgpt_csv.cpp and
// mooncake_jsonl.cpp
// feed parsed lines to a sink that owns error reporting, skipping and the
// time-order check, so both formats report the same way.
namespace slicesched::trace_detail {

// The most prompt or output tokens one trace line may give: past any model's
// context window (hf_config's at most 2^30), and small enough that a
// request's sum stays far inside 64 bits.
inline constexpr std::int64_t kMaxTraceTokens = std::int64_t{1} << 31;

struct RawRequest {
  std::int64_t ticks;  // absolute, 100 ns
  std::int64_t input_tokens;
  std::int64_t output_tokens;
};

class Sink {
 public:
  Sink(std::string_view path, bool skip_bad) : path_(path), skip_bad_(skip_bad) {}

  // "path:line: what". Fatal errors (a bad header) use this directly.
  std::string where(std::size_t line, std::string_view what) const;
  // A corrupt data line: the error to return, or Ok after counting it when
  // skipping.
  Status bad_line(std::size_t line, std::string_view what);
  // A parsed line. `shown` is how its time reads in the file (for the
  // out-of-order message) and `time_field` the column or key that holds it.
  Status add(std::size_t line, const RawRequest& r, std::string_view time_field, std::string_view shown);

  std::vector<RawRequest> requests;
  std::size_t skipped = 0;
  std::string first_skipped;

 private:
  std::string path_;
  bool skip_bad_;
  std::size_t prev_line_ = 0;
  std::string prev_shown_;
};

// Splits off the next line of `rest` (without '\n'); false at the end.
bool next_line(std::string_view& rest, std::string_view& line);
std::string_view trim(std::string_view s);
// A non-negative decimal integer filling all of `s`, or -1.
std::int64_t parse_count(std::string_view s);
// `s` in single quotes for a message, cut short when long (a corrupt line
// can be megabytes; the message stays one readable line).
// `s` in single quotes, at most about 80 characters, bytes that are not
// printable ASCII as \xNN.
std::string quote(std::string_view s);
// Shortest round-trip text of `v` ("0.25", "1e+300", "nan").
std::string format_number(double v);

// A CSV trace format: its name in messages ("" or "BurstGPT "), the columns
// of a request's time, prompt and output tokens, and how a time field reads
// as ticks (its error says what was expected and what was found).
struct CsvTraceFormat {
  std::string_view name, time, input, output;
  Result<std::int64_t> (*ticks)(std::string_view field);
};
Status read_csv_trace(std::string_view text, Sink& sink, const CsvTraceFormat& format);

// Each reads a whole file's text (byte-order mark removed), lines from 1.
Status read_azure_csv(std::string_view text, Sink& sink);
Status read_mooncake_jsonl(std::string_view text, Sink& sink);
Status read_burstgpt_csv(std::string_view text, Sink& sink);
// Whether a CSV header line names either of BurstGPT's token columns.
bool is_burstgpt_header(std::string_view line);

}  // namespace slicesched::trace_detail
