// Cross-tenant batches (co_batch) on tests/cli/co_batch.toml: tenants of one
// model share its weights, offline sequences ride in the online batches at
// low priority, leave them when online work needs the room and finish later
// with every token, and a slowdown bound keeps the online iterations within
// it.
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
import slicesched.engine.tenant;

using namespace slicesched;

namespace {

const std::string kCoBatch = std::string(SLICESCHED_SOURCE_DIR) + "/tests/cli/co_batch.toml";

struct CoBatch {
  ExperimentConfig cfg;
  PluginRegistries plugins;
  Truths truths;
  explicit CoBatch(std::vector<ConfigOverride> sets = {}) {
    auto c = load_config(kCoBatch, sets);
    REQUIRE(c.ok());
    cfg = std::move(c).value();
    REQUIRE(load_plugins(cfg, plugins).ok());
    auto t = load_truths(cfg);
    REQUIRE(t.ok());
    truths = std::move(t).value();
  }
  std::unique_ptr<PolicyParts> build(const std::string& policy) {
    auto p = find_policy(cfg, policy);
    REQUIRE(p.ok());
    auto parts = build_policy(cfg, *p.value(), plugins);
    if (!parts.ok()) FAIL(parts.status().message());
    return std::move(parts).value();
  }
  PolicyRun run(PolicyParts& parts) {
    auto r = run_offline(cfg, parts, truths);
    if (!r.ok()) FAIL(r.status().message());
    return std::move(r).value();
  }
};

const Tenant& tenant(const PolicyParts& p, const std::string& name) {
  for (const Tenant& t : p.tenants)
    if (t.spec().name == name) return t;
  FAIL("no tenant " << name);
  return p.tenants.front();
}

}  // namespace

TEST_CASE("co_batch: tenants of one model hold one copy of its weights per accelerator", "[compose][co_batch]") {
  CoBatch s;
  const std::int64_t weights = make_model(s.cfg.models.front()).value()->weight_bytes();
  REQUIRE(weights > 0);
  auto parts = s.build("Priority-Batch");
  REQUIRE(parts->tenants.size() == 2);
  for (AccelId a = 0; a < parts->accels->size(); ++a) CHECK(parts->gmg->hbm(a).weights == weights);
  // The emulated cluster starts from the same resident bytes and never holds
  // a second copy: its peak is the weights plus KV and activations, far
  // below two copies on an 80 GiB H100 with this small load.
  const PolicyRun run = s.run(*parts);
  REQUIRE(run.memory.peak.size() == 2);
  for (std::int64_t peak : run.memory.peak) {
    CHECK(peak >= weights);
    CHECK(peak < 2 * weights);
  }
}

TEST_CASE("co_batch: offline rides in the online batches, leaves for online room and finishes with every token",
          "[compose][co_batch]") {
  // A KV budget that holds about three offline prompts: online arrivals
  // must take the room back from riders.
  CoBatch s({{"tenants.online0.kv_budget_tokens", "3500"}});
  auto parts = s.build("Priority-Batch");
  const PolicyRun run = s.run(*parts);
  const Tenant& host = tenant(*parts, "online0");
  const Tenant& offline = tenant(*parts, "offline0");
  CHECK(host.rider_steps() > 0);
  CHECK(host.rider_evictions() > 0);
  // The run reports them (summary.json memory.rider_evictions): an outside
  // probe found riders evicted with no count anywhere.
  CHECK(run.riders);
  CHECK(run.rider_evictions == host.rider_evictions());
  CHECK(offline.rider_steps() == 0);  // (it runs no iteration of its own)
  // Every offline request that finished in the window has every token; the
  // evicted ones resumed and finished too.
  std::size_t done = 0;
  for (const RequestRecord& r : offline.records()) {
    if (r.done < 0) continue;
    ++done;
    CHECK(r.error.empty());
    CHECK(r.generated == r.output_tokens);
    CHECK(r.first_token >= r.arrival);
  }
  CHECK(done >= offline.records().size() * 9 / 10);
  CHECK(run.metrics.offline_done == done);
  for (const RequestRecord& r : host.records()) CHECK(r.error.empty());
}

