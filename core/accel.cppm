// The Accelerator Set: every device the scheduler may place operators on,
// its type (the estimator key), its HBM capacity, and the class of the link
// between every pair (the transfer estimator's prior).
module;
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

export module slicesched.core.accel;
import slicesched.core.ids;
import slicesched.core.status;

export namespace slicesched {

struct AcceleratorSpec {
  std::string name;
  AccelTypeId type = 0;
  // A tensor-parallel group (tp > 1): the HBM of all its GPUs together,
  // less what every GPU holds a copy of (config/models.cpp).
  std::int64_t hbm_bytes = 0;
};

struct LinkClass {
  std::string name;
  double bandwidth_bytes_per_s = 0;  // prior for the transfer estimator
  double latency_s = 0;
};

// Built once, then shared read-only (GMG clones share one instance). Not
// thread-safe for writers.
class AcceleratorSet {
 public:
  // Registers a type, returning the existing id if already known. `tp` > 1:
  // a tensor-parallel group of `tp` GPUs of type `name` that runs each
  // operator sharded over them, a type of its own named "NAME/tpN" (its
  // operators cost what one rank's share and the all-reduces cost).
  AccelTypeId add_type(std::string_view name, int tp = 1);
  // Adds a link class; the first one added is the default for pairs that
  // have no explicit link.
  Result<LinkClassId> add_link_class(std::string name, double bandwidth_bytes_per_s, double latency_s);
  // Adds an accelerator (a tensor-parallel group of `tp` GPUs when tp > 1);
  // fails on a duplicate name, HBM <= 0 or tp < 1.
  Result<AccelId> add(std::string name, std::string_view type, std::int64_t hbm_bytes, int tp = 1);
  // Sets the link class of the unordered pair (a, b).
  Status link(AccelId a, AccelId b, LinkClassId cls);

  inline std::size_t size() const { return accels_.size(); }
  inline bool contains(AccelId a) const { return a < accels_.size(); }
  inline const AcceleratorSpec& operator[](AccelId a) const { return accels_[a]; }
  inline AccelTypeId type(AccelId a) const { return accels_[a].type; }
  inline std::int64_t hbm_bytes(AccelId a) const { return accels_[a].hbm_bytes; }
  // "H100", or "H100/tp4" for a tensor-parallel group of four.
  inline const std::string& type_name(AccelTypeId t) const { return types_[t].name; }
  // The GPUs' own type ("H100" for both) and the group's size (1: one GPU).
  inline const std::string& base_type_name(AccelTypeId t) const { return types_[t].base; }
  inline int type_tp(AccelTypeId t) const { return types_[t].tp; }
  inline std::size_t type_count() const { return types_.size(); }
  // The accelerator's id, or -1. Constant time (a cluster of 100,000 is
  // built by name).
  int find(std::string_view name) const;

  // Link class of the pair; the default class when none was set. Requires
  // at least one link class.
  LinkClassId link_class(AccelId a, AccelId b) const;
  // The pairs given a class with link(), each once as (a, b) with a < b:
  // every other pair has the default class.
  std::vector<std::pair<AccelId, AccelId>> linked_pairs() const;
  inline const LinkClass& link(LinkClassId id) const { return links_[id]; }
  inline std::size_t link_class_count() const { return links_.size(); }

 private:
  std::vector<AcceleratorSpec> accels_;
  struct Type {
    std::string name, base;
    int tp = 1;
  };
  std::vector<Type> types_;
  std::vector<LinkClass> links_;
  // Name -> id, so adding and finding by name stay O(1) in big clusters.
  std::unordered_map<std::string, AccelId> by_name_;
  // Only the pairs set with link(), keyed by pair_key(a, b): a dense
  // n x n table took 18.6 GB at n = 100,000, whatever the config used.
  std::unordered_map<std::uint64_t, LinkClassId> pair_;
};

}  // namespace slicesched
