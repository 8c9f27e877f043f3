module;
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

module slicesched.plugins.greedy_arbiter;

namespace slicesched::plugins {

void GreedyArbiter::select(std::span<const TransferIntent> pending, std::span<const std::uint8_t> src_busy,
                           std::span<const std::uint8_t> dst_busy, std::vector<std::size_t>& out) {
  const std::size_t accels = std::min(src_busy.size(), dst_busy.size());
  order_.resize(pending.size());
  std::iota(order_.begin(), order_.end(), std::size_t{0});
  std::sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) {
    const TransferIntent &x = pending[a], &y = pending[b];
    return x.since != y.since ? x.since < y.since : x.id < y.id;
  });
  // A port is taken when in flight, activated this round or reserved.
  src_taken_.assign(src_busy.begin(), src_busy.begin() + static_cast<std::ptrdiff_t>(accels));
  dst_taken_.assign(dst_busy.begin(), dst_busy.begin() + static_cast<std::ptrdiff_t>(accels));
  bool oldest = true;
  for (std::size_t i : order_) {
    const TransferIntent& t = pending[i];
    // An accelerator beyond the flags is a caller bug; such an intent is
    // never started (and does not hold the oldest's reservation).
    if (t.src >= accels || t.dst >= accels) continue;
    const bool free = !src_taken_[t.src] && !dst_taken_[t.dst];
    if (free) out.push_back(i);
    if (free || (oldest && reserve_oldest_)) src_taken_[t.src] = dst_taken_[t.dst] = 1;
    oldest = false;
  }
}

}  // namespace slicesched::plugins
