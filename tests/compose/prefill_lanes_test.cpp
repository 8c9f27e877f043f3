// Prefill lanes (disaggregated prefill, TenantSpec::prefill_lanes) on
// tests/cli/prefill_lanes.toml: a prompt prefills in a lane of its own,
// its KV cache goes to host memory and back to a decode lane, costed on the
// host link, and nothing is lost on the way.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

import slicesched.compose.offline;
import slicesched.config;
import slicesched.compose.policy;
import slicesched.compose.run;
import slicesched.core.ids;
import slicesched.core.plugin;
import slicesched.engine.metrics;
import slicesched.engine.tenant;

using namespace slicesched;

namespace {

const std::string kConfig = std::string(SLICESCHED_SOURCE_DIR) + "/tests/cli/prefill_lanes.toml";

struct Run {
  std::unique_ptr<PolicyParts> parts;
  PolicyRun run;
};

Run run_policy(const std::string& policy, std::vector<ConfigOverride> sets = {}, const RecordOptions& opt = {}) {
  auto cfg = load_config(kConfig, sets);
  REQUIRE(cfg.ok());
  PluginRegistries plugins;
  REQUIRE(load_plugins(*cfg, plugins).ok());
  auto truths = load_truths(*cfg);
  REQUIRE(truths.ok());
  auto p = find_policy(*cfg, policy);
  REQUIRE(p.ok());
  auto parts = build_policy(*cfg, *p.value(), plugins);
  if (!parts.ok()) FAIL(parts.status().message());
  auto r = run_offline(*cfg, *parts.value(), *truths, opt);
  if (!r.ok()) FAIL(r.status().message());
  return {std::move(parts).value(), std::move(r).value()};
}

const Tenant& tenant(const PolicyParts& p, const std::string& name) {
  for (const Tenant& t : p.tenants)
    if (t.spec().name == name) return t;
  FAIL("no tenant " << name);
  return p.tenants.front();
}

// Llama-3-8B's KV cache per token: 32 layers of K and V, 8 heads of 128, bf16.
constexpr std::int64_t kKvBytesPerToken = 32 * 2 * 8 * 128 * 2;

// The most of `t`'s requests that held a KV cache at once, counted from
// each one's first token to its end (it surely holds its cache then).
int most_at_once(const Tenant& t) {
  std::vector<std::pair<Nanos, int>> edges;
  for (const RequestRecord& q : t.records()) {
    if (q.first_token < 0) continue;
    edges.emplace_back(q.first_token, 1);
    edges.emplace_back(q.done >= 0 ? q.done : INT64_MAX, -1);
  }
  std::sort(edges.begin(), edges.end());  // (an end before a start at the same time)
  int held = 0, most = 0;
  for (const auto& [when, d] : edges) most = std::max(most, held += d);
  return most;
}

}  // namespace

TEST_CASE("prefill lanes: a lone request's later tokens come one hand-off later, its first as soon",
          "[compose][prefill_lanes]") {
  // One request of 512 prompt tokens and 8 output tokens, alone on the pair.
  const std::vector<ConfigOverride> one = {
      {"tenants.online0.stream", "{ constant_rate = 1.0, duration_s = 1, input_tokens = 512, output_tokens = 8 }"}};
  const Run together = run_policy("Solo", one);
  const Run apart = run_policy("Solo-Apart", one);
  const RequestRecord& a = tenant(*together.parts, "online0").records().at(0);
  const RequestRecord& b = tenant(*apart.parts, "online0").records().at(0);
  REQUIRE(tenant(*together.parts, "online0").records().size() == 1);
  CHECK(a.generated == 8);
  CHECK(b.generated == 8);
  // The prefill is the same iteration either way.
  CHECK(b.first_token == a.first_token);
  // Its cache (512 tokens) goes to host memory and back over the pcie
  // class (50 GB/s, 10 us), each way 10 us + 67,108,864 B / 50 GB/s.
  const std::int64_t bytes = 512 * kKvBytesPerToken;
  const Nanos copy = 10'000 + static_cast<Nanos>(static_cast<double>(bytes) / 50e9 * 1e9);
  CHECK(copy == 1'352'177);
  CHECK(b.done - a.done == 2 * copy);
  const Tenant& host = tenant(*apart.parts, "online0");
  CHECK(host.handed_off() == 1);
  CHECK(host.handoff_bytes() == bytes);
  CHECK(tenant(*together.parts, "online0").handed_off() == 0);
  // The trace's host lane has it: out as the prefill ends, then back.
  REQUIRE(apart.run.host_copies.size() == 1);
  const HostLinkCopy& c = apart.run.host_copies[0].second;
  CHECK(c.handoff);
  CHECK(c.start == b.first_token);
  CHECK(c.copy == copy);
  CHECK(c.bytes == bytes);
  CHECK(c.sequences == 1);
  CHECK(together.run.host_copies.empty());
}

