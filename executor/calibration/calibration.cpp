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

#include "executor/torch/cuda.h"
#include "executor/torch/runtime.h"

module slicesched.executor.calibration;
import slicesched.core.priors;
import slicesched.core.status;
import slicesched.models.model;

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
// host's timings include it, and `timed(k)` follows each timed run. Returns
// each point's times.
template <class Run, class Sync, class Timed>
std::vector<std::vector<double>> round_robin(std::size_t n, const CalibrateSettings& s, Run&& run, Sync&& sync,
                                             Timed&& timed) {
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
      timed(k);
    }
  return times;
}

// What one point's timed runs come to.
struct PointTime {
  double seconds = 0;       // the operator's median, on the clock the fit uses (the device's where there is one)
  double host_seconds = 0;  // the median of its whole iteration on the host's clock
  double spread_pct = 0;    // (slowest - fastest) / median of the operator's runs
};

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

// What timing every operator inside whole iterations gives: per operator
// (model.ops() order) its time at every grid shape, and the engine's fixed
// costs as (sequences, seconds) samples.
struct IterationTimes {
  std::vector<std::vector<PointTime>> ops;  // [op][shape]
  std::vector<std::pair<double, double>> fixed;
};

// Every grid shape run as the live executor runs one iteration: its step
// plan built, then each operator in order (the embedding, every layer group
// on its KV cache, the head, which samples and brings the tokens to the
// host), round robin over the shapes that share a KV cache (same sequences
// and context). Each operator is timed where it runs in the iteration, as
// the live executor times it (CUDA events around it on its stream; the
// host's clock off CUDA): timed alone, back to back on the same inputs, an
// operator ran faster than it does between the others (the host's caches
// warm, nothing queued before it), and launch-bound layer groups came out
// 20-50 % apart at one shape from one block of runs to the next on an H100
// (docs/live.md, "Operator accuracy on an H100").
//
// Layer groups of equal size are the same computation on the same shapes:
// their samples are pooled, and each such group's time at a shape is the
// median over all of them, so one slow block of one group does not skew it.
//
// A shape's whole-iteration host median less the sum of its operators'
// medians is what the iteration costs beyond its operators: the fixed-cost
// samples, of the shapes without a fresh prefill.
IterationTimes time_iterations(Bench& bench, const Model& model, const ShapeGrid& grid, const std::string& dev,
                               const CalibrateSettings& s) {
  rt::LlamaModel& rt_model = bench.model();
  const std::span<const ModelOp> ops = model.ops();
  const std::size_t n_ops = ops.size();
  const int ordinal = rt::cuda_ordinal(dev);
  std::vector<std::unique_ptr<rt::cuda::EventTimer>> timers;
  if (ordinal >= 0)
    for (std::size_t i = 0; i < n_ops; ++i) timers.push_back(std::make_unique<rt::cuda::EventTimer>(ordinal));
  // samples[op][shape]: every timed run; whole[shape]: the host's, whole.
  std::vector<std::vector<std::vector<double>>> samples(n_ops, std::vector<std::vector<double>>(grid.shapes.size()));
  std::vector<std::vector<double>> whole(grid.shapes.size());
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::size_t>> blocks;
  for (std::size_t i = 0; i < grid.shapes.size(); ++i)
    blocks[{grid.shapes[i].seqs, grid.shapes[i].context}].push_back(i);
  for (const auto& [key, block] : blocks) {
    std::vector<rt::Value> caches(n_ops);
    for (std::size_t i = 0; i < n_ops; ++i)
      if (ops[i].role == OpRole::kLayers) caches[i] = bench.kv(ops[i].group, key.first, key.second, dev);
    std::vector<double> host_op(n_ops);
    auto run = [&](std::size_t k) {
      const rt::StepPlan plan = bench.plan(grid.shapes[block[k]]);
      rt::Value h;
      for (std::size_t i = 0; i < n_ops; ++i) {
        const auto t0 = Clock::now();
        if (!timers.empty()) timers[i]->start();
        if (ops[i].role == OpRole::kEmbed) {
          h = rt_model.embed(plan, dev);
        } else if (ops[i].role == OpRole::kHead) {
          (void)rt_model.head(h, plan, dev);
        } else {
          rt::Value kv_out;
          h = rt_model.layers(ops[i].group, h, caches[i], plan, dev, kv_out);
        }
        if (!timers.empty()) timers[i]->stop();
        host_op[i] = seconds_since(t0);  // off CUDA, every operator has finished when it returns
      }
    };
    const auto times = round_robin(
        block.size(), s, run, [&] { rt::LlamaModel::synchronize(dev); },
        [&](std::size_t k) {
          for (std::size_t i = 0; i < n_ops; ++i)
            samples[i][block[k]].push_back(timers.empty() ? host_op[i]
                                                          : static_cast<double>(timers[i]->wait_ns()) / 1e9);
        });
    for (std::size_t k = 0; k < block.size(); ++k) whole[block[k]] = times[k];
  }
  IterationTimes out;
  out.ops.resize(n_ops);
  for (std::size_t i = 0; i < n_ops; ++i) {
    for (std::size_t k = 0; k < grid.shapes.size(); ++k) {
      // Equal layer groups pooled (see above).
      std::vector<double> pool;
      for (std::size_t j = 0; j < n_ops; ++j)
        if (j == i ||
            (ops[i].role == OpRole::kLayers && ops[j].role == OpRole::kLayers && ops[j].layers == ops[i].layers))
          pool.insert(pool.end(), samples[j][k].begin(), samples[j][k].end());
      PointTime p{median(pool), median(whole[k]), 0};
      if (!pool.empty() && p.seconds > 0)
        p.spread_pct = 100.0 *
                       (*std::max_element(pool.begin(), pool.end()) - *std::min_element(pool.begin(), pool.end())) /
                       p.seconds;
      out.ops[i].push_back(p);
    }
  }
  for (std::size_t k = 0; k < grid.shapes.size(); ++k) {
    if (grid.shapes[k].prefill != 0) continue;
    double op_sum = 0;
    for (std::size_t i = 0; i < n_ops; ++i) op_sum += out.ops[i][k].seconds;
    out.fixed.push_back({static_cast<double>(grid.shapes[k].total_sequences()), median(whole[k]) - op_sum});
  }
  return out;
}

