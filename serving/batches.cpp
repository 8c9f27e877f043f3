module;
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

module slicesched.serving.batches;
import slicesched.core.ids;

namespace slicesched::serving {

namespace {

using json = nlohmann::ordered_json;

// How often the runner looks for lines when nobody woke it.
constexpr auto kPoll = std::chrono::milliseconds(200);

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// Collects one line's tokens on the engine thread and hands the whole
// result to the runner at the end.
class BatchRunner::Sink final : public RequestSink {
 public:
  Sink(BatchRunner& runner, Ended e, const GenerationOptions& gen)
      : runner_(runner), e_(std::move(e)), watch_(*e_.served, gen) {}
  void on_token(std::int64_t token, Nanos) override {
    e_.tokens.push_back(token);
    watch_.add(token);
  }
  void on_logprob(const TokenLogprob& lp) override { e_.logprobs.push_back(lp); }
  bool complete() const override { return watch_.stopped(); }
  void on_end(std::int64_t prompt_tokens, std::int64_t, const std::string& error, Nanos) override {
    e_.prompt_tokens = prompt_tokens;
    e_.error = error;
    watch_.end();
    e_.finish_reason = watch_.finish_reason();
    e_.text =
        watch_.watches_text() ? watch_.text() : decode(*e_.served, std::span(e_.tokens).first(watch_.text_tokens()));
    runner_.deliver(std::move(e_));
  }