TEST_CASE("prefill lanes: under riders a prompt no longer waits for a stretched decode step, and no token is lost",
          "[compose][prefill_lanes]") {
  // Offline rides in the online decode steps while they take at most 4x
  // their time alone.
  const Run together = run_policy("Together");
  const Run apart = run_policy("Apart");
  const Tenant& host = tenant(*apart.parts, "online0");
  const Tenant& rider = tenant(*apart.parts, "offline0");
  // Every online request that got its first token and has more to make was
  // handed off once, with its whole prompt's cache.
  std::size_t handed = 0;
  for (const RequestRecord& r : host.records()) handed += r.first_token >= 0 && r.output_tokens > 1;
  CHECK(host.handed_off() >= handed - 2);  // (one in flight at the window's end at most per prefill lane and link)
  CHECK(host.handed_off() <= handed);
  CHECK(host.handoff_bytes() == static_cast<std::int64_t>(host.handed_off()) * 512 * kKvBytesPerToken);
  // Riders still ride, in the decode steps only.
  CHECK(host.rider_steps() > 0);
  // Every request that finished has every token; as many finish as without
  // prefill lanes, within a few at the window's edge.
  for (const Tenant* t : {&host, &rider})
    for (const RequestRecord& r : t->records()) {
      CHECK(r.error.empty());
      if (r.done >= 0) CHECK(r.generated == r.output_tokens);
    }
  const RunMetrics& m0 = together.run.metrics;
  const RunMetrics& m1 = apart.run.metrics;
  INFO("TTFT p90 " << m0.ttft_p90_s << " -> " << m1.ttft_p90_s << " s, p99 " << m0.ttft_p99_s << " -> " << m1.ttft_p99_s
                   << " s; online done " << m0.online_done << " -> " << m1.online_done << ", offline done "
                   << m0.offline_done << " -> " << m1.offline_done);
  CHECK(m1.online_done + 2 >= m0.online_done);
  CHECK(m1.offline_done * 100 >= m0.offline_done * 98);
  // The prompts no longer wait for a decode step stretched by riders.
  CHECK(m1.ttft_p90_s < 0.9 * m0.ttft_p90_s);
}

TEST_CASE("prefill lanes: a drain waits for a hand-off still on the host link", "[compose][prefill_lanes]") {
  // Two requests 1 ms apart, one prefill lane, a host link of 0.5 GB/s:
  // each hand-off takes 2 x 134 ms, one after the other. The drain starts
  // when the first request ends, while the second one's cache is still on
  // the link: the run waits for it and ends drained, both requests whole
  // (it used to stop there as a deadlock: a drain waited for no arrival).
  const std::vector<ConfigOverride> sets = {
      {"tenants.online0.stream",
       "{ constant_rate = 1000.0, duration_s = 0.002, input_tokens = 512, output_tokens = 4 }"},
      {"cluster.link_classes",
       "[{ name = \"nvlink\", bandwidth_gbps = 300.0, latency_us = 5.0 }, { name = \"pcie\", bandwidth_gbps = 0.5 }]"}};
  std::atomic<int> stop{0};
  Nanos drain_at = -1;
  RecordOptions opt;
  opt.stop = &stop;
  opt.progress = [&](Nanos t, std::size_t done, std::size_t) {
    if (done >= 1 && drain_at < 0) {
      stop = 1;
      drain_at = t;
    }
  };
  const Run r = run_policy("Solo-Apart", sets, opt);  // (fails the test on a deadlock)
  const Tenant& host = tenant(*r.parts, "online0");
  REQUIRE(host.records().size() == 2);
  CHECK(host.handed_off() == 2);
  const RequestRecord& first = host.records()[0];
  const RequestRecord& second = host.records()[1];
  CHECK(first.generated == 4);
  CHECK(second.generated == 4);
  // The drain began when the first ended, while the second one's cache
  // was on the link (its copies follow the first's: it lands 4 copies
  // after the first's prefill); the second finished after it landed.
  const Nanos copy = static_cast<Nanos>(512.0 * kKvBytesPerToken / 0.5e9 * 1e9);
  const Nanos landed = first.first_token + 4 * copy;
  INFO("drain at " << drain_at << " ns, second lands at " << landed << " ns, done at " << second.done << " ns");
  CHECK(drain_at == first.done);
  CHECK(drain_at < landed);
  CHECK(second.done > landed);
}

TEST_CASE("the KV budget holds with prompts in flight in several lanes, prefill lanes or not",
          "[compose][prefill_lanes]") {
  // 1,152 tokens of KV budget: room for two requests of 512 + 64 tokens.
  // A prompt in flight in one lane once counted as one token when another
  // lane admitted, so two lanes held up to four (prefill lanes: three).
  const std::string policy = GENERATE(as<std::string>{}, "Solo", "Solo-Apart");
  INFO(policy);
  const Run r = run_policy(
      policy, {{"tenants.online0.kv_budget_tokens", "1152"}, {"policies.Solo-Apart.prefill_lanes", "{ online0 = 2 }"}});
  const Tenant& t = tenant(*r.parts, "online0");
  std::size_t done = 0;
  for (const RequestRecord& q : t.records()) done += q.done >= 0 && q.error.empty();
  CHECK(most_at_once(t) <= 2);
  CHECK(done > 100);  // (it still serves: 138 requests arrive)
}

TEST_CASE("prefill lanes start no more sequences than the decode lanes have seats for", "[compose][prefill_lanes]") {
  // Two decode lanes of two sequences each, a load that wants about eight at
  // once: the prefill lane holds prompts back instead of handing off
  // sequences that would wait for a seat (their wait would show in TPOT,
  // not in TTFT).
  const Run r = run_policy("Solo-Apart", {{"tenants.online0.max_seqs", "2"},
                                          {"tenants.online0.stream",
                                           "{ poisson_rate = 16.0, duration_s = 10, "
                                           "input_tokens = 512, output_tokens = 64 }"}});
  const Tenant& t = tenant(*r.parts, "online0");
  std::size_t done = 0;
  for (const RequestRecord& q : t.records())
    if (q.done >= 0) {
      ++done;
      CHECK(q.generated == 64);
    }
  const int most = most_at_once(t);
  CHECK(most <= 4);
  CHECK(most >= 3);  // (the load fills them)
  CHECK(done > 100);
}
