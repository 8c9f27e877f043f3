// calibrate_models: the operators' timings on one device per accelerator
// type, the copies' between every ordered pair, each fitted as it is
// measured, then the profile.
module;
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "executor/torch/runtime.h"

module slicesched.executor.calibration;
import slicesched.core.priors;
import slicesched.core.status;

namespace slicesched {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Runs `run(k)` for k in [0, n): `warmup` untimed passes, then `repeats`
// timed ones, round robin, so a burst of noise spreads over the points
// instead of skewing one. `sync` follows every run (and the warmup); the
// timings include it. Returns each point's times.
template <class Run, class Sync>
std::vector<std::vector<double>> round_robin(std::size_t n, const CalibrateSettings& s, Run&& run, Sync&& sync) {
  std::vector<std::vector<double>> times(n);
  for (int w = 0; w < s.warmup; ++w)
    for (std::size_t k = 0; k < n; ++k) run(k);
  sync();
  for (int rep = 0; rep < s.repeats; ++rep)
    for (std::size_t k = 0; k < n; ++k) {
      const auto t1 = Clock::now();
      run(k);
      sync();
      times[k].push_back(seconds_since(t1));
    }
  return times;
}

// Synthetic prompts, iteration plans and KV caches for grid shapes.
class Bench {
 public:
  Bench(std::uint64_t prompt_seed, rt::LlamaModel& model) : seed_(prompt_seed), model_(model) {}

  // `n` prompt ids of sequence `seq`, fixed per (seq, n).
  const std::vector<std::int64_t>& prompt(std::uint64_t seq, std::int64_t n) {
    auto& p = prompts_[{seq, n}];
    if (p.empty()) p = rt::synthetic_prompt(model_.config(), seed_, seq, n);
    return p;
  }

  // The iteration of `shape`: decodes (or prefills) 0..seqs-1, then the
  // fresh prefill as sequence `seqs`.
  rt::StepPlan plan(const GridShape& g) {
    rt::StepPlan p;
    for (std::int64_t i = 0; i < g.seqs; ++i) {
      const auto& ids = prompt(static_cast<std::uint64_t>(i), g.context + g.tokens);
      p.seqs.push_back(
          {static_cast<std::uint64_t>(i), g.context, std::vector<std::int64_t>(ids.begin() + g.context, ids.end())});
    }
    if (g.prefill > 0) p.seqs.push_back({static_cast<std::uint64_t>(g.seqs), 0, prompt(1u << 20, g.prefill)});
    return p;
  }

  // Layer group g's KV cache of sequences 0..seqs-1 with `context` cached
  // tokens each, built by chunked prefills of at most ~4096 tokens a call.
  rt::Value kv(int g, std::int64_t seqs, std::int64_t context, const std::string& device) {
    rt::Value cache;
    if (context == 0) return cache;
    const std::int64_t chunk = std::max<std::int64_t>(1, std::min<std::int64_t>(context, 4096 / seqs));
    for (std::int64_t pos = 0; pos < context; pos += chunk) {
      const std::int64_t n = std::min(chunk, context - pos);
      rt::StepPlan p;
      for (std::int64_t i = 0; i < seqs; ++i) {
        const auto& ids = prompt(static_cast<std::uint64_t>(i), context + 1);
        p.seqs.push_back(
            {static_cast<std::uint64_t>(i), pos, std::vector<std::int64_t>(ids.begin() + pos, ids.begin() + pos + n)});
      }
      rt::Value h = model_.embed(p, device);
      model_.layers(g, h, cache, p, device, cache);
    }
    return cache;
  }

  rt::LlamaModel& model() { return model_; }

