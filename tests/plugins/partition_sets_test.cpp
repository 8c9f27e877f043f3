#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

import slicesched.core.plugin;
import slicesched.plugins.builtin;
import slicesched.plugins.partition_sets;
import slicesched.testing;
import slicesched.core.status;
import slicesched.core.ids;
import slicesched.core.graph;
import slicesched.core.gmg;

using namespace slicesched;
using nlohmann::json;

namespace {

// 8 accelerators "a0".."a7"; batches of 6 ops unless said otherwise.
struct Fixture {
  Gmg gmg;
  PluginRegistries regs;
  explicit Fixture(int accels = 8) : gmg(std::make_shared<TemplateRegistry>(), testing::cluster(accels)) {
    REQUIRE(plugins::register_builtins(regs).ok());
  }
  std::vector<Candidate> run(const std::string& set, const json& args, std::uint32_t tenant = 0, std::size_t ops = 6) {
    auto made = regs.partition.create(set, args);
    REQUIRE(made.ok());
    REQUIRE((*made)->bind(gmg.accels()).ok());
    Batch batch;
    for (std::size_t i = 0; i < ops; ++i) batch.ops.push_back(static_cast<OpId>(100 + i));
    batch.tenant = tenant;
    return (*made)->candidates(gmg, batch);
  }
};

}  // namespace

TEST_CASE("contiguous split: op i of n on member floor(i*m/n)", "[plugins][partition]") {
  const std::vector<AccelId> four = {10, 11, 12, 13};
  std::vector<AccelId> got;
  for (std::size_t i = 0; i < 6; ++i) got.push_back(plugins::contiguous_member(four, i, 6));
  CHECK(got == std::vector<AccelId>{10, 10, 11, 12, 12, 13});
  got.clear();
  for (std::size_t i = 0; i < 2; ++i) got.push_back(plugins::contiguous_member(four, i, 2));
  CHECK(got == std::vector<AccelId>{10, 12});
}

TEST_CASE("fixed partition sets over 8 accelerators, batch of 6 ops", "[plugins][partition]") {
  struct Row {
    std::string set;
    std::vector<Candidate> want;
  };
  const std::vector<Row> rows = {
      {"singles",
       {{"a0", {0, 0, 0, 0, 0, 0}},
        {"a1", {1, 1, 1, 1, 1, 1}},
        {"a2", {2, 2, 2, 2, 2, 2}},
        {"a3", {3, 3, 3, 3, 3, 3}},
        {"a4", {4, 4, 4, 4, 4, 4}},
        {"a5", {5, 5, 5, 5, 5, 5}},
        {"a6", {6, 6, 6, 6, 6, 6}},
        {"a7", {7, 7, 7, 7, 7, 7}}}},
      {"pairs",
       {{"a0+a1", {0, 0, 0, 1, 1, 1}},
        {"a2+a3", {2, 2, 2, 3, 3, 3}},
        {"a4+a5", {4, 4, 4, 5, 5, 5}},
        {"a6+a7", {6, 6, 6, 7, 7, 7}}}},
      {"quads", {{"a0+a1+a2+a3", {0, 0, 1, 2, 2, 3}}, {"a4+a5+a6+a7", {4, 4, 5, 6, 6, 7}}}},
      {"all", {{"all", {0, 1, 2, 4, 5, 6}}}},
  };
  Fixture f;
  for (const Row& row : rows) {
    INFO(row.set);
    CHECK(f.run(row.set, json::object()) == row.want);
  }
}

TEST_CASE("fixed partition sets keep a trailing partial group", "[plugins][partition]") {
  Fixture f(7);
  CHECK(f.run("pairs", json::object(), 0, 3) ==
        std::vector<Candidate>{{"a0+a1", {0, 0, 1}}, {"a2+a3", {2, 2, 3}}, {"a4+a5", {4, 4, 5}}, {"a6", {6, 6, 6}}});
  CHECK(f.run("quads", json::object(), 0, 1) == std::vector<Candidate>{{"a0+a1+a2+a3", {0}}, {"a4+a5+a6", {4}}});
}

TEST_CASE("explicit groups by id or name, with tenants pinned", "[plugins][partition]") {
  struct Row {
    json args;
    std::uint32_t tenant;
    std::vector<Candidate> want;
  };
  const json pinned = {{"groups", {{0, 1}, {2, 3}, {4, 5, 6, 7}}}, {"tenants", {{"3", {1}}, {"4", {2, 0}}}}};
  const std::vector<Row> rows = {
      {{{"groups", {{0, 1}, {2, 3}}}}, 0, {{"a0+a1", {0, 0, 0, 1, 1, 1}}, {"a2+a3", {2, 2, 2, 3, 3, 3}}}},
      {{{"groups", {{"a6", "a7", "a5"}}}}, 0, {{"a6+a7+a5", {6, 6, 7, 7, 5, 5}}}},
      {{{"groups", {{7, "a0"}}}}, 0, {{"a7+a0", {7, 7, 7, 0, 0, 0}}}},
      {pinned, 3, {{"a2+a3", {2, 2, 2, 3, 3, 3}}}},
      {pinned, 4, {{"a4+a5+a6+a7", {4, 4, 5, 6, 6, 7}}, {"a0+a1", {0, 0, 0, 1, 1, 1}}}},
      {pinned, 9, {{"a0+a1", {0, 0, 0, 1, 1, 1}}, {"a2+a3", {2, 2, 2, 3, 3, 3}}, {"a4+a5+a6+a7", {4, 4, 5, 6, 6, 7}}}},
  };
  Fixture f;
  for (const Row& row : rows) {
    INFO(row.args.dump() << " tenant " << row.tenant);
    CHECK(f.run("explicit", row.args, row.tenant) == row.want);
  }
}

