// The small integer ids shared by every core module. Ids are dense indices
// into flat tables, which keeps clones and simulator lookups cheap.
module;
#include <algorithm>
#include <cstdint>
#include <limits>

export module slicesched.core.ids;

export namespace slicesched {

using TemplateId = std::uint32_t;
using OpKindId = std::uint32_t;     // one template operator, across all templates
using AccelId = std::uint32_t;      // an accelerator in the AcceleratorSet
using AccelTypeId = std::uint16_t;  // e.g. "H100", "cpu"
using LinkClassId = std::uint16_t;  // e.g. "nvlink", "pcie"
using OpId = std::uint32_t;         // a live operator in the GMG (slot index)
using InstanceId = std::uint64_t;   // a graph instance, never reused

// Simulated and recorded time: integer nanoseconds, so golden timelines are
// exact and the simulator is deterministic.
using Nanos = std::int64_t;

inline constexpr int kMaxFeatures = 8;
inline constexpr int kMaxDims = 8;  // named dims per template
inline constexpr AccelId kNoAccel = std::numeric_limits<AccelId>::max();
inline constexpr OpId kNoOp = std::numeric_limits<OpId>::max();

// The executor's queue order as one integer, shared by the global
// simulator, the emulated cluster and the live executor: higher priority
// first (priorities are int16, checked at instantiate), then earlier issue
// (48 bits of issue sequence). Smaller runs first.
inline std::uint64_t queue_key(std::int32_t priority, std::uint64_t seq) {
  const auto rank = static_cast<std::uint64_t>(32767 - std::clamp(priority, -32768, 32767));
  return rank << 48 | (seq & ((std::uint64_t{1} << 48) - 1));
}

}  // namespace slicesched
