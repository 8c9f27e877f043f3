#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

import slicesched.core.plugin;
import slicesched.plugins.builtin;
import slicesched.core.status;
import slicesched.core.graph;
import slicesched.core.accel;
import slicesched.core.gmg;

using namespace slicesched;
using nlohmann::json;

namespace {

class Fixed final : public PlacementPolicy {
 public:
  explicit Fixed(std::size_t pick) : pick_(pick) {}
  std::optional<std::size_t> choose(const Gmg&, const Batch&, std::span<const Candidate>,
                                    std::span<const Outcome>) override {
    return pick_;
  }
  std::size_t pick_;
};

const Gmg& empty_gmg() {
  static const Gmg gmg{std::make_shared<TemplateRegistry>(), std::make_shared<AcceleratorSet>()};
  return gmg;
}

PluginRegistry<PlacementPolicy>::Factory fixed(std::size_t pick) {
  return [pick](const PluginArgs&) { return std::make_unique<Fixed>(pick); };
}

}  // namespace

TEST_CASE("a registry refuses duplicate and empty names", "[plugins][registry]") {
  PluginRegistry<PlacementPolicy> reg("placement policy");
  REQUIRE(reg.add("first", fixed(0)).ok());
  Status dup = reg.add("first", fixed(1));
  CHECK(dup.code() == StatusCode::kAlreadyExists);
  CHECK(dup.message() == "placement policy 'first' is already registered");
  CHECK(reg.add("", fixed(0)).message() == "placement policy name must not be empty");
  CHECK(reg.add("none", nullptr).message() == "placement policy 'none' has no factory");
  CHECK(reg.names() == std::vector<std::string>{"first"});
}

TEST_CASE("unknown names list what is available, sorted", "[plugins][registry]") {
  PluginRegistry<PlacementPolicy> reg("placement policy");
  CHECK(reg.create("x").status().message() == "unknown placement policy 'x' (available: none)");
  REQUIRE(reg.add("c", fixed(0)).ok());
  REQUIRE(reg.add("a", fixed(0)).ok());
  REQUIRE(reg.add("b", fixed(0)).ok());
  auto missing = reg.create("x");
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK(missing.status().message() == "unknown placement policy 'x' (available: a, b, c)");
  CHECK(reg.names() == std::vector<std::string>{"a", "b", "c"});
}

TEST_CASE("create passes the arguments and names the plugin in factory errors", "[plugins][registry]") {
  PluginRegistry<PlacementPolicy> reg("placement policy");
  REQUIRE(reg.add("pick",
                  [](const PluginArgs& args) {
                    check_keys(args, {"index"});
                    if (!args.contains("index")) bad_arg("index", "required");
                    return std::make_unique<Fixed>(args["index"].get<std::size_t>());
                  })
              .ok());
  REQUIRE(reg.add("null", [](const PluginArgs&) { return std::unique_ptr<PlacementPolicy>(); }).ok());
  REQUIRE(reg.add("odd", [](const PluginArgs&) -> std::unique_ptr<PlacementPolicy> { throw 7; }).ok());

  auto made = reg.create("pick", json{{"index", 2}});
  REQUIRE(made.ok());
  CHECK((*made)->choose(empty_gmg(), {}, {}, {}) == 2u);

  struct Row {
    const char* name;
    json args;
    std::string message;
  };
  const std::vector<Row> rows = {
      {"pick", json::object(), "placement policy 'pick': key 'index': required"},
      {"pick", nullptr, "placement policy 'pick': key 'index': required"},
      {"pick", json{{"index", 1}, {"indx", 1}}, "placement policy 'pick': unknown key 'indx' (accepted: index)"},
      {"pick", json::array({1}), "placement policy 'pick': arguments must be a table, not array"},
      {"null", json::object(), "placement policy 'null': factory returned no object"},
      {"odd", json::object(), "placement policy 'odd': factory threw a non-standard exception"},
  };
  for (const Row& row : rows) {
    INFO(row.name << " " << row.args.dump());
    auto r = reg.create(row.name, row.args);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == row.message);
  }
}

TEST_CASE("argument helpers say which key and why", "[plugins][registry]") {
  CHECK_THROWS_WITH(check_keys(json{{"a", 1}}, {}), "unknown key 'a' (takes no arguments)");
  CHECK_NOTHROW(check_keys(json{{"a", 1}}, {"a", "b"}));
  CHECK(non_negative_arg(json::object(), "x", 2.5) == 2.5);
  CHECK(non_negative_arg(json{{"x", 0}}, "x", 2.5) == 0.0);
  CHECK_THROWS_WITH(non_negative_arg(json{{"x", -1}}, "x", 0), "key 'x': must be a number >= 0, not -1");
  CHECK_THROWS_WITH(non_negative_arg(json{{"x", "1"}}, "x", 0), "key 'x': must be a number >= 0, not \"1\"");
  CHECK(bool_arg(json{{"b", false}}, "b", true) == false);
  CHECK_THROWS_WITH(bool_arg(json{{"b", 1}}, "b", true), "key 'b': must be true or false, not 1");
}

