// The one free-list slot allocator: the GMG's operators and edges, and the
// clusters' tasks and transfers live in tables indexed by slot, and a
// finished entry's slot is reused, so a long run's tables stay as large as
// their peak rather than their total.
module;
#include <cstddef>
#include <cstdint>
#include <vector>

export module slicesched.core.slots;

export namespace slicesched {

// Slots given back, reused last first (the most recently touched memory).
// Not thread-safe: its owner's lock, if any, covers it.
class FreeSlots {
 public:
  // A slot for a new entry of `table` (a vector or deque): the last one
  // given back, its entry reset to a default value, or a new entry at the
  // end.
  template <class Table>
  std::uint32_t take(Table& table) {
    return take([&] { table.emplace_back(); }, [&](std::uint32_t s) { table[s] = typename Table::value_type{}; },
                table.size());
  }
  // The same for parallel tables of `size` entries: `grow()` appends one
  // entry to each, `reset(slot)` clears a reused slot in each.
  template <class Grow, class Reset>
  std::uint32_t take(Grow&& grow, Reset&& reset, std::size_t size) {
    if (free_.empty()) {
      grow();
      return static_cast<std::uint32_t>(size);
    }
    const std::uint32_t s = free_.back();
    free_.pop_back();
    reset(s);
    return s;
  }
  void give_back(std::uint32_t slot) { free_.push_back(slot); }

 private:
  std::vector<std::uint32_t> free_;
};

}  // namespace slicesched
