// Requests pushed at run time (engine.inbox): the engine hands them to
// their tenants, every sink hears of its request's end, a drain runs what
// was pushed, a cancel ends it with kCancelledError, and a request for a
// tenant that does not exist stops the run with one line.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

import slicesched.core.plugin;
import slicesched.engine;
import slicesched.engine.union_partition_set;
import slicesched.plugins.builtin;
import slicesched.simulator.emulated_cluster;
import slicesched.simulator.global_simulator;
import slicesched.testing;
import slicesched.core.priors;
import slicesched.engine.inbox;
import slicesched.engine.scheduler;
import slicesched.engine.tenant;
import slicesched.simulator.profile;
import slicesched.core.status;
import slicesched.core.ids;
import slicesched.core.graph;
import slicesched.core.accel;
import slicesched.core.gmg;
import slicesched.core.estimator;

using namespace slicesched;

namespace {

// What a sink heard: tokens (none in simulation: nothing is sampled) and
// the end.
struct Heard final : RequestSink {
  int ends = 0;
  std::int64_t prompt = -1, generated = -1;
  std::string error;
  void on_token(std::int64_t, Nanos) override {}
  void on_end(std::int64_t p, std::int64_t g, const std::string& e, Nanos) override {
    ++ends;
    prompt = p;
    generated = g;
    error = e;
  }
};

// Two H100s with Llama-3-8B; one online and one offline tenant with no
// stream of their own: everything comes from `inbox`.
Result<EngineResult> run_with(RequestInbox& inbox, const std::atomic<int>* stop = nullptr) {
  PluginRegistries plugins;
  REQUIRE(plugins::register_builtins(plugins).ok());
  auto accels = std::make_shared<AcceleratorSet>();
  auto templates = std::make_shared<TemplateRegistry>();
  REQUIRE(accels->add_link_class("nvlink", 300e9, 5e-6).ok());
  for (int i = 0; i < 2; ++i) REQUIRE(accels->add("gpu" + std::to_string(i), "H100", 80ll << 30).ok());
  const TemplateId tmpl = templates->add(testing::dense_template()).value();
  Gmg gmg(templates, accels);
  for (AccelId a = 0; a < accels->size(); ++a) REQUIRE(gmg.place_weights(tmpl, a).ok());

  EstimatorSet seeded;
  REQUIRE(seed_priors(seeded, *templates, *accels).ok());
  auto made = plugins.estimator.create("online-linear");
  REQUIRE(made.ok());
  PluginPtr<Estimator> estimator_ptr = std::move(made).value();
  REQUIRE(estimator_ptr
              ->seed_linear([&](EstimatorSet& set) {
                set = std::move(seeded);
                return Status::Ok();
              })
              .ok());
  Estimator& estimator = *estimator_ptr;
  std::vector<Tenant> tenants;
  tenants.emplace_back(0, TenantSpec{.name = "online", .priority = 10}, tmpl);
  tenants.emplace_back(1, TenantSpec{.name = "offline", .online = false}, tmpl);

  std::vector<PluginPtr<PartitionSet>> sets;
  sets.push_back(plugins.partition.create("singles").value());
  UnionPartitionSet partitions(std::move(sets));
  REQUIRE(partitions.bind(*accels).ok());
  auto placement = plugins.placement.create("simulation-guided");
  REQUIRE(placement.ok());
  auto arbiter = plugins.arbiter.create("greedy");
  REQUIRE(arbiter.ok());
  Scheduler scheduler(*placement.value(), partitions, estimator, {.issued_budget = 64, .batch_cap = 4});
  const std::filesystem::path dir = std::filesystem::path(SLICESCHED_SOURCE_DIR) / "data" / "profiles";
  auto layers = LayerProfile::load(dir / "llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv");
  auto links = TransferProfile::load(dir / "vidur_network_h100_dgx_send_recv.csv");
  REQUIRE(layers.ok());
  REQUIRE(links.ok());
  ProfileGroundTruth truth(std::move(layers).value(), std::move(links).value(), /*seed=*/3);
  EmulatedCluster cluster(accels->size(), truth, *arbiter.value());
  Engine engine(gmg, tenants, scheduler, estimator, cluster, {.stop = stop, .inbox = &inbox});
  return engine.run();
}

LiveRequest request(std::uint32_t tenant, std::size_t prompt, std::int64_t max_tokens, std::shared_ptr<Heard> sink) {
  return {tenant, std::vector<std::int64_t>(prompt, 1), max_tokens, std::move(sink)};
}

}  // namespace

