module;
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

module slicesched.core.shape;

namespace slicesched {

DimId DimTable::intern(std::string_view name) {
  int found = find(name);
  if (found >= 0) return static_cast<DimId>(found);
  names_.emplace_back(name);
  return static_cast<DimId>(names_.size() - 1);
}

int DimTable::find(std::string_view name) const {
  for (std::size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int>(i);
  return -1;
}

Expr::Expr() : prog_{{Kind::kConst, 0}} {}

Expr Expr::constant(std::int64_t v) {
  Expr e;
  e.prog_[0].value = v;
  return e;
}

Expr Expr::dim(DimId id) {
  Expr e;
  e.prog_ = {{Kind::kDim, id}};
  return e;
}

Expr Expr::combine(const Expr& a, const Expr& b, Kind k) {
  Expr e;
  e.prog_.reserve(a.prog_.size() + b.prog_.size() + 1);
  e.prog_ = a.prog_;
  e.prog_.insert(e.prog_.end(), b.prog_.begin(), b.prog_.end());
  e.prog_.push_back({k, 0});
  return e;
}

Expr operator+(const Expr& a, const Expr& b) { return Expr::combine(a, b, Expr::Kind::kAdd); }
Expr operator*(const Expr& a, const Expr& b) { return Expr::combine(a, b, Expr::Kind::kMul); }
Expr max(const Expr& a, const Expr& b) { return Expr::combine(a, b, Expr::Kind::kMax); }

bool Expr::is_constant() const {
  for (const Node& n : prog_)
    if (n.kind == Kind::kDim) return false;
  return true;
}

Result<std::int64_t> Expr::eval(const Binding& binding, const DimTable& dims) const {
  // Expressions are tiny; a fixed stack avoids allocation on this hot path.
  std::int64_t stack[64];
  int top = 0;
  for (const Node& n : prog_) {
    switch (n.kind) {
      case Kind::kConst:
        stack[top++] = n.value;
        break;
      case Kind::kDim: {
        auto id = static_cast<std::size_t>(n.value);
        std::int64_t v = id < binding.values.size() ? binding.values[id] : Binding::kUnbound;
        if (v == Binding::kUnbound)
          return InvalidArgument("dim '" + dims.name(static_cast<DimId>(id)) + "' is unbound");
        if (v < 0)
          return InvalidArgument("dim '" + dims.name(static_cast<DimId>(id)) + "' is negative (" + std::to_string(v) +
                                 ")");
        stack[top++] = v;
        break;
      }
      case Kind::kAdd:
      case Kind::kMul:
      case Kind::kMax: {
        std::int64_t b = stack[--top];
        std::int64_t a = stack[--top];
        std::int64_t r = 0;
        bool overflow = false;
        if (n.kind == Kind::kAdd) overflow = __builtin_add_overflow(a, b, &r);
        if (n.kind == Kind::kMul) overflow = __builtin_mul_overflow(a, b, &r);
        if (n.kind == Kind::kMax) r = a > b ? a : b;
        if (overflow) return InvalidArgument("expression " + to_string(dims) + " overflows 64 bits");
        stack[top++] = r;
        break;
      }
    }
    if (top >= 63) return InvalidArgument("expression " + to_string(dims) + " is too deep");
  }
  return stack[0];
}

// Prints what parses back to the same program: a sum is parenthesized (as
// it always was, so feature names in calibration profiles stay the same),
// a left-nested chain of sums prints flat ("(a + b + c)", not
// "((a + b) + c)"), and a right operand of the same operator keeps its own
// parentheses, so association (and with it where a 64-bit overflow can
// happen) survives the round trip. Nesting in the text then follows the
// expression's own, which the parser bounds.
std::string Expr::to_string(const DimTable& dims) const {
  struct Text {
    std::string s;  // as printed (a sum includes its parentheses)
    int prec;       // 1 sum, 2 product, 3 atom or max
  };
  std::vector<Text> stack;
  for (const Node& n : prog_) {
    switch (n.kind) {
      case Kind::kConst:
        stack.push_back({std::to_string(n.value), 3});
        break;
      case Kind::kDim:
        stack.push_back({dims.name(static_cast<DimId>(n.value)), 3});
        break;
      default: {
        Text b = std::move(stack.back());
        stack.pop_back();
        Text a = std::move(stack.back());
        stack.pop_back();
        if (n.kind == Kind::kMax) {
          stack.push_back({"max(" + a.s + ", " + b.s + ")", 3});
        } else if (n.kind == Kind::kAdd) {
          // A sum on the left continues the chain without its parentheses.
          const std::string left = a.prec == 1 ? a.s.substr(1, a.s.size() - 2) : a.s;
          stack.push_back({"(" + left + " + " + b.s + ")", 1});
        } else {
          const std::string right = b.prec == 2 ? "(" + b.s + ")" : b.s;
          stack.push_back({a.s + "*" + right, 2});
        }
      }
    }
  }
  return stack.empty() ? "0" : stack.back().s;
}

namespace {

// Recursive-descent parser over the grammar in the header.
class Parser {
 public:
  Parser(std::string_view text, DimTable& dims) : text_(text), dims_(dims) {}

  Result<Expr> parse() {
    auto e = sum();
    if (!e.ok()) return e;
    skip_space();
    if (pos_ != text_.size()) return error("unexpected '" + std::string(1, text_[pos_]) + "'");
    return e;
  }

 private:
  Result<Expr> sum() {
    auto lhs = prod();
    if (!lhs.ok()) return lhs;
    Expr acc = std::move(lhs).value();
    while (accept('+')) {
      auto rhs = prod();
      if (!rhs.ok()) return rhs;
      acc = acc + rhs.value();
    }
    return acc;
  }

  Result<Expr> prod() {
    auto lhs = atom();
    if (!lhs.ok()) return lhs;
    Expr acc = std::move(lhs).value();
    while (accept('*')) {
      auto rhs = atom();
      if (!rhs.ok()) return rhs;
      acc = acc * rhs.value();
    }
    return acc;
  }

  Result<Expr> atom() {
    skip_space();
    if (pos_ >= text_.size()) return error("expected a number, a dim name, max(...) or '('");
    char c = text_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      std::int64_t v = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, text_[pos_] - '0', &v))
          return error("integer literal overflows 64 bits");
        ++pos_;
      }
      return Expr::constant(v);
    }
    if (c == '(') {
      ++pos_;
      if (++depth_ > kMaxDepth) return error("parentheses nested deeper than " + std::to_string(kMaxDepth));
      auto e = sum();
      --depth_;
      if (!e.ok()) return e;
      if (!accept(')')) return error("expected ')'");
      return e;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t start = pos_;
      while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
        ++pos_;
      std::string_view name = text_.substr(start, pos_ - start);
      if (name == "max") {
        if (!accept('(')) return error("expected '(' after max");
        if (++depth_ > kMaxDepth) return error("parentheses nested deeper than " + std::to_string(kMaxDepth));
        auto a = sum();
        if (!a.ok()) return a;
        if (!accept(',')) return error("expected ',' in max(a, b)");
        auto b = sum();
        --depth_;
        if (!b.ok()) return b;
        if (!accept(')')) return error("expected ')' closing max(");
        return max(a.value(), b.value());
      }
      return Expr::dim(dims_.intern(name));
    }
    return error("unexpected '" + std::string(1, c) + "'");
  }

  bool accept(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  // Nesting is bounded so a hostile expression cannot overflow the stack
  // (found by tests/fuzz/shape_fuzz); real shapes nest two or three deep.
  static constexpr int kMaxDepth = 64;
  int depth_ = 0;

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  Status error(const std::string& what) const {
    return InvalidArgument("expression '" + std::string(text_) + "' at column " + std::to_string(pos_ + 1) + ": " +
                           what);
  }

  std::string_view text_;
  DimTable& dims_;
  std::size_t pos_ = 0;
};

}  // namespace

Result<Expr> Expr::parse(std::string_view text, DimTable& dims) { return Parser(text, dims).parse(); }

}  // namespace slicesched
