// Symbolic shapes: named dimensions and integer expressions over them.
//
// A graph template declares its tensor shapes, footprints and cost features
// as expressions over named dims (`batch`, `tokens`, `context`, ...). An
// instance binds every dim to a non-negative integer and evaluates them.
module;
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

export module slicesched.core.shape;
import slicesched.core.status;

export namespace slicesched {

using DimId = std::uint16_t;

// Interned dim names of one template. Not thread-safe for writers; a
// registered template's table is immutable.
class DimTable {
 public:
  // Returns the id of `name`, adding it if new.
  DimId intern(std::string_view name);
  // Returns the id of `name` or -1 when the table has no such dim.
  int find(std::string_view name) const;
  const std::string& name(DimId id) const { return names_[id]; }
  std::size_t size() const { return names_.size(); }

 private:
  std::vector<std::string> names_;
};

// Concrete values for a template's dims, indexed by DimId; kUnbound marks a
// dim the instance did not give.
struct Binding {
  static constexpr std::int64_t kUnbound = INT64_MIN;
  std::vector<std::int64_t> values;

  explicit Binding(std::size_t dims = 0) : values(dims, kUnbound) {}
  void set(DimId id, std::int64_t v) {
    if (values.size() <= id) values.resize(id + 1u, kUnbound);
    values[id] = v;
  }
};

// An integer expression over dims: constants, dims, +, *, max. Stored as a
// small postfix program, so copying and evaluating are cheap and allocation
// free beyond the program vector itself.
class Expr {
 public:
  Expr();  // the constant 0
  static Expr constant(std::int64_t v);
  static Expr dim(DimId id);
  // Parses e.g. "b*m*n*k + 2*max(tokens, 1)"; names are interned into `dims`.
  // Grammar: sum := prod ('+' prod)*; prod := atom ('*' atom)*;
  //          atom := integer | name | max '(' sum ',' sum ')' | '(' sum ')'.
  static Result<Expr> parse(std::string_view text, DimTable& dims);

  friend Expr operator+(const Expr& a, const Expr& b);
  friend Expr operator*(const Expr& a, const Expr& b);
  friend Expr max(const Expr& a, const Expr& b);

  // Evaluates under `binding`. Fails naming the dim when it is unbound or
  // negative, or when the value overflows 64 bits; `dims` gives the names.
  Result<std::int64_t> eval(const Binding& binding, const DimTable& dims) const;
  // True when the expression mentions no dim.
  bool is_constant() const;
  std::string to_string(const DimTable& dims) const;

 private:
  enum class Kind : std::uint8_t { kConst, kDim, kAdd, kMul, kMax };
  struct Node {
    Kind kind;
    std::int64_t value;  // constant or dim id
  };
  static Expr combine(const Expr& a, const Expr& b, Kind k);
  std::vector<Node> prog_;
};

// A tensor shape: one expression per axis.
using Shape = std::vector<Expr>;

}  // namespace slicesched
