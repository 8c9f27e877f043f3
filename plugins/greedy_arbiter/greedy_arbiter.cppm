// Transfer arbiter "greedy": the core's default rule (OldestFirstRule): a
// maximal conflict-free matching of pending transfers to free (source,
// destination) ports, oldest intent first, the oldest's ports reserved
// while it is blocked.
//
//   args: {"reserve_oldest": true}   // optional, default true
//
// With reserve_oldest (the default, and the rule of a run whose config names
// no arbiter) it says so (uses_default_rule()) and the global simulator
// applies the rule inline, without calling select(); with reserve_oldest =
// false it calls select().
module;
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

export module slicesched.plugins.greedy_arbiter;
import slicesched.core.plugin;

export namespace slicesched::plugins {

inline constexpr std::string_view kGreedyArbiter = "greedy";

// Not thread-safe (the rule's scratch buffers).
class GreedyArbiter final : public TransferArbiter {
 public:
  explicit GreedyArbiter(bool reserve_oldest = true) : rule_(reserve_oldest) {}

  void select(std::span<const TransferIntent> pending, std::span<const std::uint8_t> src_busy,
              std::span<const std::uint8_t> dst_busy, std::vector<std::size_t>& out) override {
    rule_.select(pending, src_busy, dst_busy, out);
  }
  bool uses_default_rule() const override { return rule_.reserve_oldest(); }
  bool reserve_oldest() const { return rule_.reserve_oldest(); }

 private:
  OldestFirstRule rule_;
};

// Registers "greedy".
Status register_greedy_arbiter(PluginRegistries& r) {
  return r.arbiter.add(std::string(kGreedyArbiter), [](const PluginArgs& args) {
    check_keys(args, {"reserve_oldest"});
    return std::make_unique<GreedyArbiter>(bool_arg(args, "reserve_oldest", true));
  });
}

}  // namespace slicesched::plugins
