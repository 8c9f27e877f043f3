module;
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>

module slicesched.cli.signals;

namespace slicesched::cli {

namespace {

// The handlers' object: a handler has no other way to reach it. Lock-free
// atomics only, so the handler is signal-safe.
std::atomic<StopSignals*> g_active{nullptr};

void say(const char* line) {
  if (line == nullptr) return;
  ssize_t ignored = write(STDERR_FILENO, line, std::strlen(line));
  (void)ignored;
}

void set_default(int sig) {
  struct sigaction sa = {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
}

}  // namespace

StopSignals::StopSignals(Options opt) : opt_(opt) {
  g_active.store(this);
  struct sigaction sa = {};
  sa.sa_handler = &StopSignals::on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
  installed_ = true;
}

StopSignals::~StopSignals() {
  restore();
  g_active.store(nullptr);
}

void StopSignals::restore() {
  if (!installed_) return;
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  installed_ = false;
}

void StopSignals::cancel() {
  stop_.store(2);
  wake_.fetch_add(1);
}

void StopSignals::on_signal(int sig) {
  StopSignals* s = g_active.load();
  if (s == nullptr) return;
  s->signal_.store(sig);
  const int n = s->stop_.fetch_add(1) + 1;
  if (n == 1 && s->opt_.first_cancels) s->stop_.fetch_add(1);
  s->wake_.fetch_add(1);
  if (n >= 2 && s->opt_.second_kills) {
    set_default(sig);
    raise(sig);
    return;
  }
  say(n == 1 ? s->opt_.first_line : s->opt_.later_line);
  if (n >= 2) {
    set_default(SIGINT);
    set_default(SIGTERM);
  }
}

DrainDeadline::DrainDeadline(StopSignals& signals, std::int64_t seconds) : signals_(signals) {
  clock_ = std::thread([this, seconds] {
    std::unique_lock lk(mu_);
    while (!over_ && signals_.count() == 0) cv_.wait_for(lk, std::chrono::milliseconds(50));
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (!over_ && signals_.count() == 1 && std::chrono::steady_clock::now() < until)
      cv_.wait_for(lk, std::chrono::milliseconds(50));
    if (over_ || signals_.count() != 1) return;
    expired_ = true;
    signals_.cancel();
  });
}

DrainDeadline::~DrainDeadline() {
  {
    std::lock_guard lk(mu_);
    over_ = true;
  }
  cv_.notify_all();
  clock_.join();
}

}  // namespace slicesched::cli
