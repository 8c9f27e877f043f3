// The plugin boundary: every call into a plugin goes through a guard that
// catches whatever the plugin throws (a std::exception, or `throw 42`)
// and turns it into a PluginFailure naming that plugin, so a run fails
// with one line blaming the right part ("partition set 'ring' threw: ..."),
// never with std::terminate. A partition set's candidates are checked at
// the boundary too: one naming an accelerator the cluster does not have,
// or not one accelerator per operator, is that plugin's failure.
//
// The plugin interfaces return values, not Statuses, so a guard throws;
// compose's run() catches PluginFailure and returns it as a Status.
module;
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

export module slicesched.compose.guard;
import slicesched.core.plugin;

export namespace slicesched {

// A plugin failed; what() is one line naming it ("<kind> '<name>' threw: ...").
class PluginFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the exception being handled is, as a user reads it: its what(), or
// for any other type "a non-standard exception of type int". Call only
// inside a catch block.
std::string describe_current_exception();

// What calls into one plugin cost: how many, and the wall time they took
// (the plugin's own time). Shared by every guard of that plugin (the
// what-if workers' arbiters are several objects); safe for concurrent
// calls.
struct PluginUse {
  std::atomic<std::uint64_t> calls{0};
  // In the guard's clock ticks: the CPU's time-stamp counter where there
  // is one (a read costs a few ns; a steady_clock read pair cost 3 % of a
  // 10,000-accelerator run, whose what-ifs ask the arbiter millions of
  // times), else steady-clock nanoseconds. seconds() converts.
  std::atomic<std::int64_t> ticks{0};
  double seconds() const;
};

// Each wraps a plugin object (which keeps its library loaded) and is
// itself a plugin of the same interface. `who` names it in failures, e.g.
// "partition set 'ring'"; `use`, when given, counts its calls and time.
PluginPtr<PartitionSet> guard(PluginPtr<PartitionSet> inner, std::string who, std::shared_ptr<PluginUse> use = nullptr);
PluginPtr<PlacementPolicy> guard(PluginPtr<PlacementPolicy> inner, std::string who,
                                 std::shared_ptr<PluginUse> use = nullptr);
PluginPtr<TransferArbiter> guard(PluginPtr<TransferArbiter> inner, std::string who,
                                 std::shared_ptr<PluginUse> use = nullptr);
PluginPtr<Estimator> guard(PluginPtr<Estimator> inner, std::string who, std::shared_ptr<PluginUse> use = nullptr);
PluginPtr<CandidateFilter> guard(PluginPtr<CandidateFilter> inner, std::string who,
                                 std::shared_ptr<PluginUse> use = nullptr);
PluginPtr<CandidateScore> guard(PluginPtr<CandidateScore> inner, std::string who,
                                std::shared_ptr<PluginUse> use = nullptr);

}  // namespace slicesched
