// Score stage "kv-affinity", an out-of-tree example (docs/plugins.md): a
// candidate costs what the estimator prices the batch at on its
// accelerators, plus `away_s_per_gib` seconds for every GiB of the batch's
// tenant's KV cache that is held elsewhere (what following the cache saves
// in transfers). Stacked after a "feasible" filter and a "mean-completion"
// score (kv_affinity.toml), it pulls a tenant's work toward its cache. It
// shows the three read-only views a stage gets: where each tenant's KV
// caches live (retained_by_tenant), the estimator's price of an operator on
// an accelerator (price_op, through PolicyContext), and the reasons it
// attaches to each decision (`slicesched explain` prints them).
module;
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

export module example.kv_affinity;
export import slicesched.core.views;

namespace example {

using namespace slicesched;

export class KvAffinity final : public CandidateScore {
 public:
  explicit KvAffinity(double away_s_per_gib) : away_s_per_gib_(away_s_per_gib) {}

  // The estimator prices the batch; a run always hands one over.
  Status bind(const PolicyContext& ctx) override {
    if (!ctx.estimator) return FailedPrecondition("kv-affinity needs the policy's estimator");
    est_ = ctx.estimator;
    return Status::Ok();
  }

  void score(const StageRound& round, std::span<const std::uint8_t> keep, std::span<double> cost) override {
    // Where the batch's tenant keeps its KV caches now.
    held_.clear();
    total_ = 0;
    for (const RetainedTotal& t : retained_by_tenant(round.gmg))
      if (t.tenant == round.batch.tenant) {
        held_.push_back(t);
        total_ += t.bytes;
      }
    home_.clear();
    std::int64_t most = 0;
    for (const RetainedTotal& t : held_)
      if (t.bytes > most) most = t.bytes, home_ = round.gmg.accels()[t.accel].name;
    best_ = -1;
    for (std::size_t i = 0; i < cost.size(); ++i) {
      if (!keep[i]) continue;
      const Candidate& c = round.candidates[i];
      double compute = 0;
      for (std::size_t k = 0; k < round.batch.ops.size(); ++k) {
        auto priced = price_op(*est_, round.gmg, round.batch.ops[k], c.accel[k]);
        compute += priced.ok() ? priced.value() : INFINITY;  // (a candidate the cluster lacks: dropped)
      }
      std::int64_t near = 0;
      for (const RetainedTotal& t : held_)
        for (AccelId a : c.accel)
          if (a == t.accel) {
            near += t.bytes;
            break;
          }
      const double away_gib = static_cast<double>(total_ - near) / (1024.0 * 1024.0 * 1024.0);
      cost[i] = compute + away_s_per_gib_ * away_gib;
      if (best_ < 0 || cost[i] < best_) best_ = cost[i];
    }
  }

  std::vector<std::string> reasons() const override {
    char line[200];
    if (held_.empty())
      std::snprintf(line, sizeof line, "the tenant holds no KV cache yet; lowest cost %.6f s", best_);
    else
      std::snprintf(line, sizeof line,
                    "the tenant holds %.1f MiB of KV cache on %zu accelerator(s), most on %s; "
                    "lowest cost %.6f s",
                    static_cast<double>(total_) / (1024.0 * 1024.0), held_.size(), home_.c_str(), best_);
    return {line};
  }

 private:
  double away_s_per_gib_;
  const Estimator* est_ = nullptr;
  // The latest round's, for reasons().
  std::vector<RetainedTotal> held_;
  std::int64_t total_ = 0;
  std::string home_;
  double best_ = -1;
};

export Status register_kv_affinity(PluginRegistries& r) {
  return r.score.add("kv-affinity", [](const PluginArgs& args) {
    check_keys(args, {"away_s_per_gib"});
    return std::make_unique<KvAffinity>(non_negative_arg(args, "away_s_per_gib", 0.01));
  });
}

}  // namespace example
