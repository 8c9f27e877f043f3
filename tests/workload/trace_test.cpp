#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

import slicesched.workload.trace;
import slicesched.core.status;

using namespace slicesched;

namespace {

const std::string kSourceDir = SLICESCHED_SOURCE_DIR;
const std::string kAzure = kSourceDir + "/data/traces/AzureLLMInferenceTrace_code.csv";
const std::string kMooncake = kSourceDir + "/data/traces/mooncake_FAST25_synthetic_trace.jsonl";
const std::string kWindowCsv = kSourceDir + "/tests/workload/data/window.csv";
const std::string kSmallJsonl = kSourceDir + "/tests/workload/data/small.jsonl";

std::vector<double> arrivals(const Trace& t) {
  std::vector<double> out;
  for (const Request& r : t.requests) out.push_back(r.arrival_s);
  return out;
}

std::vector<std::int64_t> inputs(const Trace& t) {
  std::vector<std::int64_t> out;
  for (const Request& r : t.requests) out.push_back(r.input_tokens);
  return out;
}

// Files written by one test, removed with it.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    dir_ = std::filesystem::temp_directory_path() /
           ("slicesched_trace_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string path() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

std::int64_t ticks(const char* text) {
  Result<std::int64_t> t = parse_datetime_ticks(text);
  REQUIRE(t.ok());
  return *t;
}

std::string datetime_error(const char* text) {
  Result<std::int64_t> t = parse_datetime_ticks(text);
  REQUIRE(!t.ok());
  return t.status().message();
}

const std::string kAzureHeader = "TIMESTAMP,ContextTokens,GeneratedTokens\n";

// The message read_trace gives for `text` written to a file named `name`,
// which the message must start with.
std::string error_for(const TempDir& dir, const std::string& name, const std::string& text,
                      const TraceOptions& opt = {}) {
  const std::string path = dir.write(name, text);
  Result<Trace> t = read_trace(path, opt);
  REQUIRE(!t.ok());
  CHECK(t.status().code() == StatusCode::kInvalidArgument);
  const std::string m = t.status().message();  // status() is a copy
  REQUIRE(m.starts_with(path));
  return m.substr(path.size());
}

}  // namespace

TEST_CASE("date-times are exact 100 ns ticks since 1970", "[trace][datetime]") {
  CHECK(ticks("1970-01-01 00:00:00") == 0);
  CHECK(ticks("1969-12-31 23:59:59.9999999") == -1);
  CHECK(ticks("2024-02-29 00:00:00") == 1709164800LL * kTicksPerSecond);
  CHECK(ticks("2023-11-16 18:17:03.9799600") == 17001586239799600LL);
  CHECK(ticks("2023-11-16T18:17:03.98") == 17001586239800000LL);
  CHECK(ticks("2023-11-16 18:17:03.5") - ticks("2023-11-16 18:17:03") == 5'000'000);
  CHECK(ticks("2023-11-16 18:17:03.0000001") - ticks("2023-11-16 18:17:03") == 1);
  // One tick before midnight is one tick before the next day, across month,
  // year and leap-day boundaries.
  CHECK(ticks("2023-11-16 23:59:59.9999999") + 1 == ticks("2023-11-17 00:00:00"));
  CHECK(ticks("2023-12-31 23:59:59.9999999") + 1 == ticks("2024-01-01 00:00:00"));
  CHECK(ticks("2024-02-28 23:59:59.9999999") + 1 == ticks("2024-02-29 00:00:00"));
  CHECK(ticks("2024-02-29 23:59:59.9999999") + 1 == ticks("2024-03-01 00:00:00"));
  CHECK(ticks("2023-02-28 23:59:59.9999999") + 1 == ticks("2023-03-01 00:00:00"));
  constexpr std::int64_t kDay = 86400 * kTicksPerSecond;
  CHECK(ticks("2000-03-01 00:00:00") - ticks("2000-02-28 00:00:00") == 2 * kDay);  // 400-year rule: leap
  CHECK(ticks("2000-02-29 00:00:00") - ticks("2000-02-28 00:00:00") == kDay);
  CHECK(ticks("2100-03-01 00:00:00") - ticks("2100-02-28 00:00:00") == kDay);  // 100-year rule: not
  CHECK(ticks("2024-12-31 00:00:00") - ticks("2024-01-01 00:00:00") == 365 * kDay);
}

TEST_CASE("malformed date-times say what was expected", "[trace][datetime][bad-input]") {
  const std::string kExpected =
      "expected a date-time like 2023-11-16 18:17:03.9799600 (up to 7 fractional digits, no zone), got ";
  CHECK(datetime_error("2023-02-29 00:00:00") == kExpected + "'2023-02-29 00:00:00' (2023-02 has 28 days)");
  CHECK(datetime_error("1900-02-29 00:00:00") == kExpected + "'1900-02-29 00:00:00' (1900-02 has 28 days)");
  CHECK(datetime_error("2023-04-31 00:00:00") == kExpected + "'2023-04-31 00:00:00' (2023-04 has 30 days)");
  CHECK(datetime_error("2023-13-01 00:00:00") == kExpected + "'2023-13-01 00:00:00' (month 13 is out of range)");
  CHECK(datetime_error("2023-11-16 24:00:00") == kExpected + "'2023-11-16 24:00:00' (time of day out of range)");
  CHECK(datetime_error("2023-11-16 23:59:60") == kExpected + "'2023-11-16 23:59:60' (time of day out of range)");
  CHECK(datetime_error("2023-11-16 18:17:03.97996001") ==
        kExpected + "'2023-11-16 18:17:03.97996001' (more than 7 fractional digits)");
  CHECK(datetime_error("2023-11-16 18:17:03Z") ==
        kExpected + "'2023-11-16 18:17:03Z' (a time zone 'Z': the times must be plain, all in one zone)");
  CHECK(datetime_error("2023-11-16 18:17:03.9799600+00:00") ==
        kExpected +
            "'2023-11-16 18:17:03.9799600+00:00' (a time zone '+00:00': the times must be plain, all in one zone)");
  CHECK(datetime_error("2023-11-16 18:17:03.") == kExpected + "'2023-11-16 18:17:03.'");
  CHECK(datetime_error("2023-11-16 18:17:03.9x") == kExpected + "'2023-11-16 18:17:03.9x'");
  CHECK(datetime_error("2023/11/16 18:17:03") == kExpected + "'2023/11/16 18:17:03'");
  CHECK(datetime_error("16-11-2023 18:17:03") == kExpected + "'16-11-2023 18:17:03'");
  CHECK(datetime_error("") == kExpected + "''");
}

TEST_CASE("the Azure code trace reads as the data README describes it", "[trace][real]") {
  Result<Trace> t = read_trace(kAzure);
  REQUIRE(t.ok());
  CHECK(t->source == kAzure);
  CHECK(t->skipped_lines == 0);
  REQUIRE(t->requests.size() == 8819);
  CHECK(t->requests.front().arrival_s == 0);
  // 18:17:03.9799600 then 18:17:04.0319600; last at 19:14:19.9280160.
  CHECK(t->requests[1].arrival_s == 0.052);
  CHECK(t->requests.back().arrival_s == 3435.948056);
  CHECK(t->window_s == 3435.948056);
  CHECK(std::is_sorted(t->requests.begin(), t->requests.end(),
                       [](const Request& a, const Request& b) { return a.arrival_s < b.arrival_s; }));
  CHECK(t->requests.front().input_tokens == 4808);
  CHECK(t->requests.front().output_tokens == 10);
  CHECK(t->requests.back().input_tokens == 549);
  CHECK(t->requests.back().output_tokens == 173);
  std::int64_t in_sum = 0, out_sum = 0;
  std::vector<std::int64_t> in, out;
  for (const Request& r : t->requests) {
    in_sum += r.input_tokens;
    out_sum += r.output_tokens;
    in.push_back(r.input_tokens);
    out.push_back(r.output_tokens);
  }
  CHECK(in_sum == 18059974);
  CHECK(out_sum == 245896);
  std::sort(in.begin(), in.end());
  std::sort(out.begin(), out.end());
  CHECK(in[in.size() / 2] == 1469);  // README: p50 1469, p99 7436
  CHECK(out[out.size() / 2] == 13);  // README: p50 13, p99 252
  CHECK(in[in.size() * 99 / 100] == 7436);
  CHECK(out[out.size() * 99 / 100] == 252);

  TraceOptions opt;
  opt.start_offset_s = 600;
  opt.duration_s = 600;
  Result<Trace> w = read_trace(kAzure, opt);
  REQUIRE(w.ok());
  CHECK(w->requests.size() == 2146);  // counted independently with Python
  CHECK(w->requests.front().arrival_s >= 0);
  CHECK(w->requests.back().arrival_s < 600);
}

TEST_CASE("the Mooncake trace reads as the data README describes it", "[trace][real]") {
  Result<Trace> t = read_trace(kMooncake);
  REQUIRE(t.ok());
  REQUIRE(t->requests.size() == 3993);
  CHECK(t->requests.front().arrival_s == 0);
  CHECK(t->requests[2].arrival_s == 0.04);
  CHECK(t->requests.back().arrival_s == 1022.025);
  CHECK(t->requests.front().input_tokens == 40160);
  CHECK(t->requests.front().output_tokens == 6);
  std::int64_t in_sum = 0, out_sum = 0;
  for (const Request& r : t->requests) {
    in_sum += r.input_tokens;
    out_sum += r.output_tokens;
  }
  CHECK(in_sum == 61194628);
  CHECK(out_sum == 595432);

  TraceOptions opt;
  opt.start_offset_s = 100;
  opt.duration_s = 100;
  Result<Trace> w = read_trace(kMooncake, opt);
  REQUIRE(w.ok());
  CHECK(w->requests.size() == 362);
}

TEST_CASE("a hand-written CSV: column order, extra columns, CRLF, blanks, spaces", "[trace][window]") {
  Result<Trace> t = read_trace(kWindowCsv);
  REQUIRE(t.ok());
  // First request 2024-02-28 23:59:58.5; the others across the leap-day midnight.
  CHECK(arrivals(*t) == std::vector<double>{0, 1, 1.5, 2.75, 4.5, 4.5, 6.25});
  CHECK(inputs(*t) == std::vector<std::int64_t>{100, 200, 300, 400, 500, 600, 700});
  CHECK(t->requests[3].output_tokens == 4);
  CHECK(t->window_s == 6.25);
}

TEST_CASE("offset and duration cut a half-open window of trace time", "[trace][window]") {
  TraceOptions opt;
  opt.start_offset_s = 1;
  opt.duration_s = 3.5;  // [1, 4.5): the two requests at exactly 4.5 are out
  Result<Trace> t = read_trace(kWindowCsv, opt);
  REQUIRE(t.ok());
  CHECK(arrivals(*t) == std::vector<double>{0, 0.5, 1.75});
  CHECK(inputs(*t) == std::vector<std::int64_t>{200, 300, 400});
  CHECK(t->window_s == 3.5);

  opt.duration_s = 3.5000001;  // one tick more takes them in
  t = read_trace(kWindowCsv, opt);
  REQUIRE(t.ok());
  CHECK(arrivals(*t) == std::vector<double>{0, 0.5, 1.75, 3.5, 3.5});

  opt = {};
  opt.start_offset_s = 1.25;  // no request at the offset: arrivals still count from it
  t = read_trace(kWindowCsv, opt);
  REQUIRE(t.ok());
  CHECK(arrivals(*t) == std::vector<double>{0.25, 1.5, 3.25, 3.25, 5});
  CHECK(t->window_s == 5);
}

TEST_CASE("rate_scale compresses arrivals after the window is cut", "[trace][window]") {
  TraceOptions opt;
  opt.rate_scale = 2;
  Result<Trace> t = read_trace(kWindowCsv, opt);
  REQUIRE(t.ok());
  CHECK(arrivals(*t) == std::vector<double>{0, 0.5, 0.75, 1.375, 2.25, 2.25, 3.125});
  CHECK(t->window_s == 3.125);

  opt.duration_s = 2;  // trace seconds: [0, 2) keeps three, then halved
  t = read_trace(kWindowCsv, opt);
  REQUIRE(t.ok());
  CHECK(arrivals(*t) == std::vector<double>{0, 0.5, 0.75});
  CHECK(t->window_s == 1);

  opt = {};
  opt.rate_scale = 0.5;  // stretches
  t = read_trace(kWindowCsv, opt);
  REQUIRE(t.ok());
  CHECK(t->requests.back().arrival_s == 12.5);
}

TEST_CASE("time_shift rotates the window with wrap-around, ties stay in file order", "[trace][window]") {
  TraceOptions opt;
  opt.duration_s = 5;
  opt.time_shift_s = 2;  // 0,1,1.5,2.75,4.5,4.5 -> 2,3,3.5,4.75,1.5,1.5
  Result<Trace> t = read_trace(kWindowCsv, opt);
  REQUIRE(t.ok());
  CHECK(arrivals(*t) == std::vector<double>{1.5, 1.5, 2, 3, 3.5, 4.75});
  CHECK(inputs(*t) == std::vector<std::int64_t>{500, 600, 100, 200, 300, 400});
  CHECK(t->window_s == 5);

  opt.time_shift_s = -1;  // same as +4
  t = read_trace(kWindowCsv, opt);
  REQUIRE(t.ok());
  CHECK(arrivals(*t) == std::vector<double>{0, 0.5, 1.75, 3.5, 3.5, 4});
  CHECK(inputs(*t) == std::vector<std::int64_t>{200, 300, 400, 500, 600, 100});

  opt.time_shift_s = 7;  // same as +2
  t = read_trace(kWindowCsv, opt);
  REQUIRE(t.ok());
  CHECK(inputs(*t) == std::vector<std::int64_t>{500, 600, 100, 200, 300, 400});

  opt.time_shift_s = 2;
  opt.rate_scale = 2;  // shift in trace seconds, then compress
  t = read_trace(kWindowCsv, opt);
  REQUIRE(t.ok());
  CHECK(arrivals(*t) == std::vector<double>{0.75, 0.75, 1, 1.5, 1.75, 2.375});
  CHECK(t->window_s == 2.5);

  // Without a duration the trace repeats after its span (6.25 s) and one
  // mean gap (6.25 / 6 s): the last request wraps to the gap's end before
  // the first one's new place (it landed on that instant, found by an
  // outside probe), and nothing wraps at a shift within the gap.
  opt = {};
  opt.time_shift_s = 2;
  t = read_trace(kWindowCsv, opt);
  REQUIRE(t.ok());
  REQUIRE(t->requests.size() == 7);
  CHECK(t->requests[0].arrival_s == Approx(0.9583334).margin(1e-9));
  const std::vector<double> at = arrivals(*t);
  CHECK(std::vector<double>(at.begin() + 1, at.end()) == std::vector<double>{2, 3, 3.5, 4.75, 6.5, 6.5});
  CHECK(inputs(*t) == std::vector<std::int64_t>{700, 100, 200, 300, 400, 500, 600});
  CHECK(t->window_s == Approx(7.2916666).margin(1e-9));
  opt.time_shift_s = 1;
  t = read_trace(kWindowCsv, opt);
  REQUIRE(t.ok());
  CHECK(arrivals(*t) == std::vector<double>{1, 2, 2.5, 3.75, 5.5, 5.5, 7.25});
}

TEST_CASE("a trace written as one JSON array is refused as such", "[trace][jsonl][bad-input]") {
  // (found by an outside probe: it was blamed on a missing CSV column)
  TempDir dir;
  const std::string path =
      dir.write("array.jsonl", "\n[{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 2}]\n");
  Result<Trace> t = read_trace(path);
  REQUIRE_FALSE(t.ok());
  CHECK(t.status().message() == path +
                                    ":2: a JSON array: expected JSON lines (one object per line, as Mooncake's trace) "
                                    "or a CSV with a header");
}

TEST_CASE("JSONL is chosen by content: timestamps in ms, extra keys ignored", "[trace][jsonl]") {
  Result<Trace> t = read_trace(kSmallJsonl);
  REQUIRE(t.ok());
  CHECK(arrivals(*t) == std::vector<double>{0, 0.25, 0.2505, 1});
  CHECK(inputs(*t) == std::vector<std::int64_t>{10, 20, 30, 1});
  CHECK(t->requests[1].output_tokens == 2);

  // Not by name: JSON lines in a .csv, CSV in a .jsonl.
  TempDir dir;
  t = read_trace(dir.write("lines.csv", "\n  {\"timestamp\": 5, \"input_length\": 1, \"output_length\": 2}\n"));
  REQUIRE(t.ok());
  CHECK(t->requests.size() == 1);
  t = read_trace(dir.write("table.jsonl", "\xEF\xBB\xBF" + kAzureHeader + "2023-11-16 18:17:03,1,2\n"));
  REQUIRE(t.ok());
  CHECK(t->requests.size() == 1);
}

TEST_CASE("a BurstGPT CSV is chosen by its header: seconds from the start, columns by name", "[trace][burstgpt]") {
  TempDir dir;
  // As the dataset ships it (failed requests have 0 response tokens: read as
  // 0, then run as one, as every format's), then as a Hugging Face export
  // reorders it.
  const std::string shipped =
      "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
      "5,ChatGPT,472,18,490,Conversation log\n"
      "45,ChatGPT,1087,0,1087,Conversation log\n"
      "45.25,GPT-4,417,276,693,API log\n";
  Result<Trace> t = read_trace(dir.write("burst.csv", shipped));
  REQUIRE(t.ok());
  CHECK(arrivals(*t) == std::vector<double>{0, 40, 40.25});
  CHECK(inputs(*t) == std::vector<std::int64_t>{472, 1087, 417});
  CHECK(t->requests[0].output_tokens == 18);
  CHECK(t->requests[1].output_tokens == 0);
  CHECK(t->requests[2].output_tokens == 276);
  const std::string exported =
      "Log Type,Timestamp,Request tokens,Response tokens,Total tokens,Model\n"
      "Conversation log,5,472,18,490,ChatGPT\n"
      "API log,45.25,417,276,693,GPT-4\n";
  t = read_trace(dir.write("export.csv", exported), {.duration_s = 40.1});
  REQUIRE(t.ok());
  CHECK(inputs(*t) == std::vector<std::int64_t>{472});
  // Its errors name the file, the line and the column.
  const std::string header = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
  CHECK(error_for(dir, "b.csv", header + "-1,ChatGPT,4,1,5,API log\n") ==
        ":2: Timestamp: expected a number of seconds in [0, 1e11], got '-1'");
  CHECK(error_for(dir, "b.csv", header + "nan,ChatGPT,4,1,5,API log\n") ==
        ":2: Timestamp: expected a number of seconds in [0, 1e11], got 'nan'");
  CHECK(error_for(dir, "b.csv", header + "1,ChatGPT,0,1,1,API log\n") ==
        ":2: Request tokens: expected an integer >= 1, got '0'");
  CHECK(error_for(dir, "b.csv", header + "1,ChatGPT,4,x,5,API log\n") ==
        ":2: Response tokens: expected a non-negative integer, got 'x'");
  CHECK(error_for(dir, "b.csv", header + "1,ChatGPT,4,1,5\n") ==
        ":2: expected 6 comma-separated fields as in the header, got 5");
  CHECK(error_for(dir, "b.csv", "Model,Request tokens,Response tokens\n1,2,3\n") ==
        ":1: BurstGPT CSV header lacks column Timestamp (needs Timestamp, Request tokens, Response tokens; found "
        "'Model,Request tokens,Response tokens')");
  CHECK(error_for(dir, "b.csv", header + "9,ChatGPT,4,1,5,API log\n2,ChatGPT,4,1,5,API log\n").find(":3: ") ==
        0);  // out of time order
  // strtod's hex floats are not seconds.
  CHECK(error_for(dir, "b.csv", header + "0x10,ChatGPT,4,1,5,API log\n") ==
        ":2: Timestamp: expected a number of seconds in [0, 1e11], got '0x10'");
  // Counts whose sum passed 2^63 wrapped negative and slipped past the
  // context check (the run never ended): bounded at every format's reader.
  CHECK(error_for(dir, "b.csv", header + "0,a,10,9223372036854775798,0,x\n") ==
        ":2: Response tokens: expected at most 2147483648 tokens (more than any context), got "
        "'9223372036854775798'");
  CHECK(error_for(dir, "a.csv", kAzureHeader + "2023-11-16 18:17:03,9223372036854775807,1\n") ==
        ":2: ContextTokens: expected at most 2147483648 tokens (more than any context), got "
        "'9223372036854775807'");
  CHECK(error_for(dir, "m.jsonl", "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 4294967296}\n") ==
        ":1: output_length: expected at most 2147483648 tokens (more than any context), got '4294967296'");
  // A header with one of BurstGPT's token columns is told what it lacks as
  // BurstGPT's (it read as an Azure header lacking TIMESTAMP).
  CHECK(error_for(dir, "b.csv", "Timestamp,Model,Request tokens,Total tokens\n1,a,2,3\n") ==
        ":1: BurstGPT CSV header lacks column Response tokens (needs Timestamp, Request tokens, Response tokens; "
        "found 'Timestamp,Model,Request tokens,Total tokens')");
}

TEST_CASE("a missing or unreadable file names the path and the reason", "[trace][bad-input]") {
  TempDir dir;
  const std::string missing = dir.path() + "/nope.csv";
  Result<Trace> t = read_trace(missing);
  REQUIRE(!t.ok());
  CHECK(t.status().code() == StatusCode::kNotFound);
  CHECK(t.status().message() == missing + ": cannot open (No such file or directory)");
  t = read_trace(dir.path());
  REQUIRE(!t.ok());
  CHECK(t.status().message() == dir.path() + ": cannot read (Is a directory)");
}

TEST_CASE("CSV errors name the file, the line and what was expected", "[trace][bad-input]") {
  TempDir dir;
  CHECK(error_for(dir, "e.csv", "") == ": empty file, expected a CSV header or JSON lines");
  CHECK(error_for(dir, "e.csv", "\r\n  \n") == ": empty file, expected a CSV header or JSON lines");
  CHECK(error_for(dir, "h.csv", kAzureHeader) == ": no requests in the file");
  CHECK(error_for(dir, "h.csv", "\n\nTIMESTAMP, ContextTokens,Generated\n") ==
        ":3: CSV header lacks column GeneratedTokens (needs TIMESTAMP, ContextTokens, GeneratedTokens; "
        "found 'TIMESTAMP,ContextTokens,Generated')");
  CHECK(error_for(dir, "h.csv", "timestamp,ContextTokens,GeneratedTokens\n") ==
        ":1: CSV header lacks column TIMESTAMP (needs TIMESTAMP, ContextTokens, GeneratedTokens; "
        "found 'timestamp,ContextTokens,GeneratedTokens')");
  CHECK(error_for(dir, "h.csv", "TIMESTAMP,ContextTokens,GeneratedTokens,ContextTokens\n") ==
        ":1: CSV header has column ContextTokens twice");
  const std::string ok = "2023-11-16 18:17:03.9799600,4808,10\n";
  CHECK(error_for(dir, "x.csv", kAzureHeader + ok + "2023-11-16 18:17:04,3180,abc\n") ==
        ":3: GeneratedTokens: expected a non-negative integer, got 'abc'");
  CHECK(error_for(dir, "x.csv", kAzureHeader + ok + "2023-11-16 18:17:04,-5,1\n") ==
        ":3: ContextTokens: expected an integer >= 1, got '-5'");
  // (a prompt has at least one token)
  CHECK(error_for(dir, "x.csv", kAzureHeader + ok + "2023-11-16 18:17:04,0,0\n") ==
        ":3: ContextTokens: expected an integer >= 1, got '0'");
  CHECK(error_for(dir, "x.csv", kAzureHeader + ok + "2023-11-16 18:17:04,12.5,1\n") ==
        ":3: ContextTokens: expected an integer >= 1, got '12.5'");
  CHECK(error_for(dir, "x.csv", kAzureHeader + ok + "2023-11-16 18:17:04,,1\n") ==
        ":3: ContextTokens: expected an integer >= 1, got ''");
  CHECK(error_for(dir, "x.csv", kAzureHeader + ok + "2023-11-16 18:17:04,99999999999999999999,1\n") ==
        ":3: ContextTokens: expected an integer >= 1, got '99999999999999999999'");
  CHECK(error_for(dir, "x.csv", kAzureHeader + ok + "2023-11-16 18:17:04,3180\n") ==
        ":3: expected 3 comma-separated fields as in the header, got 2");
  CHECK(error_for(dir, "x.csv", kAzureHeader + ok + "2023-11-16 18:17:04,3180,1,\n") ==
        ":3: expected 3 comma-separated fields as in the header, got 4");
  CHECK(error_for(dir, "x.csv", kAzureHeader + "2023-11-31 18:17:04,3180,1\n") ==
        ":2: TIMESTAMP: expected a date-time like 2023-11-16 18:17:03.9799600 (up to 7 fractional digits, no "
        "zone), got '2023-11-31 18:17:04' (2023-11 has 30 days)");
  CHECK(error_for(dir, "x.csv", kAzureHeader + ok + "\n2023-11-16 18:17:03.97995,1,1\n") ==
        ":4: TIMESTAMP: expected time order, got '2023-11-16 18:17:03.97995' after '2023-11-16 18:17:03.9799600' "
        "(line 2)");
  const std::string long_field(200, 'x');
  CHECK(error_for(dir, "x.csv", kAzureHeader + ok + "2023-11-16 18:17:04,1," + long_field + "\n") ==
        ":3: GeneratedTokens: expected a non-negative integer, got '" + std::string(77, 'x') + "...'");
}

TEST_CASE("JSONL errors name the file, the line and what was expected", "[trace][bad-input]") {
  TempDir dir;
  const std::string ok = "{\"timestamp\": 10, \"input_length\": 1, \"output_length\": 2}\n";
  CHECK(
      error_for(dir, "x.jsonl", ok + "{\"timestamp\": 20, \"input_length\": 1,\n") ==
      ":2: expected a JSON object, got invalid JSON (the line ends early): '{\"timestamp\": 20, \"input_length\": 1,'");
  CHECK(error_for(dir, "x.jsonl", ok + "{} {}\n") ==
        ":2: expected a JSON object, got invalid JSON at column 4: '{} {}'");
  CHECK(error_for(dir, "x.jsonl", ok + "[1, 2]\n") == ":2: expected a JSON object, got array '[1, 2]'");
  CHECK(error_for(dir, "x.jsonl", ok + "{\"timestamp\": 20, \"output_length\": 2}\n") ==
        ":2: missing key input_length (needs timestamp, input_length, output_length)");
  CHECK(error_for(dir, "x.jsonl", ok + "{\"timestamp\": -1, \"input_length\": 1, \"output_length\": 2}\n") ==
        ":2: timestamp: expected a non-negative number of milliseconds, got '-1'");
  CHECK(error_for(dir, "x.jsonl", ok + "{\"timestamp\": \"20\", \"input_length\": 1, \"output_length\": 2}\n") ==
        ":2: timestamp: expected a non-negative number of milliseconds, got '\"20\"'");
  CHECK(error_for(dir, "x.jsonl", ok + "{\"timestamp\": 1e300, \"input_length\": 1, \"output_length\": 2}\n") ==
        ":2: timestamp: expected a non-negative number of milliseconds, got '1e+300'");
  CHECK(error_for(dir, "x.jsonl", ok + "{\"timestamp\": 20, \"input_length\": \"abc\", \"output_length\": 2}\n") ==
        ":2: input_length: expected an integer >= 1, got '\"abc\"'");
  CHECK(error_for(dir, "x.jsonl", ok + "{\"timestamp\": 20, \"input_length\": 1, \"output_length\": 2.5}\n") ==
        ":2: output_length: expected a non-negative integer, got '2.5'");
  CHECK(error_for(dir, "x.jsonl", ok + "{\"timestamp\": 20, \"input_length\": 1, \"output_length\": -2}\n") ==
        ":2: output_length: expected a non-negative integer, got '-2'");
  CHECK(error_for(dir, "x.jsonl", ok + "\n{\"timestamp\": 9.5, \"input_length\": 1, \"output_length\": 2}\n") ==
        ":3: timestamp: expected time order, got '9.5' after '10' (line 1)");
  // A number beyond a double is an error on its line, not an exception
  // (found by tests/fuzz/trace_fuzz).
  const std::string huge =
      error_for(dir, "x.jsonl", ok + "{\"timestamp\": 1e999, \"input_length\": 1, \"output_length\": 2}\n");
  CHECK(huge.starts_with(":2: expected a JSON object, got "));
  CHECK(huge.find("number overflow") != std::string::npos);
}

TEST_CASE("out-of-range options are refused, naming the option", "[trace][bad-input]") {
  auto message = [](const TraceOptions& opt) {
    Result<Trace> t = read_trace(kWindowCsv, opt);
    REQUIRE(!t.ok());
    CHECK(t.status().code() == StatusCode::kInvalidArgument);
    REQUIRE(t.status().message().starts_with(kWindowCsv + ": "));
    return t.status().message().substr(kWindowCsv.size() + 2);
  };
  TraceOptions opt;
  opt.rate_scale = 0;
  CHECK(message(opt) == "option rate_scale must be a finite number > 0, got 0");
  opt.rate_scale = -2;
  CHECK(message(opt) == "option rate_scale must be a finite number > 0, got -2");
  opt.rate_scale = std::nan("");
  CHECK(message(opt) == "option rate_scale must be a finite number > 0, got nan");
  opt = {};
  opt.duration_s = 0;
  CHECK(message(opt) ==
        "option duration_s must be a number of seconds in (0, 1e11], or < 0 for the rest of the "
        "trace, got 0");
  opt.duration_s = 1e-8;
  CHECK(message(opt) == "option duration_s must be at least 1e-07 (one 100 ns tick), got 1e-08");
  opt = {};
  opt.start_offset_s = -1;
  CHECK(message(opt) == "option start_offset_s must be a number of seconds in [0, 1e11], got -1");
  opt = {};
  opt.time_shift_s = INFINITY;
  CHECK(message(opt) == "option time_shift_s must be a number of seconds in [-1e11, 1e11], got inf");
  opt = {};
  opt.start_offset_s = 100;
  CHECK(message(opt) ==
        "no requests in the window (start_offset_s 100, duration_s -1); the trace has 7 requests over 6.25 s");
  opt.start_offset_s = 6.25;  // one request left, at the offset: a zero-length span to rotate
  opt.time_shift_s = 0.5;
  CHECK(message(opt) ==
        "option time_shift_s needs a window longer than 0 s, but every kept request is at the "
        "same instant");
  opt.duration_s = 1;  // a window of its own: the shift moves the request
  Result<Trace> t = read_trace(kWindowCsv, opt);
  REQUIRE(t.ok());
  CHECK(arrivals(*t) == std::vector<double>{0.5});
  opt.duration_s = -1;
  opt.time_shift_s = 0;
  t = read_trace(kWindowCsv, opt);
  REQUIRE(t.ok());
  CHECK(arrivals(*t) == std::vector<double>{0});
}

TEST_CASE("skip_bad_lines skips and counts corrupt lines, never a bad header", "[trace][bad-input]") {
  TempDir dir;
  TraceOptions opt;
  opt.skip_bad_lines = true;
  const std::string path = dir.write("s.csv", kAzureHeader +
                                                  "2023-11-16 18:17:00,1,1\n"
                                                  "2023-11-16 18:17:01,x,1\n"  // corrupt
                                                  "2023-11-16 18:17:02,2,2\n"
                                                  "2023-11-16 18:16:59,3,3\n"  // out of order
                                                  "2023-11-16 18:17:03,4\n"    // short
                                                  "2023-11-16 18:17:04,5,5\n");
  Result<Trace> t = read_trace(path, opt);
  REQUIRE(t.ok());
  CHECK(t->skipped_lines == 3);
  CHECK(t->first_skipped == path + ":3: ContextTokens: expected an integer >= 1, got 'x'");
  CHECK(arrivals(*t) == std::vector<double>{0, 2, 4});
  CHECK(inputs(*t) == std::vector<std::int64_t>{1, 2, 5});

  opt.skip_bad_lines = false;
  t = read_trace(path, opt);
  REQUIRE(!t.ok());
  CHECK(t.status().message() == path + ":3: ContextTokens: expected an integer >= 1, got 'x'");

  opt.skip_bad_lines = true;
  const std::string jsonl = dir.write("s.jsonl",
                                      "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\n"
                                      "not json\n"
                                      "{\"timestamp\": 500, \"input_length\": 2, \"output_length\": 2}\n");
  t = read_trace(jsonl, opt);
  REQUIRE(t.ok());
  CHECK(t->skipped_lines == 1);
  CHECK(arrivals(*t) == std::vector<double>{0, 0.5});

  // The first valid request anchors the window, not a skipped one.
  const std::string late = dir.write("late.csv", kAzureHeader + "2023-11-16 18:17:00,x,1\n2023-11-16 18:17:10,1,1\n");
  t = read_trace(late, opt);
  REQUIRE(t.ok());
  CHECK(t->skipped_lines == 1);
  CHECK(arrivals(*t) == std::vector<double>{0});

  CHECK(error_for(dir, "all.csv", kAzureHeader + "a,1,1\nb,1,1\n", opt) ==
        ": no valid requests (2 corrupt lines skipped; first: " + dir.path() +
            "/all.csv:2: TIMESTAMP: expected a date-time like 2023-11-16 18:17:03.9799600 (up to 7 fractional "
            "digits, no zone), got 'a')");
  CHECK(error_for(dir, "hdr.csv", "TIMESTAMP,GeneratedTokens\n2023-11-16 18:17:00,1\n", opt) ==
        ":1: CSV header lacks column ContextTokens (needs TIMESTAMP, ContextTokens, GeneratedTokens; found "
        "'TIMESTAMP,GeneratedTokens')");
}

TEST_CASE("constant_rate spaces requests exactly", "[trace][synthetic]") {
  Trace t = constant_rate(1, 10, 2048, 15);  // the paper's offline load
  REQUIRE(t.requests.size() == 10);
  for (std::size_t k = 0; k < t.requests.size(); ++k) {
    CHECK(t.requests[k].arrival_s == static_cast<double>(k));
    CHECK(t.requests[k].input_tokens == 2048);
    CHECK(t.requests[k].output_tokens == 15);
  }
  CHECK(t.window_s == 10);
  CHECK(t.source == "constant_rate(1 req/s, 10 s, 2048 in, 15 out)");
  CHECK(arrivals(constant_rate(4, 2.5, 1, 1)) == std::vector<double>{0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.25});
  CHECK(constant_rate(3, 1, 1, 1).requests.size() == 3);
  CHECK(constant_rate(3, 1.0001, 1, 1).requests.size() == 4);
  CHECK(constant_rate(1, 0, 1, 1).requests.empty());
  // k / rate, not a running sum: the millionth arrival has no drift.
  Trace long_run = constant_rate(10, 100000, 1, 1);
  REQUIRE(long_run.requests.size() == 1000000);
  CHECK(long_run.requests.back().arrival_s == 99999.9);
}

TEST_CASE("poisson is reproducible by seed and has the asked rate", "[trace][synthetic]") {
  Trace a = poisson(1, 10000, 2048, 15, 42);
  Trace b = poisson(1, 10000, 2048, 15, 42);
  Trace c = poisson(1, 10000, 2048, 15, 43);
  CHECK(arrivals(a) == arrivals(b));
  CHECK(arrivals(a) != arrivals(c));
  REQUIRE(a.requests.size() > 1);
  CHECK(a.window_s == 10000);
  CHECK(a.source == "poisson(1 req/s, 10000 s, 2048 in, 15 out, seed 42)");
  CHECK(a.requests.front().input_tokens == 2048);
  CHECK(a.requests.back().output_tokens == 15);
  CHECK(std::is_sorted(a.requests.begin(), a.requests.end(),
                       [](const Request& x, const Request& y) { return x.arrival_s < y.arrival_s; }));
  CHECK(a.requests.front().arrival_s >= 0);
  CHECK(a.requests.back().arrival_s < 10000);
  for (const Trace* t : {&a, &c}) {
    const double rate = static_cast<double>(t->requests.size()) / 10000;
    CHECK(std::fabs(rate - 1) < 0.05);
  }
  Trace fast = poisson(3, 10000, 1, 1, 7);
  CHECK(std::fabs(static_cast<double>(fast.requests.size()) / 10000 / 3 - 1) < 0.05);
  // Exponential gaps: coefficient of variation 1 (a constant-rate stream has 0).
  std::vector<double> gaps;
  for (std::size_t i = 1; i < a.requests.size(); ++i)
    gaps.push_back(a.requests[i].arrival_s - a.requests[i - 1].arrival_s);
  const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / static_cast<double>(gaps.size());
  double var = 0;
  for (double g : gaps) var += (g - mean) * (g - mean);
  var /= static_cast<double>(gaps.size() - 1);
  CHECK(std::fabs(std::sqrt(var) / mean - 1) < 0.05);
}

// A stream cut at the measurement window keeps exactly the requests of the
// whole stream that arrive before the cut and counts the rest: a 1e9 s
// stream used to be built whole (a bare std::bad_alloc).
TEST_CASE("synthetic streams cut at the window count what they leave out", "[trace][synthetic]") {
  SECTION("constant rate: the same prefix, the rest counted arithmetically") {
    const Trace whole = constant_rate(3, 10, 1, 1);
    const Trace cut = constant_rate(3, 10, 1, 1, 1.0);  // k / 3 < 1: k = 0, 1, 2
    CHECK(arrivals(cut) == std::vector<double>{0, 1.0 / 3, 2.0 / 3});
    CHECK(cut.beyond_cut == 27);
    CHECK(cut.requests.size() + cut.beyond_cut == whole.requests.size());
    CHECK(cut.window_s == 10);                              // the stream's period, not the cut's
    CHECK(constant_rate(3, 10, 1, 1, 20).beyond_cut == 0);  // a cut after the end cuts nothing
    CHECK(constant_rate(3, 10, 1, 1, 20).requests.size() == 30);
    CHECK(constant_rate(3, 10, 1, 1).beyond_cut == 0);
    // Rounded boundaries: 0.1 * 30 is not 3 in binary.
    for (double rate : {0.1, 0.3, 7.0, 1e3 / 3})
      for (double at : {0.1, 1.0, 29.9, 30.0, 100.0 / 3}) {
        const Trace w = constant_rate(rate, 100, 1, 1), c = constant_rate(rate, 100, 1, 1, at);
        CHECK(c.requests.size() + c.beyond_cut == w.requests.size());
        const std::vector<double> all = arrivals(w);
        CHECK(arrivals(c) ==
              std::vector<double>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(c.requests.size())));
        if (!c.requests.empty()) CHECK(c.requests.back().arrival_s < at);
        if (c.requests.size() < w.requests.size()) CHECK(w.requests[c.requests.size()].arrival_s >= at);
      }
    // 2e10 requests in all, 600 in a 30 s window: generated in no time.
    const Trace huge = constant_rate(20, 1e9, 1, 1, 30);
    CHECK(huge.requests.size() == 600);
    CHECK(huge.beyond_cut == 19'999'999'400ull);
  }

  SECTION("poisson: the same prefix, the rest drawn and counted, or its expectation when huge") {
    const Trace whole = poisson(5, 1000, 1, 1, 42);
    const Trace cut = poisson(5, 1000, 1, 1, 42, 100);
    std::size_t before = 0;
    while (before < whole.requests.size() && whole.requests[before].arrival_s < 100) ++before;
    REQUIRE(cut.requests.size() == before);
    const std::vector<double> all = arrivals(whole);
    CHECK(arrivals(cut) == std::vector<double>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(before)));
    CHECK(cut.beyond_cut == whole.requests.size() - before);
    // 1e21 arrivals in all: the expectation, saturated at what a count holds.
    const Trace huge = poisson(1e9, 1e12, 1, 1, 7, 1e-6);
    CHECK(huge.requests.size() > 900);
    CHECK(huge.requests.size() < 1100);
    CHECK(huge.beyond_cut == std::numeric_limits<std::size_t>::max());
    const Trace big = poisson(1e6, 1e3, 1, 1, 7, 1e-3);  // 1e9 beyond: not drawn
    CHECK(big.beyond_cut == 999'999'000ull);
  }
}
