#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

import slicesched.core.plugin;
import slicesched.plugins.builtin;
import slicesched.core.graph;
import slicesched.core.accel;
import slicesched.core.gmg;

using namespace slicesched;

namespace {

struct Fixture {
  Gmg gmg{std::make_shared<TemplateRegistry>(), std::make_shared<AcceleratorSet>()};
  PluginRegistries regs;
  Fixture() { REQUIRE(plugins::register_builtins(regs).ok()); }
  PluginPtr<PlacementPolicy> make(const std::string& name) {
    auto made = regs.placement.create(name);
    REQUIRE(made.ok());
    return std::move(made).value();
  }
};

Outcome feasible(double mean) { return {true, {}, mean, mean}; }
Outcome infeasible(double mean) { return {false, {}, mean, mean}; }

}  // namespace

TEST_CASE("simulation-guided picks the feasible candidate that completes soonest", "[plugins][placement]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Row {
    const char* what;
    std::vector<Outcome> outcomes;
    std::optional<std::size_t> want;
  };
  const std::vector<Row> rows = {
      {"lowest mean wins", {feasible(2.0), feasible(1.0), feasible(3.0)}, 1},
      {"a tie goes to the lowest index", {feasible(1.0), feasible(1.0)}, 0},
      {"a tie after the first goes to the lowest index", {feasible(3.0), feasible(1.5), feasible(1.5)}, 1},
      {"an infeasible candidate never wins, however fast", {infeasible(0.1), feasible(2.0)}, 1},
      {"ties among feasible ignore an infeasible one before them", {infeasible(0.1), feasible(2), feasible(2)}, 1},
      {"nothing feasible defers the batch", {infeasible(1.0), infeasible(2.0)}, std::nullopt},
      {"no candidates defers the batch", {}, std::nullopt},
      {"a non-finite mean counts as infeasible", {feasible(nan), feasible(5.0)}, 1},
  };
  Fixture f;
  auto policy = f.make("simulation-guided");
  CHECK(policy->needs_simulation());
  for (const Row& row : rows) {
    INFO(row.what);
    const std::vector<Candidate> candidates(row.outcomes.size(), Candidate{"c", {0}});
    CHECK(policy->choose(f.gmg, Batch{{0}, 0, 0, 0}, candidates, row.outcomes) == row.want);
  }
}

TEST_CASE("static takes the pinned candidate without simulating", "[plugins][placement]") {
  Fixture f;
  auto policy = f.make("static");
  CHECK_FALSE(policy->needs_simulation());
  const std::vector<Candidate> three(3, Candidate{"c", {0}});
  CHECK(policy->choose(f.gmg, Batch{{0}, 0, 0, 0}, three, {}) == std::optional<std::size_t>(0));
  CHECK(policy->choose(f.gmg, Batch{{0}, 0, 0, 0}, {}, {}) == std::nullopt);
}

TEST_CASE("placement policies take no arguments", "[plugins][placement]") {
  Fixture f;
  CHECK(f.regs.placement.create("static", {{"pin", 1}}).status().message() ==
        "placement policy 'static': unknown key 'pin' (takes no arguments)");
}
