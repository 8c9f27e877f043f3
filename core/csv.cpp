module;
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

module slicesched.core.csv;
import slicesched.core.files;

namespace slicesched::csv {

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

void split_fields(std::string_view line, std::vector<std::string_view>& out) {
  out.clear();
  for (std::size_t start = 0;;) {
    const auto comma = line.find(',', start);
    out.push_back(trim(line.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) return;
    start = comma + 1;
  }
}

Result<std::string> read_text(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return NotFound(path.string() + ": is a directory, expected a CSV file");
  }
  if (Status s = refuse_special_file(path.string(), "a CSV file"); !s.ok()) return s;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return NotFound(path.string() + ": cannot open (" + std::strerror(errno) + ")");
  std::string text;
  char buf[1 << 16];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return NotFound(path.string() + ": read error");
  return text;
}

namespace {

// A field in double quotes: this reader splits at every comma and keeps
// quotes, so a quoted name matched nothing and its rows were passed over.
std::optional<std::size_t> quoted(const std::vector<std::string_view>& fields) {
  for (std::size_t i = 0; i < fields.size(); ++i)
    if (fields[i].starts_with('"')) return i;
  return std::nullopt;
}

std::string quoted_message(const std::vector<std::string_view>& fields, std::size_t i) {
  return "field " + std::to_string(i + 1) + " (" + std::string(fields[i].substr(0, 40)) +
         ") is in quotes: expected plain comma-separated values, without quoting";
}

}  // namespace

Result<CsvReader> CsvReader::open(std::string_view text, std::string_view source) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 byte-order mark, as spreadsheets write
  CsvReader r(text, std::string(source));
  std::string_view line;
  while (r.next_line(line)) {
    if (trim(line).empty()) continue;
    std::vector<std::string_view> fields;
    split_fields(line, fields);
    if (auto q = quoted(fields)) return InvalidArgument(r.at(r.line_, quoted_message(fields, *q)));
    for (std::size_t i = 0; i < fields.size(); ++i)
      for (std::size_t j = i + 1; j < fields.size(); ++j)
        if (!fields[i].empty() && fields[i] == fields[j])
          return InvalidArgument(r.at(r.line_, "column '" + std::string(fields[i]) + "' appears twice (fields " +
                                                   std::to_string(i + 1) + " and " + std::to_string(j + 1) +
                                                   "): expected each column once"));
    r.header_.assign(fields.begin(), fields.end());
    r.header_line_ = r.line_;
    return r;
  }
  return InvalidArgument(r.at(1, "empty file, expected a CSV header line"));
}

Result<std::size_t> CsvReader::column(std::string_view name) const {
  for (std::size_t i = 0; i < header_.size(); ++i) {
    if (header_[i] == name) return i;
  }
  std::string found;
  for (std::size_t i = 0; i < header_.size(); ++i) found += (i == 0 ? "" : ",") + header_[i];
  return InvalidArgument(at(header_line_, "missing column '" + std::string(name) + "' (header has: " + found + ")"));
}

Result<std::vector<std::size_t>> CsvReader::columns(std::initializer_list<std::string_view> names) const {
  std::vector<std::size_t> out;
  for (std::string_view name : names) {
    auto c = column(name);
    if (!c.ok()) return c.status();
    out.push_back(*c);
  }
  return out;
}

Result<bool> CsvReader::next(CsvRow& row) {
  std::string_view line;
  while (next_line(line)) {
    if (trim(line).empty()) continue;
    row.line = line_;
    split_fields(line, row.fields);
    if (auto q = quoted(row.fields)) return InvalidArgument(at(line_, quoted_message(row.fields, *q)));
    if (row.fields.size() != header_.size()) {
      return InvalidArgument(at(line_, "expected " + std::to_string(header_.size()) +
                                           " fields as in the header, found " + std::to_string(row.fields.size())));
    }
    return true;
  }
  return false;
}

Result<std::int64_t> CsvReader::integer(const CsvRow& row, std::size_t col, std::int64_t min) const {
  const std::string_view f = row.fields[col];
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
  if (f.empty() || ec != std::errc() || end != f.data() + f.size() || v < min) {
    // (a count past 2^63 - 1 overflows: saying ">= 1" of it misled)
    const std::string range = ec == std::errc::result_out_of_range
                                  ? "an integer in [" + std::to_string(min) + ", 9223372036854775807]"
                                  : "an integer >= " + std::to_string(min);
    return InvalidArgument(bad_field(row, col, range));
  }
  return v;
}

Result<double> CsvReader::number(const CsvRow& row, std::size_t col, bool positive) const {
  const std::string_view f = row.fields[col];
  double v = 0;
  const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
  if (f.empty() || ec != std::errc() || end != f.data() + f.size() || !std::isfinite(v) || v < 0 ||
      (positive && v == 0)) {
    return InvalidArgument(bad_field(row, col, positive ? "a positive number" : "a non-negative number"));
  }
  return v;
}

std::string CsvReader::at(int line, std::string_view message) const {
  return source_ + ":" + std::to_string(line) + ": " + std::string(message);
}

std::string CsvReader::at(std::string_view message) const { return source_ + ": " + std::string(message); }

bool CsvReader::next_line(std::string_view& line) {
  if (pos_ >= text_.size()) return false;
  const auto nl = text_.find('\n', pos_);
  const auto end = nl == std::string_view::npos ? text_.size() : nl;
  line = text_.substr(pos_, end - pos_);
  pos_ = end + 1;
  ++line_;
  return true;
}

std::string CsvReader::bad_field(const CsvRow& row, std::size_t col, std::string_view expected) const {
  return at(row.line, "column '" + header_[col] + "' is '" + std::string(row.fields[col]) + "', expected " +
                          std::string(expected));
}

}  // namespace slicesched::csv
