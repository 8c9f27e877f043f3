// `slicesched bench roofline`: how well the roofline ground truth predicts a
// measured profile it was not fitted on. Fits the per-kind efficiencies on
// the --fit profiles (or reads a fit file), predicts every row of --profile,
// and prints the mean absolute percentage error per kind of work and
// overall. With --write it saves the fit (how configs/accelerators/
// roofline-fit.toml is made; docs/ground-truth.md).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"

import slicesched.config.accelerators;
import slicesched.models.dense;
import slicesched.core.status;
import slicesched.hardware.roofline;
import slicesched.models.work;
import slicesched.cli.fail;

namespace slicesched::cli {

int bench_roofline(const BenchRooflineOptions& opt) {
  const auto preset = dense_preset(opt.model);
  if (!preset) {
    std::string known;
    for (auto n : dense_preset_names()) known += (known.empty() ? "" : ", ") + std::string(n);
    fail("--model: unknown model '" + opt.model + "' (presets: " + known + ")");
  }
  if (opt.profile.empty() && !opt.write) fail("give --profile (to test) or --write (to save a fit), or both");
  auto model = DenseDecoder::make(*preset);
  if (!model.ok()) fail("--model: " + model.status().message());
  const DenseShape shape = model.value()->shape();
  const std::string dir = opt.accelerator_dir.empty() ? default_accelerator_dir() : opt.accelerator_dir;
  std::vector<AcceleratorType> types;
  auto add_type = [&](const std::string& name) -> Status {
    if (find_type(types, name)) return Status::Ok();
    auto t = find_accelerator_type(name, dir);
    if (!t.ok()) return t.status();
    types.push_back(std::move(t).value());
    return Status::Ok();
  };

  RooflineFit fit;
  if (!opt.fit.empty()) {
    std::vector<ProfileRow> train;
    std::string on;
    for (const std::string& f : opt.fit) {
      const auto at = f.rfind('@');
      if (at == std::string::npos || at == 0 || at + 1 == f.size())
        fail("--fit " + f + ": expected CSV@TYPE (e.g. data/profiles/x.csv@H100)");
      const std::string path = f.substr(0, at), type = f.substr(at + 1);
      if (!opt.profile.empty() &&
          std::filesystem::path(path).filename() == std::filesystem::path(opt.profile).filename())
        fail("--fit " + f + ": that is the profile under test; fit on other profiles");
      if (Status s = add_type(type); !s.ok()) fail("--fit " + f + ": " + s.message());
      auto rows = read_profile_rows(path, shape, opt.tp, type);
      if (!rows.ok()) fail(rows.status().message());
      train.insert(train.end(), rows->begin(), rows->end());
      on += (on.empty() ? "" : ", ") + std::filesystem::path(path).filename().string() + " (" + type + ", tp" +
            std::to_string(opt.tp) + ")";
    }
    RooflineFit fallback;
    if (auto shipped = load_roofline_fit(default_roofline_fit(dir)); shipped.ok()) fallback = *shipped;
    auto fitted = fit_roofline(train, types, fallback);
    if (!fitted.ok()) fail(fitted.status().message());
    fit = std::move(fitted).value();
    fit.fitted_on = on;
  } else {
    const std::string path = opt.efficiencies ? *opt.efficiencies : default_roofline_fit(dir);
    auto loaded = load_roofline_fit(path);
    if (!loaded.ok()) fail(loaded.status().message());
    fit = std::move(loaded).value();
  }
  if (opt.write) {
    std::ofstream out(*opt.write);
    out << roofline_fit_toml(
        fit, {"Roofline efficiencies per kind of work, fitted by:", "  " + opt.command_line,
              "time = (tc^p + tm^p)^(1/p) + overhead, tc = flops / (peak * compute), tm = bytes / (hbm * memory),",
              "p = overlap_p (absent: infinity, max(tc, tm))"});
    if (!out) fail(*opt.write + ": cannot write");
  }
  if (opt.profile.empty()) return 0;

  if (Status s = add_type(opt.type); !s.ok()) fail("--type: " + s.message());
  auto rows = read_profile_rows(opt.profile, shape, opt.tp, opt.type);
  if (!rows.ok()) fail(rows.status().message());
  auto err = roofline_error(*rows, types, fit);
  if (!err.ok()) fail(err.status().message());
  const bool seen = fit.fitted_on.find(std::filesystem::path(opt.profile).filename().string()) != std::string::npos;

  if (opt.json) {
    nlohmann::json j;
    j["profile"] = opt.profile;
    j["type"] = find_type(types, opt.type)->name;
    j["tp"] = opt.tp;
    j["fitted_on"] = fit.fitted_on;
    j["profile_in_fit"] = seen;
    j["rows"] = err->rows;
    j["mape_pct"] = err->overall_pct;
    j["summed_mape_pct"] = err->summed_pct;
    for (int k = 0; k < kWorkKinds; ++k) {
      const auto kind = static_cast<WorkKind>(k);
      auto& o = j["kinds"][std::string(work_kind_name(kind))];
      o["rows"] = err->kind_rows[k];
      o["mape_pct"] = std::isnan(err->kind_pct[k]) ? nlohmann::json() : nlohmann::json(err->kind_pct[k]);
      o["compute"] = fit[kind].compute;
      o["memory"] = fit[kind].memory;
      o["overhead_us"] = fit[kind].overhead_s * 1e6;
      // null: infinity, the plain max(tc, tm) (a number either way, as
      // mape_pct's NaN; it was the string "inf" beside numbers).
      o["overlap_p"] = std::isfinite(fit[kind].overlap_p) ? nlohmann::json(fit[kind].overlap_p) : nlohmann::json();
      o["sm_bytes_per_cycle"] = fit[kind].sm_bytes_per_cycle;
      o["sm_flops_per_cycle"] = fit[kind].sm_flops_per_cycle;
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("roofline vs %s on %s (tp%d), fitted on: %s%s\n", opt.profile.c_str(),
              find_type(types, opt.type)->name.c_str(), opt.tp, fit.fitted_on.c_str(),
              seen ? "  [this profile was in the fit]" : "");
  std::printf("%-12s %7s %9s %8s %7s %12s %9s %9s %10s\n", "kind", "rows", "MAPE %", "compute", "memory", "overhead us",
              "overlap p", "B/SM cyc", "FLOP/SM cyc");
  for (int k = 0; k < kWorkKinds; ++k) {
    const auto kind = static_cast<WorkKind>(k);
    std::printf("%-12s %7zu %9.1f %8.2f %7.2f %12.2f %9.2f %9.2f %10.0f\n", std::string(work_kind_name(kind)).c_str(),
                err->kind_rows[k], err->kind_pct[k], fit[kind].compute, fit[kind].memory, fit[kind].overhead_s * 1e6,
                fit[kind].overlap_p, fit[kind].sm_bytes_per_cycle, fit[kind].sm_flops_per_cycle);
  }
  std::printf("%-12s %7zu %9.1f\n", "overall", err->rows, err->overall_pct);
  std::printf("%-12s %7zu %9.1f  (all kernels at one token count, summed)\n", "summed", err->token_counts,
              err->summed_pct);
  return 0;
}

}  // namespace slicesched::cli
