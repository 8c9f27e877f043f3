// Partition sets "singles", "pairs", "quads" and "all": the accelerators cut
// by id into consecutive groups of a fixed width, one candidate per group.
module;
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

export module slicesched.plugins.partition_sets:fixed_groups;
import slicesched.core.plugin;
import :contiguous;

export namespace slicesched::plugins {

// Groups (0..w-1), (w..2w-1), ... in id order; with an accelerator count
// that is not a multiple of w the last group is smaller (7 accelerators as
// pairs: (0,1) (2,3) (4,5) (6)), so every accelerator is in exactly one
// candidate. Width 0 is one group of every accelerator, labelled "all";
// other labels join the member names with '+'. Candidates come in group
// order, each with the contiguous split. Not thread-safe (caches the groups
// of the last cluster seen).
class FixedGroups final : public PartitionSet {
 public:
  explicit FixedGroups(std::size_t width) : width_(width) {}

  Status bind(const AcceleratorSet& accels) override {
    refresh(accels);
    return Status::Ok();
  }

  std::vector<Candidate> candidates(const Gmg& gmg, const Batch& batch) override {
    refresh(gmg.accels());
    std::vector<Candidate> out;
    out.reserve(groups_.size());
    for (const AccelGroup& g : groups_) out.push_back(contiguous_candidate(g, gmg, batch));
    return out;
  }

  void candidates_into(const Gmg& gmg, const Batch& batch, std::vector<Candidate>& out) override {
    refresh(gmg.accels());
    out.resize(groups_.size());
    for (std::size_t i = 0; i < groups_.size(); ++i) contiguous_candidate_into(groups_[i], gmg, batch, out[i]);
  }

 private:
  // GMG clones share one AcceleratorSet, so identity and size say whether
  // the cached groups still describe the cluster.
  void refresh(const AcceleratorSet& accels) {
    if (&accels == built_for_ && accels.size() == built_size_) return;
    built_for_ = &accels;
    built_size_ = accels.size();
    groups_.clear();
    const std::size_t n = accels.size();
    const std::size_t w = width_ == 0 ? n : width_;
    for (std::size_t first = 0; first < n; first += w) {
      AccelGroup g;
      for (std::size_t a = first; a < n && a < first + w; ++a) g.members.push_back(static_cast<AccelId>(a));
      g.label = width_ == 0 ? "all" : names_label(accels, g.members);
      groups_.push_back(std::move(g));
    }
  }

  std::size_t width_;
  const AcceleratorSet* built_for_ = nullptr;
  std::size_t built_size_ = 0;
  std::vector<AccelGroup> groups_;
};

}  // namespace slicesched::plugins