 private:
  std::uint64_t seed_;
  rt::LlamaModel& model_;
  std::map<std::pair<std::uint64_t, std::int64_t>, std::vector<std::int64_t>> prompts_;
};

// The grid's shapes grouped by the KV cache they read (a layer group's
// shapes: same sequences and context; other ops: all in one group).
std::vector<std::vector<std::size_t>> cache_blocks(const ShapeGrid& grid, bool is_layers) {
  std::vector<std::vector<std::size_t>> blocks;
  std::map<std::pair<std::int64_t, std::int64_t>, std::size_t> block_of;
  for (std::size_t i = 0; i < grid.shapes.size(); ++i) {
    const GridShape& g = grid.shapes[i];
    const auto key = is_layers ? std::pair{g.seqs, g.context} : std::pair<std::int64_t, std::int64_t>{0, 0};
    auto [it, fresh] = block_of.try_emplace(key, blocks.size());
    if (fresh) blocks.emplace_back();
    blocks[it->second].push_back(i);
  }
  return blocks;
}

// The median time of the operator with role `op` (the embedding, a layer
// group, the head: the model contract says which) at every grid shape on
// device `dev`, each block of shapes that shares a KV cache timed round robin.
std::vector<double> time_operator(Bench& bench, const ModelOp& op, const ShapeGrid& grid, const std::string& dev,
                                  const CalibrateSettings& s) {
  rt::LlamaModel& model = bench.model();
  const bool is_layers = op.role == OpRole::kLayers;
  const int group = op.group;
  std::vector<double> medians(grid.shapes.size());
  for (const auto& block : cache_blocks(grid, is_layers)) {
    const GridShape& first = grid.shapes[block.front()];
    const rt::Value cache = is_layers ? bench.kv(group, first.seqs, first.context, dev) : rt::Value();
    std::vector<rt::StepPlan> plans;
    std::vector<rt::Value> hidden;
    for (std::size_t i : block) {
      plans.push_back(bench.plan(grid.shapes[i]));
      if (op.role != OpRole::kEmbed) hidden.push_back(model.embed(plans.back(), dev));
    }
    auto run = [&](std::size_t k) {
      if (op.role == OpRole::kEmbed) {
        (void)model.embed(plans[k], dev);
      } else if (op.role == OpRole::kHead) {
        (void)model.head(hidden[k], plans[k], dev);
      } else {
        rt::Value kv_out;
        (void)model.layers(group, hidden[k], cache, plans[k], dev, kv_out);
      }
    };
    const auto times = round_robin(block.size(), s, run, [&] { rt::LlamaModel::synchronize(dev); });
    for (std::size_t k = 0; k < block.size(); ++k) medians[block[k]] = median(times[k]);
  }
  return medians;
}

// The engine's fixed costs on device `dev`: every grid shape without a
// fresh prefill run as the live executor runs one iteration (its step plan
// built, then embed, every layer group on its KV cache and the head, which
// samples and brings the tokens to the host), timed whole, round robin per
// KV cache like the operators. A shape's whole-iteration median less the sum
// of its operators' medians (`op_sum`, each timed alone) is what the
// iteration costs beyond its operators; appended to `out` as (sequences,
// seconds).
void time_iterations(Bench& bench, const Model& model, const ShapeGrid& grid, const std::string& dev,
                     const CalibrateSettings& s, const std::vector<double>& op_sum,
                     std::vector<std::pair<double, double>>& out) {
  rt::LlamaModel& rt_model = bench.model();
  std::vector<int> groups;
  for (const ModelOp& op : model.ops())
    if (op.role == OpRole::kLayers) groups.push_back(op.group);
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::size_t>> blocks;
  for (std::size_t i = 0; i < grid.shapes.size(); ++i)
    if (grid.shapes[i].prefill == 0) blocks[{grid.shapes[i].seqs, grid.shapes[i].context}].push_back(i);
  for (const auto& [key, block] : blocks) {
    std::vector<rt::Value> caches;
    for (int g : groups) caches.push_back(bench.kv(g, key.first, key.second, dev));
    auto run = [&](std::size_t k) {
      const rt::StepPlan plan = bench.plan(grid.shapes[block[k]]);
      rt::Value h = rt_model.embed(plan, dev);
      for (std::size_t g = 0; g < groups.size(); ++g) {
        rt::Value kv_out;
        h = rt_model.layers(groups[g], h, caches[g], plan, dev, kv_out);
      }
      (void)rt_model.head(h, plan, dev);
    };
    const auto times = round_robin(block.size(), s, run, [&] { rt::LlamaModel::synchronize(dev); });
    for (std::size_t k = 0; k < block.size(); ++k)
      out.push_back(
          {static_cast<double>(grid.shapes[block[k]].total_sequences()), median(times[k]) - op_sum[block[k]]});
  }
}

// Fits op `op` on accelerator type `type` to its medians, appending its
// row and points to `r`.
Status fit_operator(CalibrationResult& r, const GraphTemplate& tmpl, const TemplateOp& op, AccelTypeId type,
                    const ShapeGrid& grid, const std::vector<double>& medians) {
  std::vector<std::vector<double>> x;
  for (std::size_t i = 0; i < grid.shapes.size(); ++i) {
    const GridShape& g = grid.shapes[i];
    x.push_back(op_features(tmpl, op, g.total_tokens(), g.total_sequences(), g.total_context()));
    if (Status st = r.est.observe_op(op.kind, type, x.back(), medians[i]); !st.ok()) return st;
  }
  CalibrationResult::Row row{tmpl.name(), op.name, r.accels->type_name(type), x.size(), 0, 1e300, 0, false};
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double predicted = r.est.predict_op(op.kind, type, x[i]);
    row.mape_pct += std::abs(predicted - medians[i]) / medians[i];
    r.points.push_back({row.model, op.name, row.type, grid.shapes[i], 0, x[i], medians[i], predicted});
  }
  if (!x.empty()) row.mape_pct *= 100.0 / static_cast<double>(x.size());
  for (double y : medians) row.min_s = std::min(row.min_s, y), row.max_s = std::max(row.max_s, y);
  r.rows.push_back(std::move(row));
  return Status::Ok();
}