TEST_CASE("inbox: pushed requests run on their tenants and every sink hears its end", "[engine][inbox]") {
  RequestInbox inbox;
  std::vector<std::shared_ptr<Heard>> heard;
  for (int i = 0; i < 5; ++i) {
    heard.push_back(std::make_shared<Heard>());
    REQUIRE(inbox.push(request(i % 2, 100 + i, 3 + i, heard.back())));
  }
  // Closed before the run: the engine still runs what was pushed, then ends.
  inbox.close();
  CHECK_FALSE(inbox.push(request(0, 10, 1, std::make_shared<Heard>())));
  auto r = run_with(inbox);
  REQUIRE(r.ok());
  CHECK(r->complete);
  REQUIRE(r->requests.size() == 5);
  for (int i = 0; i < 5; ++i) {
    INFO("request " << i);
    CHECK(heard[i]->ends == 1);
    CHECK(heard[i]->error.empty());
    CHECK(heard[i]->prompt == 100 + i);
    CHECK(heard[i]->generated == 3 + i);
  }
  // Online (tenant 0) requests first in the records, tenant by tenant.
  CHECK(r->requests[0].input_tokens == 100);
  CHECK(r->requests[0].output_tokens == 3);
  CHECK(r->requests[0].first_token >= 0);
}

TEST_CASE("inbox: a drain runs what was pushed before it, a cancel ends it with an error", "[engine][inbox]") {
  for (int stop_level : {1, 2}) {
    INFO("stop " << stop_level);
    RequestInbox inbox;
    auto a = std::make_shared<Heard>(), b = std::make_shared<Heard>();
    REQUIRE(inbox.push(request(0, 50, 4, a)));
    REQUIRE(inbox.push(request(1, 60, 2, b)));
    std::atomic<int> stop{stop_level};
    auto r = run_with(inbox, &stop);
    REQUIRE(r.ok());
    CHECK(inbox.closed());
    CHECK(r->interrupted == (stop_level == 2 || !r->complete));
    for (const auto& h : {a, b}) {
      CHECK(h->ends == 1);
      if (stop_level == 1) {
        CHECK(h->error.empty());
      } else {
        CHECK(h->error == kCancelledError);
      }
    }
  }
}

TEST_CASE("inbox: a request for a tenant that does not exist stops the run", "[engine][inbox]") {
  RequestInbox inbox;
  REQUIRE(inbox.push(request(7, 10, 1, std::make_shared<Heard>())));
  inbox.close();
  auto r = run_with(inbox);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() == "engine: a live request names tenant 7 of 2");
}

TEST_CASE("inbox: its wake counts on the counter it is given and calls the waker", "[engine][inbox]") {
  // The one wake path: a signal handler bumps the same counter (cli/signals),
  // a push, the close and wake() bump it and end the backend's wait.
  std::atomic<int> wake{0};
  RequestInbox inbox(&wake);
  CHECK(&inbox.counter() == &wake);
  int woken = 0;
  inbox.set_waker([&woken] { ++woken; });
  REQUIRE(inbox.push(request(0, 10, 1, std::make_shared<Heard>())));
  CHECK(wake.load() == 1);
  CHECK(woken == 1);
  inbox.wake();
  CHECK(wake.load() == 2);
  CHECK(woken == 2);
  inbox.set_waker({});  // (what it called is gone): the counter still counts
  inbox.close();
  CHECK(wake.load() == 3);
  CHECK(woken == 2);
  // Without one it counts on its own.
  RequestInbox own(nullptr);
  own.wake();
  CHECK(own.counter().load() == 1);
  CHECK(wake.load() == 3);
}
