// `slicesched validate`: replays every row of a published-measurements CSV
// (data/validation/trtllm_a100.csv: TensorRT-LLM's own A100 tables) on the
// roofline ground truth (simulator/validation.cppm) and prints published,
// simulated and their ratio per row, the median and worst |error|, and
// checks each simulated figure against its physical floor: a figure better
// than physically possible on the published GPU fails the command.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"

import slicesched.config.accelerators;
import slicesched.simulator.validation;
import slicesched.models.dense;
import slicesched.cli.fail;
import slicesched.core.status;
import slicesched.hardware.roofline;
import slicesched.models.work;

namespace slicesched::cli {

namespace {

// Fails the command with one line naming it.
[[noreturn]] void refuse(const std::string& what) { fail("validate: " + what); }

// The share of a replay's simulated time per kind of work and the fixed costs.
nlohmann::json share_json(const StaticBatch& b) {
  nlohmann::json j;
  const double total = b.total_s();
  for (int k = 0; k < kWorkKinds; ++k)
    j[std::string(work_kind_name(static_cast<WorkKind>(k)))] = b.kind_s[static_cast<std::size_t>(k)] / total;
  j["fixed"] = b.fixed_s / total;
  return j;
}

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int validate(const ValidateOptions& opt) {
  const std::string data = opt.data.empty() ? default_validation_csv() : opt.data;
  auto rows = read_published(data);
  if (!rows.ok()) refuse(rows.status().message());
  const std::string dir = opt.accelerator_dir.empty() ? default_accelerator_dir() : opt.accelerator_dir;
  // --efficiencies holds on every row; otherwise each row's type plays its
  // own fit where its table names one (as the emulated cluster plays it),
  // else the shipped general fit.
  std::map<std::string, RooflineFit> fits;  // by path
  auto fit_of = [&](const std::string& path) -> Result<const RooflineFit*> {
    auto it = fits.find(path);
    if (it == fits.end()) {
      auto loaded = load_roofline_fit(path);
      if (!loaded.ok()) return loaded.status();
      it = fits.emplace(path, std::move(loaded).value()).first;
    }
    return &it->second;
  };
  std::string fit_paths;  // the fits played, for the header
  const FixedCosts fixed{opt.iteration_overhead_us * 1e-6, opt.request_overhead_us * 1e-6,
                         opt.sequence_overhead_us * 1e-6};

  struct Out {
    PublishedRow row;
    std::string type;
    RowFigures fig;
    double ratio = 0;
    StaticBatch batch;
  };
  std::vector<Out> out;
  std::map<std::string, std::shared_ptr<const DenseDecoder>> models;
  for (const PublishedRow& r : *rows) {
    const std::string where = data + ":" + std::to_string(r.line) + ": ";
    auto played = find_accelerator_type(r.gpu, dir);
    if (!played.ok()) refuse(where + "gpu: " + played.status().message());
    // The floor is the published GPU's datasheet as shipped, whatever
    // --accelerators says the simulated one is.
    auto sheet = find_accelerator_type(r.gpu, default_accelerator_dir());
    if (!sheet.ok()) refuse(where + "gpu: " + sheet.status().message());
    if (r.precision != "fp16" && r.precision != "bf16")
      refuse(where + "precision: expected fp16 or bf16 (16-bit weights), got \"" + r.precision + "\"");
    auto& m = models[r.model];
    if (!m) {
      auto preset = dense_preset(r.model);
      if (!preset) {
        std::string known;
        for (auto n : dense_preset_names()) known += (known.empty() ? "" : ", ") + std::string(n);
        refuse(where + "model: no preset named \"" + r.model + "\" (presets: " + known + ")");
      }
      auto made = DenseDecoder::make(*preset);
      if (!made.ok()) refuse(where + "model: " + made.status().message());
      m = std::move(made).value();
    }
    if (r.input_tokens + r.output_tokens > m->context_window())
      refuse(where + "input_tokens + output_tokens: " + std::to_string(r.input_tokens + r.output_tokens) + " exceed " +
             r.model + "'s context window of " + std::to_string(m->context_window()));
    // A batch whose weights and KV cache do not fit the GPU it was
    // published for was never measured: its figure would be a wrong answer.
    {
      const double need = static_cast<double>(m->weight_bytes()) +
                          static_cast<double>(r.batch) * static_cast<double>(r.input_tokens + r.output_tokens) *
                              static_cast<double>(m->kv_bytes_per_token());
      if (sheet->hbm_bytes > 0 && need > static_cast<double>(sheet->hbm_bytes)) {
        char msg[256];
        std::snprintf(
            msg, sizeof msg,
            "batch: %lld sequences of %lld tokens of %s need %.1f GiB (weights and KV cache); %s has %.1f GiB",
            static_cast<long long>(r.batch), static_cast<long long>(r.input_tokens + r.output_tokens), r.model.c_str(),
            need / (1 << 30), sheet->name.c_str(), static_cast<double>(sheet->hbm_bytes) / (1 << 30));
        refuse(where + msg);
      }
    }
    const std::string fit_path = opt.efficiencies                ? *opt.efficiencies
                                 : !played->roofline_fit.empty() ? played->roofline_fit
                                                                 : default_roofline_fit(dir);
    auto fit = fit_of(fit_path);
    if (!fit.ok()) refuse(fit.status().message());
    const std::string shown = std::filesystem::path(fit_path).filename().string();
    if (fit_paths.find(shown) == std::string::npos) fit_paths += (fit_paths.empty() ? "" : ", ") + shown;
    const StaticBatch b =
        replay_static_batch(*played, **fit, *sheet, *m, r.batch, r.input_tokens, r.output_tokens, fixed);
    Out o{r, played->name, row_figures(r, b), 0, b};
    o.ratio = o.fig.simulated / r.value;
    out.push_back(std::move(o));
  }

  std::vector<double> errors;
  std::size_t worst = 0, within = 0, beats = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    errors.push_back(std::abs(out[i].ratio - 1));
    if (errors[i] > errors[worst]) worst = i;
    if (out[i].ratio >= 0.8 && out[i].ratio <= 1.25) ++within;
    if (out[i].fig.beats_floor) ++beats;
  }
  const double med = median(errors);

