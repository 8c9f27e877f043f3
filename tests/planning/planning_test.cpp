// Capacity planning logic: the sweep grid and its errors, shards, rows and
// their files, merging shards, objectives, and plan's bisection.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

import slicesched.planning.grid;
import slicesched.planning.rows;
import slicesched.planning.search;
import slicesched.core.status;

using namespace slicesched;
using namespace slicesched::planning;

namespace {

SweepAxis axis(const std::string& arg) {
  auto a = parse_axis(arg);
  REQUIRE(a.ok());
  return a.value();
}

std::string error_of(const std::string& arg) {
  auto a = parse_axis(arg);
  REQUIRE_FALSE(a.ok());
  return a.status().message();
}

SweepTable table_of(const std::vector<SweepAxis>& axes, const std::vector<SweepPoint>& points) {
  SweepTable t;
  t.config = "c.toml";
  t.config_hash = fnv1a64_hex("config bytes");
  t.seed = 3;
  t.axes = axes;
  t.policies = {"A", "B"};
  t.points_total = expand(axes).size();
  for (const auto& p : points)
    for (const std::string policy : {"A", "B"}) {
      nlohmann::json e;
      e["request_throughput"] = 1.5 * static_cast<double>(p.index) + (policy == "B" ? 0.25 : 0);
      e["token_throughput"] = 100.0 / 3.0;
      e["done"] = 1;
      t.rows.push_back(make_row(p, policy, e));
    }
  return t;
}

}  // namespace

TEST_CASE("sweep axes: names, values and errors", "[planning]") {
  const SweepAxis a = axis("tenants.offline0.stream.constant_rate=1,2, 4");
  CHECK(a.name == "constant_rate");
  CHECK(a.key == "tenants.offline0.stream.constant_rate");
  CHECK(a.values == std::vector<std::string>{"1", "2", "4"});
  CHECK(axis("cluster.accelerators[0].count=4,8").name == "count");
  CHECK(axis("gpus:cluster.accelerators[0].count=4").name == "gpus");
  // Commas inside arrays, tables and quotes do not split.
  CHECK(axis("k=[1, 2],\"a,b\",{ x = 1, y = 2 }").values ==
        std::vector<std::string>{"[1, 2]", "\"a,b\"", "{ x = 1, y = 2 }"});
  CHECK(error_of("tenants.x.stream.rate").find("expected [NAME:]KEY=V1,V2") != std::string::npos);
  CHECK(error_of("=1,2").find("empty KEY") != std::string::npos);
  CHECK(error_of("k=1,,2").find("empty value") != std::string::npos);
  CHECK(error_of("k=1,2,1") == "--set k=1,2,1: value '1' is listed twice");
  CHECK(error_of("k=5,5.0") == "--set k=5,5.0: values '5' and '5.0' are one number, listed twice");
  CHECK(error_of("k=1000,2,1e3") == "--set k=1000,2,1e3: values '1000' and '1e3' are one number, listed twice");
  CHECK(error_of(":k=1").find("empty NAME") != std::string::npos);
  const Status clash = check_axes({axis("a.count=1"), axis("b.count=2")});
  REQUIRE_FALSE(clash.ok());
  CHECK(clash.message().find("a second axis named 'count'") != std::string::npos);
  CHECK_FALSE(check_axes({axis("a=1,2,3"), axis("b=1,2,3")}, 8).ok());
  CHECK(check_axes({axis("a=1,2,3"), axis("b=1,2,3")}, 9).ok());
  // Two axes that set one value (the later won at every point, and the rows
  // were labelled with values that never ran), however the key is written.
  struct Case {
    const char *a, *b;
    bool same;
  };
  for (const Case& c :
       {Case{"duration_s", "duration_s", true},
        Case{"cluster.accelerators[0].count", "cluster.accelerators.0.count", true},
        Case{"tenants.*.stream.rate_scale", "tenants.online0.stream.rate_scale", true},
        Case{"tenants.offline0.lanes", "tenants.online0.lanes", false},
        Case{"cluster.accelerators[0].count", "cluster.accelerators[1].count", false}, Case{"a.b", "a.b.c", false}}) {
    CAPTURE(c.a, c.b);
    CHECK(same_setting(c.a, c.b) == c.same);
    // Only a wildcard over a named element sets more than the other key.
    CHECK(sets_more_than(c.a, c.b) == (std::string(c.a).find('*') != std::string::npos && c.same));
    CHECK_FALSE(sets_more_than(c.b, c.a));
    const Status s = check_axes({axis(std::string("x:") + c.a + "=1"), axis(std::string("y:") + c.b + "=2")});
    CHECK(s.ok() == !c.same);
    if (c.same) CHECK(s.message().find("sets what axis 'x' (" + std::string(c.a) + ") sets") != std::string::npos);
  }
}

