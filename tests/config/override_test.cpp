// Config overrides (sweep and plan's --set): dotted paths into the TOML,
// elements by index, name or '*', and errors that name the override.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

import slicesched.config;

using namespace slicesched;
namespace fs = std::filesystem;

namespace {

const std::string kSmall = (fs::path(SLICESCHED_SOURCE_DIR) / "tests/cli/small.toml").string();

ExperimentConfig with(const std::vector<ConfigOverride>& o) {
  auto cfg = load_config(kSmall, o);
  INFO((cfg.ok() ? std::string() : cfg.status().message()));
  REQUIRE(cfg.ok());
  return cfg.value();
}

std::string error_with(const std::vector<ConfigOverride>& o) {
  auto cfg = load_config(kSmall, o);
  REQUIRE_FALSE(cfg.ok());
  return cfg.status().message();
}

}  // namespace

TEST_CASE("overrides set values by dotted path", "[config]") {
  CHECK(with({}).accelerators.size() == 4);
  CHECK(with({{"cluster.accelerators[0].count", "8"}}).accelerators.size() == 8);
  CHECK(with({{"cluster.accelerators.0.count", "6"}}).accelerators.size() == 6);
  CHECK(with({{"duration_s", "30"}}).duration_s == 30);
  CHECK(with({{"tenants.offline0.stream.constant_rate", "4"}}).tenants[1].stream.rate_per_s == 4);
  // A key absent from the file is created; rate_scale scales any stream.
  const auto scaled = with({{"tenants.*.stream.rate_scale", "2"}});
  CHECK(scaled.tenants[0].stream.trace.rate_scale == 2);
  CHECK(scaled.tenants[1].stream.rate_per_s == 2);
  // A bare word is a string.
  CHECK(with({{"policies.SliceScheduler.placement.plugin", "static"}}).policies[1].placement.name == "static");
  CHECK(with({{"tenants.offline0.instances", "3"}}).tenants[1].instances == 3);
  // Later overrides win.
  CHECK(with({{"duration_s", "30"}, {"duration_s", "40"}}).duration_s == 40);
}

TEST_CASE("bad overrides are refused naming the --set", "[config]") {
  CHECK(error_with({{"tenants.offline9.stream.constant_rate", "1"}}) ==
        "--set tenants.offline9.stream.constant_rate: no element of 'tenants' is named 'offline9' (names: online0, "
        "offline0)");
  CHECK(error_with({{"cluster.accelerators[3].count", "1"}}) ==
        "--set cluster.accelerators[3].count: 'cluster.accelerators' has 1 element(s), no [3]");
  CHECK(error_with({{"clusterr.accelerators[0].count", "1"}}).find("has no key 'clusterr'") != std::string::npos);
  CHECK(error_with({{"duration_s.x", "1"}}).find("'duration_s' is a value") != std::string::npos);
  CHECK(error_with({{"tenants..stream", "1"}}).find("empty path segment") != std::string::npos);
  CHECK(error_with({{"duration_s", "[1"}}).find("is not a TOML value") != std::string::npos);
  // The reader's own checks name the override instead of a line.
  CHECK(error_with({{"tenants.offline0.stream.constant_rate", "-1"}}) ==
        "--set tenants.offline0.stream.constant_rate=-1: tenants[1].stream.constant_rate: expected a number in "
        "[1e-09, 1e+09], got -1");
  CHECK(error_with({{"tenants.offline0.stream.typo", "1"}}).find("--set tenants.offline0.stream.typo=1: ") == 0);
  CHECK(error_with({{"cluster.accelerators[0].count", "0"}}).find("expected an integer in [1, 100000], got 0") !=
        std::string::npos);
  // So do they inside a table or an array the override wrote, and for a
  // key such a table lacks (they used to say "small.toml:0:").
  CHECK(error_with({{"tenants.offline0.stream", "{ constant_rate = -1, input_tokens = 8, output_tokens = 4 }"}}) ==
        "--set tenants.offline0.stream={ constant_rate = -1, input_tokens = 8, output_tokens = 4 }: "
        "tenants[1].stream.constant_rate: expected a number in [1e-09, 1e+09], got -1");
  CHECK(error_with({{"tenants.offline0.stream", "{ input_tokens = 8, output_tokens = 4 }"}}) ==
        "--set tenants.offline0.stream={ input_tokens = 8, output_tokens = 4 }: tenants[1].stream.trace: exactly one "
        "of trace, constant_rate, poisson_rate is required");
  CHECK(error_with({{"cluster.accelerators", "[{ name = \"g\", type = \"H100\", hbm_gib = -1 }]"}}) ==
        "--set cluster.accelerators=[{ name = \"g\", type = \"H100\", hbm_gib = -1 }]: "
        "cluster.accelerators[0].hbm_gib: expected a number > 0 and <= 1000000, got -1");
}
