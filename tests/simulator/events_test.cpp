// The event queue's order (earlier time first, then push order) against a
// plain model, including the slow paths: pushes earlier than an event
// already taken out, negative times, peeking with top().
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

import slicesched.simulator.events;
import slicesched.core.ids;

using namespace slicesched;

TEST_CASE("the event queue takes events out by time, then push order", "[simulator][events]") {
  std::mt19937_64 rng(99);
  EventQueue q;  // reused across trials, as the simulators do
  for (int trial = 0; trial < 300; ++trial) {
    INFO("trial " << trial);
    q.clear();
    struct Item {
      Nanos t;
      std::uint32_t seq;
    };
    std::vector<Item> model;  // what is inside, in push order
    std::uint32_t seq = 0;
    Nanos floor = std::uniform_int_distribution<Nanos>(-1000, 1000)(rng);
    const bool monotone = trial % 3 != 0;  // the simulators' use; else anything goes
    for (int step = 0; step < 400; ++step) {
      const int what = std::uniform_int_distribution<int>(0, 9)(rng);
      if (what < 5 || model.empty()) {
        // Few distinct times, so ties are common; spreads from 0 to ~2^40.
        const int scale = std::uniform_int_distribution<int>(0, 40)(rng);
        Nanos t = floor + (std::uniform_int_distribution<Nanos>(0, 3)(rng) << scale);
        if (!monotone) t -= std::uniform_int_distribution<Nanos>(0, 2000)(rng);
        q.push(t, 0, seq);
        model.push_back({t, seq++});
        continue;
      }
      // The model's next: earliest time, then earliest push.
      const auto next = std::min_element(model.begin(), model.end(), [](const Item& a, const Item& b) {
        return a.t != b.t ? a.t < b.t : a.seq < b.seq;
      });
      REQUIRE(q.size() == model.size());
      REQUIRE(q.top().t == next->t);
      REQUIRE(q.top().id == next->seq);
      Event e;
      if (what < 7) {
        e = q.pop();
      } else {
        REQUIRE(q.next_time() == next->t);
        REQUIRE(q.pop_at(next->t, e));
        Event none;
        if (model.size() > 1) {
          const Nanos later = next->t + 1;
          const bool any_at_later =
              std::any_of(model.begin(), model.end(), [&](const Item& x) { return x.t == later; });
          if (!any_at_later) REQUIRE_FALSE(q.pop_at(later, none));
        }
      }
      REQUIRE(e.t == next->t);
      REQUIRE(e.id == next->seq);
      if (monotone) floor = e.t;
      model.erase(next);
    }
    while (!model.empty()) {
      const auto next = std::min_element(model.begin(), model.end(), [](const Item& a, const Item& b) {
        return a.t != b.t ? a.t < b.t : a.seq < b.seq;
      });
      const Event e = q.pop();
      REQUIRE(e.t == next->t);
      REQUIRE(e.id == next->seq);
      model.erase(next);
    }
    REQUIRE(q.empty());
  }
}

TEST_CASE("durations become ns: rounded, 0 below zero or NaN, saturated past 1e9 s", "[simulator][events]") {
  CHECK(to_nanos(1.5e-9) == 2);
  CHECK(to_nanos(-1.0) == 0);
  CHECK(to_nanos(std::numeric_limits<double>::quiet_NaN()) == 0);
  // (a cast of 1e300 * 1e9 to int64 is undefined; a few saturated ones still add up)
  CHECK(to_nanos(1e300) == 1'000'000'000'000'000'000);
  CHECK(to_nanos(std::numeric_limits<double>::infinity()) == 1'000'000'000'000'000'000);
  CHECK(to_nanos(1e300) * 9 > 0);
}