// Every operator of `served` on one accelerator of each type that holds
// its weights.
// Each type's whole-iteration samples go to samples[type] (time_iterations).
Status calibrate_operators(CalibrationResult& r, const CalibrationTarget& target,
                           const CalibrationTarget::Served& served, Bench& bench, const CalibrateSettings& s,
                           std::map<AccelTypeId, std::vector<std::pair<double, double>>>& samples) {
  const AcceleratorSet& accels = *r.accels;
  const GraphTemplate& tmpl = r.templates->get(served.tmpl);
  if (!served.model || served.model->ops().size() != tmpl.ops().size())
    return InvalidArgument("calibrate: template '" + tmpl.name() + "' has no model contract behind it");
  for (AccelTypeId type = 0; type < accels.type_count(); ++type) {
    AccelId rep = kNoAccel;
    for (AccelId a : served.accels)
      if (accels.type(a) == type) {
        rep = a;
        break;
      }
    if (rep == kNoAccel) continue;
    const std::string& dev = target.devices[rep];
    for (const TemplateOp& op : tmpl.ops()) bench.model().load(op.name, dev);
    std::vector<double> op_sum(target.grid.shapes.size(), 0.0);  // the operators' medians, summed per shape
    for (std::size_t i = 0; i < tmpl.ops().size(); ++i) {
      const TemplateOp& op = tmpl.ops()[i];
      const auto t0 = Clock::now();
      const std::vector<double> medians = time_operator(bench, served.model->ops()[i], target.grid, dev, s);
      for (std::size_t k = 0; k < medians.size(); ++k) op_sum[k] += medians[k];
      if (Status st = fit_operator(r, tmpl, op, type, target.grid, medians); !st.ok()) return st;
      const CalibrationResult::Row& row = r.rows.back();
      if (s.progress)
        std::fprintf(stderr,
                     "  calibrate: %s %-10s on %-8s (%s): %llu shapes, %.3f-%.3f ms, fit MAPE %.2f %% [%.1f s]\n",
                     tmpl.name().c_str(), op.name.c_str(), row.type.c_str(), dev.c_str(),
                     static_cast<unsigned long long>(row.samples), row.min_s * 1e3, row.max_s * 1e3, row.mape_pct,
                     seconds_since(t0));
    }
    const auto t0 = Clock::now();
    time_iterations(bench, *served.model, target.grid, dev, s, op_sum, samples[type]);
    if (s.progress)
      std::fprintf(stderr, "  calibrate: %s whole iterations on %-8s (%s): fixed costs measured [%.1f s]\n",
                   tmpl.name().c_str(), accels.type_name(type).c_str(), dev.c_str(), seconds_since(t0));
  }
  return Status::Ok();
}