TEST_CASE("sweep grid: every combination, last axis fastest, shards partition it", "[planning]") {
  const std::vector<SweepAxis> axes = {axis("a=1,2"), axis("b=x,y,z")};
  const auto grid = expand(axes);
  REQUIRE(grid.size() == 6);
  const std::vector<std::vector<std::string>> want = {{"1", "x"}, {"1", "y"}, {"1", "z"},
                                                      {"2", "x"}, {"2", "y"}, {"2", "z"}};
  for (std::size_t i = 0; i < grid.size(); ++i) {
    CHECK(grid[i].index == i);
    CHECK(grid[i].values == want[i]);
  }
  CHECK(expand({}).size() == 1);
  const auto o = overrides(axes, grid[4]);
  REQUIRE(o.size() == 2);
  CHECK((o[1].key == "b" && o[1].value == "y"));

  std::vector<int> seen(grid.size(), 0);
  for (std::size_t i = 0; i < 4; ++i)
    for (const auto& p : select(grid, {i, 4})) ++seen[p.index];
  CHECK(seen == std::vector<int>(grid.size(), 1));
  CHECK(parse_shard("1/4").ok());
  CHECK(parse_shard("1/4").value().count == 4);
  for (const std::string bad : {"4/4", "1", "-1/2", "a/b", "0/0", "1/"}) CHECK_FALSE(parse_shard(bad).ok());
}

TEST_CASE("sweep rows: stable text, JSON round trip, shards merge to the whole", "[planning]") {
  const std::vector<SweepAxis> axes = {axis("rate=1,2,4"), axis("policy_name:k=\"s\"")};
  const auto grid = expand(axes);
  const SweepTable whole = table_of(axes, grid);
  const std::string csv = to_csv(whole);
  CHECK(csv.rfind("rate,policy_name,policy,request_throughput,token_throughput,", 0) == 0);
  // Display drops TOML quotes; integral figures print as integers, others with six decimals.
  CHECK(csv.find("\n2,s,B,1.750000,33.333333,") != std::string::npos);
  CHECK(csv.find(",1,") != std::string::npos);

  auto back = from_json(to_json(whole), "w.json");
  REQUIRE(back.ok());
  CHECK(to_csv(back.value()) == csv);
  // A figure n/a (null, as sweep writes it) reads back as NaN; anything
  // else that is not a number is refused, naming the point.
  {
    nlohmann::json j = to_json(whole);
    j["rows"][0]["figures"][0] = nullptr;
    auto na = from_json(j, "na.json");
    REQUIRE(na.ok());
    CHECK(std::isnan(na.value().rows[0].figures[0]));
    j["rows"][0]["figures"][0] = "1";
    auto bad = from_json(j, "bad.json");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.status().message().find("expected a number or null (n/a)") != std::string::npos);
  }

  std::vector<SweepTable> shards;
  for (std::size_t i = 0; i < 2; ++i) {
    SweepTable s = table_of(axes, select(grid, {i, 2}));
    s.shard = Shard{i, 2};
    shards.push_back(s);
  }
  auto merged = merge({shards[1], shards[0]}, {"b", "a"});
  REQUIRE(merged.ok());
  CHECK(to_csv(merged.value()) == csv);
  CHECK(to_json(merged.value()) == to_json(whole));

  auto missing = merge({shards[0]}, {"a"});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("1 of 3 points are missing (first: 1)") != std::string::npos);
  auto twice = merge({shards[0], shards[0], shards[1]}, {"a", "a2", "b"});
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.status().message().find("in more than one shard (a2)") != std::string::npos);
  SweepTable other = shards[1];
  other.seed = 4;
  auto foreign = merge({shards[0], other}, {"a", "b"});
  REQUIRE_FALSE(foreign.ok());
  CHECK(foreign.status().message().find("b is from another sweep than a") != std::string::npos);
  CHECK_FALSE(from_json(nlohmann::json{{"format", "x"}}, "x.json").ok());

  // A shard edited or mixed up by hand: named, never merged.
  auto error_of_json = [](const nlohmann::json& j) {
    auto t = from_json(j, "s.json");
    REQUIRE_FALSE(t.ok());
    return t.status().message();
  };
  nlohmann::json ghost = to_json(whole);
  ghost["rows"][1]["policy"] = "Ghost";
  CHECK(error_of_json(ghost) == "s.json: a row of point 0 names policy 'Ghost', which the sweep did not run");
  nlohmann::json values = to_json(whole);
  values["rows"][2]["values"][0] = "999";
  CHECK(error_of_json(values) == "s.json: the row of point 1 has values that are not that point's in the grid");
  nlohmann::json fraction = to_json(whole);
  fraction["rows"][2]["point"] = 1.5;
  CHECK(error_of_json(fraction) == "s.json: a row's point is 1.5, expected an integer >= 0");
  nlohmann::json total = to_json(whole);
  total["points_total"] = 4;
  CHECK(error_of_json(total) == "s.json: points_total 4 is not the 3 points its axes make");
  // A point without one of the sweep's policies.
  SweepTable lacking = shards[1];
  lacking.rows.pop_back();
  auto partial = merge({shards[0], lacking}, {"a", "b"});
  REQUIRE_FALSE(partial.ok());
  CHECK(partial.status().message().find("has no row of policy 'B' in any shard") != std::string::npos);
}