  if (opt.json) {
    nlohmann::json j;
    j["data"] = data;
    j["efficiencies"] = fit_paths;
    j["iteration_overhead_us"] = opt.iteration_overhead_us;
    j["request_overhead_us"] = opt.request_overhead_us;
    j["sequence_overhead_us"] = opt.sequence_overhead_us;
    for (const Out& o : out)
      j["rows"].push_back({{"line", o.row.line},
                           {"model", o.row.model},
                           {"version", o.row.version},
                           {"gpu", o.type},
                           {"batch", o.row.batch},
                           {"input_tokens", o.row.input_tokens},
                           {"output_tokens", o.row.output_tokens},
                           {"metric", o.row.metric},
                           {"published", o.row.value},
                           {"simulated", o.fig.simulated},
                           {"ratio", o.ratio},
                           {"floor", o.fig.floor},
                           {"beats_floor", o.fig.beats_floor},
                           {"share", share_json(o.batch)}});
    j["median_abs_error_pct"] = 100 * med;
    j["worst_abs_error_pct"] = 100 * errors[worst];
    j["worst_line"] = out[worst].row.line;
    j["within_0.8_1.25"] = within;
    j["rows_beating_floor"] = beats;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "validate %s: %zu rows on the roofline (efficiencies %s; fixed costs %.0f us/iteration, %.0f us/request, "
        "%.1f us/sequence/iteration)\n",
        data.c_str(), out.size(), fit_paths.c_str(), opt.iteration_overhead_us, opt.request_overhead_us,
        opt.sequence_overhead_us);
    std::printf("%4s %-11s %-6s %-9s %5s %5s %5s %-20s %10s %10s %6s %10s\n", "line", "model", "ver", "gpu", "batch",
                "in", "out", "metric", "published", "simulated", "ratio", "floor");
    for (const Out& o : out)
      std::printf("%4d %-11s %-6s %-9s %5lld %5lld %5lld %-20s %10.1f %10.1f %6.2f %10.1f%s\n", o.row.line,
                  o.row.model.c_str(), o.row.version.c_str(), o.type.c_str(), static_cast<long long>(o.row.batch),
                  static_cast<long long>(o.row.input_tokens), static_cast<long long>(o.row.output_tokens),
                  o.row.metric.c_str(), o.row.value, o.fig.simulated, o.ratio, o.fig.floor,
                  o.fig.beats_floor ? "  BEATS ITS FLOOR" : "");
    std::printf("median |error| %.1f %%, worst |error| %.1f %% (line %d), %zu of %zu rows within 0.8-1.25x\n",
                100 * med, 100 * errors[worst], out[worst].row.line, within, out.size());
    if (opt.breakdown) {
      std::printf("\nwhere the simulated time goes (%% of each row's time):\n%4s", "line");
      for (int k = 0; k < kWorkKinds; ++k)
        std::printf(" %11s", std::string(work_kind_name(static_cast<WorkKind>(k))).c_str());
      std::printf(" %11s %8s\n", "fixed", "prefill");
      for (const Out& o : out) {
        const double total = o.batch.total_s();
        std::printf("%4d", o.row.line);
        for (int k = 0; k < kWorkKinds; ++k)
          std::printf(" %11.1f", 100 * o.batch.kind_s[static_cast<std::size_t>(k)] / total);
        std::printf(" %11.1f %8.1f\n", 100 * o.batch.fixed_s / total, 100 * o.batch.prefill_s / total);
      }
    }
  }
  if (beats > 0) {
    for (const Out& o : out)
      if (o.fig.beats_floor)
        std::fprintf(stderr,
                     "slicesched: validate: %s:%d: simulated %s %.1f beats its physical floor %.1f on %s "
                     "(weights and KV cache at HBM bandwidth, FLOPs at peak)\n",
                     data.c_str(), o.row.line, o.row.metric.c_str(), o.fig.simulated, o.fig.floor, o.row.gpu.c_str());
    return 1;
  }
  return 0;
}

}  // namespace slicesched::cli
