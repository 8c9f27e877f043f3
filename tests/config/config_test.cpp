// The config reader: the shipped experiment loads; every bad input gives
// one line naming the file, the line and the key.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

import slicesched.config;

using namespace slicesched;
namespace fs = std::filesystem;

namespace {

const fs::path kRoot(SLICESCHED_SOURCE_DIR);

// A valid config; `edit` replaces one line to break it. The files it names
// (l.csv, t.csv) are made, empty, in the temporary folder the tests write
// configs to: a config loads only when they exist.
std::string base() {
  for (const char* name : {"l.csv", "t.csv"}) std::ofstream(fs::temp_directory_path() / name);
  return R"(name = "t"
[cluster]
link_classes = [{ name = "nvlink", bandwidth_gbps = 300.0 }]
accelerators = [{ name_prefix = "gpu", count = 2, type = "H100", hbm_gib = 80 }]
[ground_truth]
layers = "l.csv"
transfers = "t.csv"
[[tenants]]
name = "on"
stream = { constant_rate = 1.0, duration_s = 10, input_tokens = 16, output_tokens = 2 }
[[policies]]
name = "p"
tenants = ["on"]
placement = { plugin = "static" }
partition_sets = [{ plugin = "singles" }]
)";
}

std::string load_error(const std::string& text) {
  // One file per process: ctest runs the test cases side by side.
  const fs::path p = fs::temp_directory_path() / ("slicesched_config_test_" + std::to_string(getpid()) + ".toml");
  std::ofstream(p) << text;
  auto cfg = load_config(p.string());
  REQUIRE(!cfg.ok());
  std::string m = cfg.status().message();
  // Messages start with the path; compare the rest.
  REQUIRE(m.rfind(p.string(), 0) == 0);
  return m.substr(p.string().size());
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto pos = s.find(from);
  REQUIRE(pos != std::string::npos);
  return s.replace(pos, from.size(), to);
}

}  // namespace

TEST_CASE("the colocation experiment loads", "[config]") {
  auto cfg = load_config((kRoot / "configs/experiments/colocation.toml").string());
  REQUIRE(cfg.ok());
  CHECK(cfg->accelerators.size() == 8);
  CHECK(cfg->accelerators[7].name == "gpu7");
  CHECK(cfg->accelerators[0].hbm_bytes == 80ll << 30);
  // One offline stream; Dual-Share serves it with two instances.
  CHECK(cfg->tenants.size() == 5);
  CHECK(cfg->policies.size() == 6);
  CHECK(instances_of(cfg->policies[2], cfg->tenants[4]) == 2);
  CHECK(instances_of(cfg->policies[1], cfg->tenants[4]) == 1);
  // Priority-Batch: offline dealt among the four online instances, riding only.
  CHECK(instances_of(cfg->policies[4], cfg->tenants[4]) == 4);
  CHECK(cfg->policies[4].co_batch.size() == 1);
  CHECK(cfg->policies[4].co_batch[0].hosts.size() == 4);
  CHECK_FALSE(cfg->policies[4].co_batch_own_iterations);
  CHECK(cfg->policies[4].co_batch_slowdown < 0);
  CHECK(cfg->policies[5].placement.name == "simulation-guided");
  CHECK(cfg->policies[5].partition_sets.size() == 3);
  CHECK(cfg->policies[5].co_batch_own_iterations);
  CHECK(cfg->policies[5].co_batch_slowdown == 2.0);
  // SliceScheduler: offline dealt over four instances of two lanes each,
  // riders kept on board unless their host needs the KV room.
  CHECK(instances_of(cfg->policies[5], cfg->tenants[4]) == 4);
  CHECK(lanes_of(cfg->policies[5], cfg->tenants[4]) == 2);
  CHECK(lanes_of(cfg->policies[4], cfg->tenants[4]) == 4);
  CHECK(cfg->policies[5].co_batch_keep_riders);
  CHECK_FALSE(cfg->policies[4].co_batch_keep_riders);
  CHECK(cfg->policies[0].partition_sets[0].args["groups"].size() == 4);
  CHECK(fs::exists(cfg->ground_truth.layers_csv));
  CHECK(fs::exists(cfg->tenants[0].stream.path));
  CHECK(cfg->tenants[1].stream.trace.time_shift_s == 450);
  CHECK(cfg->tenants[1].lanes == 4);
  CHECK(cfg->duration_s == 1800);
  CHECK(!cfg->tenants[4].online);
}

TEST_CASE("a valid minimal config loads with defaults", "[config]") {
  const fs::path p = fs::temp_directory_path() / "slicesched_config_ok.toml";
  std::ofstream(p) << base();
  auto cfg = load_config(p.string());
  REQUIRE(cfg.ok());
  CHECK(cfg->seed == 1);
  CHECK(cfg->tenants[0].token_budget == 2048);
  CHECK(cfg->ground_truth.op_noise_cv == 0.006);
  CHECK(cfg->ground_truth.layers_csv == (p.parent_path() / "l.csv").string());
}

