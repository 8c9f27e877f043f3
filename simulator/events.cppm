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
import slicesched.core.ids;

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
    // Only the buckets in use: a what-if clears its queue for every candidate.
    buckets_[0].reset();
    for (std::uint64_t m = mask_ & ~std::uint64_t{1}; m != 0; m &= m - 1) buckets_[std::countr_zero(m)].reset();
    buckets_[64].reset();
    head0_ = 0;
    mask_ = 0;
    top_bucket_ = false;
    size_ = 0;
    last_ = 0;
  }
  inline void reserve(std::size_t n) {
    if (buckets_[0].store.size() < n) buckets_[0].store.resize(n);
  }
  inline void push(Nanos t, std::uint32_t kind, std::uint32_t id) {
    const std::uint64_t u = ukey(t);
    if (u < last_) [[unlikely]]
      lower_floor(u);
    const unsigned b = bucket_of(u);
    buckets_[b].append({t, kind, id}, u);
    mark(b);
    ++size_;
  }
  inline bool empty() const { return size_ == 0; }
  inline std::size_t size() const { return size_; }
  // The next event; does not change the queue. Not for an empty queue.
  inline const Event& top() const {
    if (head0_ < buckets_[0].n) return buckets_[0].store[head0_];
    const Bucket& b = buckets_[lowest()];
    const Event* best = &b.store[0];
    for (std::size_t k = 1; k < b.n; ++k)
      if (b.store[k].t < best->t) best = &b.store[k];
    return *best;
  }
  // The time of the next event, committing to it: events pushed afterwards
  // should not be earlier (they may be, at a cost). Not for an empty queue.
  inline Nanos next_time() {
    if (head0_ == buckets_[0].n) refill();
    return buckets_[0].store[head0_].t;
  }
  inline Event pop() {
    if (head0_ == buckets_[0].n) refill();
    --size_;
    return buckets_[0].store[head0_++];
  }
  // Takes the next event out if it is at time `t` (the next event is never
  // earlier than `t`, or `t` is not what next_time() returned).
  inline bool pop_at(Nanos t, Event& out) {
    if (head0_ == buckets_[0].n) {
      if (size_ == 0 || last_ == ukey(t) || top().t != t) return false;
      refill();
    }
    const Event& e = buckets_[0].store[head0_];
    if (e.t != t) return false;
    out = e;
    ++head0_;
    --size_;
    return true;
  }

 private:
  // A FIFO bucket: storage only grows, so a reused queue allocates nothing.
  struct Bucket {
    std::vector<Event> store;
    std::size_t n = 0;
    std::uint64_t min = ~std::uint64_t{0};  // smallest key in it, so a refill needs no search
    inline void append(const Event& e, std::uint64_t u) {
      if (n == store.size()) [[unlikely]]
        grow();
      store[n++] = e;
      min = u < min ? u : min;
    }
    inline void reset() {
      n = 0;
      min = ~std::uint64_t{0};
    }
    [[gnu::noinline]] void grow() { store.resize(store.empty() ? 64 : 2 * store.size()); }
  };
  // Times as unsigned keys in the same order.
  inline static std::uint64_t ukey(Nanos t) { return static_cast<std::uint64_t>(t) ^ (std::uint64_t{1} << 63); }
  inline unsigned bucket_of(std::uint64_t u) const { return static_cast<unsigned>(64 - std::countl_zero(u ^ last_)); }
  // Bucket b < 64 is bit b of the mask (bit 0, bucket 0, is ignored: it
  // is tracked by its head); bucket 64 (times of both signs) by a flag.
  inline void mark(unsigned b) {
    if (b < 64) [[likely]]
      mask_ |= std::uint64_t{1} << b;
    else
      top_bucket_ = true;
  }
  inline unsigned lowest() const {
    const std::uint64_t m = mask_ & ~std::uint64_t{1};
    return m ? static_cast<unsigned>(std::countr_zero(m)) : 64;
  }
  // Bucket 0 is used up: moves the smallest non-empty bucket down.
  void refill() {
    buckets_[0].reset();
    head0_ = 0;
    const unsigned b = lowest();
    Bucket& from = buckets_[b];
    last_ = from.min;
    if (b < 64)
      mask_ &= ~(std::uint64_t{1} << b);
    else
      top_bucket_ = false;
    for (std::size_t k = 0; k < from.n; ++k) {
      const Event& e = from.store[k];
      const std::uint64_t u = ukey(e.t);
      const unsigned nb = bucket_of(u);
      buckets_[nb].append(e, u);
      mark(nb);
    }
    from.reset();
  }
  // Makes `u` the floor: redistributes everything. Equal times share a
  // bucket and are re-pushed in their order, so push order survives.
  [[gnu::noinline]] void lower_floor(std::uint64_t u) {
    scratch_.clear();
    for (std::size_t k = head0_; k < buckets_[0].n; ++k) scratch_.push_back(buckets_[0].store[k]);
    for (unsigned b = 1; b < buckets_.size(); ++b)
      for (std::size_t k = 0; k < buckets_[b].n; ++k) scratch_.push_back(buckets_[b].store[k]);
    for (auto& b : buckets_) b.reset();
    head0_ = 0;
    mask_ = 0;
    top_bucket_ = false;
    last_ = u;
    for (const Event& e : scratch_) {
      const unsigned nb = bucket_of(ukey(e.t));
      buckets_[nb].append(e, ukey(e.t));
      mark(nb);
    }
  }

  std::array<Bucket, 65> buckets_;
  std::vector<Event> scratch_;
  std::size_t head0_ = 0;    // bucket 0 is consumed from here
  std::uint64_t mask_ = 0;   // bit b in 1..63: bucket b is not empty
  bool top_bucket_ = false;  // bucket 64 is not empty
  std::size_t size_ = 0;
  std::uint64_t last_ = 0;  // the floor: ukey of the last time taken out
};

// Seconds to simulated ns, rounded to nearest; negative predictions (and
// NaN) are 0, and past 1e9 s (31.7 years) they saturate there, so that a
// few such durations still add up inside an int64 (a cast of a larger
// double is undefined). The inputs are range-checked where they are read.
inline constexpr double kMaxDurationSeconds = 1e9;
inline Nanos to_nanos(double seconds) {
  if (!(seconds > 0)) return 0;
  if (seconds >= kMaxDurationSeconds) return static_cast<Nanos>(kMaxDurationSeconds * 1e9);
  return static_cast<Nanos>(seconds * 1e9 + 0.5);
}

}  // namespace slicesched
