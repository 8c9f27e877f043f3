// Requests pushed at run time, for live front ends (the HTTP server): an
// open-ended request source next to the tenants' recorded streams. Other
// threads push; the engine thread takes what was pushed at each step and
// hands each request to its tenant, which tells the request's sink about
// every token it samples and how the request ended.
module;
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

export module slicesched.engine.inbox;
import slicesched.core.ids;
import slicesched.core.sampling;

export namespace slicesched {

// The error a live request ends with when the engine stops before it
// finished (a cancel): the request was never run to its end, so a front end
// may run it again later (batch jobs do).
inline constexpr const char* kCancelledError = "cancelled: the server stopped before the request finished";
// The error a request ends with when its client gave up (RequestSink::abandoned).
inline constexpr const char* kAbandonedError = "cancelled: the client went away";

// Where a live request's results go. Called on the engine thread only, in
// order: on_token per sampled token, then on_end exactly once. Must not
// block (hand the data to the client's thread) and must not throw.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  virtual void on_token(std::int64_t token, Nanos t) = 0;
  // Done (every token generated) or failed (`error` not empty).
  virtual void on_end(std::int64_t prompt_tokens, std::int64_t generated, const std::string& error, Nanos t) = 0;
  // True once nobody waits for the result (the client disconnected); may be
  // read from the engine thread at any time. The engine then ends the
  // request with kAbandonedError: waiting, it leaves the queue; running, its
  // sequence leaves the batch at its iteration's end, and the next
  // iteration's KV cache no longer holds it (as a finished one's).
  virtual bool abandoned() const { return false; }
  // The log-probabilities of the token the next on_token brings, called
  // just before it when the request asked for them (sampling->logprobs >= 0).
  virtual void on_logprob(const TokenLogprob&) {}
  // True once the output is complete before max_tokens (a stop string, a
  // stop token, end of sequence), read by the engine thread right after
  // on_token: the request then ends as done (on_end, no error) and leaves
  // the batch, as one that reached max_tokens.
  virtual bool complete() const { return false; }
};

// One request from a client: its tenant (the engine's index), prompt token
// ids (not empty) and the tokens to generate (>= 1). The sink is shared
// with the client's thread, which may outlive the engine's use of it.
struct LiveRequest {
  std::uint32_t tenant = 0;
  std::vector<std::int64_t> prompt;
  std::int64_t max_tokens = 1;
  std::shared_ptr<RequestSink> sink;
  // How its tokens are chosen (null: greedy, as a recorded stream's).
  std::shared_ptr<const SamplingParams> sampling;
};

// Thread-safe: push and close from any thread; take from the engine thread.
// Once closed, push refuses, and take still returns what was pushed before
// the close (so nothing accepted is dropped).
//
// The inbox owns the engine's one wake: the counter a waiting backend
// watches (LiveCluster::set_interrupt) and the waker that ends its wait at
// once. Pushes, the close and wake() go through it; a signal handler, which
// may not lock, bumps counter() only (the wait sees it within its poll).
class RequestInbox {
 public:
  RequestInbox() = default;
  // Counts on `wake` instead of a counter of its own (null: its own): a
  // counter a signal handler bumps too (cli/signals), which must outlive
  // the inbox.
  explicit RequestInbox(std::atomic<int>* wake) : counter_(wake ? wake : &own_) {}
  RequestInbox(const RequestInbox&) = delete;
  RequestInbox& operator=(const RequestInbox&) = delete;

  // Called after every push, at the close and by wake() (any thread, under
  // the inbox's lock: it must not push): ends the engine's wait (e.g.
  // LiveCluster::wake). Clear it before what it calls goes away.
  void set_waker(std::function<void()> waker) {
    std::lock_guard lk(mu_);
    waker_ = std::move(waker);
  }
  // The counter every wake increments: the backend's interrupt flag, so
  // that a wait in advance_to ends when a request arrives.
  std::atomic<int>& counter() { return *counter_; }
  // Ends the engine's wait now (a drain or a cancel decided off a signal
  // handler, e.g. a drain's deadline).
  void wake() {
    std::lock_guard lk(mu_);
    counter_->fetch_add(1);
    if (waker_) waker_();
  }

  // False (and the request is not kept) once the inbox is closed.
  bool push(LiveRequest r) {
    // The waker is called under the lock, so that once set_waker({}) or
    // close() returned no push calls into a backend that may be gone.
    std::lock_guard lk(mu_);
    if (closed_) return false;
    pending_.push_back(std::move(r));
    counter_->fetch_add(1);
    if (waker_) waker_();
    return true;
  }
  std::vector<LiveRequest> take() {
    std::lock_guard lk(mu_);
    return std::exchange(pending_, {});
  }
  void close() {
    std::lock_guard lk(mu_);
    closed_ = true;
    counter_->fetch_add(1);
    if (waker_) waker_();
  }
  bool closed() const {
    std::lock_guard lk(mu_);
    return closed_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<LiveRequest> pending_;
  bool closed_ = false;
  std::atomic<int> own_{0};
  std::atomic<int>* counter_ = &own_;
  std::function<void()> waker_;
};

}  // namespace slicesched
