// The one CSV reader: plain comma-separated fields (the measured profiles
// and the traces never quote), a header row, and errors that name the file,
// the 1-based line and what was expected, on one line. Used by the
// simulator's profiles, hardware's profile rows and the Azure traces.
//
// Values and a reader over borrowed text: a reader is not thread-safe, the
// free functions are.
module;
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

export module slicesched.core.csv;
import slicesched.core.status;

export namespace slicesched::csv {

// A field without the blanks and carriage return around it.
std::string_view trim(std::string_view s);

// The comma-separated fields of one line, trimmed, into `out` (cleared
// first); views into `line`. The tables read here never quote.
void split_fields(std::string_view line, std::vector<std::string_view>& out);

// Whole file as text, or "path: cannot open (reason)".
Result<std::string> read_text(const std::filesystem::path& path);

struct CsvRow {
  int line = 0;  // 1-based
  std::vector<std::string_view> fields;
};

// Reads rows of `text` one at a time; views point into `text`, which must
// outlive the reader.
class CsvReader {
 public:
  // Reads the header (the first non-blank line). An empty text is an error.
  static Result<CsvReader> open(std::string_view text, std::string_view source);

  // Index of the column named `name`, or "source:L: missing column 'name'
  // (header: ...)".
  Result<std::size_t> column(std::string_view name) const;
  // The indices of `names`, in their order; the first one missing fails as
  // column() does.
  Result<std::vector<std::size_t>> columns(std::initializer_list<std::string_view> names) const;

  // The next non-blank row into `row`; false at the end. A row with another
  // field count than the header is an error.
  Result<bool> next(CsvRow& row);

  // Field `col` of `row` as an integer >= `min`, or a finite number >= 0
  // (> 0 for positive); otherwise "source:L: column 'name' is 'text',
  // expected ...".
  Result<std::int64_t> integer(const CsvRow& row, std::size_t col, std::int64_t min) const;
  Result<double> non_negative(const CsvRow& row, std::size_t col) const { return number(row, col, false); }
  Result<double> positive(const CsvRow& row, std::size_t col) const { return number(row, col, true); }

  // The header's column names, in order.
  const std::vector<std::string>& header() const { return header_; }
  int header_line() const { return header_line_; }

  // "source:L: message" / "source: message", for checks made by the caller.
  std::string at(int line, std::string_view message) const;
  std::string at(std::string_view message) const;
  // "source:L: column 'name' is 'text', expected <expected>", for a
  // caller's own range check of a field.
  std::string bad_field(const CsvRow& row, std::size_t col, std::string_view expected) const;

 private:
  CsvReader(std::string_view text, std::string source) : text_(text), source_(std::move(source)) {}
  bool next_line(std::string_view& line);
  Result<double> number(const CsvRow& row, std::size_t col, bool positive) const;

  std::string_view text_;
  std::size_t pos_ = 0;
  int line_ = 0;
  std::string source_;
  int header_line_ = 0;
  std::vector<std::string> header_;
};

}  // namespace slicesched::csv
