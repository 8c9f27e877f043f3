// `slicesched simulate CONFIG`: offline capacity planning. Every policy of
// the config runs on the same engine against the emulated cluster; the
// result is a comparison table, summary.json, CSVs, Chrome traces and plots.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"

import slicesched.cli.offline;

namespace slicesched::cli {

int simulate(const SimulateOptions& opt) {
  std::vector<ConfigOverride> overrides;
  for (const auto& s : opt.sets) {
    const auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "slicesched: --set %s: expected KEY=VALUE\n", s.c_str());
      return 2;
    }
    overrides.push_back({s.substr(0, eq), s.substr(eq + 1)});
  }
  auto cfg = load_config(opt.config, overrides);
  if (!cfg.ok()) {
    std::fprintf(stderr, "slicesched: %s\n", cfg.status().message().c_str());
    return 2;
  }
  if (opt.seed) cfg->seed = *opt.seed;
  if (opt.skip_bad_lines)
    for (auto& t : cfg->tenants) t.stream.trace.skip_bad_lines = true;
  try {
    PluginRegistries plugins;
    load_plugins(cfg.value(), plugins);
    const Truths truths = load_truths(cfg.value());
    // Every policy's plugins are created once up front, so a bad name or
    // argument stops the run before anything is simulated.
    check_policies(cfg.value(), plugins, opt.policy);

    std::vector<PolicyRun> runs;
    const auto t0 = std::chrono::steady_clock::now();
    bool matched = false;
    for (const auto& p : cfg->policies) {
      if (opt.policy && *opt.policy != p.name) continue;
      matched = true;
      runs.push_back(run_offline(cfg.value(), p, plugins, truths));
    }
    if (!matched) {
      std::string names;
      for (const auto& p : cfg->policies) names += (names.empty() ? "" : ", ") + p.name;
      fail("no policy named '" + *opt.policy + "' in " + opt.config + " (policies: " + names + ")");
    }
    report(cfg.value(), runs, opt);
    std::printf("%zu polic%s simulated in %.1f s wall\n", runs.size(), runs.size() == 1 ? "y" : "ies",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "slicesched: %s\n", e.what());
    return 2;
  }
  return 0;
}

}  // namespace slicesched::cli
