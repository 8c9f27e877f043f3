module;
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

module slicesched.plugins.stages.staged;

namespace slicesched::plugins {

StagedPlacement::StagedPlacement(std::vector<FilterStage> filters, std::vector<ScoreStage> scores)
    : filters_(std::move(filters)), scores_(std::move(scores)) {
  bool prunable = !scores_.empty();
  for (const FilterStage& f : filters_) {
    simulate_ = simulate_ || f.plugin->needs_simulation();
    prunable = prunable && f.plugin->drops_only_infeasible();
  }
  std::optional<Objective> shared;
  for (const ScoreStage& s : scores_) {
    simulate_ = simulate_ || s.plugin->needs_simulation();
    const Objective o = s.plugin->objective();
    if (!shared) shared = o;
    prunable = prunable && o == *shared && o != Objective::kNone && s.weight > 0;
  }
  objective_ = prunable ? *shared : Objective::kNone;
  left_after_.resize(filters_.size());
  pick_costs_.resize(scores_.size());
}

Status StagedPlacement::bind(const PolicyContext& ctx) {
  for (FilterStage& f : filters_)
    if (Status s = f.plugin->bind(ctx); !s.ok()) return s;
  for (ScoreStage& s : scores_)
    if (Status st = s.plugin->bind(ctx); !st.ok()) return st;
  return Status::Ok();
}

std::optional<std::size_t> StagedPlacement::choose(const Gmg& gmg, const Batch& batch,
                                                   std::span<const Candidate> candidates,
                                                   std::span<const Outcome> outcomes) {
  // Without a what-if the outcomes are empty; stages get defaults then.
  const std::size_t n = candidates.size();
  std::vector<Outcome> defaults;
  if (outcomes.size() < n) {
    defaults.assign(outcomes.begin(), outcomes.end());
    defaults.resize(n);
    outcomes = defaults;
  }
  const StageRound round{gmg, batch, candidates, outcomes.first(n)};
  offered_ = n;
  keep_.assign(n, 1);
  for (std::size_t f = 0; f < filters_.size(); ++f) {
    // A filter may only clear flags: one that set a cleared one back
    // brought a candidate an earlier filter had rejected back into play.
    kept_before_.assign(keep_.begin(), keep_.end());
    filters_[f].plugin->filter(round, keep_);
    std::size_t left = 0;
    for (std::size_t i = 0; i < n; ++i) {
      keep_[i] = kept_before_[i] != 0 && keep_[i] != 0;
      left += keep_[i];
    }
    left_after_[f] = left;
  }
  total_.assign(n, 0.0);
  cost_.assign(n * scores_.size(), 0.0);
  for (std::size_t s = 0; s < scores_.size(); ++s) {
    const std::span<double> cost(cost_.data() + s * n, n);
    scores_[s].plugin->score(round, keep_, cost);
    for (std::size_t i = 0; i < n; ++i) {
      if (!keep_[i]) continue;
      if (!std::isfinite(cost[i])) {
        keep_[i] = 0;
        continue;
      }
      total_[i] += scores_[s].weight * cost[i];
    }
  }
  pick_.reset();
  scored_ = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!keep_[i]) continue;
    ++scored_;
    if (!pick_ || total_[i] < total_[*pick_]) pick_ = i;
  }
  if (pick_) {
    pick_total_ = total_[*pick_];
    for (std::size_t s = 0; s < scores_.size(); ++s) pick_costs_[s] = cost_[s * n + *pick_];
  }
  return pick_;
}

std::vector<std::string> StagedPlacement::reasons() const {
  std::vector<std::string> out;
  char buf[160];
  for (std::size_t f = 0; f < filters_.size(); ++f) {
    std::snprintf(buf, sizeof buf, "filter '%s' left %zu of %zu", filters_[f].name.c_str(), left_after_[f],
                  f == 0 ? offered_ : left_after_[f - 1]);
    out.emplace_back(buf);
    for (std::string& r : filters_[f].plugin->reasons()) out.push_back(filters_[f].name + ": " + std::move(r));
  }
  std::string sum;
  for (std::size_t s = 0; s < scores_.size(); ++s) {
    for (std::string& r : scores_[s].plugin->reasons()) out.push_back(scores_[s].name + ": " + std::move(r));
    std::snprintf(buf, sizeof buf, "%s%.9g x %s %.9g", s ? " + " : "", scores_[s].weight, scores_[s].name.c_str(),
                  pick_costs_[s]);
    sum += buf;
  }
  if (pick_) {
    std::snprintf(buf, sizeof buf, "lowest weighted cost of %zu scored: %.9g = ", scored_, pick_total_);
    out.emplace_back(std::string(buf) + sum);
    return out;
  } else {
  }
  std::snprintf(buf, sizeof buf, "deferred: no candidate left after %zu filter(s) and %zu score(s)", filters_.size(),
                scores_.size());
  out.emplace_back(buf);
  return out;
}

}  // namespace slicesched::plugins
