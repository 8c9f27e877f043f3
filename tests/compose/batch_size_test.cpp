// A batch the scheduler collects (up to scheduler.batch_cap operators of an
// iteration) that could never fit any candidate is collected again with
// fewer operators before anything fails: the whole iteration of a small
// model on one accelerator holds all its layer groups' KV caches there, and
// a few operators at a time fit (tests/compose/batch_size.toml). In live
// mode which operators a batch collects depends on what is already issued,
// so the same request failed out of memory only sometimes.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

import slicesched.compose.offline;
import slicesched.compose.policy;
import slicesched.compose.run;
import slicesched.config;
import slicesched.core.plugin;
import slicesched.engine.tenant;

using namespace slicesched;

namespace {

const std::string kBatchSize = std::string(SLICESCHED_SOURCE_DIR) + "/tests/compose/batch_size.toml";

PolicyRun run(const std::vector<ConfigOverride>& sets) {
  auto cfg = load_config(kBatchSize, sets);
  REQUIRE(cfg.ok());
  PluginRegistries plugins;
  REQUIRE(load_plugins(*cfg, plugins).ok());
  auto truths = load_truths(*cfg);
  REQUIRE(truths.ok());
  auto parts = build_policy(*cfg, cfg->policies.front(), plugins);
  REQUIRE(parts.ok());
  auto r = run_offline(*cfg, *parts.value(), *truths);
  if (!r.ok()) FAIL(r.status().message());
  return std::move(r).value();
}

}  // namespace

TEST_CASE("a batch that could never fit is collected again with fewer operators, not failed",
          "[compose][memory][scheduler]") {
  const PolicyRun tight = run({});
  REQUIRE(tight.requests.size() == 4);
  CHECK(tight.oom_failed_requests == 0);
  for (const RequestRecord& r : tight.requests) {
    INFO("request arriving at " << r.arrival << " ns: " << r.error);
    CHECK(r.error.empty());
    CHECK(r.generated == 16);
    CHECK(r.first_token - r.arrival == 354'584);
    CHECK(r.done - r.arrival == 5'623'287);
  }
  // With room for the whole iteration on one accelerator it is one batch:
  // fewer batches than the tight run needed, and the same tokens.
  const PolicyRun roomy = run({{"cluster.accelerators[0].hbm_gib", "1"}});
  REQUIRE(roomy.requests.size() == 4);
  for (const RequestRecord& r : roomy.requests) CHECK(r.generated == 16);
  CHECK(roomy.scheduling.batches < tight.scheduling.batches);
}