TEST_CASE("co_batch: with a slowdown bound the online decode steps stay within it", "[compose][co_batch]") {
  CoBatch s;
  auto alone = s.build("Static-Online");
  auto bounded = s.build("Bounded-Batch");
  auto unbounded = s.build("Priority-Batch");
  const PolicyRun a = s.run(*alone);
  const PolicyRun b = s.run(*bounded);
  const PolicyRun u = s.run(*unbounded);
  // Riders rode under the bound, and finished.
  CHECK(tenant(*bounded, "online0").rider_steps() > 0);
  CHECK(b.metrics.offline_done > 0);
  // The online time per output token stays within 10 % of online alone (plus
  // 2 % for what the estimator mispredicts); without the bound it does not.
  INFO("TPOT alone " << a.metrics.tpot_mean_s << " s, bounded " << b.metrics.tpot_mean_s << " s, unbounded "
                     << u.metrics.tpot_mean_s << " s");
  CHECK(b.metrics.tpot_mean_s <= a.metrics.tpot_mean_s * 1.10 * 1.02);
  CHECK(u.metrics.tpot_mean_s > b.metrics.tpot_mean_s);
  CHECK(u.metrics.offline_done >= b.metrics.offline_done);
}

TEST_CASE("co_batch: kept riders leave only for KV room and lose no work to the bound", "[compose][co_batch]") {
  // Under a tight bound, riders that no longer fit leave and recompute what
  // they held; kept (keep_riders), they step one token instead.
  CoBatch plain;
  CoBatch kept({{"policies.Bounded-Batch.co_batch.keep_riders", "true"}});
  auto p = plain.build("Bounded-Batch");
  auto k = kept.build("Bounded-Batch");
  const PolicyRun rp = plain.run(*p);
  const PolicyRun rk = kept.run(*k);
  const Tenant& host_p = tenant(*p, "online0");
  const Tenant& host_k = tenant(*k, "online0");
  INFO("evictions plain " << host_p.rider_evictions() << ", kept " << host_k.rider_evictions());
  CHECK(host_p.rider_evictions() > 0);
  // The KV budget holds every rider here: none leaves.
  CHECK(host_k.rider_evictions() == 0);
  CHECK(host_k.rider_steps() > 0);
  CHECK(rk.metrics.offline_done >= rp.metrics.offline_done);
  for (const RequestRecord& r : tenant(*k, "offline0").records())
    if (r.done >= 0) {
      CHECK(r.error.empty());
      CHECK(r.generated == r.output_tokens);
    }
  for (const RequestRecord& r : host_k.records()) CHECK(r.error.empty());

  // Short of KV room (about three offline prompts), online work still takes
  // it back: kept riders leave then, and finish later with every token.
  CoBatch short_kv(
      {{"policies.Bounded-Batch.co_batch.keep_riders", "true"}, {"tenants.online0.kv_budget_tokens", "3500"}});
  auto s = short_kv.build("Bounded-Batch");
  const PolicyRun rs = short_kv.run(*s);
  CHECK(tenant(*s, "online0").rider_evictions() > 0);
  std::size_t done = 0;
  for (const RequestRecord& r : tenant(*s, "offline0").records())
    if (r.done >= 0) {
      ++done;
      CHECK(r.error.empty());
      CHECK(r.generated == r.output_tokens);
    }
  CHECK(done > 0);
  CHECK(rs.metrics.offline_done == done);
}

TEST_CASE("co_batch: a peer's requests are seated as the host's own, one batch for both tenants",
          "[compose][co_batch]") {
  // tests/cli/co_batch_peers.toml: two online tenants of one model; in
  // Shared, online1 rides only in online0's iterations at online0's
  // priority, under a slowdown bound of 0 that seats no lower-priority rider.
  auto cfg = load_config(std::string(SLICESCHED_SOURCE_DIR) + "/tests/cli/co_batch_peers.toml");
  REQUIRE(cfg.ok());
  PluginRegistries plugins;
  REQUIRE(load_plugins(*cfg, plugins).ok());
  auto truths = load_truths(*cfg);
  REQUIRE(truths.ok());
  auto run = [&](const std::string& name) {
    auto p = find_policy(*cfg, name);
    REQUIRE(p.ok());
    auto parts = build_policy(*cfg, *p.value(), plugins);
    if (!parts.ok()) FAIL(parts.status().message());
    auto r = run_offline(*cfg, *parts.value(), *truths);
    if (!r.ok()) FAIL(r.status().message());
    return std::pair{std::move(parts).value(), std::move(r).value()};
  };
  const auto [apart, a] = run("Apart");
  const auto [shared, s] = run("Shared");
  const Tenant& host = tenant(*shared, "online0");
  const Tenant& peer = tenant(*shared, "online1");
  CHECK(host.rider_steps() > 0);
  CHECK(peer.rider_steps() == 0);  // (it hosts nothing and runs no iteration of its own)
  CHECK(host.rider_evictions() == 0);
  // The bound of 0 seats no lower-priority rider; the peer's requests all
  // ran, whole, and every one that finished has every token.
  for (const Tenant* t : {&host, &peer}) {
    std::size_t done = 0;
    for (const RequestRecord& r : t->records()) {
      CHECK(r.error.empty());
      if (r.done < 0) continue;
      ++done;
      CHECK(r.generated == r.output_tokens);
      CHECK(r.first_token >= r.arrival);
    }
    CHECK(done >= t->records().size() * 9 / 10);
  }
  // One batch reads the weights once for both tenants' decodes: the pair is
  // busy for less time than when each tenant runs its own iterations.
  double busy_apart = 0, busy_shared = 0;
  for (double b : a.metrics.accel_busy_s) busy_apart += b;
  for (double b : s.metrics.accel_busy_s) busy_shared += b;
  INFO("GPU busy apart " << busy_apart << " s, shared " << busy_shared << " s");
  CHECK(busy_shared < 0.9 * busy_apart);
  CHECK(s.metrics.online_done == a.metrics.online_done);
}

