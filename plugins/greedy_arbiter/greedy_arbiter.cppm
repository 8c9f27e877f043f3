// Transfer arbiter "greedy": a maximal conflict-free matching of pending
// transfers to free (source, destination) ports, oldest intent first.
//
//   args: {"reserve_oldest": true}   // optional, default true
module;
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

export module slicesched.plugins.greedy_arbiter;
export import slicesched.core.plugin;

export namespace slicesched::plugins {

inline constexpr std::string_view kGreedyArbiter = "greedy";

// Walks the intents oldest first (by `since`, then `id`) and activates each
// whose source and destination are neither busy nor taken this round, so
// the result is maximal: every intent left out shares a port with one taken
// or one in flight. Indices are appended in that age order.
//
// Oldest-first alone does not prevent starvation when transfers last
// several rounds: the oldest intent may find its source free while its
// destination is busy, a younger one takes the source, and so on forever.
// With reserve_oldest (the default), when the oldest intent is blocked by a
// busy port, both its ports are withheld from younger intents this round;
// ports in flight always drain, so it starts as soon as both are free. Each
// intent thus waits at most D rounds as the oldest (D: the longest transfer,
// in rounds), hence at most k*D rounds in all with k intents pending at its
// arrival (k rounds when transfers finish within the round that started
// them). The price is that the withheld free port may idle for a while;
// without the reservation the matching is maximal over all intents.
//
// With reserve_oldest (the default, and the rule of a run whose config names
// no arbiter) the global simulator applies this rule inline, without
// calling select(); with reserve_oldest = false it calls select().
//
// Not thread-safe (scratch buffers); allocates only when the number of
// pending intents or accelerators grows.
class GreedyArbiter final : public TransferArbiter {
 public:
  explicit GreedyArbiter(bool reserve_oldest = true) : reserve_oldest_(reserve_oldest) {}

  void select(std::span<const TransferIntent> pending, std::span<const std::uint8_t> src_busy,
              std::span<const std::uint8_t> dst_busy, std::vector<std::size_t>& out) override;
  // The default rule, which the global simulator runs inline.
  bool is_default_greedy() const override { return reserve_oldest_; }
  bool reserve_oldest() const { return reserve_oldest_; }

 private:
  bool reserve_oldest_;
  std::vector<std::size_t> order_;
  std::vector<std::uint8_t> src_taken_, dst_taken_;
};

// Registers "greedy".
Status register_greedy_arbiter(PluginRegistries& r) {
  return r.arbiter.add(std::string(kGreedyArbiter), [](const PluginArgs& args) {
    check_keys(args, {"reserve_oldest"});
    return std::make_unique<GreedyArbiter>(bool_arg(args, "reserve_oldest", true));
  });
}

}  // namespace slicesched::plugins
