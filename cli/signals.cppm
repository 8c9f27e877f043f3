// SIGINT and SIGTERM, set up one way for every command that can be stopped
// (simulate, sweep, serve, executor): a handler that counts signals into one stop
// flag (EngineOptions::stop's: 1 drains, 2 cancels) and bumps the counter
// the engine's wait watches, so a waiting engine sees it at once.
module;
#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

export module slicesched.cli.signals;

export namespace slicesched::cli {

// The handlers, installed for the object's lifetime (one at a time): the
// handlers there were before are given back by restore() or the destructor.
class StopSignals {
 public:
  struct Options {
    // A second signal ends the process at once (simulate: results cut
    // short are never written). Otherwise it counts (a cancel) and gives
    // the signals their defaults back, so a third one ends the process.
    bool second_kills = false;
    // The first signal cancels (stop 2) instead of draining (stop 1): for
    // commands that write nothing of a run cut short (simulate, sweep),
    // finishing what was admitted is time spent on results thrown away; at
    // 10,000 accelerators it took a minute.
    bool first_cancels = false;
    // Written to stderr by the handler at the first signal and at a later
    // one (null: nothing).
    const char* first_line = nullptr;
    const char* later_line = nullptr;
  };
  explicit StopSignals(Options opt);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Gives back the handlers there were before (a signal then does what it
  // did before); the counts stay readable. Idempotent.
  void restore();
  // The signals so far: what the engine (EngineOptions::stop) and the
  // executor server watch.
  const std::atomic<int>& stop() const { return stop_; }
  int count() const { return stop_.load(); }
  // The last signal received (SIGINT or SIGTERM; 0 before any), and its name.
  int last() const { return signal_.load(); }
  const char* name() const { return last() == SIGTERM ? "SIGTERM" : "SIGINT"; }
  // The counter a signal bumps after the stop flag: the engine's wake
  // (RequestInbox(wake), whose waiting backend polls it).
  std::atomic<int>& wake() { return wake_; }
  // From a thread, what a second signal does: a cancel (stop 2), then the wake.
  void cancel();

 private:
  static void on_signal(int sig);
  Options opt_;
  std::atomic<int> stop_{0}, signal_{0}, wake_{0};
  struct sigaction old_int_ = {}, old_term_ = {};
  bool installed_ = false;
};

// serve's drain deadline: `seconds` after the first signal, a drain still
// running is cancelled (as a second signal would). Its clock thread ends
// with the object.
class DrainDeadline {
 public:
  DrainDeadline(StopSignals& signals, std::int64_t seconds);
  ~DrainDeadline();
  DrainDeadline(const DrainDeadline&) = delete;
  DrainDeadline& operator=(const DrainDeadline&) = delete;

  // Whether the deadline passed and cancelled the drain.
  bool expired() const { return expired_.load(); }

 private:
  StopSignals& signals_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool over_ = false;
  std::atomic<bool> expired_{false};
  std::thread clock_;
};

}  // namespace slicesched::cli