// A float, a huge or non-finite number must never reach a cast in a plugin.
TEST_CASE("integer_arg takes integers in range and refuses everything else", "[plugins][registry]") {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK(integer_arg(json::object(), "seed", 7, 0, kMax) == 7);
  CHECK(integer_arg(json{{"seed", 0}}, "seed", 7, 0, kMax) == 0);
  CHECK(integer_arg(json{{"seed", kMax}}, "seed", 7, 0, kMax) == kMax);
  CHECK(integer_arg(json{{"n", -3}}, "n", 0, -3, 3) == -3);
  CHECK(integer_arg(json{{"n", 3u}}, "n", 0, -3, 3) == 3);
  struct Row {
    json value;
    std::int64_t min, max;
    std::string message;
  };
  const std::string e = "key 'seed': expected an integer in ";
  const std::vector<Row> rows = {
      {1e30, 0, kMax, e + "[0, 9223372036854775807], got 1e+30"},
      {1.5, 0, 10, e + "[0, 10], got 1.5"},
      {4.0, 0, 10, e + "[0, 10], got 4.0"},
      {nan, 0, 10, e + "[0, 10], got nan"},
      {inf, 0, 10, e + "[0, 10], got inf"},
      {-inf, 0, 10, e + "[0, 10], got -inf"},
      {-1, 0, 10, e + "[0, 10], got -1"},
      {11, 0, 10, e + "[0, 10], got 11"},
      {std::numeric_limits<std::uint64_t>::max(), 0, kMax, e + "[0, 9223372036854775807], got 18446744073709551615"},
      {5u, -10, -1, e + "[-10, -1], got 5"},
      {"7", 0, 10, e + "[0, 10], got \"7\""},
      {nullptr, 0, 10, e + "[0, 10], got null"},
  };
  for (const Row& row : rows) {
    INFO(row.value.dump());
    CHECK_THROWS_WITH(integer_arg(json{{"seed", row.value}}, "seed", 0, row.min, row.max), row.message);
  }
  CHECK_THROWS_WITH(integer_value(json(2.5), "groups[1]", 0, 3),
                    "key 'groups[1]': expected an integer in [0, 3], got 2.5");
}

TEST_CASE("a placement policy's bad integer argument is refused by create, naming policy and key",
          "[plugins][registry]") {
  PluginRegistry<PlacementPolicy> reg("placement policy");
  REQUIRE(reg.add("seeded",
                  [](const PluginArgs& args) {
                    check_keys(args, {"seed"});
                    const auto seed = integer_arg(args, "seed", 1, 0, std::numeric_limits<std::int64_t>::max());
                    return std::make_unique<Fixed>(static_cast<std::size_t>(seed));
                  })
              .ok());
  auto made = reg.create("seeded", json{{"seed", 3}});
  REQUIRE(made.ok());
  CHECK((*made)->choose(empty_gmg(), {}, {}, {}) == 3u);
  auto bad = reg.create("seeded", json{{"seed", 1e30}});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "placement policy 'seeded': key 'seed': expected an integer in [0, 9223372036854775807], got 1e+30");
}

TEST_CASE("the built-ins register under their documented names", "[plugins][registry]") {
  PluginRegistries regs;
  REQUIRE(plugins::register_builtins(regs).ok());
  CHECK(regs.partition.names() == std::vector<std::string>{"all", "explicit", "pairs", "quads", "singles"});
  CHECK(regs.placement.names() == std::vector<std::string>{"simulation-guided", "static"});
  CHECK(regs.estimator.names() == std::vector<std::string>{"online-linear"});
  CHECK(regs.arbiter.names() == std::vector<std::string>{"greedy", "serial"});
  Status again = plugins::register_builtins(regs);
  CHECK(again.message() == "placement policy 'simulation-guided' is already registered");
}

TEST_CASE("adopting a library's registries is all or nothing", "[plugins][registry]") {
  PluginRegistries regs;
  REQUIRE(plugins::register_builtins(regs).ok());
  PluginRegistries staged;
  REQUIRE(staged.placement.add("mine", fixed(0)).ok());
  REQUIRE(staged.arbiter.add("greedy", [](const PluginArgs&) -> std::unique_ptr<TransferArbiter> { return {}; }).ok());
  auto token = std::make_shared<int>(0);
  Status s = regs.adopt(std::move(staged), token);
  CHECK(s.message() == "transfer arbiter 'greedy' is already registered");
  CHECK_FALSE(regs.placement.contains("mine"));
  CHECK(token.use_count() == 1);
}

TEST_CASE("objects keep their library alive after the registry is gone", "[plugins][registry]") {
  // A stand-in for a loaded library: whatever the registry entries and the
  // objects hold on to.
  auto library = std::make_shared<int>(0);
  std::weak_ptr<int> alive = library;
  PluginPtr<PlacementPolicy> policy;
  {
    PluginRegistries regs, staged;
    REQUIRE(staged.placement.add("lib-policy", fixed(3)).ok());
    REQUIRE(regs.adopt(std::move(staged), library).ok());
    library.reset();
    CHECK_FALSE(alive.expired());  // the registry entry holds it
    auto made = regs.placement.create("lib-policy");
    REQUIRE(made.ok());
    policy = std::move(made).value();
  }
  CHECK_FALSE(alive.expired());  // the object holds it
  CHECK(policy->choose(empty_gmg(), {}, {}, {}) == 3u);
  policy.reset();
  CHECK(alive.expired());
}
