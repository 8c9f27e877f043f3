#include <catch2/catch.hpp>
#include <optional>
#include <string>

import slicesched.core.graph;
import slicesched.core.shape;

using namespace slicesched;

namespace {

TensorSpec vec(TemplateBuilder& b, const char* expr, DType t = DType::kBF16) { return {{b.expr(expr).value()}, t}; }

std::string build_error(TemplateBuilder&& b) {
  auto t = std::move(b).build();
  REQUIRE(!t.ok());
  return t.status().message();
}

}  // namespace

TEST_CASE("a valid template is stored in topological order", "[graph]") {
  TemplateBuilder b("mlp");
  b.op("down").input("up").output(vec(b, "tokens*4096"));
  b.op("up").input("x").output(vec(b, "tokens*14336"));
  b.port("x", vec(b, "tokens*4096"));
  auto t = std::move(b).build();
  REQUIRE(t.ok());
  REQUIRE(t->ops().size() == 2);
  CHECK(t->ops()[0].name == "up");
  CHECK(t->ops()[1].name == "down");
  CHECK(t->ops()[1].inputs[0].index == 0);
  CHECK(t->ops()[0].inputs[0].is_port);
}

TEST_CASE("template validation refuses bad graphs, naming template and op", "[graph][bad-input]") {
  SECTION("cycle") {
    TemplateBuilder b("loop");
    b.op("a").input("c").output(vec(b, "1"));
    b.op("b").input("a").output(vec(b, "1"));
    b.op("c").input("b").output(vec(b, "1"));
    b.op("free").output(vec(b, "1"));
    CHECK(build_error(std::move(b)) == "template 'loop' op 'a': lies on a cycle");
  }
  SECTION("self loop") {
    TemplateBuilder b("self");
    b.op("a").input("a").output(vec(b, "1"));
    CHECK(build_error(std::move(b)) == "template 'self' op 'a': takes its own output as input (cycle)");
  }
  SECTION("dangling input") {
    TemplateBuilder b("dangle");
    b.op("a").input("ghost").output(vec(b, "1"));
    CHECK(build_error(std::move(b)) == "template 'dangle' op 'a': input 'ghost' names no operator or port");
  }
  SECTION("duplicate names") {
    TemplateBuilder b("dup");
    b.op("a").output(vec(b, "1"));
    b.op("a").output(vec(b, "1"));
    CHECK(build_error(std::move(b)) == "template 'dup': duplicate name 'a'");
  }
  SECTION("rank mismatch") {
    TemplateBuilder b("rank");
    b.op("a").output(vec(b, "tokens"));
    b.op("b").input("a", {{b.dim("tokens"), b.dim("hidden")}, DType::kBF16}).output(vec(b, "1"));
    CHECK(build_error(std::move(b)) == "template 'rank' op 'b': input 'a' expects rank 2 but 'a' has rank 1");
  }
  SECTION("dtype mismatch") {
    TemplateBuilder b("dtype");
    b.op("a").output(vec(b, "tokens", DType::kI64));
    b.op("b").input("a", vec(b, "tokens", DType::kBF16)).output(vec(b, "1"));
    CHECK(build_error(std::move(b)) == "template 'dtype' op 'b': input 'a' expects bf16 but 'a' is i64");
  }
  SECTION("too many features and wrong prior size") {
    TemplateBuilder b("feat");
    std::vector<Expr> nine(9, Expr::constant(1));
    b.op("a").output(vec(b, "1")).features(nine);
    CHECK(build_error(std::move(b)) == "template 'feat' op 'a': has 9 features, at most 8 are supported");
    TemplateBuilder c("prior");
    c.op("a").output(vec(c, "1")).features({Expr::constant(1)}).prior({1.0, 2.0});
    CHECK(build_error(std::move(c)) == "template 'prior' op 'a': prior has 2 coefficients for 1 features");
  }
  SECTION("empty") { CHECK(build_error(TemplateBuilder("empty")) == "template 'empty': has no operators"); }
}

TEST_CASE("the registry refuses duplicates and assigns operator kinds", "[graph]") {
  TemplateRegistry reg;
  auto make = [](const char* name) {
    TemplateBuilder b(name);
    b.op("x").output({{Expr::constant(1)}, DType::kI8});
    b.op("y").input("x").output({{Expr::constant(1)}, DType::kI8});
    return std::move(b).build().value();
  };
  auto a = reg.add(make("prefill"));
  auto b = reg.add(make("decode"));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(reg.op_kind_count() == 4);
  CHECK(reg.kind_name(reg.get(b.value()).ops()[1].kind) == "decode/y");
  auto dup = reg.add(make("prefill"));
  REQUIRE(!dup.ok());
  CHECK(dup.status().message() == "template 'prefill' is already registered");
  CHECK(reg.find("decode") == b.value());
  CHECK(!reg.find("train"));
}
