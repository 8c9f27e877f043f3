#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

import slicesched.core.plugin;
import slicesched.plugins.builtin;
import slicesched.core.ids;

using namespace slicesched;
using nlohmann::json;

namespace {

PluginPtr<TransferArbiter> make(const std::string& name, const json& args = json::object()) {
  PluginRegistries regs;
  REQUIRE(plugins::register_builtins(regs).ok());
  auto made = regs.arbiter.create(name, args);
  REQUIRE(made.ok());
  return std::move(made).value();
}

struct Row {
  const char* what;
  std::vector<TransferIntent> pending;  // {id, src, dst, since}
  std::vector<AccelId> src_busy, dst_busy;
  std::vector<std::size_t> want;  // indices into pending, in age order
};

void check_rows(TransferArbiter& arbiter, const std::vector<Row>& rows, std::size_t accels = 4) {
  for (const Row& row : rows) {
    INFO(row.what);
    std::vector<std::uint8_t> src(accels, 0), dst(accels, 0);
    for (AccelId a : row.src_busy) src[a] = 1;
    for (AccelId a : row.dst_busy) dst[a] = 1;
    std::vector<std::size_t> out;
    arbiter.select(row.pending, src, dst, out);
    CHECK(out == row.want);
  }
}

// A cluster's transfer ports over rounds: intents wait in `pending`, the
// arbiter activates some each round, and an activated transfer of d rounds
// keeps its source and destination busy for the next d - 1 rounds.
struct Fabric {
  struct InFlight {
    AccelId src, dst;
    int rounds_left;
  };
  std::size_t accels;
  std::vector<TransferIntent> pending;
  std::vector<InFlight> in_flight;
  std::vector<std::uint8_t> src_busy, dst_busy;
  std::vector<std::size_t> out;

  explicit Fabric(std::size_t n) : accels(n) {}

  // Runs one round; returns the intents activated, in the arbiter's order.
  std::vector<TransferIntent> round(TransferArbiter& arbiter) {
    src_busy.assign(accels, 0);
    dst_busy.assign(accels, 0);
    for (const InFlight& t : in_flight) src_busy[t.src] = dst_busy[t.dst] = 1;
    out.clear();
    arbiter.select(pending, src_busy, dst_busy, out);
    std::vector<TransferIntent> started;
    std::vector<std::uint8_t> taken(pending.size(), 0);
    for (std::size_t i : out) {
      REQUIRE(i < pending.size());
      REQUIRE_FALSE(taken[i]);
      taken[i] = 1;
      started.push_back(pending[i]);
    }
    std::size_t keep = 0;
    for (std::size_t i = 0; i < pending.size(); ++i)
      if (!taken[i]) pending[keep++] = pending[i];
    pending.resize(keep);
    for (InFlight& t : in_flight) --t.rounds_left;
    std::erase_if(in_flight, [](const InFlight& t) { return t.rounds_left <= 0; });
    return started;
  }
  void start(const TransferIntent& t, int rounds) {
    if (rounds > 1) in_flight.push_back({t.src, t.dst, rounds - 1});
  }
};

// Checks one round's choice: conflict-free, clear of busy ports and, when
// `maximal`, leaving out only intents that share a port with one taken or in
// flight (or, with `reserved`, with the oldest intent's ports).
void check_round(const std::vector<TransferIntent>& before, const Fabric& f, const std::vector<TransferIntent>& started,
                 bool maximal, bool reserved) {
  std::vector<std::uint8_t> src = f.src_busy, dst = f.dst_busy;
  for (const TransferIntent& t : started) {
    REQUIRE_FALSE(src[t.src]);
    REQUIRE_FALSE(dst[t.dst]);
    src[t.src] = dst[t.dst] = 1;
  }
  if (!maximal || before.empty()) return;
  const TransferIntent& oldest = *std::min_element(before.begin(), before.end(), [](const auto& a, const auto& b) {
    return a.since != b.since ? a.since < b.since : a.id < b.id;
  });
  for (const TransferIntent& t : f.pending) {
    const bool blocked = src[t.src] || dst[t.dst] || (reserved && (t.src == oldest.src || t.dst == oldest.dst));
    REQUIRE(blocked);
  }
}

}  // namespace