TEST_CASE("partition set arguments are refused with the key named", "[plugins][partition]") {
  struct Row {
    std::string set;
    json args;
    std::string message;
  };
  const std::string e = "partition set 'explicit': ";
  const std::vector<Row> rows = {
      {"singles", {{"width", 2}}, "partition set 'singles': unknown key 'width' (takes no arguments)"},
      {"explicit", json::object(), e + "key 'groups': required: a list of accelerator groups, e.g. [[0, 1], [2, 3]]"},
      {"explicit", {{"groups", json::array()}}, e + "key 'groups': must be a non-empty list of accelerator groups"},
      {"explicit", {{"groups", {{0}, 3}}}, e + "key 'groups[1]': must be a non-empty list of accelerator ids or names"},
      {"explicit", {{"groups", {{0, -1}}}}, e + "key 'groups[0][1]': expected an integer in [0, 4294967294], got -1"},
      {"explicit", {{"groups", {{0, 1.5}}}}, e + "key 'groups[0][1]': expected an integer in [0, 4294967294], got 1.5"},
      {"explicit", {{"groups", {{1e30}}}}, e + "key 'groups[0][0]': expected an integer in [0, 4294967294], got 1e+30"},
      {"explicit",
       {{"groups", {{0, true}}}},
       e + "key 'groups[0][1]': must be an accelerator id (>= 0) or name, not true"},
      {"explicit", {{"groups", {{0}}}, {"tenant", 1}}, e + "unknown key 'tenant' (accepted: groups, tenants)"},
      {"explicit",
       {{"groups", {{0}}}, {"tenants", 1}},
       e + "key 'tenants': must be a table of tenant id -> list of group indices"},
      {"explicit",
       {{"groups", {{0}}}, {"tenants", {{"x", {0}}}}},
       e + "key 'tenants.x': tenant ids are unsigned integers, not 'x'"},
      {"explicit",
       {{"groups", {{0}}}, {"tenants", {{"3", {1}}}}},
       e + "key 'tenants.3[0]': expected an integer in [0, 0], got 1"},
      {"explicit",
       {{"groups", {{0}, {1}}}, {"tenants", {{"3", {0, std::numeric_limits<double>::quiet_NaN()}}}}},
       e + "key 'tenants.3[1]': expected an integer in [0, 1], got nan"},
  };
  Fixture f;
  for (const Row& row : rows) {
    INFO(row.args.dump());
    auto r = f.regs.partition.create(row.set, row.args);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == row.message);
  }
}

TEST_CASE("explicit groups that do not fit the cluster fail at bind and offer nothing", "[plugins][partition]") {
  struct Row {
    json groups;
    std::string message;
  };
  const std::string e = "partition set 'explicit': ";
  const std::vector<Row> rows = {
      {{{0, "gpu9"}}, e + "key 'groups[0][1]': no accelerator named 'gpu9'"},
      {{{1}, {8}}, e + "key 'groups[1][0]': accelerator id 8 out of range (8 accelerators)"},
      {{{1, "a1"}}, e + "key 'groups[0][1]': accelerator 'a1' is already in this group"},
  };
  Fixture f;
  for (const Row& row : rows) {
    INFO(row.groups.dump());
    auto made = f.regs.partition.create("explicit", {{"groups", row.groups}});
    REQUIRE(made.ok());
    Status s = (*made)->bind(f.gmg.accels());
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message() == row.message);
    CHECK((*made)->candidates(f.gmg, Batch{{1, 2}, 0, 0, 0}).empty());
  }
}

TEST_CASE("explicit groups bind themselves to the cluster they first see", "[plugins][partition]") {
  Fixture f;
  // Spelled out: {{"a1", "a2"}} would read as the object {"a1": "a2"}.
  const json args = {{"groups", json::array({json::array({"a1", "a2"})})}};
  auto made = f.regs.partition.create("explicit", args);
  INFO(args.dump() << ": " << made.status().message());
  REQUIRE(made.ok());
  CHECK((*made)->candidates(f.gmg, Batch{{1, 2}, 0, 0, 0}) == std::vector<Candidate>{{"a1+a2", {1, 2}}});
}

TEST_CASE("candidates written over last round's equal freshly made ones", "[plugins][partition]") {
  // The scheduler hands a set last round's candidates to overwrite
  // (candidates_into), so their buffers are reused. Whatever they held
  // (another batch size, another set's, an accelerator lost or back since),
  // the result must be what candidates() makes afresh.
  Fixture f;
  std::vector<Candidate> kept;
  const json explicit_args = {{"groups", {{0, 1}, {2, 3, 4}, {7}}}, {"tenants", {{"3", {1, 0}}}}};
  for (const char* set : {"pairs", "quads", "singles", "all", "explicit", "pairs"}) {
    auto made = f.regs.partition.create(set, std::string(set) == "explicit" ? explicit_args : json::object());
    REQUIRE(made.ok());
    REQUIRE((*made)->bind(f.gmg.accels()).ok());
    for (std::size_t ops : {6, 1, 3, 6, 2})
      for (int lost : {-1, 3, 0, -1}) {
        for (AccelId a = 0; a < 8; ++a) f.gmg.set_down(a, static_cast<int>(a) == lost);
        Batch batch;
        for (std::size_t i = 0; i < ops; ++i) batch.ops.push_back(static_cast<OpId>(100 + i));
        batch.tenant = 3;
        INFO(set << ", " << ops << " ops, lost " << lost);
        (*made)->candidates_into(f.gmg, batch, kept);
        CHECK(kept == (*made)->candidates(f.gmg, batch));
      }
  }
}
