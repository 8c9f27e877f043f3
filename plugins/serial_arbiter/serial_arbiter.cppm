// Transfer arbiter "serial": at most one transfer in flight in the whole
// cluster (a baseline, and a safe mode for fabrics that cannot take
// concurrent copies).
module;
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

export module slicesched.plugins.serial_arbiter;
import slicesched.core.plugin;

export namespace slicesched::plugins {

inline constexpr std::string_view kSerialArbiter = "serial";

// Activates the oldest pending intent (by `since`, then `id`) when no port
// is busy, else nothing. Strict FIFO, so starvation-free. Stateless.
class SerialArbiter final : public TransferArbiter {
 public:
  void select(std::span<const TransferIntent> pending, std::span<const std::uint8_t> src_busy,
              std::span<const std::uint8_t> dst_busy, std::vector<std::size_t>& out) override {
    const std::size_t accels = src_busy.size() < dst_busy.size() ? src_busy.size() : dst_busy.size();
    for (std::size_t a = 0; a < src_busy.size(); ++a)
      if (src_busy[a]) return;
    for (std::size_t a = 0; a < dst_busy.size(); ++a)
      if (dst_busy[a]) return;
    std::size_t best = pending.size();
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const TransferIntent& t = pending[i];
      if (t.src >= accels || t.dst >= accels) continue;  // a caller bug: never started
      if (best == pending.size() || t.since < pending[best].since ||
          (t.since == pending[best].since && t.id < pending[best].id))
        best = i;
    }
    if (best < pending.size()) out.push_back(best);
  }
};

// Registers "serial" (takes no arguments).
Status register_serial_arbiter(PluginRegistries& r) {
  return r.arbiter.add(std::string(kSerialArbiter), [](const PluginArgs& args) {
    check_keys(args, {});
    return std::make_unique<SerialArbiter>();
  });
}

}  // namespace slicesched::plugins
