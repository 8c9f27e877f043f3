#include <catch2/catch.hpp>
#include <string>

import slicesched.core.shape;

using namespace slicesched;

TEST_CASE("expressions evaluate under a binding", "[shape]") {
  DimTable dims;
  auto e = Expr::parse("b*m*n*k + 2*max(tokens, 1)", dims);
  REQUIRE(e.ok());
  Binding bind(dims.size());
  bind.set(static_cast<DimId>(dims.find("b")), 2);
  bind.set(static_cast<DimId>(dims.find("m")), 3);
  bind.set(static_cast<DimId>(dims.find("n")), 5);
  bind.set(static_cast<DimId>(dims.find("k")), 7);
  bind.set(static_cast<DimId>(dims.find("tokens")), 0);
  auto v = e->eval(bind, dims);
  REQUIRE(v.ok());
  CHECK(v.value() == 2 * 3 * 5 * 7 + 2 * 1);
  bind.set(static_cast<DimId>(dims.find("tokens")), 10);
  CHECK(e->eval(bind, dims).value() == 210 + 20);
}

TEST_CASE("expressions built in code match parsed ones", "[shape]") {
  DimTable dims;
  Expr b = Expr::dim(dims.intern("batch"));
  Expr c = Expr::dim(dims.intern("context"));
  Expr built = b * c + Expr::constant(3);
  Binding bind(dims.size());
  bind.set(0, 4);
  bind.set(1, 100);
  CHECK(built.eval(bind, dims).value() == 403);
  CHECK(built.to_string(dims) == "(batch*context + 3)");
  // Printing keeps association (so overflow happens where it did) without
  // nesting a chain: found by tests/fuzz/shape_fuzz.
  for (const char* text : {"a + b + c + d", "a + (b + c)", "a*(b*c)", "(a + b)*c*d", "max(a + 1, b*(c + d))"}) {
    INFO(text);
    DimTable d2;
    auto e = Expr::parse(text, d2);
    REQUIRE(e.ok());
    DimTable d3;
    auto again = Expr::parse(e->to_string(d2), d3);
    REQUIRE(again.ok());
    CHECK(again->to_string(d3) == e->to_string(d2));
  }
  DimTable d4;
  CHECK(Expr::parse("a + b + c + d", d4)->to_string(d4) == "(a + b + c + d)");
  CHECK(Expr::parse("a + (b + c)", d4)->to_string(d4) == "(a + (b + c))");
  CHECK(Expr::parse("a*(b*c)", d4)->to_string(d4) == "a*(b*c)");
  CHECK(!built.is_constant());
  CHECK(Expr::constant(5).is_constant());
}

TEST_CASE("evaluation errors name the dim", "[shape][bad-input]") {
  DimTable dims;
  auto e = Expr::parse("batch * context", dims).value();
  Binding bind(dims.size());
  bind.set(0, 4);
  auto unbound = e.eval(bind, dims);
  REQUIRE(!unbound.ok());
  CHECK(unbound.status().message() == "dim 'context' is unbound");
  bind.set(1, -3);
  auto negative = e.eval(bind, dims);
  REQUIRE(!negative.ok());
  CHECK(negative.status().message() == "dim 'context' is negative (-3)");
  bind.set(1, 1ll << 62);
  auto overflow = e.eval(bind, dims);
  REQUIRE(!overflow.ok());
  CHECK(overflow.status().message().find("overflows") != std::string::npos);
}

TEST_CASE("parse errors say where and what", "[shape][bad-input]") {
  DimTable dims;
  struct Case {
    const char* text;
    const char* expect;
  };
  for (auto [text, expect] :
       {Case{"a +", "at column 4: expected a number"}, Case{"max(a b)", "expected ','"}, Case{"(a * b", "expected ')'"},
        Case{"a - b", "unexpected '-'"}, Case{"99999999999999999999", "overflows"}}) {
    auto e = Expr::parse(text, dims);
    INFO(text);
    REQUIRE(!e.ok());
    CHECK(e.status().message().find(expect) != std::string::npos);
  }
  // Nesting is bounded, so no input overflows the parser's stack (found by
  // tests/fuzz/shape_fuzz with 100,000 '('); 64 levels still parse.
  const std::string deep = std::string(100000, '(') + "a" + std::string(100000, ')');
  auto too_deep = Expr::parse(deep, dims);
  REQUIRE(!too_deep.ok());
  CHECK(too_deep.status().message().find("parentheses nested deeper than 64") != std::string::npos);
  std::string maxes = "a";
  for (int i = 0; i < 1000; ++i) maxes = "max(" + maxes + ",1)";
  CHECK(!Expr::parse(maxes, dims).ok());
  auto fine = Expr::parse(std::string(64, '(') + "a" + std::string(64, ')'), dims);
  CHECK(fine.ok());
}
