// Several partition sets offered as one: candidates are their union, in
// the order the sets were given (the config's order).
module;
#include <memory>
#include <utility>
#include <vector>

export module slicesched.engine.union_partition_set;
import slicesched.core.plugin;
import slicesched.core.status;
import slicesched.core.accel;
import slicesched.core.gmg;

export namespace slicesched {

class UnionPartitionSet final : public PartitionSet {
 public:
  explicit UnionPartitionSet(std::vector<PluginPtr<PartitionSet>> sets) : sets_(std::move(sets)) {}
  Status bind(const AcceleratorSet& accels) override {
    for (auto& s : sets_)
      if (Status st = s->bind(accels); !st.ok()) return st;
    return Status::Ok();
  }
  std::vector<Candidate> candidates(const Gmg& gmg, const Batch& batch) override {
    std::vector<Candidate> all;
    for (auto& s : sets_) {
      auto c = s->candidates(gmg, batch);
      all.insert(all.end(), std::make_move_iterator(c.begin()), std::make_move_iterator(c.end()));
    }
    return all;
  }
  // Each set fills its own kept vector, copied over `out`'s elements:
  // copies into buffers already large enough allocate nothing.
  void candidates_into(const Gmg& gmg, const Batch& batch, std::vector<Candidate>& out) override {
    kept_.resize(sets_.size());
    std::size_t n = 0;
    for (std::size_t s = 0; s < sets_.size(); ++s) {
      sets_[s]->candidates_into(gmg, batch, kept_[s]);
      n += kept_[s].size();
    }
    out.resize(n);
    std::size_t i = 0;
    for (const auto& k : kept_)
      for (const Candidate& c : k) {
        out[i].label = c.label;
        out[i].accel = c.accel;
        ++i;
      }
  }

 private:
  std::vector<PluginPtr<PartitionSet>> sets_;
  std::vector<std::vector<Candidate>> kept_;  // per set, last round's
};

}  // namespace slicesched