// Least squares of overhead = iteration + sequence * seqs over `samples`
// (seqs, overhead), each coefficient held at >= 0: what the engine costs
// beyond its operators cannot be negative, and a negative fit is noise.
CalibrationProfile::FixedCost fit_fixed_cost(const std::string& type,
                                             const std::vector<std::pair<double, double>>& xs) {
  CalibrationProfile::FixedCost f{type, 0, 0, xs.size()};
  if (xs.empty()) return f;
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto [x, y] : xs) n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  const double det = n * sxx - sx * sx;
  double a = sy / n, b = 0;  // one sequence count: the mean per iteration
  if (det > 0) {
    b = (n * sxy - sx * sy) / det;
    a = (sy - b * sx) / n;
  }
  if (b < 0) b = 0, a = sy / n;
  if (a < 0) a = 0, b = sxx > 0 ? std::max(0.0, sxy / sxx) : 0;
  f.iteration_s = std::max(0.0, a);
  f.sequence_s = b;
  return f;
}

// What the copies move, made on device `home`: hidden states of the grid's
// hidden sizes, then KV caches of its KV sizes (layer group 0's, in
// sequences of at most 1024 tokens).
std::vector<rt::Value> copy_values(Bench& bench, const ShapeGrid& grid, const std::string& home) {
  std::vector<rt::Value> values;
  for (std::int64_t t : grid.hidden_tokens) values.push_back(bench.model().embed(bench.plan({1, t, 0, 0}), home));
  for (std::int64_t k : grid.kv_tokens) {
    const std::int64_t seqs = (k + 1023) / 1024;
    values.push_back(bench.kv(0, seqs, k / seqs, home));
  }
  return values;
}

// Fits the copies from accelerator a to b to their medians (bytes, seconds),
// appending its row and points to `r`.
Status fit_pair(CalibrationResult& r, AccelId a, AccelId b, const std::vector<std::pair<double, double>>& samples) {
  const AcceleratorSet& accels = *r.accels;
  for (auto [bytes, y] : samples)
    if (Status st = r.est.observe_transfer(a, b, static_cast<std::uint64_t>(bytes), y); !st.ok()) return st;
  CalibrationResult::Row row{"", "copy", accels[a].name + " -> " + accels[b].name, samples.size(), 0, 1e300, 0, true};
  for (auto [bytes, y] : samples) {
    const double predicted = r.est.predict_transfer(a, b, static_cast<std::uint64_t>(bytes));
    r.points.push_back({"", "copy", row.type, {}, static_cast<std::int64_t>(bytes), {}, y, predicted});
    row.mape_pct += std::abs(predicted - y) / y;
    row.min_s = std::min(row.min_s, y), row.max_s = std::max(row.max_s, y);
  }
  row.mape_pct *= 100.0 / static_cast<double>(samples.size());
  r.rows.push_back(std::move(row));
  return Status::Ok();
}