TEST_CASE("a type table of one's own, with no fit beside it, plays the shipped general fit", "[config]") {
  // An outside probe: the general fit was looked for beside the type table
  // only, and the error named ground_truth.roofline, a key the config did
  // not set.
  const fs::path dir = fs::temp_directory_path() / ("slicesched_own_types_" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::copy_file(kRoot / "configs" / "accelerators" / "H100-SXM.toml", dir / "Mine.toml",
                fs::copy_options::overwrite_existing);
  const fs::path p = dir / "own_type.toml";
  std::ofstream(p) << replace(replace(base(), "type = \"H100\"", "type = \"" + (dir / "Mine.toml").string() + "\""),
                              "layers = \"l.csv\"\ntransfers = \"t.csv\"\n", "");
  auto cfg = load_config(p.string());
  INFO(cfg.status().message());
  REQUIRE(cfg.ok());
  CHECK(cfg->ground_truth.roofline_fit == (kRoot / "configs" / "accelerators" / "roofline-fit.toml").string());
  fs::remove_all(dir);
}

TEST_CASE("config errors name the file, line and key", "[config][bad-input]") {
  CHECK(load_error(replace(base(), "name = \"t\"", "name = \"t")).find(":1:") == 0);
  CHECK(load_error(replace(base(), "hbm_gib = 80", "hbm_gib = -1")) ==
        ":4: cluster.accelerators[0].hbm_gib: expected a number > 0 and <= 1000000, got -1");
  CHECK(load_error(replace(base(), "hbm_gib = 80", "hbm_gib = \"80\"")) ==
        ":4: cluster.accelerators[0].hbm_gib: expected a number, got \"80\"");
  CHECK(load_error(replace(base(), "[ground_truth]", "[ground_truht]")) ==
        ":5: ground_truht: unknown key (did you mean 'ground_truth'? known here: cluster, duration_s, estimators, "
        "faults, ground_truth, hosts, live, model, models, name, plugins, policies, seed, serve, slo_baseline, "
        "tenants)");
  // Keys read only when present are named too (they were left out).
  CHECK(load_error(replace(base(), "[cluster]", "[cluster]\nzz = 1")) ==
        ":3: cluster.zz: unknown key (known here: accelerator_types, accelerators, host_link, link_classes, links)");
  CHECK(load_error(replace(base(), "tenants = [\"on\"]", "tenants = [\"off\"]")) ==
        ":13: policies[0].tenants: no tenant named 'off'");
  CHECK(load_error(replace(base(), "constant_rate = 1.0,", "constant_rate = 1.0, poisson_rate = 2.0,")) ==
        ":10: tenants[0].stream.trace: exactly one of trace, constant_rate, poisson_rate is required");
  CHECK(load_error(replace(base(), "name = \"p\"", "name = \"p\"\nbatch_cap = 3")) ==
        ":13: policies[0].batch_cap: unknown key (known here: arbiter, co_batch, estimator, instances, lanes, name, "
        "partition_sets, placement, prefill_lanes, scheduler, stages, tenants)");
  CHECK(load_error(replace(base(), "name = \"p\"", "name = \"p\"\nco_batch = { riders = { ghost = [\"t\"] } }")) ==
        ":13: policies[0].co_batch.riders.ghost: the policy runs no tenant named 'ghost'");
  CHECK(load_error(replace(base(), "name = \"p\"", "name = \"p\"\nlanes = { ghost = 2 }")) ==
        ":13: policies[0].lanes.ghost: the policy runs no tenant named 'ghost'");
  CHECK(load_error(replace(base(), "name = \"p\"", "name = \"p\"\nlanes = { on = 0 }")) ==
        ":13: policies[0].lanes.on: expected an integer in [1, 1024], got 0");
  CHECK(load_error(replace(base(), "name = \"p\"", "name = \"p\"\nco_batch = { riders = {}, keep_riders = 1 }")) ==
        ":13: policies[0].co_batch.keep_riders: expected true or false, got 1");
  CHECK(
      load_error(replace(base(), "name = \"p\"", "name = \"p\"\nco_batch = { riders = {}, rides_only = [\"on\"] }")) ==
      ":13: policies[0].co_batch.rides_only: expected tenants named in riders, got 'on'");
  CHECK(load_error(replace(base(), "name = \"p\"",
                           "name = \"p\"\nco_batch = { riders = {}, own_iterations = false, rides_only = [] }")) ==
        ":13: policies[0].co_batch.rides_only: own_iterations = false already makes every rider ride only; give one "
        "of the two");
  {
    // Two tenants riding only in each other: nobody runs an iteration.
    std::string two = replace(base(), "tenants = [\"on\"]", "tenants = [\"on\", \"off\"]");
    two +=
        "\n[[tenants]]\nname = \"off\"\nstream = { constant_rate = 1.0, duration_s = 10, input_tokens = 8, "
        "output_tokens = 2 }\n";
    two = replace(two, "name = \"p\"",
                  "name = \"p\"\nco_batch = { riders = { on = [\"off\"], off = [\"on\"] }, rides_only = [\"on\", "
                  "\"off\"] }");
    CHECK(load_error(two).find("policies[0].co_batch.rides_only: 'o") != std::string::npos);
    CHECK(load_error(two).find("would ride only in tenants that ride only themselves") != std::string::npos);
  }
  // Links are needed only where accelerators reach each other.
  const std::string no_links = replace(base(), "link_classes = [{ name = \"nvlink\", bandwidth_gbps = 300.0 }]\n", "");
  CHECK(load_error(no_links) ==
        ":2: cluster.link_classes: is required (an array) with more than one accelerator: how they reach each other");
  {
    const fs::path p = fs::temp_directory_path() / "slicesched_config_one_accel.toml";
    std::ofstream(p) << replace(no_links, "count = 2", "count = 1");
    auto one = load_config(p.string());
    REQUIRE(one.ok());
    CHECK(one->link_classes.empty());
    CHECK(one->accelerators.size() == 1);
  }
  CHECK(load_error(replace(base(), "count = 2", "count = 0")) ==
        ":4: cluster.accelerators[0].count: expected an integer in [1, 100000], got 0");
  // Policy names whose files would be one file: requests_a_b.csv for both.
  {
    const std::string one =
        "[[policies]]\nname = \"p\"\ntenants = [\"on\"]\nplacement = { plugin = \"static\" }\n"
        "partition_sets = [{ plugin = \"singles\" }]\n";
    std::string two = replace(base(), "name = \"p\"", "name = \"A/b\"");
    two += replace(one, "name = \"p\"", "name = \"a_B\"");
    CHECK(load_error(two) ==
          ":17: policies[1].name: policy 'a_B' would write the same files as policy 'A/b' (requests_a_b.csv, ...): "
          "expected names that differ in more than case and punctuation");
    CHECK(file_stem("Static-Online") == "static_online");
  }
  CHECK(load_error(replace(base(), "name = \"p\"", "name = \"p\"\nscheduler = { what_if_scope = \"half\" }")) ==
        ":13: policies[0].scheduler.what_if_scope: expected \"component\" or \"cluster\", got \"half\"");
}

// A bound the value is refused by is stated as it is: an exclusive one as
// "> 0" (never "[0, ...], got 0"), a sentinel as the one value it is.
TEST_CASE("range errors state the bound they enforce", "[config][bad-input]") {
  CHECK(load_error(replace(base(), "hbm_gib = 80", "hbm_gib = 0")) ==
        ":4: cluster.accelerators[0].hbm_gib: expected a number > 0 and <= 1000000, got 0");
  CHECK(load_error(replace(base(), "hbm_gib = 80", "hbm_gib = 2e6")) ==
        ":4: cluster.accelerators[0].hbm_gib: expected a number > 0 and <= 1000000, got 2000000");
  CHECK(load_error(replace(base(), "duration_s = 10,", "duration_s = 0,")) ==
        ":10: tenants[0].stream.duration_s: expected a number > 0 and <= 1e+12, got 0");
  // The measurement window: > 0, or -1; nothing in between is "run until
  // done" by accident.
  CHECK(load_error(replace(base(), "name = \"t\"", "name = \"t\"\nduration_s = 0")) ==
        ":2: duration_s: expected a number > 0 and <= 1e+09, or -1 to run until done, got 0");
  CHECK(load_error(replace(base(), "name = \"t\"", "name = \"t\"\nduration_s = -0.5")) ==
        ":2: duration_s: expected a number > 0 and <= 1e+09, or -1 to run until done, got -0.5");
  CHECK(load_error(replace(base(), "constant_rate = 1.0, duration_s = 10, input_tokens = 16, output_tokens = 2",
                           "trace = \"x.csv\", duration_s = -2")) ==
        ":10: tenants[0].stream.duration_s: expected a number > 0 and <= 1e+12, or -1 for all, got -2");
  // Any positive value is taken; a type error stays a type error.
  const fs::path tiny = fs::temp_directory_path() / "slicesched_config_tiny_hbm.toml";
  std::ofstream(tiny) << replace(base(), "hbm_gib = 80", "hbm_gib = 1e-7");
  CHECK(load_config(tiny.string()).ok());
  CHECK(load_error(replace(base(), "hbm_gib = 80", "hbm_gib = \"80\"")) ==
        ":4: cluster.accelerators[0].hbm_gib: expected a number, got \"80\"");
}

TEST_CASE("a what-if's scope is the component by default, the cluster on request", "[config]") {
  const fs::path p = fs::temp_directory_path() / "slicesched_config_scope.toml";
  std::ofstream(p) << base();
  auto cfg = load_config(p.string());
  REQUIRE(cfg.ok());
  CHECK(cfg->policies[0].scoped_what_if);
  std::ofstream(p) << replace(base(), "name = \"p\"", "name = \"p\"\nscheduler = { what_if_scope = \"cluster\" }");
  cfg = load_config(p.string());
  REQUIRE(cfg.ok());
  CHECK_FALSE(cfg->policies[0].scoped_what_if);
}

TEST_CASE("a policy's arbiter and estimator default to the built-ins and take arguments", "[config]") {
  const fs::path p = fs::temp_directory_path() / "slicesched_config_plugins.toml";
  std::ofstream(p) << base();
  auto cfg = load_config(p.string());
  REQUIRE(cfg.ok());
  CHECK(cfg->policies[0].arbiter.name == "greedy");
  CHECK(cfg->policies[0].arbiter.args == nlohmann::json::object());
  CHECK(cfg->policies[0].estimator.name == "online-linear");
  std::ofstream(p) << replace(base(), "placement = { plugin = \"static\" }",
                              "placement = { plugin = \"static\" }\n"
                              "arbiter = { plugin = \"greedy\", reserve_oldest = false }\n"
                              "estimator = { plugin = \"mine\", window = 8 }");
  cfg = load_config(p.string());
  REQUIRE(cfg.ok());
  CHECK(cfg->policies[0].arbiter.name == "greedy");
  CHECK(cfg->policies[0].arbiter.args == nlohmann::json{{"reserve_oldest", false}});
  CHECK(cfg->policies[0].estimator.name == "mine");  // checked by simulate, which knows the loaded plugins
  CHECK(cfg->policies[0].estimator.args == nlohmann::json{{"window", 8}});
}

TEST_CASE("a policy's arbiter and estimator must be plugin tables", "[config][bad-input]") {
  const std::string at = "placement = { plugin = \"static\" }";
  CHECK(load_error(replace(base(), at, at + "\narbiter = \"serial\"")) == ":15: policies[0].arbiter: expected a table");
  CHECK(load_error(replace(base(), at, at + "\narbiter = { reserve_oldest = false }")) ==
        ":15: policies[0].arbiter.plugin: is required (a string)");
  CHECK(load_error(replace(base(), at, at + "\nestimator = { plugin = 3 }")) ==
        ":15: policies[0].estimator.plugin: expected a string");
  CHECK(load_error(replace(base(), at, at + "\nestimator = [\"online-linear\"]")) ==
        ":15: policies[0].estimator: expected a table");
}

TEST_CASE("a missing config file is one clear error", "[config][bad-input]") {
  auto cfg = load_config("/nonexistent/x.toml");
  REQUIRE(!cfg.ok());
  CHECK(cfg.status().message().rfind("/nonexistent/x.toml", 0) == 0);
}

TEST_CASE("live keys: devices, the model and [live]", "[config]") {
  const fs::path p = fs::temp_directory_path() / "slicesched_config_live.toml";
  std::string text = replace(base(), "hbm_gib = 80 }", "hbm_gib = 1, device = \"cpu:*\" }");
  text = replace(text, "[ground_truth]\nlayers = \"l.csv\"\ntransfers = \"t.csv\"\n",
                 "[model]\nname = \"llama-tiny\"\nhidden = 128\n[live]\nthreads = 2\ntime_scale = 10\n");
  std::ofstream(p) << text;
  auto cfg = load_config(p.string());
  if (!cfg.ok()) FAIL(cfg.status().message());
  CHECK(cfg->accelerators[0].device == "cpu:0");
  CHECK(cfg->accelerators[1].device == "cpu:1");
  CHECK(cfg->models.front().vocab == 512);
  CHECK(cfg->models.front().hidden == 128);
  CHECK(cfg->models.front().dtype == "float32");
  CHECK(cfg->live.threads == 2);
  CHECK(cfg->live.time_scale == 10);
  CHECK_FALSE(cfg->ground_truth.present);
}

TEST_CASE("live keys: bad devices and model shapes name the key", "[config][bad-input]") {
  CHECK(load_error(replace(base(), "hbm_gib = 80 }", "hbm_gib = 80, device = \"tpu:0\" }")) ==
        ":4: cluster.accelerators[0].device: expected \"cpu\", \"cpu:N\", \"cuda:N\" or \"cpu:*\" / \"cuda:*\", got "
        "\"tpu:0\"");
  CHECK(load_error(base() + "[model]\nname = \"gpt2\"\n") ==
        ":17: model.name: expected one of \"llama3-8b\", \"llama3.1-8b\", \"llama-tiny\", \"llama2-7b\", "
        "\"llama2-70b\", \"codellama-34b\", \"internlm-20b\", \"mistral-7b\", \"phi-2\", got \"gpt2\"");
  // A preset gives its shapes (here Llama-2-70B's: 80 layers, 8 KV heads of 128).
  const fs::path bp = fs::temp_directory_path() / ("slicesched_config_preset_" + std::to_string(getpid()) + ".toml");
  std::ofstream(bp) << base() + "[model]\nname = \"llama2-70b\"\n";
  auto big = load_config(bp.string());
  if (!big.ok()) FAIL(big.status().message());
  CHECK(big->models.front().layers == 80);
  CHECK(big->models.front().hidden == 8192);
  CHECK(big->models.front().kv_heads == 8);
  CHECK(big->models.front().mlp == 28672);
  CHECK(big->models.front().vocab == 32000);
  CHECK(load_error(base() + "[model]\nname = \"llama-tiny\"\nheads = 3\n") ==
        ":18: model.heads: expected a divisor of hidden (64) leaving an even head dimension");
  CHECK(load_error(base() + "[model]\nname = \"llama-tiny\"\nkv_heads = 3\n") ==
        ":18: model.kv_heads: expected a divisor of heads (4)");
  CHECK(load_error(base() + "[model]\ndtype = \"int4\"\n") ==
        ":17: model.dtype: expected \"bfloat16\", \"float16\" or \"float32\", got \"int4\"");
  CHECK(load_error(base() + "[live]\nthreads = 0\n").find(":17: live.threads: expected") == 0);
  // A [[hosts]] entry that owns no accelerator: serve would wait a minute
  // for an executor that refuses to start.
  const std::string hosts =
      "[[hosts]]\nname = \"a\"\naddress = \"tcp://127.0.0.1:5901\"\n"
      "[[hosts]]\nname = \"b\"\naddress = \"tcp://127.0.0.1:5902\"\n";
  CHECK(load_error(replace(base(), "hbm_gib = 80 }", "hbm_gib = 80, host = \"a\" }") + hosts) ==
        ":19: hosts[1].name: host 'b' has no accelerator (give one `host = \"b\"` in cluster.accelerators, or "
        "remove the entry)");
}

TEST_CASE("serve keys: [serve] with its defaults, its values, and its errors", "[config][bad-input]") {
  const fs::path p = fs::temp_directory_path() / "slicesched_config_serve.toml";
  std::ofstream(p) << base() + "[serve]\nlisten = \"0.0.0.0:9000\"\nmax_queue = 5\nbatch_store = \"b.sqlite\"\n";
  auto cfg = load_config(p.string());
  if (!cfg.ok()) FAIL(cfg.status().message());
  CHECK(cfg->serve.listen == "0.0.0.0:9000");
  CHECK(cfg->serve.max_queue == 5);
  CHECK(cfg->serve.retry_after_s == 1);
  CHECK(cfg->serve.batch_inflight == 16);
  CHECK(cfg->serve.batch_store == (fs::temp_directory_path() / "b.sqlite").lexically_normal().string());
  const fs::path q = fs::temp_directory_path() / "slicesched_config_no_serve.toml";
  std::ofstream(q) << base();
  auto plain = load_config(q.string());
  REQUIRE(plain.ok());
  CHECK(plain->serve.listen.empty());
  CHECK(plain->serve.batch_store.empty());
  CHECK(plain->serve.max_queue == 64);

  CHECK(load_error(base() + "[serve]\nmax_queue = 0\n") ==
        ":17: serve.max_queue: expected an integer in [1, 1000000], got 0");
  CHECK(load_error(base() + "[serve]\nlisten = \"localhost\"\n") ==
        ":17: serve.listen: expected \"HOST:PORT\", got \"localhost\"");
  CHECK(load_error(base() + "[serve]\nbatch_store = \"\"\n") ==
        ":17: serve.batch_store: expected a file path, got \"\"");
  CHECK(load_error(base() + "[serve]\nmax_queu = 3\n").find(":17: serve.max_queu: unknown key") == 0);
  CHECK(plain->serve.ttft_slo_s < 0);  // no target: SLO attainment n/a
  CHECK(load_error(base() + "[serve]\nttft_slo_s = 0\n") ==
        ":17: serve.ttft_slo_s: expected a number > 0 and <= 1000000, or -1 for no SLO target, got 0");
}

TEST_CASE("faults: lost accelerators from the config, and their errors", "[config][faults][bad-input]") {
  const fs::path p = fs::temp_directory_path() / "slicesched_config_faults.toml";
  std::ofstream(p) << base() +
                          "[[faults]]\naccelerator = \"gpu1\"\nat_s = 20\nduration_s = 5\n"
                          "[[faults]]\naccelerator = \"gpu0\"\nat_s = 3\n";
  auto cfg = load_config(p.string());
  REQUIRE(cfg.ok());
  REQUIRE(cfg->faults.size() == 2);  // in time order
  CHECK(cfg->faults[0].accelerator == "gpu0");
  CHECK(cfg->faults[0].at_s == 3);
  CHECK(cfg->faults[0].duration_s < 0);  // for good
  CHECK(cfg->faults[1].accelerator == "gpu1");
  CHECK(cfg->faults[1].duration_s == 5);

  const std::string one = "[[faults]]\naccelerator = \"gpu1\"\nat_s = 20\n";
  CHECK(load_error(base() + replace(one, "gpu1", "gpu7")) ==
        ":17: faults[0].accelerator: no accelerator named 'gpu7' in [cluster]");
  CHECK(load_error(base() + replace(one, "at_s = 20", "at_s = -1")).find(":18: faults[0].at_s: expected") == 0);
  CHECK(load_error(base() + replace(one, "at_s = 20", "at_s = nan")) ==
        ":18: faults[0].at_s: expected a finite number, got nan");
  CHECK(load_error(base() + replace(one, "at_s = 20", "")) == ":16: faults[0].at_s: is required (a number)");
  CHECK(load_error(base() + one + "duration_s = 0\n") ==
        ":19: faults[0].duration_s: expected > 0 (leave it out: lost for good)");
  CHECK(load_error(base() + one + "dur = 3\n").find(":19: faults[0].dur: unknown key") == 0);
  // A second loss of the same accelerator while the first lasts.
  CHECK(load_error(base() + one + "duration_s = 10\n" + replace(one, "at_s = 20", "at_s = 25"))
            .find("faults: the fault of 'gpu1' at 25.000000 s starts while its fault at 20.000000 s lasts") !=
        std::string::npos);
  CHECK(load_error(base() + one + replace(one, "at_s = 20", "at_s = 900"))
            .find("starts while its fault at 20.000000 s lasts") != std::string::npos);
  // A fault at or after the measurement window's end could change nothing:
  // refused, naming the window (one inside it loads).
  const std::string windowed = replace(base(), "name = \"t\"\n", "name = \"t\"\nduration_s = 20\n");
  CHECK(load_error(windowed + one) ==
        ":19: faults[0].at_s: expected a time inside the measurement window (duration_s = 20 s), got 20 s");
  const fs::path w = fs::temp_directory_path() / "slicesched_config_fault_in_window.toml";
  std::ofstream(w) << windowed + replace(one, "at_s = 20", "at_s = 19.5");
  CHECK(load_config(w.string()).ok());
}

// The accelerator count is bounded in all, not per entry: two entries of
// 100,000 made a cluster of 200,000 that nothing had been measured at.
TEST_CASE("a cluster beyond the documented accelerator count is refused", "[config][bad-input]") {
  const std::string two =
      "accelerators = [{ name_prefix = \"gpu\", count = 60000, type = \"H100\", hbm_gib = 80 },\n"
      "  { name_prefix = \"gpv\", count = 40001, type = \"H100\", hbm_gib = 80 }]";
  CHECK(load_error(replace(
            base(), "accelerators = [{ name_prefix = \"gpu\", count = 2, type = \"H100\", hbm_gib = 80 }]", two)) ==
        ":5: cluster.accelerators[1].count: the cluster would have 100001 accelerators; at most 100000 are supported");
  const std::string one_more =
      "accelerators = [{ name_prefix = \"gpu\", count = 100000, type = \"H100\", hbm_gib = 80 },\n"
      "  { name = \"extra\", type = \"H100\", hbm_gib = 80 }]";
  CHECK(
      load_error(replace(base(), "accelerators = [{ name_prefix = \"gpu\", count = 2, type = \"H100\", hbm_gib = 80 }]",
                         one_more)) ==
      ":5: cluster.accelerators[1].name: the cluster would have 100001 accelerators; at most 100000 are supported");
}

// A synthetic stream is generated inside the measurement window only; one
// with more requests there than memory holds is refused with the numbers.
TEST_CASE("a stream with too many requests inside the window is refused", "[config][bad-input]") {
  CHECK(load_error(replace(base(), "constant_rate = 1.0, duration_s = 10", "constant_rate = 1e6, duration_s = 100")) ==
        ":10: tenants[0].stream.constant_rate: expected at most 20000000 requests inside the measurement window, got "
        "100000000 (1000000 requests/s for 100 s, the stream's duration_s)");
  CHECK(load_error(replace(replace(base(), "constant_rate = 1.0, duration_s = 10",
                                   "poisson_rate = 1e3, rate_scale = 2, duration_s = 1e9"),
                           "name = \"t\"", "name = \"t\"\nduration_s = 30000")) ==
        ":11: tenants[0].stream.poisson_rate: expected at most 20000000 requests inside the measurement window, got "
        "60000000 (2000 requests/s for 30000 s, the top-level duration_s)");
  // A long stream is fine when the window is short: only the window is made.
  const fs::path p = fs::temp_directory_path() / "slicesched_config_long_stream.toml";
  std::ofstream(p) << replace(
      replace(base(), "constant_rate = 1.0, duration_s = 10", "constant_rate = 1e3, duration_s = 1e12"), "name = \"t\"",
      "name = \"t\"\nduration_s = 30");
  CHECK(load_config(p.string()).ok());
}

// A config copied away from its data: the error names the key and the path
// it resolved to, after every other check.
TEST_CASE("a file the config names that cannot be opened names its key and resolved path", "[config][bad-input]") {
  const std::string dir = fs::temp_directory_path().string();
  const std::string hint = "; relative paths resolve against the config's folder)";
  CHECK(load_error(replace(base(), "layers = \"l.csv\"", "layers = \"../nope/l.csv\"")) ==
        ":6: ground_truth.layers: cannot open " + (fs::temp_directory_path().parent_path() / "nope/l.csv").string() +
            " (No such file or directory" + hint);
  CHECK(load_error(replace(base(), "transfers = \"t.csv\"", "transfers = \"/nonexistent/t.csv\"")) ==
        ":7: ground_truth.transfers: cannot open /nonexistent/t.csv (No such file or directory)");
  CHECK(load_error(replace(base(), "constant_rate = 1.0, duration_s = 10, input_tokens = 16, output_tokens = 2",
                           "trace = \"no_trace.csv\"")) ==
        ":10: tenants[0].stream.trace: cannot open " + dir + "/no_trace.csv (No such file or directory" + hint);
  fs::create_directories(fs::temp_directory_path() / "slicesched_a_folder");
  CHECK(load_error(base() + "[estimators]\nprior = \"slicesched_a_folder\"\n") ==
        ":17: estimators.prior: cannot open " + dir + "/slicesched_a_folder (is a folder" + hint);
  CHECK(load_error(base() + "[plugins]\npaths = [\"l.csv\", \"libnope.so\"]\n") ==
        ":17: plugins.paths[1]: cannot open " + dir + "/libnope.so (No such file or directory" + hint);
  // A mistake in the text comes first.
  CHECK(load_error(
            replace(replace(base(), "layers = \"l.csv\"", "layers = \"nope.csv\""), "hbm_gib = 80", "hbm_gib = -1")) ==
        ":4: cluster.accelerators[0].hbm_gib: expected a number > 0 and <= 1000000, got -1");
  // Through --set: the override is named, and its path resolves against the config's folder too.
  const fs::path p = fs::temp_directory_path() / "slicesched_config_files.toml";
  std::ofstream(p) << base();
  auto cfg = load_config(p.string(), {{"ground_truth.layers", "\"gone.csv\""}});
  REQUIRE(!cfg.ok());
  CHECK(cfg.status().message() == "--set ground_truth.layers=\"gone.csv\": ground_truth.layers: cannot open " + dir +
                                      "/gone.csv (No such file or directory" + hint);
}

TEST_CASE("a policy's stages: filters and weighted scores instead of a placement", "[config]") {
  const fs::path p = fs::temp_directory_path() / "slicesched_config_stages.toml";
  std::ofstream(p) << replace(base(), "placement = { plugin = \"static\" }",
                              "stages = [{ kind = \"filter\", plugin = \"feasible\" },\n"
                              "  { kind = \"score\", plugin = \"makespan\", weight = 2.5, args = { x = 1 } }]");
  auto cfg = load_config(p.string());
  REQUIRE(cfg.ok());
  const PolicyConfig& policy = cfg->policies[0];
  CHECK(policy.placement.name.empty());
  REQUIRE(policy.stages.size() == 2);
  CHECK(policy.stages[0].kind == StageChoice::Kind::kFilter);
  CHECK(policy.stages[0].plugin.name == "feasible");
  CHECK(policy.stages[0].weight == 1.0);
  CHECK(policy.stages[1].kind == StageChoice::Kind::kScore);
  CHECK(policy.stages[1].plugin.name == "makespan");
  CHECK(policy.stages[1].weight == 2.5);
  CHECK(policy.stages[1].plugin.args == nlohmann::json{{"x", 1}});
}

TEST_CASE("a policy's stages: every mistake names its key", "[config][bad-input]") {
  const std::string at = "placement = { plugin = \"static\" }";
  CHECK(load_error(replace(base(), at, at + "\nstages = [{ kind = \"score\", plugin = \"makespan\" }]")) ==
        ":15: policies[0].stages: give either placement or stages, not both");
  CHECK(load_error(replace(base(), at, "stages = [{ kind = \"rank\", plugin = \"x\" }]")) ==
        ":14: policies[0].stages[0].kind: expected \"filter\" or \"score\", got \"rank\"");
  CHECK(load_error(replace(base(), at, "stages = [{ kind = \"filter\", plugin = \"feasible\", weight = 2 }]")) ==
        ":14: policies[0].stages[0].weight: only a score stage has a weight");
  CHECK(load_error(replace(base(), at, "stages = [{ kind = \"score\", plugin = \"makespan\", wieght = 2 }]")) ==
        ":14: policies[0].stages[0].wieght: unknown key (did you mean 'weight'? known here: args, kind, plugin, "
        "weight)");
  CHECK(load_error(replace(base(), at, "stages = [{ kind = \"score\" }]")) ==
        ":14: policies[0].stages[0].plugin: is required (a string)");
  CHECK(load_error(replace(base(), at, "stages = []")) == ":14: policies[0].stages: expected at least one stage");
  CHECK(load_error(replace(base(), at, "stages = [{ kind = \"score\", plugin = \"m\", weight = 0 }]"))
            .find(":14: policies[0].stages[0].weight: ") == 0);
}

TEST_CASE("preemption_mode: recompute by default, swap over the cluster's host link", "[config]") {
  const fs::path p = fs::temp_directory_path() / "slicesched_config_swap.toml";
  std::ofstream(p) << base();
  auto cfg = load_config(p.string());
  REQUIRE(cfg.ok());
  CHECK_FALSE(cfg->tenants[0].swap_preempted);
  CHECK(cfg->host_link == -1);
  const std::string links = "link_classes = [{ name = \"nvlink\", bandwidth_gbps = 300.0 }]";
  std::ofstream(p) << replace(
      replace(base(), links,
              "link_classes = [{ name = \"nvlink\", bandwidth_gbps = 300.0 }, { name = \"pcie\", bandwidth_gbps = "
              "25.0, latency_us = 10 }]\nhost_link = \"pcie\""),
      "name = \"on\"", "name = \"on\"\npreemption_mode = \"swap\"");
  cfg = load_config(p.string());
  REQUIRE(cfg.ok());
  CHECK(cfg->tenants[0].swap_preempted);
  REQUIRE(cfg->host_link == 1);
  CHECK(cfg->link_classes[1].bandwidth_bytes_per_s == 25e9);
}

TEST_CASE("preemption_mode: bad values and a missing host link name their keys", "[config][bad-input]") {
  CHECK(load_error(replace(base(), "name = \"on\"", "name = \"on\"\npreemption_mode = \"swap\"")) ==
        ":10: tenants[0].preemption_mode: \"swap\" needs cluster.host_link: the link class KV caches cross to host "
        "memory and back");
  CHECK(load_error(replace(base(), "name = \"on\"", "name = \"on\"\npreemption_mode = \"drop\"")) ==
        ":10: tenants[0].preemption_mode: expected \"recompute\" or \"swap\", got \"drop\"");
  CHECK(load_error(replace(base(), "[ground_truth]", "host_link = \"pcie\"\n[ground_truth]")) ==
        ":5: cluster.host_link: no link class named 'pcie' (link_classes: nvlink)");
}

TEST_CASE("prefill_lanes: a tenant's or a policy's, over the cluster's host link, mistakes name their keys",
          "[config][bad-input]") {
  const std::string links = "link_classes = [{ name = \"nvlink\", bandwidth_gbps = 300.0 }]";
  const std::string with_host = replace(base(), links,
                                        "link_classes = [{ name = \"nvlink\", bandwidth_gbps = 300.0 }, { name = "
                                        "\"pcie\", bandwidth_gbps = 50.0 }]\nhost_link = \"pcie\"");
  const fs::path p = fs::temp_directory_path() / ("slicesched_config_pl_" + std::to_string(getpid()) + ".toml");
  std::ofstream(p) << replace(replace(with_host, "name = \"on\"", "name = \"on\"\nprefill_lanes = 2"),
                              "tenants = [\"on\"]", "tenants = [\"on\"]\nprefill_lanes = { on = 1 }");
  auto cfg = load_config(p.string());
  REQUIRE(cfg.ok());
  CHECK(cfg->tenants[0].prefill_lanes == 2);
  CHECK(prefill_lanes_of(cfg->policies[0], cfg->tenants[0]) == 1);
  std::ofstream(p) << with_host;
  cfg = load_config(p.string());
  REQUIRE(cfg.ok());
  CHECK(prefill_lanes_of(cfg->policies[0], cfg->tenants[0]) == 0);  // (off by default)
  CHECK(load_error(replace(base(), "name = \"on\"", "name = \"on\"\nprefill_lanes = 1")) ==
        ":10: tenants[0].prefill_lanes: prefill lanes need cluster.host_link: the link class a handed-off KV cache "
        "crosses to host memory and back");
  CHECK(load_error(replace(base(), "tenants = [\"on\"]", "tenants = [\"on\"]\nprefill_lanes = { on = 1 }")) ==
        ":14: policies[0].prefill_lanes.on: prefill lanes need cluster.host_link: the link class a handed-off KV "
        "cache crosses to host memory and back");
  CHECK(load_error(replace(with_host, "tenants = [\"on\"]", "tenants = [\"on\"]\nprefill_lanes = { off = 1 }")) ==
        ":15: policies[0].prefill_lanes.off: the policy runs no tenant named 'off'");
  CHECK(load_error(replace(with_host, "name = \"on\"", "name = \"on\"\nprefill_lanes = -1"))
            .find(":11: tenants[0].prefill_lanes: ") == 0);
  // A policy's prefill lanes for a tenant that only rides would do nothing.
  const std::string rider =
      replace(replace(with_host, "[[policies]]",
                      "[[tenants]]\nname = \"off\"\nonline = false\nstream = { constant_rate = 1.0, duration_s = 10, "
                      "input_tokens = 16, output_tokens = 2 }\n[[policies]]"),
              "tenants = [\"on\"]",
              "tenants = [\"on\", \"off\"]\nco_batch = { riders = { off = [\"on\"] }, own_iterations = false }\n"
              "prefill_lanes = { off = 1 }");
  CHECK(load_error(rider) ==
        ":20: policies[0].prefill_lanes.off: 'off' only rides in other tenants' iterations "
        "(co_batch), so it has no lanes to prefill in; give its hosts the prefill lanes");
  std::ofstream(p) << replace(rider, "prefill_lanes = { off = 1 }", "prefill_lanes = { on = 1 }");
  CHECK(load_config(p.string()).ok());  // (the host's)
}

TEST_CASE("config: names are not empty or split by control characters, a link joins two accelerators", "[config]") {
  auto with = [](std::string from, std::string to) {
    std::string s = base();
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  CHECK(load_error(with("name = \"on\"", "name = \"\"")) == ":9: tenants[0].name: expected a non-empty name");
  CHECK(load_error(with("name = \"p\"", "name = \"a\\nb\"")) ==
        ":12: policies[0].name: expected a name without control characters (newline, tab, NUL)");
  CHECK(load_error(with("link_classes = [{ name = \"nvlink\", bandwidth_gbps = 300.0 }]",
                        "link_classes = [{ name = \"nvlink\", bandwidth_gbps = 300.0 }, "
                        "{ name = \"nvlink\", bandwidth_gbps = 50.0 }]")) ==
        ":3: cluster.link_classes[1].name: duplicate link class name 'nvlink'");
  CHECK(load_error(with("[ground_truth]",
                        "links = [{ between = [\"gpu0\", \"gpu0\"], class = \"nvlink\" }]\n"
                        "[ground_truth]")) ==
        ":5: cluster.links[0].between: expected two different accelerators, got 'gpu0' twice");
  CHECK(load_error(with("tenants = [\"on\"]", "tenants = [\"on\", \"on\"]")) ==
        ":13: policies[0].tenants: 'on' is listed twice");
}

TEST_CASE("config: a measured profile's type is a known table's, or an accelerator's own", "[config]") {
  std::string own = base();
  own.replace(own.find("type = \"H100\""), 13, "type = \"X9\"");
  own.replace(own.find("[ground_truth]\n"), 15, "[ground_truth]\nlayers_type = \"X9\"\n");
  const fs::path p = fs::temp_directory_path() / ("slicesched_config_type_" + std::to_string(getpid()) + ".toml");
  std::ofstream(p) << own;
  auto cfg = load_config(p.string());
  fs::remove(p);
  INFO((cfg.ok() ? std::string() : cfg.status().message()));
  CHECK(cfg.ok());  // X9 has no table, but the accelerators that name it play the profile
  if (cfg.ok()) CHECK(cfg->ground_truth.hbm_bytes_per_s == 3350e9);  // (no table: the H100's)
  // The profile's decode attention reads its cache at the measured type's
  // bandwidth (found by an outside probe: an A100 profile read it at the
  // H100's 3,350 GB/s); hbm_gbps, given, wins.
  for (const auto& [lines, want] :
       std::vector<std::pair<std::string, double>>{{"layers_type = \"A100\"\n", 2039e9},
                                                   {"layers_type = \"H100-SXM\"\n", 3350e9},
                                                   {"layers_type = \"A100\"\nhbm_gbps = 1000\n", 1000e9}}) {
    std::string a100 = base();
    a100.replace(a100.find("[ground_truth]\n"), 15, "[ground_truth]\n" + lines);
    std::ofstream(p) << a100;
    auto c = load_config(p.string());
    fs::remove(p);
    INFO(lines << (c.ok() ? std::string() : c.status().message()));
    REQUIRE(c.ok());
    CHECK(c->ground_truth.hbm_bytes_per_s == want);
  }
  std::string typo = base();
  typo.replace(typo.find("[ground_truth]\n"), 15, "[ground_truth]\nlayers_type = \"Z100\"\n");
  CHECK_THAT(load_error(typo), Catch::StartsWith(":6: ground_truth.layers_type: unknown accelerator type 'Z100'"));
}

TEST_CASE("tp: a tensor-parallel group's HBM is its GPUs' less each rank's copies, mistakes name their keys",
          "[config][bad-input][tp]") {
  // (ar.csv: an all-reduce profile, made empty; only simulate reads it)
  std::ofstream(fs::temp_directory_path() / "ar.csv");
  const std::string one = "accelerators = [{ name_prefix = \"gpu\", count = 2, type = \"H100\", hbm_gib = 80 }]";
  const std::string group =
      "accelerators = [{ name_prefix = \"gpu\", count = 2, type = \"H100\", hbm_gib = 80, tp = 4, tp_link = "
      "\"nvlink\" }]";
  const fs::path p = fs::temp_directory_path() / ("slicesched_config_tp_" + std::to_string(getpid()) + ".toml");
  std::ofstream(p) << replace(base(), one, group);
  auto cfg = load_config(p.string());
  REQUIRE(cfg.ok());
  REQUIRE(cfg->accelerators.size() == 2);
  CHECK(cfg->accelerators[1].tp == 4);
  CHECK(cfg->accelerators[1].gpu_hbm_bytes == 80ll << 30);
  CHECK(cfg->ground_truth.tp_groups);
  // Llama-3-8B (the default model): each of the four ranks keeps its own
  // copy of the 65 norms of 4,096 bf16 weights (three more than the model
  // has), and 128,256 vocabulary rows split evenly.
  CHECK(cfg->accelerators[1].hbm_bytes == 4 * (80ll << 30) - 3 * 65 * 4096 * 2);
  // A vocabulary of 50,001 rows is padded to 50,004, in the embedding and
  // the LM head alike.
  std::ofstream(p) << replace(replace(base(), one, group), "[[tenants]]", "[model]\nvocab = 50001\n[[tenants]]");
  cfg = load_config(p.string());
  REQUIRE(cfg.ok());
  CHECK(cfg->accelerators[0].hbm_bytes == 4 * (80ll << 30) - (3 * 65 * 4096 + 3 * 4096 * 2) * 2);
  // Phi-2: per layer one LayerNorm (weight and bias) and the biases of the
  // two row-parallel projections (dense, fc2), and the final LayerNorm:
  // 32 x 4 + 2 vectors of 2,560 float16s; 51,200 rows split evenly.
  std::ofstream(p) << replace(replace(base(), one, group), "[[tenants]]", "[model]\nname = \"phi-2\"\n[[tenants]]");
  cfg = load_config(p.string());
  REQUIRE(cfg.ok());
  CHECK(cfg->accelerators[0].hbm_bytes == 4 * (80ll << 30) - 3 * (32 * 4 + 2) * 2560 * 2);
  // With 51,201 rows, the padded rows of the LM head carry a bias element each.
  std::ofstream(p) << replace(replace(base(), one, group), "[[tenants]]",
                              "[model]\nname = \"phi-2\"\nvocab = 51201\n[[tenants]]");
  cfg = load_config(p.string());
  REQUIRE(cfg.ok());
  CHECK(cfg->accelerators[0].hbm_bytes == 4 * (80ll << 30) - (3 * (32 * 4 + 2) * 2560 + 3 * 2560 * 2 + 3) * 2);
  CHECK(load_error(replace(base(), one, replace(group, "tp = 4", "tp = 0"))).find(":4: cluster.accelerators[0].tp: ") ==
        0);
  CHECK(load_error(replace(base(), one, replace(group, "tp = 4", "tp = 3"))) ==
        ":4: cluster.accelerators[0].tp: accelerator 'gpu0' is a tensor-parallel group of 3, which does not divide "
        "'llama3-8b''s 32 heads, 8 KV heads and MLP width 14336 evenly (expected a common divisor)");
  CHECK(load_error(replace(base(), one, replace(group, "tp_link = \"nvlink\"", "tp_link = \"ib\""))) ==
        ":4: cluster.accelerators[0].tp_link: no link class named 'ib' (link_classes: nvlink)");
  // (tp_link is unused with tp = 1: a sweep over tp may keep it)
  std::ofstream(p) << replace(base(), one, replace(group, "tp = 4, ", ""));
  REQUIRE(load_config(p.string()).ok());
  CHECK(load_config(p.string())->accelerators[0].hbm_bytes == 80ll << 30);
  CHECK(load_error(replace(base(), one, replace(group, ", tp_link = \"nvlink\"", ""))) ==
        ":4: cluster.accelerators[0].tp: accelerator 'gpu0' is a tensor-parallel group: its all-reduces need "
        "ground_truth.all_reduce (a measured profile) or tp_link (the link class between its GPUs)");
  // A measured all-reduce profile serves instead of the link.
  std::ofstream(p) << replace(replace(base(), one, replace(group, ", tp_link = \"nvlink\"", "")),
                              "transfers = \"t.csv\"", "transfers = \"t.csv\"\nall_reduce = \"ar.csv\"");
  CHECK(load_config(p.string()).ok());
  // A profile measured on another type plays no group of this one: the
  // group then needs its own link.
  const std::string typed =
      replace(replace(base(), one, replace(group, ", tp_link = \"nvlink\"", "")), "transfers = \"t.csv\"",
              "transfers = \"t.csv\"\nall_reduce = \"ar.csv\"\nall_reduce_type = \"A100\"");
  CHECK(load_error(typed) ==
        ":4: cluster.accelerators[0].tp: accelerator 'gpu0' is a tensor-parallel group: its all-reduces need a "
        "measured profile of its type (ground_truth.all_reduce measured A100, not H100) or tp_link (the link class "
        "between its GPUs)");
  std::ofstream(p) << replace(typed, "all_reduce_type = \"A100\"", "all_reduce_type = \"H100-SXM\"");
  CHECK(load_config(p.string()).ok());  // (an alias of the cluster's "H100")
  CHECK(load_error(replace(base(), "transfers = \"t.csv\"", "transfers = \"t.csv\"\nall_reduce_type = \"H100\"")) ==
        ":8: ground_truth.all_reduce_type: names the type the all-reduce profile measured: give all_reduce too");
  // A group of GPUs too small for the copies alone.
  CHECK(load_error(replace(base(), one, replace(group, "hbm_gib = 80", "hbm_gib = 0.0003"))) ==
        ":4: cluster.accelerators[0].tp: accelerator 'gpu0' has 1.23 MiB of HBM in its GPUs; the copies each holds "
        "need 1.52 MiB");
}

TEST_CASE("tp: each stage of a pipeline of tensor-parallel groups holds its own stage's copies", "[config][tp]") {
  // Llama-2-70B spread over four groups of two H100s: 80 layers in 8 groups,
  // two groups (20 layers, 40 norms) a stage, the final norm on the last;
  // 32,000 vocabulary rows split evenly.
  auto cfg = load_config((kRoot / "configs/experiments/llama2-70b.toml").string(),
                         {{"cluster.accelerators.0.tp", "2"}, {"cluster.accelerators.0.tp_link", "nvlink"}});
  REQUIRE(cfg.ok());
  REQUIRE(cfg->accelerators.size() == 4);
  const std::int64_t gpus = 2 * (80ll << 30), norm = 8192 * 2;
  CHECK(cfg->accelerators[0].hbm_bytes == gpus - 40 * norm);
  CHECK(cfg->accelerators[1].hbm_bytes == gpus - 40 * norm);
  CHECK(cfg->accelerators[3].hbm_bytes == gpus - 41 * norm);
}