 private:
  BatchRunner& runner_;
  Ended e_;
  StopWatch watch_;
};

BatchRunner::BatchRunner(BatchStore& store, RequestInbox& inbox, BatchRoute route, std::size_t max_inflight)
    : store_(store), inbox_(inbox), route_(std::move(route)), max_inflight_(std::max<std::size_t>(1, max_inflight)) {}

BatchRunner::~BatchRunner() { (void)stop(); }

void BatchRunner::start() {
  thread_ = std::thread([this] { loop(); });
}

void BatchRunner::wake() {
  std::lock_guard lk(mu_);
  woken_ = true;
  cv_.notify_all();
}

Result<std::optional<BatchInfo>> BatchRunner::cancel(const std::string& id) {
  std::set<std::pair<std::string, std::int64_t>> running;
  {
    std::lock_guard lk(mu_);
    running = running_;
  }
  auto b = store_.stop_batch(id, false, running);
  wake();
  return b;
}

std::size_t BatchRunner::inflight() const {
  std::lock_guard lk(mu_);
  return running_.size() - unwritten_.size();
}

std::string BatchRunner::store_error() const {
  std::lock_guard lk(mu_);
  return store_error_;
}

std::size_t BatchRunner::unwritten() const {
  std::lock_guard lk(mu_);
  return unwritten_.size();
}

std::uint64_t BatchRunner::failed_writes() const {
  std::lock_guard lk(mu_);
  return failed_writes_;
}

void BatchRunner::deliver(Ended e) {
  std::lock_guard lk(mu_);
  ended_.push_back(std::move(e));
  cv_.notify_all();
}

Status BatchRunner::write(const Ended& e) {
  if (e.error == kCancelledError) return Status::Ok();  // stays pending: runs again after a restart
  const std::string req_id = "batch_req_" + e.batch_id + "_" + std::to_string(e.line);
  json line;
  if (e.error.empty()) {
    const std::string cmpl = "cmpl-" + e.batch_id + "-" + std::to_string(e.line);
    line = {
        {"id", req_id},
        {"custom_id", e.custom_id},
        {"response",
         {{"status_code", 200},
          {"request_id", cmpl},
          {"body", completion_body(
                       cmpl, e.created, e.model, e.prompt_tokens, e.tokens, e.text, e.finish_reason.c_str(),
                       e.want_logprobs && e.served ? completion_logprobs(*e.served, e.tokens, e.logprobs) : json())}}},
        {"error", nullptr}};
  } else {
    line = {{"id", req_id},
            {"custom_id", e.custom_id},
            {"response", nullptr},
            {"error", {{"code", "request_failed"}, {"message", e.error}}}};
  }
  return store_.finish_line(e.batch_id, e.line, e.error.empty(), dump_text(line));
}

void BatchRunner::loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    const bool stopping = stopping_;
    // What the store refused before is written again first, once its
    // back-off passed (or at the stop: a last try).
    std::vector<Ended> ended;
    if (unwritten_.empty() || stopping || std::chrono::steady_clock::now() >= retry_at_) {
      ended = std::exchange(unwritten_, {});
      for (Ended& e : ended_) ended.push_back(std::move(e));
    } else {  // the store refuses writes: new results wait with the others for the next try
      for (Ended& e : ended_) unwritten_.push_back(std::move(e));
    }
    ended_.clear();
    lk.unlock();
    bool refused = false;
    std::vector<Ended> kept;
    for (Ended& e : ended) {
      // After one refusal the rest wait for the next try: a full disk
      // refuses them all, and each try costs an fsync.
      Status s = refused ? Status::Ok() : write(e);
      if (!refused && s.ok()) {
        lk.lock();
        running_.erase({e.batch_id, e.line});
        lk.unlock();
        continue;
      }
      if (!refused) {
        refused = true;
        lk.lock();
        ++failed_writes_;
        const bool first = store_error_.empty();
        store_error_ = s.message();
        backoff_ = std::min<std::chrono::milliseconds>(
            std::chrono::seconds(30), backoff_.count() == 0 ? std::chrono::milliseconds(1000) : 2 * backoff_);
        retry_at_ = std::chrono::steady_clock::now() + backoff_;
        if (first_error_.ok()) first_error_ = s;
        lk.unlock();
        if (first)
          std::fprintf(stderr,
                       "slicesched: %s; batch results are kept and written again (every 1 s to 30 s), no new batch "
                       "line starts meanwhile\n",
                       s.message().c_str());
      }
      kept.push_back(std::move(e));
    }
    lk.lock();
    if (!ended.empty() && !refused && unwritten_.empty() && !store_error_.empty()) {
      std::fprintf(stderr, "slicesched: the batch store takes writes again; batches resume\n");
      store_error_.clear();
      backoff_ = std::chrono::milliseconds(0);
    }
    for (Ended& e : kept) unwritten_.push_back(std::move(e));
    if (stopping) return;  // (stop() was called after the engine ended: no sink reports later)
    // Batches past their completion window expire: what did not start is
    // given up (what runs finishes), before new lines are taken.
    {
      const auto running = running_;
      lk.unlock();
      if (auto gone = store_.expired(unix_now()); gone.ok())
        for (const std::string& id : gone.value())
          if (auto st = store_.stop_batch(id, true, running); !st.ok())
            std::fprintf(stderr, "slicesched: %s\n", st.status().message().c_str());
      lk.lock();
    }
    // Paused while results wait for the store: nothing new runs.
    const std::size_t room =
        !unwritten_.empty() ? 0 : (max_inflight_ > running_.size() ? max_inflight_ - running_.size() : 0);
    const auto skip = running_;
    lk.unlock();
    if (room > 0 && !inbox_.closed()) {
      auto lines = store_.pending(room, skip);
      if (!lines.ok()) {
        std::fprintf(stderr, "slicesched: %s\n", lines.status().message().c_str());
      } else {
        for (PendingLine& p : lines.value()) {
          auto routed = route_(p.body);
          Ended e;
          e.batch_id = p.batch_id, e.custom_id = p.custom_id, e.line = p.line, e.created = unix_now();
          if (auto* err = std::get_if<ApiError>(&routed)) {
            // Validated when the batch was made; the config changed since.
            e.error = err->message;
            lk.lock();
            running_.insert({p.batch_id, p.line});
            ended_.push_back(std::move(e));  // (written, or kept, by the loop like any result)
            lk.unlock();
            continue;
          }
          Routed& r = std::get<Routed>(routed);
          e.model = r.model->name;
          e.served = r.model;
          e.want_logprobs = r.request.sampling && r.request.sampling->logprobs >= 0;
          lk.lock();
          running_.insert({p.batch_id, p.line});
          lk.unlock();
          r.request.sink = std::make_shared<Sink>(*this, std::move(e), r.gen);
          if (!inbox_.push(std::move(r.request))) {
            lk.lock();
            running_.erase({p.batch_id, p.line});
            lk.unlock();
            break;  // closed: the server is stopping; the line stays pending
          }
        }
      }
    }
    lk.lock();
    cv_.wait_for(lk, kPoll, [&] { return woken_ || stopping_ || !ended_.empty(); });
    woken_ = false;
  }
}

Status BatchRunner::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard lk(mu_);
  // (what the store took in the end is not an error of this run)
  if (unwritten_.empty()) return Status::Ok();
  return Status(first_error_.code(), std::to_string(unwritten_.size()) +
                                         " batch result(s) could not be written, and their lines stay pending (they "
                                         "run again after a restart): " +
                                         store_error_);
}

}  // namespace slicesched::serving
