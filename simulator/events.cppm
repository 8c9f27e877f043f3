// The event kernel shared by the global simulator (predictions) and the
// emulated cluster (ground truth). They share this code, never data.
//
// Event order is defined here and only here: earlier time first, then the
// order in which events were pushed. Pushes happen in a deterministic order,
// so the whole simulation is deterministic.
module;
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <vector>

export module slicesched.simulator.events;
export import slicesched.core.ids;

export namespace slicesched {

struct Event {
  Nanos t = 0;
  std::uint32_t kind = 0;
  std::uint32_t id = 0;
};

// A priority queue of events in the order above. Not thread-safe; one per
// simulation.
//
// Simulated time only moves forward, so this is a monotone radix heap: an
// event sits in the bucket named by the highest bit in which its time
// differs from the last time taken out (bucket 0: equal to it). Taking the
// next event out of an empty bucket 0 moves the smallest non-empty bucket
// down into lower ones. Buckets are FIFO and an event only ever moves to a
// lower bucket, keeping its place among events of equal time, so events of
// equal time leave in push order without a sequence number. Push is O(1);
// each event moves down at most 64 times in its life, in practice a few.
//
// Pushing an event earlier than one already taken out is allowed but slow
// (every bucket is redistributed); the simulators never do it.
class EventQueue {
 public:
  inline void clear() {
    for (auto& b : buckets_) b.clear();
    head0_ = 0;
    mask_ = 0;
    size_ = 0;
    last_ = 0;
  }
  inline void reserve(std::size_t n) { buckets_[0].reserve(n); }
  inline void push(Nanos t, std::uint32_t kind, std::uint32_t id) {
    const std::uint64_t u = ukey(t);
    if (u < last_) [[unlikely]]
      lower_floor(u);
    const unsigned b = bucket_of(u);
    buckets_[b].push_back({t, kind, id});
    mark(b);
    ++size_;
  }
  inline bool empty() const { return size_ == 0; }
  inline std::size_t size() const { return size_; }
  // The next event; does not change the queue. Not for an empty queue.
  inline const Event& top() const {
    if (head0_ < buckets_[0].size()) return buckets_[0][head0_];
    const auto& b = buckets_[std::countr_zero(mask_) + 1];
    return *std::min_element(b.begin(), b.end(), [](const Event& x, const Event& y) { return x.t < y.t; });
  }
  // The time of the next event, committing to it: events pushed afterwards
  // should not be earlier (they may be, at a cost). Not for an empty queue.
  inline Nanos next_time() {
    if (head0_ == buckets_[0].size()) refill();
    return buckets_[0][head0_].t;
  }
  inline Event pop() {
    if (head0_ == buckets_[0].size()) refill();
    --size_;
    return buckets_[0][head0_++];
  }
  // Takes the next event out if it is at time `t` (the next event is never
  // earlier than `t`, or `t` is not what next_time() returned).
  inline bool pop_at(Nanos t, Event& out) {
    if (head0_ == buckets_[0].size()) {
      if (size_ == 0 || last_ == ukey(t) || top().t != t) return false;
      refill();
    }
    if (buckets_[0][head0_].t != t) return false;
    --size_;
    out = buckets_[0][head0_++];
    return true;
  }

 private:
  // Times as unsigned keys in the same order.
  inline static std::uint64_t ukey(Nanos t) { return static_cast<std::uint64_t>(t) ^ (std::uint64_t{1} << 63); }
  inline unsigned bucket_of(std::uint64_t u) const {
    return static_cast<unsigned>(64 - std::countl_zero(u ^ last_));
  }
  // Bucket b >= 1 is bit b - 1 of the mask; bucket 0 is tracked by its head.
  inline void mark(unsigned b) { mask_ |= std::uint64_t{b != 0} << ((b - 1) & 63); }
  // Bucket 0 is used up: moves the smallest non-empty bucket down.
  inline void refill() {
    buckets_[0].clear();
    head0_ = 0;
    const unsigned b = static_cast<unsigned>(std::countr_zero(mask_)) + 1;
    auto& from = buckets_[b];
    std::uint64_t m = ~std::uint64_t{0};
    for (const Event& e : from) m = std::min(m, ukey(e.t));
    last_ = m;
    mask_ &= ~(std::uint64_t{1} << (b - 1));
    for (const Event& e : from) {
      const unsigned nb = bucket_of(ukey(e.t));
      buckets_[nb].push_back(e);
      mark(nb);
    }
    from.clear();
  }
  // Makes `u` the floor: redistributes everything. Equal times share a
  // bucket and are re-pushed in their order, so push order survives.
  void lower_floor(std::uint64_t u) {
    scratch_.clear();
    scratch_.insert(scratch_.end(), buckets_[0].begin() + static_cast<std::ptrdiff_t>(head0_), buckets_[0].end());
    for (unsigned b = 1; b < buckets_.size(); ++b) scratch_.insert(scratch_.end(), buckets_[b].begin(), buckets_[b].end());
    for (auto& b : buckets_) b.clear();
    head0_ = 0;
    mask_ = 0;
    last_ = u;
    for (const Event& e : scratch_) {
      const unsigned nb = bucket_of(ukey(e.t));
      buckets_[nb].push_back(e);
      mark(nb);
    }
  }

  std::array<std::vector<Event>, 65> buckets_;
  std::vector<Event> scratch_;
  std::size_t head0_ = 0;   // bucket 0 is consumed from here
  std::uint64_t mask_ = 0;  // bit b - 1: bucket b >= 1 is not empty
  std::size_t size_ = 0;
  std::uint64_t last_ = 0;  // the floor: ukey of the last time taken out
};

// The executor's queue order as one integer, shared by the global simulator
// and the emulated cluster: higher priority first (priorities are int16,
// checked at instantiate), then earlier issue (48 bits of issue sequence).
// Smaller runs first.
inline std::uint64_t queue_key(std::int32_t priority, std::uint64_t seq) {
  const auto rank = static_cast<std::uint64_t>(32767 - std::clamp(priority, -32768, 32767));
  return rank << 48 | (seq & ((std::uint64_t{1} << 48) - 1));
}

// Seconds to simulated ns, rounded to nearest; negative predictions are 0.
inline Nanos to_nanos(double seconds) { return seconds > 0 ? static_cast<Nanos>(seconds * 1e9 + 0.5) : 0; }

}  // namespace slicesched