TEST_CASE("objectives and --vary parse, or name what is wrong", "[planning]") {
  auto o = parse_objective("ttft_p90_s<=1.0");
  REQUIRE(o.ok());
  CHECK(o->figure == "ttft_p90_s");
  CHECK(o->holds(1.0));
  CHECK_FALSE(o->holds(1.01));
  auto g = parse_objective("slo_attainment > 0.99");
  REQUIRE(g.ok());
  CHECK_FALSE(g->holds(0.99));
  CHECK(g->holds(0.995));
  CHECK(parse_objective("ttft_p90<=1").status().message().find("no figure named 'ttft_p90'") != std::string::npos);
  CHECK(parse_objective("done=>0.9").status().message() ==
        "--objective done=>0.9: '=>' is written backwards: '>=' (e.g. ttft_p90_s<=1.0)");
  CHECK(parse_objective("done=1").status().message().find("expected FIGURE<=X") != std::string::npos);
  CHECK(parse_objective("done>=x").status().message().find("not a finite number") != std::string::npos);
  CHECK(parse_objective("done>=nan").status().message().find("not a finite number") != std::string::npos);
  // What no run can meet is refused (it searched the whole range to answer "none").
  CHECK(parse_objective("slo_attainment>=2").status().message() ==
        "--objective slo_attainment>=2: no run can meet it (slo_attainment is a fraction, at most 1)");
  CHECK(parse_objective("ttft_p90_s<0").status().message() ==
        "--objective ttft_p90_s<0: no run can meet it (ttft_p90_s is never below 0)");
  CHECK(parse_objective("done>=1").ok());
  CHECK(parse_objective("ttft_p90_s<=0").ok());

  auto v = parse_vary("cluster.accelerators[0].count=2..16");
  REQUIRE(v.ok());
  CHECK(v->key == "cluster.accelerators[0].count");
  CHECK((v->lo == 2 && v->hi == 16));
  for (const std::string bad : {"k=5..2", "k=1-4", "=1..2", "k=a..4", "k=1..", "k"}) CHECK_FALSE(parse_vary(bad).ok());
  CHECK(v->count() == 15);
  CHECK(v->at(3) == 5);
  // A list: those values only, ascending (a tensor-parallel group's sizes).
  auto tp = parse_vary("cluster.accelerators[0].tp=2,4,8");
  REQUIRE(tp.ok());
  CHECK(tp->key == "cluster.accelerators[0].tp");
  CHECK(tp->list == std::vector<std::int64_t>{2, 4, 8});
  CHECK((tp->lo == 2 && tp->hi == 8));
  CHECK(tp->count() == 3);
  CHECK(tp->at(1) == 4);
  auto single = parse_vary("k=4");  // a list of one value
  REQUIRE(single.ok());
  CHECK(single->count() == 1);
  CHECK(single->at(0) == 4);
  for (const std::string bad : {"k=4,2", "k=2,2", "k=2,", "k=,2", "k=2,a", "=2,4", "k=2,4..8", "k="}) {
    INFO(bad);
    CHECK_FALSE(parse_vary(bad).ok());
  }
  CHECK(parse_vary("k=4,2").status().message() ==
        "--vary k=4,2: expected KEY=LO..HI with integers LO <= HI (e.g. cluster.accelerators[0].count=2..16), or "
        "KEY=V1,V2,... with ascending integers (e.g. cluster.accelerators[0].tp=2,4,8)");
}

TEST_CASE("plan's bisection finds the smallest value that holds", "[planning]") {
  struct Case {
    std::int64_t lo, hi, threshold;
    std::optional<std::int64_t> answer;
  };
  const std::vector<Case> cases = {
      {1, 100, 37, 37}, {1, 100, 1, 1},          {1, 100, 100, 100}, {1, 100, 101, std::nullopt},
      {5, 5, 5, 5},     {5, 5, 6, std::nullopt}, {-10, 10, -3, -3},  {0, 1'000'000, 654'321, 654'321}};
  for (const Case& c : cases) {
    int calls = 0;
    const auto r = smallest_holding(c.lo, c.hi, [&](std::int64_t v) {
      ++calls;
      return v >= c.threshold;
    });
    INFO("range [" << c.lo << ", " << c.hi << "], threshold " << c.threshold);
    CHECK(r.answer == c.answer);
    CHECK(r.monotone);
    CHECK(static_cast<std::size_t>(calls) == r.steps.size());  // each value once
    CHECK(calls <= 3 + static_cast<int>(std::log2(static_cast<double>(c.hi - c.lo + 1))) + 1);
    if (r.answer && *r.answer > c.lo) {
      // Its lower neighbour was tried and failed; its upper one (in range) held.
      bool below = false, above = *r.answer == c.hi;
      for (const auto& s : r.steps) {
        below |= s.value == *r.answer - 1 && !s.holds;
        above |= s.value == *r.answer + 1 && s.holds;
      }
      CHECK(below);
      CHECK(above);
    }
  }
  // A value above the answer that fails is reported.
  const auto odd = smallest_holding(1, 10, [](std::int64_t v) { return v >= 3 && v != 4; });
  CHECK_FALSE(odd.monotone);
}
