// The one signal setup (cli/signals): a signal counts into the stop flag and
// bumps the engine's wake (for simulate and sweep the first cancels); a
// second cancels and gives the defaults back (or ends the process, for
// simulate); the previous handlers come back with the
// object; serve's drain deadline cancels a drain that runs too long.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>

import slicesched.cli.signals;

using slicesched::cli::DrainDeadline;
using slicesched::cli::StopSignals;

namespace {

void (*handler_of(int sig))(int) {
  struct sigaction now = {};
  sigaction(sig, nullptr, &now);
  return now.sa_handler;
}

}  // namespace

TEST_CASE("signals: each one counts and wakes, the second gives the defaults back", "[cli][signals]") {
  const auto before_int = handler_of(SIGINT), before_term = handler_of(SIGTERM);
  {
    StopSignals s(StopSignals::Options{});
    CHECK(s.count() == 0);
    CHECK(s.last() == 0);
    raise(SIGTERM);  // (delivered before raise returns, on this thread)
    CHECK(s.count() == 1);
    CHECK(s.stop().load() == 1);
    CHECK(s.last() == SIGTERM);
    CHECK(std::string(s.name()) == "SIGTERM");
    CHECK(s.wake().load() == 1);
    CHECK(handler_of(SIGINT) != SIG_DFL);  // a first signal drains: still ours
    raise(SIGINT);
    CHECK(s.count() == 2);
    CHECK(s.last() == SIGINT);
    CHECK(s.wake().load() == 2);
    // A third one ends the process as usual.
    CHECK(handler_of(SIGINT) == SIG_DFL);
    CHECK(handler_of(SIGTERM) == SIG_DFL);
  }
  CHECK(handler_of(SIGINT) == before_int);
  CHECK(handler_of(SIGTERM) == before_term);
}

TEST_CASE("signals: with first_cancels the first signal cancels, it does not drain", "[cli][signals]") {
  // simulate and sweep write nothing of a run cut short: draining what was
  // admitted (stop 1) only delayed the exit, a minute at 10,000 GPUs.
  StopSignals s({.first_cancels = true});
  raise(SIGTERM);
  CHECK(s.stop().load() == 2);
  CHECK(s.count() > 0);
  CHECK(s.last() == SIGTERM);
  CHECK(s.wake().load() == 1);
  CHECK(handler_of(SIGTERM) != SIG_DFL);  // still ours: a second one is counted (or kills, second_kills)
  s.restore();
}

TEST_CASE("signals: restore gives the previous handlers back and keeps the counts", "[cli][signals]") {
  const auto before = handler_of(SIGTERM);
  StopSignals s(StopSignals::Options{});
  raise(SIGTERM);
  s.restore();
  CHECK(handler_of(SIGTERM) == before);
  CHECK(s.count() == 1);
  s.restore();  // idempotent
  CHECK(handler_of(SIGTERM) == before);
}

TEST_CASE("signals: the drain deadline cancels a drain still running, and only then", "[cli][signals]") {
  {
    StopSignals s(StopSignals::Options{});
    const DrainDeadline d(s, 0);
    raise(SIGTERM);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!d.expired() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(d.expired());
    CHECK(s.count() == 2);  // a cancel, as a second signal
    CHECK(s.wake().load() == 2);
  }
  {
    StopSignals s(StopSignals::Options{});
    const DrainDeadline d(s, 3600);
    raise(SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    CHECK_FALSE(d.expired());
    CHECK(s.count() == 1);
  }  // (its clock ends with it, long before the hour)
}
