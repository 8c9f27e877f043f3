// The event kernel shared by the global simulator (predictions) and the
// emulated cluster (ground truth). They share this code, never data.
//
// Event order is defined here and only here: earlier time first, then the
// order in which events were pushed. Pushes happen in a deterministic order,
// so the whole simulation is deterministic.
module;
#include <algorithm>
#include <cstdint>
#include <vector>

export module slicesched.simulator.events;
export import slicesched.core.ids;

export namespace slicesched {

struct Event {
  Nanos t = 0;
  std::uint64_t seq = 0;  // push order: the total tie-break
  std::uint32_t kind = 0;
  std::uint32_t id = 0;
};

// A min-heap of events. Not thread-safe; one per simulation.
class EventQueue {
 public:
  inline void clear() {
    heap_.clear();
    next_seq_ = 0;
  }
  inline void reserve(std::size_t n) { heap_.reserve(n); }
  inline void push(Nanos t, std::uint32_t kind, std::uint32_t id) {
    heap_.push_back({t, next_seq_++, kind, id});
    std::push_heap(heap_.begin(), heap_.end(), later);
  }
  inline bool empty() const { return heap_.empty(); }
  inline const Event& top() const { return heap_.front(); }
  inline Event pop() {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    Event e = heap_.back();
    heap_.pop_back();
    return e;
  }
  inline std::size_t size() const { return heap_.size(); }

 private:
  // The single definition of event order (std heaps want "less", so this
  // says which event comes later).
  inline static bool later(const Event& a, const Event& b) { return a.t != b.t ? a.t > b.t : a.seq > b.seq; }
  std::vector<Event> heap_;
  std::uint64_t next_seq_ = 0;
};

// Seconds to simulated ns, rounded to nearest; negative predictions are 0.
inline Nanos to_nanos(double seconds) { return seconds > 0 ? static_cast<Nanos>(seconds * 1e9 + 0.5) : 0; }

}  // namespace slicesched