// Fits op `op` on accelerator type `type` to its medians, appending its
// row and points to `r`.
Status fit_operator(CalibrationResult& r, const GraphTemplate& tmpl, const TemplateOp& op, AccelTypeId type,
                    const ShapeGrid& grid, const std::vector<PointTime>& medians) {
  std::vector<std::vector<double>> x;
  for (std::size_t i = 0; i < grid.shapes.size(); ++i) {
    const GridShape& g = grid.shapes[i];
    x.push_back(op_features(tmpl, op, g.total_tokens(), g.total_sequences(), g.total_context()));
    if (Status st = r.est.observe_op(op.kind, type, x.back(), medians[i].seconds); !st.ok()) return st;
  }
  CalibrationResult::Row row{tmpl.name(), op.name, r.accels->type_name(type), x.size(), 0, 1e300, 0, false};
  for (std::size_t i = 0; i < x.size(); ++i) {
    const PointTime& m = medians[i];
    const double predicted = r.est.predict_op(op.kind, type, x[i]);
    row.mape_pct += std::abs(predicted - m.seconds) / m.seconds;
    r.points.push_back(
        {row.model, op.name, row.type, grid.shapes[i], 0, x[i], m.seconds, predicted, m.host_seconds, m.spread_pct});
    row.min_s = std::min(row.min_s, m.seconds), row.max_s = std::max(row.max_s, m.seconds);
  }
  if (!x.empty()) row.mape_pct *= 100.0 / static_cast<double>(x.size());
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
    const auto t0 = Clock::now();
    IterationTimes times = time_iterations(bench, *served.model, target.grid, dev, s);
    for (std::size_t i = 0; i < tmpl.ops().size(); ++i) {
      const TemplateOp& op = tmpl.ops()[i];
      if (Status st = fit_operator(r, tmpl, op, type, target.grid, times.ops[i]); !st.ok()) return st;
      const CalibrationResult::Row& row = r.rows.back();
      if (s.progress)
        std::fprintf(stderr, "  calibrate: %s %-10s on %-8s (%s): %llu shapes, %.3f-%.3f ms, fit MAPE %.2f %%\n",
                     tmpl.name().c_str(), op.name.c_str(), row.type.c_str(), dev.c_str(),
                     static_cast<unsigned long long>(row.samples), row.min_s * 1e3, row.max_s * 1e3, row.mape_pct);
    }
    auto& fixed = samples[type];
    fixed.insert(fixed.end(), times.fixed.begin(), times.fixed.end());
    if (s.progress)
      std::fprintf(stderr, "  calibrate: %s on %-8s (%s): %zu shapes timed in whole iterations [%.1f s]\n",
                   tmpl.name().c_str(), accels.type_name(type).c_str(), dev.c_str(), target.grid.shapes.size(),
                   seconds_since(t0));
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
    r.points.push_back({"", "copy", row.type, {}, static_cast<std::int64_t>(bytes), {}, y, predicted, y, 0});
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
          [] {}, [](std::size_t) {});
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
void snapshot_profile(CalibrationResult& r, const CalibrationTarget& target) {
  r.profile = snapshot(r.est, *r.templates, *r.accels, target.source);
  for (const auto& served : target.models)
    if (served.model) r.profile.models.push_back({served.model->name(), shape_text(*served.model)});
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
  snapshot_profile(r, target);
  for (const auto& [type, xs] : overheads)
    r.profile.fixed_costs.push_back(fit_fixed_cost(r.accels->type_name(type), xs));
  r.wall_s = seconds_since(t_start);
  return r;
}

}  // namespace slicesched
