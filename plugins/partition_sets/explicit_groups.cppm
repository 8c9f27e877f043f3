// Partition set "explicit": groups of accelerators listed in the
// configuration, optionally pinning tenants to some of them (the paper's
// static baselines).
//
//   args: {"groups": [[0, 1], ["gpu2", "gpu3"]],      // ids or names
//          "tenants": {"3": [0], "4": [0, 1]}}        // optional
//
// Each group is one candidate with the contiguous split, labelled with its
// members' names joined by '+'. A tenant listed under "tenants" gets only
// its groups, in the listed order; any other tenant gets every group, in
// configuration order.
module;
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

export module slicesched.plugins.partition_sets:explicit_groups;
import slicesched.core.plugin;
import :contiguous;

export namespace slicesched::plugins {

// Not thread-safe (caches the groups resolved for the last cluster seen).
class ExplicitGroups final : public PartitionSet {
 public:
  // Validates the shape of `args`; throws bad_arg naming the key (e.g.
  // "key 'groups[1][0]': must be an accelerator id (>= 0) or name").
  explicit ExplicitGroups(const PluginArgs& args);

  // Resolves names and checks ids against `accels`. Fails naming the key:
  // "partition set 'explicit': key 'groups[0][1]': no accelerator named 'x'".
  Status bind(const AcceleratorSet& accels) override;

  // Binds to gmg's cluster first if not bound to it yet; a cluster the
  // groups do not fit (bind() failed) gets no candidates.
  std::vector<Candidate> candidates(const Gmg& gmg, const Batch& batch) override;

 private:
  // An accelerator as configured: an id, or a name (id kNoAccel).
  struct Member {
    AccelId id = kNoAccel;
    std::string name;
  };
  std::vector<std::vector<Member>> spec_;
  std::map<std::uint32_t, std::vector<std::size_t>> tenants_;

  const AcceleratorSet* bound_to_ = nullptr;
  std::size_t bound_size_ = 0;
  bool bound_ok_ = false;
  std::vector<AccelGroup> groups_;
};

}  // namespace slicesched::plugins
