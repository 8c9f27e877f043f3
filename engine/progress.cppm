// Progress of a run as an engine observer: how many requests have ended
// (done or failed) out of all of them, reported about every 1 %.
module;
#include <cstddef>
#include <functional>
#include <utility>

export module slicesched.engine.progress;
import slicesched.engine.observer;
import slicesched.core.ids;
import slicesched.engine.tenant;

export namespace slicesched {

// (now, requests ended, requests in all).
using ProgressFn = std::function<void(Nanos, std::size_t, std::size_t)>;

// Calls `fn` whenever another 1 % of `total` requests has ended, and when
// the last one does. Not thread-safe (the engine's thread).
class ProgressObserver final : public EngineObserver {
 public:
  ProgressObserver(ProgressFn fn, std::size_t total) : fn_(std::move(fn)), total_(total) {}
  void on_request(const RequestEvent& e, const RequestRecord& /*record*/) override {
    if (e.kind != RequestEvent::Kind::kDone && e.kind != RequestEvent::Kind::kFailed) return;
    ++ended_;
    if (fn_ && (ended_ == total_ || (ended_ - reported_) * 100 >= total_)) {
      fn_(e.t, ended_, total_);
      reported_ = ended_;
    }
  }

 private:
  ProgressFn fn_;
  std::size_t total_ = 0, ended_ = 0, reported_ = 0;
};

}  // namespace slicesched
