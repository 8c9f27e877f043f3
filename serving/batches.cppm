// Batch jobs as the offline tenant: a thread that feeds the pending lines of
// the batch store into the engine's inbox (at most `max_inflight` at once,
// so a million-line batch holds a bounded queue) and writes each result back
// as it ends. Lines are routed to their model's offline tenant, so they run
// at its priority and fill the slices interactive traffic leaves idle.
//
// Threading: start/wake/stop from any one owner thread; sinks report from
// the engine thread; the store is written from this runner's own thread
// only (an fsync never stalls the engine).
module;
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

export module slicesched.serving.batches;
import slicesched.serving.api;
import slicesched.serving.batch_store;
import slicesched.engine.inbox;
import slicesched.core.sampling;
import slicesched.core.status;

export namespace slicesched::serving {

// A completion request routed to a tenant: the request (its sink not set)
// and the model that serves it.
struct Routed {
  LiveRequest request;
  const ServedModel* model = nullptr;
  GenerationOptions gen;  // its stop conditions (the sampling is in request)
};
// Routes one line's body (JSON text) to an offline tenant, or says why not.
using BatchRoute = std::function<std::variant<Routed, ApiError>(const std::string& body)>;

class BatchRunner {
 public:
  // `store` and `inbox` are the caller's and must outlive the runner.
  BatchRunner(BatchStore& store, RequestInbox& inbox, BatchRoute route, std::size_t max_inflight);
  ~BatchRunner();
  void start();
  // New pending lines: look now rather than at the next poll.
  void wake();
  // Writes the results that arrived and stops feeding. Call after the
  // engine stopped: a line that ended with kCancelledError, or that was
  // never run, stays pending in the store and runs after a restart.
  // Returns the first store error met, if any.
  Status stop();

  // POST /v1/batches/{id}/cancel: the lines not in the engine are given up
  // now, those in it finish (their results kept); see BatchStore::stop_batch.
  // Any thread.
  Result<std::optional<BatchInfo>> cancel(const std::string& id);

  // For the front end's metrics: lines in the engine now.
  std::size_t inflight() const;
  // Fail-safe writes: a result the store refuses (a full disk: ENOSPC,
  // SQLITE_FULL; EIO) is kept here and written again after a back-off that
  // doubles from 1 s to 30 s; meanwhile no new line is fed (the batches
  // are paused), and the line is never run again. "" while the store
  // takes every write, else the last refusal (one line, with the path).
  std::string store_error() const;
  // Results waiting for the store, and write attempts that failed so far.
  std::size_t unwritten() const;
  std::uint64_t failed_writes() const;

 private:
  struct Ended {
    std::string batch_id, custom_id, model;
    std::int64_t line = 0, prompt_tokens = 0, created = 0;
    std::vector<std::int64_t> tokens;
    std::string error;
    const ServedModel* served = nullptr;  // decodes the text
    // Set at the end: why it ended and its text (cut at a stop string, a
    // stop token's left out).
    std::string finish_reason = "length", text;
    std::vector<TokenLogprob> logprobs;
    bool want_logprobs = false;
  };
  class Sink;
  void loop();
  void deliver(Ended e);
  Status write(const Ended& e);

  BatchStore& store_;
  RequestInbox& inbox_;
  BatchRoute route_;
  std::size_t max_inflight_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::pair<std::string, std::int64_t>> running_;  // in the engine, or ended and not yet written
  std::vector<Ended> ended_;
  std::vector<Ended> unwritten_;  // ended; the store refused their result (kept in running_)
  std::chrono::steady_clock::time_point retry_at_{};
  std::chrono::milliseconds backoff_{0};
  std::string store_error_;
  std::uint64_t failed_writes_ = 0;
  bool stopping_ = false, woken_ = false;
  Status first_error_ = Status::Ok();
  std::thread thread_;
};

}  // namespace slicesched::serving
