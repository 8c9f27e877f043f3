// A policy made of stages (plugins.staged with the built-in stages):
// filters, then the lowest weighted sum of scores; the objective it
// declares; its reasons.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

import slicesched.core.plugin;
import slicesched.plugins.builtin;
import slicesched.plugins.stages.staged;
import slicesched.core.graph;
import slicesched.core.accel;
import slicesched.core.gmg;

using namespace slicesched;
using Objective = PlacementPolicy::Objective;

namespace {

struct Stage {
  bool filter;
  const char* name;
  double weight = 1;
};

struct Fixture {
  Gmg gmg{std::make_shared<TemplateRegistry>(), std::make_shared<AcceleratorSet>()};
  PluginRegistries regs;
  Fixture() { REQUIRE(plugins::register_builtins(regs).ok()); }
  std::unique_ptr<plugins::StagedPlacement> make(std::initializer_list<Stage> stages) {
    std::vector<plugins::FilterStage> filters;
    std::vector<plugins::ScoreStage> scores;
    for (const Stage& s : stages) {
      if (s.filter) {
        auto made = regs.filter.create(s.name);
        REQUIRE(made.ok());
        filters.push_back({std::move(made).value(), s.name});
      } else {
        auto made = regs.score.create(s.name);
        REQUIRE(made.ok());
        scores.push_back({std::move(made).value(), s.name, s.weight});
      }
    }
    return std::make_unique<plugins::StagedPlacement>(std::move(filters), std::move(scores));
  }
};

Outcome outcome(bool feasible, double mean, double makespan) { return {feasible, {}, mean, makespan}; }

}  // namespace

TEST_CASE("stages: filters drop, weighted scores pick the lowest sum, ties to the lower index", "[plugins][stages]") {
  Fixture f;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<Candidate> cands(4, Candidate{"c", {}});
  // c0 infeasible (and soonest), c1 soonest on average, c2 soonest done, c3 a NaN mean.
  const std::vector<Outcome> outs = {outcome(false, 0.1, 0.1), outcome(true, 2, 5), outcome(true, 3, 1),
                                     outcome(true, nan, 0.5)};
  struct Row {
    const char* what;
    std::initializer_list<Stage> stages;
    std::optional<std::size_t> pick;
    Objective objective;
  };
  const Row rows[] = {
      {"simulation-guided as stages", {{true, "feasible"}, {false, "mean-completion"}}, 1, Objective::kMeanCompletion},
      {"a score alone drops infeasible and NaN", {{false, "mean-completion", 3}}, 1, Objective::kMeanCompletion},
      {"makespan", {{true, "feasible"}, {false, "makespan", 2}}, 2, Objective::kMakespan},
      // c1: 2 + 5 = 7, c2: 3 + 1 = 4.
      {"two scores", {{true, "feasible"}, {false, "mean-completion"}, {false, "makespan"}}, 2, Objective::kNone},
      // c1: 2 + 0.1 * 5 = 2.5, c2: 3 + 0.1 * 1 = 3.1.
      {"weights", {{true, "feasible"}, {false, "mean-completion"}, {false, "makespan", 0.1}}, 1, Objective::kNone},
      {"static as a stage", {{false, "candidate-order"}}, 0, Objective::kNone},
      {"filtered static", {{true, "feasible"}, {false, "candidate-order"}}, 1, Objective::kNone},
  };
  for (const Row& r : rows) {
    INFO(r.what);
    auto policy = f.make(r.stages);
    CHECK(policy->objective() == r.objective);
    const Batch batch;
    CHECK(policy->choose(f.gmg, batch, cands, outs) == r.pick);
  }
  auto alone = f.make({{false, "candidate-order"}});
  CHECK_FALSE(alone->needs_simulation());
  CHECK(f.make({{true, "feasible"}, {false, "candidate-order"}})->needs_simulation());
}

TEST_CASE("stages: nothing left defers, and the reasons say why", "[plugins][stages]") {
  Fixture f;
  auto policy = f.make({{true, "feasible"}, {false, "mean-completion"}, {false, "makespan", 0.5}});
  const std::vector<Candidate> cands(3, Candidate{"c", {}});
  const Batch batch;
  const std::vector<Outcome> none = {outcome(false, 1, 1), outcome(false, 2, 2), outcome(false, 3, 3)};
  CHECK(policy->choose(f.gmg, batch, cands, none) == std::nullopt);
  std::vector<std::string> why = policy->reasons();
  REQUIRE(why.size() == 2);
  CHECK(why[0] == "filter 'feasible' left 0 of 3");
  CHECK(why[1] == "deferred: no candidate left after 1 filter(s) and 2 score(s)");

  const std::vector<Outcome> some = {outcome(false, 1, 1), outcome(true, 2, 4), outcome(true, 3, 3)};
  CHECK(policy->choose(f.gmg, batch, cands, some) == 1);  // 2 + 2 = 4 against 3 + 1.5 = 4.5
  why = policy->reasons();
  REQUIRE(why.size() == 2);
  CHECK(why[0] == "filter 'feasible' left 2 of 3");
  CHECK(why[1] == "lowest weighted cost of 2 scored: 4 = 1 x mean-completion 2 + 0.5 x makespan 4");
}

TEST_CASE("stages: unknown stage names and arguments are refused by their registries", "[plugins][stages]") {
  Fixture f;
  CHECK(f.regs.filter.create("nope").status().message() == "unknown filter stage 'nope' (available: feasible)");
  CHECK(f.regs.score.create("makespan", {{"x", 1}}).status().message() ==
        "score stage 'makespan': unknown key 'x' (takes no arguments)");
}

TEST_CASE("stages: a later filter cannot bring back what an earlier one dropped", "[plugins][stages]") {
  // A filter that sets every flag: it may clear flags only, so the pick
  // stays among what 'feasible' kept (the only feasible candidate, c2).
  struct KeepAll final : CandidateFilter {
    void filter(const StageRound&, std::span<std::uint8_t> keep) override {
      for (std::uint8_t& k : keep) k = 1;
    }
  };
  Fixture f;
  std::vector<plugins::FilterStage> filters;
  auto feasible = f.regs.filter.create("feasible");
  REQUIRE(feasible.ok());
  filters.push_back({std::move(feasible).value(), "feasible"});
  filters.push_back({PluginPtr<CandidateFilter>(new KeepAll), "keep-all"});
  std::vector<plugins::ScoreStage> scores;
  auto order = f.regs.score.create("candidate-order");
  REQUIRE(order.ok());
  scores.push_back({std::move(order).value(), "candidate-order", 1.0});
  plugins::StagedPlacement policy(std::move(filters), std::move(scores));
  const std::vector<Candidate> cands(3, Candidate{"c", {}});
  const std::vector<Outcome> outs = {outcome(false, 1, 1), outcome(false, 2, 2), outcome(true, 3, 3)};
  const Batch batch;
  CHECK(policy.choose(f.gmg, batch, cands, outs) == 2);
  const std::vector<std::string> why = policy.reasons();
  REQUIRE(why.size() >= 2);
  CHECK(why[0] == "filter 'feasible' left 1 of 3");
  CHECK(why[1] == "filter 'keep-all' left 1 of 1");
}