TEST_CASE("greedy activates a maximal conflict-free set, oldest first", "[plugins][arbiter]") {
  const std::vector<Row> rows = {
      {"nothing pending", {}, {}, {}, {}},
      {"oldest by since, then the next that fits", {{1, 0, 1, 10}, {2, 0, 2, 5}, {3, 2, 3, 7}}, {}, {}, {1, 2}},
      {"equal since: lower id first", {{5, 0, 1, 3}, {4, 0, 2, 3}}, {}, {}, {1}},
      {"one destination, three senders", {{1, 0, 3, 0}, {2, 1, 3, 1}, {3, 2, 3, 2}}, {}, {}, {0}},
      {"a busy source or destination is never used", {{1, 0, 1, 0}, {2, 1, 2, 1}, {3, 2, 3, 2}}, {1}, {3}, {0}},
      {"the oldest blocked by a busy port reserves both of its ports",
       {{1, 0, 1, 0}, {2, 2, 1, 1}, {3, 0, 2, 2}, {4, 3, 0, 3}},
       {},
       {1},
       {3}},
      {"a send and a receive on one accelerator are separate ports", {{1, 0, 1, 0}, {2, 1, 0, 1}}, {}, {}, {0, 1}},
      {"an accelerator beyond the flags is never started", {{1, 9, 0, 0}, {2, 1, 2, 1}}, {}, {}, {1}},
  };
  auto greedy = make("greedy");
  check_rows(*greedy, rows);

  SECTION("without the reservation younger intents may take a blocked oldest's free port") {
    auto plain = make("greedy", {{"reserve_oldest", false}});
    check_rows(*plain, {{"plain greedy", {{1, 0, 1, 0}, {2, 2, 1, 1}, {3, 0, 2, 2}, {4, 3, 0, 3}}, {}, {1}, {2, 3}}});
  }
  SECTION("select appends to the caller's buffer") {
    std::vector<std::size_t> out = {99};
    const std::vector<TransferIntent> one = {{7, 0, 1, 0}};
    const std::vector<std::uint8_t> idle(2, 0);
    greedy->select(one, idle, idle, out);
    CHECK(out == std::vector<std::size_t>{99, 0});
  }
}

TEST_CASE("greedy is the core's default rule, and says so only with the reservation", "[plugins][arbiter]") {
  // The same random rounds through the core rule and through the plugin.
  for (const bool reserve : {true, false}) {
    INFO("reserve_oldest = " << reserve);
    auto greedy = make("greedy", {{"reserve_oldest", reserve}});
    CHECK(greedy->uses_default_rule() == reserve);
    OldestFirstRule rule(reserve);
    std::mt19937_64 rng(5);
    for (int round = 0; round < 200; ++round) {
      std::vector<TransferIntent> pending;
      for (std::uint64_t id = 0, n = rng() % 8; id < n; ++id)
        pending.push_back(
            {id, static_cast<AccelId>(rng() % 4), static_cast<AccelId>(rng() % 4), static_cast<Nanos>(rng() % 3), 1});
      std::vector<std::uint8_t> src(4), dst(4);
      for (auto& b : src) b = rng() % 4 == 0;
      for (auto& b : dst) b = rng() % 4 == 0;
      std::vector<std::size_t> by_rule, by_plugin;
      rule.select(pending, src, dst, by_rule);
      greedy->select(pending, src, dst, by_plugin);
      CHECK(by_rule == by_plugin);
    }
  }
  CHECK_FALSE(make("serial")->uses_default_rule());
}

TEST_CASE("serial keeps at most one transfer in flight", "[plugins][arbiter]") {
  const std::vector<Row> rows = {
      {"nothing pending", {}, {}, {}, {}},
      {"the oldest alone", {{1, 0, 1, 10}, {2, 2, 3, 5}, {3, 1, 0, 7}}, {}, {}, {1}},
      {"equal since: lower id", {{5, 0, 1, 3}, {4, 2, 3, 3}}, {}, {}, {1}},
      {"anything in flight: nothing", {{1, 0, 1, 0}}, {3}, {}, {}},
      {"a receive in flight: nothing", {{1, 0, 1, 0}}, {}, {2}, {}},
      {"an accelerator beyond the flags is never started", {{1, 0, 9, 0}, {2, 1, 2, 1}}, {}, {}, {1}},
  };
  auto serial = make("serial");
  check_rows(*serial, rows);
}

