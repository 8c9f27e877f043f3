// Several partition sets offered as one: candidates are their union, in
// the order the sets were given (the config's order).
module;
#include <memory>
#include <utility>
#include <vector>

export module slicesched.engine.union_partition_set;
export import slicesched.core.plugin;

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

 private:
  std::vector<PluginPtr<PartitionSet>> sets_;
};

}  // namespace slicesched
