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
  // Registers a type name, returning the existing id if already known.
  AccelTypeId add_type(std::string_view name);
  // Adds a link class; the first one added is the default for pairs that
  // have no explicit link.
  Result<LinkClassId> add_link_class(std::string name, double bandwidth_bytes_per_s, double latency_s);
  // Adds an accelerator; fails on a duplicate name or HBM <= 0.
  Result<AccelId> add(std::string name, std::string_view type, std::int64_t hbm_bytes);
  // Sets the link class of the unordered pair (a, b).
  Status link(AccelId a, AccelId b, LinkClassId cls);

  inline std::size_t size() const { return accels_.size(); }
  inline bool contains(AccelId a) const { return a < accels_.size(); }
  inline const AcceleratorSpec& operator[](AccelId a) const { return accels_[a]; }
  inline AccelTypeId type(AccelId a) const { return accels_[a].type; }
  inline std::int64_t hbm_bytes(AccelId a) const { return accels_[a].hbm_bytes; }
  inline const std::string& type_name(AccelTypeId t) const { return types_[t]; }
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
  std::vector<std::string> types_;
  std::vector<LinkClass> links_;
  // Name -> id, so adding and finding by name stay O(1) in big clusters.
  std::unordered_map<std::string, AccelId> by_name_;
  // Only the pairs set with link(), keyed by pair_key(a, b): a dense
  // n x n table took 18.6 GB at n = 100,000, whatever the config used.
  std::unordered_map<std::uint64_t, LinkClassId> pair_;
};

}  // namespace slicesched