TEST_CASE("co_batch: a policy's lanes override a tenant's, instance by instance", "[compose][co_batch]") {
  // colocation.toml: SliceScheduler runs four offline instances of two lanes,
  // Priority-Batch four of the tenant's own four.
  auto cfg = load_config(std::string(SLICESCHED_SOURCE_DIR) + "/configs/experiments/colocation.toml");
  REQUIRE(cfg.ok());
  PluginRegistries plugins;
  REQUIRE(load_plugins(*cfg, plugins).ok());
  for (const auto& [policy, lanes] : {std::pair<std::string, int>{"SliceScheduler", 2}, {"Priority-Batch", 4}}) {
    auto p = find_policy(*cfg, policy);
    REQUIRE(p.ok());
    auto parts = build_policy(*cfg, *p.value(), plugins);
    if (!parts.ok()) FAIL(parts.status().message());
    int offline = 0;
    for (const Tenant& t : parts.value()->tenants) {
      if (t.spec().name.rfind("offline0#", 0) == 0) {
        ++offline;
        CHECK(t.spec().lanes == lanes);
      } else {
        CHECK(t.spec().lanes == 4);  // the online tenants keep their own
      }
    }
    CHECK(offline == 4);
  }
}

TEST_CASE("co_batch: a rider larger than every host's KV budget fails at arrival instead of blocking the queue",
          "[compose][co_batch]") {
  // Offline prompt and output 1,056 tokens against a host budget of 1,000:
  // it can never ride. Before, it waited at the head of the queue for good
  // (and every rider behind it), and the run ended in a deadlock once the
  // online work was done.
  CoBatch s({{"tenants.online0.kv_budget_tokens", "1000"}});
  auto parts = s.build("Priority-Batch");
  const PolicyRun run = s.run(*parts);
  const Tenant& offline = tenant(*parts, "offline0");
  REQUIRE(!offline.records().empty());
  for (const RequestRecord& r : offline.records()) {
    CHECK(r.done == r.arrival);
    CHECK(r.generated == 0);
    CHECK(r.error.find("need 1056 tokens of KV cache, more than any tenant it rides in may hold (kv_budget_tokens: "
                       "online0: 1000)") != std::string::npos);
  }
  CHECK(run.metrics.offline_done == 0);
  for (const RequestRecord& r : tenant(*parts, "online0").records())
    if (r.done >= 0) CHECK(r.error.empty());
}

TEST_CASE("co_batch: a rider of another model is refused, both models named", "[compose][co_batch][bad-input]") {
  const std::string path = std::string(SLICESCHED_SOURCE_DIR) + "/tests/compose/co_batch_two_models.toml";
  auto cfg = load_config(path);
  REQUIRE(cfg.ok());
  PluginRegistries plugins;
  REQUIRE(load_plugins(*cfg, plugins).ok());
  auto parts = build_policy(*cfg, cfg->policies.front(), plugins);
  REQUIRE_FALSE(parts.ok());
  CHECK(parts.status().message() ==
        path +
            ": policy 'Priority-Batch': co_batch.riders.offline0: host 'online0' serves model 'chat', 'offline0' model "
            "'batch' (a batch runs one model; models are told apart by name, so two [[models]] entries alike are two "
            "models, each with its weights: give both tenants one)");
}