namespace {

// Random intents over 6 accelerators, 0-3 new ones a round, each transfer
// lasting 1..max_rounds rounds. Every intent must start within k *
// max_rounds rounds of its arrival (both rounds counted), k being the number
// of intents pending right after it arrived, itself included.
void check_no_starvation(const std::string& name, const json& args, int max_rounds, bool maximal, bool reserved) {
  auto arbiter = make(name, args);
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    INFO(name << " " << args.dump() << " seed " << seed << " max_rounds " << max_rounds);
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> arrivals(0, 3), accel(0, 5), duration(1, max_rounds);
    Fabric f(6);
    std::map<std::uint64_t, std::pair<int, std::size_t>> arrived;  // id -> (round, pending then)
    std::uint64_t next_id = 0;
    std::size_t activated = 0, longest_wait = 0;
    // Arrivals for 300 rounds, then until everything has started: the
    // serial arbiter falls behind this load and drains it afterwards.
    for (int r = 0; r < 300 || !f.pending.empty(); ++r) {
      REQUIRE(r < 100000);
      for (int n = r < 300 ? arrivals(rng) : 0; n > 0; --n) {
        const TransferIntent t{next_id++, static_cast<AccelId>(accel(rng)), static_cast<AccelId>(accel(rng)), r, 1};
        f.pending.push_back(t);
        arrived[t.id] = {r, 0};
      }
      for (const TransferIntent& t : f.pending)
        if (arrived[t.id].first == r) arrived[t.id].second = f.pending.size();
      const std::vector<TransferIntent> before = f.pending;
      const std::vector<TransferIntent> started = f.round(*arbiter);
      check_round(before, f, started, maximal, reserved);
      for (const TransferIntent& t : started) {
        const auto [since, k] = arrived.at(t.id);
        const std::size_t waited = static_cast<std::size_t>(r - since + 1);
        REQUIRE(waited <= k * static_cast<std::size_t>(max_rounds));
        longest_wait = std::max(longest_wait, waited);
        f.start(t, duration(rng));
        ++activated;
      }
    }
    REQUIRE(activated == next_id);
    REQUIRE(longest_wait > 1);  // the stream did make intents wait
  }
}

}  // namespace

TEST_CASE("no intent starves: each starts within (pending at arrival) rounds", "[plugins][arbiter][property]") {
  SECTION("greedy, transfers done within the round") { check_no_starvation("greedy", json::object(), 1, true, true); }
  SECTION("greedy without reservation, transfers done within the round") {
    check_no_starvation("greedy", {{"reserve_oldest", false}}, 1, true, false);
  }
  SECTION("serial, transfers done within the round") { check_no_starvation("serial", json::object(), 1, false, false); }
  SECTION("greedy, transfers of up to 3 rounds: within 3x that") {
    check_no_starvation("greedy", json::object(), 3, true, true);
  }
  SECTION("serial, transfers of up to 3 rounds: within 3x that") {
    check_no_starvation("serial", json::object(), 3, false, false);
  }
}

TEST_CASE("the oldest intent's reservation defeats an adversarial stream", "[plugins][arbiter]") {
  // X = 0 -> 1 waits behind a transfer into 1. Each round an adversary sends
  // a younger 2-round transfer through whichever of X's ports is free, so
  // without the reservation X finds one of its ports busy forever.
  auto run = [](TransferArbiter& arbiter) {
    Fabric f(6);
    f.in_flight.push_back({5, 1, 1});
    f.pending.push_back({0, 0, 1, 0, 1});
    for (int r = 0; r < 50; ++r) {
      std::vector<std::uint8_t> src(6, 0), dst(6, 0);
      for (const auto& t : f.in_flight) src[t.src] = dst[t.dst] = 1;
      const TransferIntent adversary =
          !src[0] ? TransferIntent{100u + r, 0, 2, r, 1} : TransferIntent{100u + r, 3, 1, r, 1};
      f.pending.push_back(adversary);
      for (const TransferIntent& t : f.round(arbiter)) {
        if (t.id == 0) return r;
        f.start(t, 2);
      }
      std::erase_if(f.pending, [](const TransferIntent& t) { return t.id >= 100; });  // the adversary retries fresh
    }
    return -1;
  };
  auto plain = make("greedy", {{"reserve_oldest", false}});
  auto reserving = make("greedy");
  CHECK(run(*plain) == -1);
  CHECK(run(*reserving) == 1);
}
