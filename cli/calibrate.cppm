// Calibration on real devices: what `slicesched calibrate` and `bench
// accuracy` share. Every operator of the config's model (embed, layers<g>,
// head) is timed over a grid of iteration shapes on one device of each
// accelerator type, every ordered accelerator pair's copies over a range of
// sizes; a linear estimator set is fitted to the medians with exactly the
// template's features, and snapshotted as a slicesched-calibration/2
// profile (simulate's ground truth or estimator prior).
//
// The shape grid (derived from the config, so it covers what serving asks):
//   P = the longest prompt, O = the longest output of any tenant's stream,
//   S = the most sequences one iteration can hold (max_seqs, capped by the
//       tenant's requests), T = the most tokens one iteration can hold
//       (max(token_budget, P), capped by requests * P), K = the most cached
//       tokens (kv_budget_tokens, capped by requests * (P + O)).
//   seqs    s in {1, 2, 4, ...} < S, and S
//   prefill s <= 4 sequences of t new tokens, t in {1, 4, 16, ...} < P and P, s*t <= T
//   decode  s sequences of 1 new token on c cached, c in {1, 4, 16, ...} < P+O-1 and P+O-1,
//           s*(c+1) <= K
//   mixed   s decodes on P cached each plus one prefill of t tokens (continuous batching),
//           s+t <= T
//   The head's cost follows the sequences (features {sequences, 1}); when
//   every shape above has one sequence, two one-token prompts are added
//   (T >= 2), so its fit sees two sequence counts and is identifiable.
//   copies  hidden states of t tokens, t in {1, 4, 16, ...} < T and T, and KV
//           caches of k tokens, k in {16, 64, ...} < K and K, between every ordered pair.
// Each point: `warmup` untimed runs, then `repeats` timed ones (each
// followed by a device synchronize), taken round robin over the points that
// share a KV cache (or over the sizes of one pair); the median is the sample.
module;
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "executor/torch/runtime.h"

export module slicesched.cli.calibrate;
export import slicesched.compose.setup;
export import slicesched.core.calibration;

export namespace slicesched::cli {

struct CalibrateSettings {
  int warmup = 2;
  int repeats = 5;
  bool progress = true;  // a line per operator and per accelerator pair on stderr
};

// One iteration shape: `seqs` sequences, each with `tokens` new tokens on
// top of `context` cached ones, plus (when > 0) one fresh prefill of
// `prefill` tokens, as continuous batching mixes them.
struct GridShape {
  std::int64_t seqs = 1, tokens = 1, context = 0, prefill = 0;
  std::int64_t total_tokens() const { return seqs * tokens + prefill; }
  std::int64_t total_sequences() const { return seqs + (prefill > 0 ? 1 : 0); }
  std::int64_t total_context() const { return seqs * context; }
};

struct ShapeGrid {
  std::vector<GridShape> shapes;
  std::vector<std::int64_t> hidden_tokens;  // copies of hidden states of this many tokens
  std::vector<std::int64_t> kv_tokens;      // copies of KV caches of this many tokens
  // What the grid was derived from (see the comment at the top).
  std::int64_t max_prompt = 0, max_output = 0, max_seqs = 0, max_tokens = 0, max_kv = 0;
};

ShapeGrid shape_grid(const ExperimentConfig& cfg);
// A few lines: the bounds and the point counts.
std::string describe(const ShapeGrid& grid);

struct CalibrationResult {
  std::shared_ptr<AcceleratorSet> accels;
  std::shared_ptr<TemplateRegistry> templates;
  TemplateId tmpl = 0;
  EstimatorSet est;  // the fit (template priors, then the measurements)
  CalibrationProfile profile;
  struct Row {
    std::string what, type;  // op and accelerator type, or "copy" and "src -> dst"
    std::uint64_t samples = 0;
    double mape_pct = 0;  // in-sample: the fit against the medians it was fitted to
    double min_s = 0, max_s = 0;
    bool transfer = false;
  };
  std::vector<Row> rows;
  // Every measurement: an operator at a grid shape, or a copy of `bytes`.
  struct Point {
    std::string what, type;  // as in Row
    GridShape shape;         // operators
    std::int64_t bytes = 0;  // copies
    std::vector<double> x;   // operators: the template's features
    double seconds = 0;      // the median
    double predicted = 0;    // by the final fit
  };
  std::vector<Point> points;
  double wall_s = 0;
};

// Measures and fits. The accelerators' devices must exist (check_devices)
// and the model's weights fit (check_weights_fit). Throws std::runtime_error
// (one line) on a device or LibTorch failure.
CalibrationResult calibrate_model(const ExperimentConfig& cfg, rt::LlamaModel& model, const CalibrateSettings& s);

// The table: op, type, samples, MAPE %, fastest and slowest median.
void print_calibration(const CalibrationResult& r, std::FILE* out);
// Every point as CSV (what,type,seqs,tokens,context,prefill,bytes,features,seconds,predicted); false on an
// I/O error.
bool write_points_csv(const CalibrationResult& r, const std::string& path);

// The features of template op `op` for an iteration of `tokens` new tokens
// over `sequences` sequences on `context` cached ones, exactly as the GMG
// evaluates them.
std::vector<double> op_features(const GraphTemplate& t, const TemplateOp& op, std::int64_t tokens,
                                std::int64_t sequences, std::int64_t context);

}  // namespace slicesched::cli