// Every ordered accelerator pair's copies of the copy values (a copy's
// time depends on its bytes, not on the model that made them). `bench`
// runs `served`, which is made resident on the first accelerator's device
// for the values.
Status calibrate_copies(CalibrationResult& r, const CalibrationTarget& target, const CalibrationTarget::Served& served,
                        Bench& bench, const CalibrateSettings& s) {
  const AcceleratorSet& accels = *r.accels;
  if (accels.size() <= 1) return Status::Ok();
  const std::string& home = target.devices[0];
  for (const TemplateOp& op : r.templates->get(served.tmpl).ops()) bench.model().load(op.name, home);
  const std::vector<rt::Value> values = copy_values(bench, target.grid, home);
  for (AccelId a = 0; a < accels.size(); ++a) {
    std::vector<rt::Value> at_a;
    for (const rt::Value& v : values) at_a.push_back(rt::LlamaModel::copy_to(v, target.devices[a]));
    for (AccelId b = 0; b < accels.size(); ++b) {
      if (a == b) continue;
      const auto t0 = Clock::now();
      const std::string &from = target.devices[a], &to = target.devices[b];
      const auto times = round_robin(
          at_a.size(), s,
          [&](std::size_t k) {
            (void)rt::LlamaModel::copy_to(at_a[k], to);
            rt::LlamaModel::synchronize(to);
            rt::LlamaModel::synchronize(from);
          },
          [] {});
      std::vector<std::pair<double, double>> samples;  // bytes, seconds
      for (std::size_t k = 0; k < at_a.size(); ++k)
        samples.push_back({static_cast<double>(at_a[k].bytes()), median(times[k])});
      if (Status st = fit_pair(r, a, b, samples); !st.ok()) return st;
      const CalibrationResult::Row& row = r.rows.back();
      if (s.progress)
        std::fprintf(stderr,
                     "  calibrate: copy %s -> %s (%s -> %s): %zu sizes, %.3f-%.3f ms, fit MAPE %.2f %% [%.1f s]\n",
                     accels[a].name.c_str(), accels[b].name.c_str(), from.c_str(), to.c_str(), samples.size(),
                     row.min_s * 1e3, row.max_s * 1e3, row.mape_pct, seconds_since(t0));
    }
  }
  return Status::Ok();
}

// The profile of the fit, its MAPE the rows' (the fit against the medians;
// the estimator's own is prequential, scored from the roofline prior
// onwards).
void snapshot_profile(CalibrationResult& r, const std::string& source) {
  r.profile = snapshot(r.est, *r.templates, *r.accels, source);
  for (auto& op : r.profile.ops)
    for (const auto& row : r.rows)
      if (!row.transfer && row.model == op.tmpl && row.what == op.op && row.type == op.type) op.mape_pct = row.mape_pct;
  for (auto& t : r.profile.transfers)
    for (const auto& row : r.rows)
      if (row.transfer && row.type == t.src + " -> " + t.dst) t.mape_pct = row.mape_pct;
}

}  // namespace

Result<CalibrationResult> calibrate_models(const CalibrationTarget& target, std::span<rt::LlamaModel* const> runtimes,
                                           const CalibrateSettings& s) {
  if (target.models.empty() || runtimes.size() != target.models.size())
    return InvalidArgument("calibrate: " + std::to_string(target.models.size()) + " model(s) to calibrate but " +
                           std::to_string(runtimes.size()) + " runtime(s)");
  const auto t_start = Clock::now();
  CalibrationResult r;
  r.accels = target.accels;
  r.templates = target.templates;
  if (Status st = seed_priors(r.est, *r.templates, *r.accels); !st.ok()) return st;
  // The fixed costs are the engine's, not a model's: every model's samples
  // on a type are fitted together.
  std::map<AccelTypeId, std::vector<std::pair<double, double>>> overheads;
  // LibTorch reports a device or kernel failure by throwing: this is where
  // it becomes a Status.
  try {
    for (std::size_t i = 0; i < target.models.size(); ++i) {
      Bench bench(target.models[i].prompt_seed, *runtimes[i]);
      if (Status st = calibrate_operators(r, target, target.models[i], bench, s, overheads); !st.ok()) return st;
      if (i == 0)
        if (Status st = calibrate_copies(r, target, target.models[0], bench, s); !st.ok()) return st;
    }
  } catch (const rt::DeviceOutOfMemory& e) {
    return ResourceExhausted(std::string("calibrate: out of device memory: ") + e.what());
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("calibrate: ") + e.what());
  }
  snapshot_profile(r, target.source);
  for (const auto& [type, xs] : overheads)
    r.profile.fixed_costs.push_back(fit_fixed_cost(r.accels->type_name(type), xs));
  r.wall_s = seconds_since(t_start);
  return r;
}

}  // namespace slicesched