namespace slicesched::cli {

namespace {

using Clock = std::chrono::steady_clock;

// {first, first*step, first*step^2, ...} below `max`, then `max` itself.
std::vector<std::int64_t> ladder(std::int64_t first, std::int64_t max, std::int64_t step = 4) {
  std::vector<std::int64_t> v;
  for (std::int64_t x = first; x < max; x *= step) v.push_back(x);
  if (max >= 1) v.push_back(max);
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Sample {
  std::vector<double> x;
  double y = 0;
};

double fit_mape(const EstimatorSet& est, OpKindId kind, AccelTypeId type, const std::vector<Sample>& samples) {
  double err = 0;
  for (const Sample& s : samples) err += std::abs(est.predict_op(kind, type, s.x) - s.y) / s.y;
  return samples.empty() ? 0.0 : 100.0 * err / static_cast<double>(samples.size());
}

class Bench {
 public:
  Bench(const ExperimentConfig& cfg, rt::LlamaModel& model) : cfg_(cfg), model_(model) {}

  // `n` prompt ids of sequence `seq`, fixed per (seq, n).
  const std::vector<std::int64_t>& prompt(std::uint64_t seq, std::int64_t n) {
    auto& p = prompts_[{seq, n}];
    if (p.empty()) p = rt::synthetic_prompt(model_.config(), cfg_.model.weights_seed + 17, seq, n);
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

 private:
  const ExperimentConfig& cfg_;
  rt::LlamaModel& model_;
  std::map<std::pair<std::uint64_t, std::int64_t>, std::vector<std::int64_t>> prompts_;
};

}  // namespace

std::vector<double> op_features(const GraphTemplate& t, const TemplateOp& op, std::int64_t tokens,
                                std::int64_t sequences, std::int64_t context) {
  Binding b(t.dims().size());
  const std::pair<const char*, std::int64_t> dims[] = {
      {"tokens", tokens}, {"sequences", sequences}, {"context", context}, {"kv_prev", context}};
  for (const auto& [name, v] : dims)
    if (int id = t.dims().find(name); id >= 0) b.set(static_cast<DimId>(id), v);
  std::vector<double> x;
  for (const Expr& e : op.features) {
    auto v = e.eval(b, t.dims());
    if (!v.ok()) fail("calibrate: features of " + op.name + ": " + v.status().message());
    x.push_back(static_cast<double>(v.value()));
  }
  return x;
}

ShapeGrid shape_grid(const ExperimentConfig& cfg) {
  ShapeGrid g;
  for (std::size_t i = 0; i < cfg.tenants.size(); ++i) {
    const TenantConfig& t = cfg.tenants[i];
    // What the window replays, as build_policy does.
    const Trace trace = make_stream(t, cfg.seed + i, cfg.duration_s > 0 ? cfg.duration_s : -1);
    std::int64_t p = 1, o = 1;
    for (const Request& r : trace.requests) {
      p = std::max(p, r.input_tokens);
      o = std::max(o, r.output_tokens);
    }
    const auto n = std::max<std::int64_t>(1, static_cast<std::int64_t>(trace.requests.size()));
    g.max_prompt = std::max(g.max_prompt, p);
    g.max_output = std::max(g.max_output, o);
    g.max_seqs = std::max(g.max_seqs, std::min(t.max_seqs, n));
    g.max_tokens = std::max(g.max_tokens, std::min(std::max(t.token_budget, p), n * p));
    g.max_kv = std::max(g.max_kv, std::min(t.kv_budget_tokens, n * (p + o)));
  }
  if (cfg.tenants.empty()) g.max_prompt = g.max_output = g.max_seqs = g.max_tokens = g.max_kv = 1;
  const std::int64_t P = g.max_prompt, C = std::max<std::int64_t>(1, g.max_prompt + g.max_output - 1);
  const std::vector<std::int64_t> seqs = ladder(1, g.max_seqs, 2), ps = ladder(1, P);
  // Prefills come a few at a time (arrivals between two iterations).
  for (std::int64_t s : seqs)
    if (s <= 4)
      for (std::int64_t t : ps)
        if (s * t <= g.max_tokens) g.shapes.push_back({s, t, 0, 0});
  for (std::int64_t s : seqs)
    for (std::int64_t c : ladder(1, C))
      if (s * (c + 1) <= g.max_kv) g.shapes.push_back({s, 1, c, 0});
  // Continuous batching: the running decodes plus a newly admitted prompt.
  for (std::int64_t s : seqs)
    for (std::int64_t t : ps)
      if (s + t <= g.max_tokens && s * (P + 1) + t <= g.max_kv) g.shapes.push_back({s, 1, P, t});
  // The head's fit needs two sequence counts.
  const bool one_count =
      std::all_of(g.shapes.begin(), g.shapes.end(), [](const GridShape& s) { return s.total_sequences() == 1; });
  if (one_count && g.max_tokens >= 2) g.shapes.push_back({2, 1, 0, 0});
  g.hidden_tokens = ladder(1, g.max_tokens);
  g.kv_tokens = ladder(16, std::max<std::int64_t>(16, g.max_kv));
  return g;
}

std::string describe(const ShapeGrid& g) {
  std::size_t prefill = 0, decode = 0, mixed = 0;
  std::set<std::int64_t> counts;
  for (const GridShape& s : g.shapes) {
    (s.prefill ? mixed : s.context ? decode : prefill) += 1;
    counts.insert(s.total_sequences());
  }
  char buf[640];
  std::snprintf(
      buf, sizeof buf,
      "shape grid: prompts <= %lld, outputs <= %lld, <= %lld sequences, <= %lld tokens and <= %lld cached "
      "tokens per iteration\n  %zu shapes (%zu prefill, %zu decode, %zu mixed) of %zu sequence counts "
      "(%lld to %lld); copies of %zu hidden and %zu KV sizes per accelerator pair\n",
      static_cast<long long>(g.max_prompt), static_cast<long long>(g.max_output), static_cast<long long>(g.max_seqs),
      static_cast<long long>(g.max_tokens), static_cast<long long>(g.max_kv), g.shapes.size(), prefill, decode, mixed,
      counts.size(), static_cast<long long>(counts.empty() ? 0 : *counts.begin()),
      static_cast<long long>(counts.empty() ? 0 : *counts.rbegin()), g.hidden_tokens.size(), g.kv_tokens.size());
  return buf;
}

CalibrationResult calibrate_model(const ExperimentConfig& cfg, rt::LlamaModel& model, const CalibrateSettings& s) {
  const auto t_start = Clock::now();
  CalibrationResult r;
  r.accels = make_cluster(cfg);
  r.templates = std::make_shared<TemplateRegistry>();
  r.tmpl = r.templates->add(llama::make_template(cfg.model.name, model_shape(cfg.model))).value();
  const GraphTemplate& tmpl = r.templates->get(r.tmpl);
  const AcceleratorSet& accels = *r.accels;
  check(seed_priors(r.est, *r.templates, accels));
  const ShapeGrid grid = shape_grid(cfg);
  Bench bench(cfg, model);
  auto device_of = [&](AccelId a) { return cfg.accelerators[a].device; };
  try {
    // ---- operators: one device per accelerator type ----
    for (AccelTypeId type = 0; type < accels.type_count(); ++type) {
      AccelId rep = kNoAccel;
      for (AccelId a = 0; a < accels.size() && rep == kNoAccel; ++a)
        if (accels.type(a) == type) rep = a;
      if (rep == kNoAccel) continue;
      const std::string dev = device_of(rep);
      for (const TemplateOp& op : tmpl.ops()) model.load(op.name, dev);
      for (const TemplateOp& op : tmpl.ops()) {
        const auto t0 = Clock::now();
        const bool is_layers = op.name.rfind("layers", 0) == 0;
        const int group = is_layers ? std::stoi(op.name.substr(6)) : 0;
        if (!is_layers && op.name != "embed" && op.name != "head")
          fail("calibrate: operator '" + op.name + "' is not embed, layers<g> or head");
        // Shapes that share a KV cache (layers: same sequences and context)
        // are timed together, round robin: `warmup` passes, then `repeats`
        // timed passes, so a burst of noise spreads over shapes instead of
        // skewing one.
        std::vector<std::vector<std::size_t>> blocks;
        std::map<std::pair<std::int64_t, std::int64_t>, std::size_t> block_of;
        for (std::size_t i = 0; i < grid.shapes.size(); ++i) {
          const GridShape& g = grid.shapes[i];
          const auto key = is_layers ? std::pair{g.seqs, g.context} : std::pair<std::int64_t, std::int64_t>{0, 0};
          auto [it, fresh] = block_of.try_emplace(key, blocks.size());
          if (fresh) blocks.emplace_back();
          blocks[it->second].push_back(i);
        }
        std::vector<std::vector<double>> times(grid.shapes.size());
        for (const auto& block : blocks) {
          const GridShape& first = grid.shapes[block.front()];
          const rt::Value cache = is_layers ? bench.kv(group, first.seqs, first.context, dev) : rt::Value();
          std::vector<rt::StepPlan> plans;
          std::vector<rt::Value> hidden;
          for (std::size_t i : block) {
            plans.push_back(bench.plan(grid.shapes[i]));
            if (op.name != "embed") hidden.push_back(model.embed(plans.back(), dev));
          }
          auto run = [&](std::size_t k) {
            if (op.name == "embed") {
              (void)model.embed(plans[k], dev);
            } else if (op.name == "head") {
              (void)model.head(hidden[k], plans[k], dev);
            } else {
              rt::Value kv_out;
              (void)model.layers(group, hidden[k], cache, plans[k], dev, kv_out);
            }
          };
          for (int w = 0; w < s.warmup; ++w)
            for (std::size_t k = 0; k < block.size(); ++k) run(k);
          rt::LlamaModel::synchronize(dev);
          for (int rep = 0; rep < s.repeats; ++rep)
            for (std::size_t k = 0; k < block.size(); ++k) {
              const auto t1 = Clock::now();
              run(k);
              rt::LlamaModel::synchronize(dev);
              times[block[k]].push_back(seconds_since(t1));
            }
        }
        std::vector<Sample> samples;
        for (std::size_t i = 0; i < grid.shapes.size(); ++i) {
          const GridShape& g = grid.shapes[i];
          samples.push_back(
              {op_features(tmpl, op, g.total_tokens(), g.total_sequences(), g.total_context()), median(times[i])});
          check(r.est.observe_op(op.kind, type, samples.back().x, samples.back().y));
        }
        CalibrationResult::Row row{
            op.name, accels.type_name(type), samples.size(), fit_mape(r.est, op.kind, type, samples), 1e300, 0, false};
        for (std::size_t i = 0; i < samples.size(); ++i)
          r.points.push_back({op.name, row.type, grid.shapes[i], 0, samples[i].x, samples[i].y,
                              r.est.predict_op(op.kind, type, samples[i].x)});
        for (const Sample& x : samples) row.min_s = std::min(row.min_s, x.y), row.max_s = std::max(row.max_s, x.y);
        if (s.progress)
          std::fprintf(stderr, "  calibrate: %-10s on %-8s (%s): %zu shapes, %.3f-%.3f ms, fit MAPE %.2f %% [%.1f s]\n",
                       op.name.c_str(), row.type.c_str(), dev.c_str(), samples.size(), row.min_s * 1e3, row.max_s * 1e3,
                       row.mape_pct, seconds_since(t0));
        r.rows.push_back(std::move(row));
      }
    }

    // ---- copies: every ordered pair, hidden states and KV caches ----
    if (accels.size() > 1) {
      const std::string home = device_of(0);
      for (const TemplateOp& op : tmpl.ops()) model.load(op.name, home);
      std::vector<rt::Value> values;
      for (std::int64_t t : grid.hidden_tokens) {
        GridShape g{1, t, 0, 0};
        values.push_back(model.embed(bench.plan(g), home));
      }
      for (std::int64_t k : grid.kv_tokens) {
        const std::int64_t seqs = (k + 1023) / 1024;
        values.push_back(bench.kv(0, seqs, k / seqs, home));
      }
      for (AccelId a = 0; a < accels.size(); ++a) {
        std::vector<rt::Value> at_a;
        for (const rt::Value& v : values) at_a.push_back(rt::LlamaModel::copy_to(v, device_of(a)));
        for (AccelId b = 0; b < accels.size(); ++b) {
          if (a == b) continue;
          const auto t0 = Clock::now();
          const std::string from = device_of(a), to = device_of(b);
          std::vector<std::pair<double, double>> samples;  // bytes, seconds
          std::vector<std::vector<double>> times(at_a.size());
          auto copy = [&](std::size_t k) {
            (void)rt::LlamaModel::copy_to(at_a[k], to);
            rt::LlamaModel::synchronize(to);
            rt::LlamaModel::synchronize(from);
          };
          for (int w = 0; w < s.warmup; ++w)
            for (std::size_t k = 0; k < at_a.size(); ++k) copy(k);
          for (int rep = 0; rep < s.repeats; ++rep)
            for (std::size_t k = 0; k < at_a.size(); ++k) {
              const auto t1 = Clock::now();
              copy(k);
              times[k].push_back(seconds_since(t1));
            }
          for (std::size_t k = 0; k < at_a.size(); ++k) {
            const double y = median(times[k]);
            samples.push_back({static_cast<double>(at_a[k].bytes()), y});
            check(r.est.observe_transfer(a, b, static_cast<std::uint64_t>(at_a[k].bytes()), y));
          }
          CalibrationResult::Row row{"copy", accels[a].name + " -> " + accels[b].name, samples.size(), 0, 1e300, 0,
                                     true};
          for (auto [bytes, y] : samples) {
            r.points.push_back({"copy",
                                row.type,
                                {},
                                static_cast<std::int64_t>(bytes),
                                {},
                                y,
                                r.est.predict_transfer(a, b, static_cast<std::uint64_t>(bytes))});
            row.mape_pct += std::abs(r.est.predict_transfer(a, b, static_cast<std::uint64_t>(bytes)) - y) / y;
            row.min_s = std::min(row.min_s, y), row.max_s = std::max(row.max_s, y);
          }
          row.mape_pct *= 100.0 / static_cast<double>(samples.size());
          if (s.progress)
            std::fprintf(stderr,
                         "  calibrate: copy %s -> %s (%s -> %s): %zu sizes, %.3f-%.3f ms, fit MAPE %.2f %% [%.1f s]\n",
                         accels[a].name.c_str(), accels[b].name.c_str(), from.c_str(), to.c_str(), samples.size(),
                         row.min_s * 1e3, row.max_s * 1e3, row.mape_pct, seconds_since(t0));
          r.rows.push_back(std::move(row));
        }
      }
    }
  } catch (const rt::DeviceOutOfMemory& e) {
    fail(std::string("calibrate: out of device memory: ") + e.what());
  } catch (const std::invalid_argument& e) {
    fail(std::string("calibrate: ") + e.what());
  } catch (const std::logic_error& e) {
    fail(std::string("calibrate: ") + e.what());
  }

  std::string devices;
  for (const auto& a : cfg.accelerators)
    if (devices.find(a.device) == std::string::npos) devices += (devices.empty() ? "" : ", ") + a.device;
  r.profile = snapshot(r.est, *r.templates, accels, "calibrate " + cfg.path + " on " + devices);
  // The profile's MAPE: the fit against the medians (the estimator's own is
  // prequential, scored from the roofline prior onwards).
  for (auto& op : r.profile.ops)
    for (const auto& row : r.rows)
      if (!row.transfer && row.what == op.op && row.type == op.type) op.mape_pct = row.mape_pct;
  for (auto& t : r.profile.transfers)
    for (const auto& row : r.rows)
      if (row.transfer && row.type == t.src + " -> " + t.dst) t.mape_pct = row.mape_pct;
  r.wall_s = seconds_since(t_start);
  return r;
}

void print_calibration(const CalibrationResult& r, std::FILE* out) {
  std::fprintf(out, "%-12s %-22s %8s %8s %12s %12s\n", "op", "type", "samples", "MAPE %", "min ms", "max ms");
  for (const auto& row : r.rows)
    std::fprintf(out, "%-12s %-22s %8llu %8.2f %12.4f %12.4f\n", row.what.c_str(), row.type.c_str(),
                 static_cast<unsigned long long>(row.samples), row.mape_pct, row.min_s * 1e3, row.max_s * 1e3);
}

bool write_points_csv(const CalibrationResult& r, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  std::fprintf(f, "what,type,seqs,tokens,context,prefill,bytes,features,seconds,predicted\n");
  for (const auto& p : r.points) {
    std::string x;
    for (double v : p.x) x += (x.empty() ? "" : " ") + std::to_string(static_cast<long long>(v));
    std::fprintf(f, "%s,%s,%lld,%lld,%lld,%lld,%lld,%s,%.9g,%.9g\n", p.what.c_str(), p.type.c_str(),
                 static_cast<long long>(p.shape.seqs), static_cast<long long>(p.shape.tokens),
                 static_cast<long long>(p.shape.context), static_cast<long long>(p.shape.prefill),
                 static_cast<long long>(p.bytes), x.c_str(), p.seconds, p.predicted);
  }
  return std::fclose(f) == 0;
}

}  // namespace slicesched::cli
