module;
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

module slicesched.compose.policy;
import slicesched.plugins.builtin;
import slicesched.plugins.loader;
import slicesched.plugins.stages.staged;
import slicesched.compose.setup;
import slicesched.core.accel;
import slicesched.core.estimator;
import slicesched.core.graph;
import slicesched.core.priors;
import slicesched.hardware.roofline;
import slicesched.core.shape;
import slicesched.models.model;

namespace slicesched {

namespace {

// A plugin's factory may throw (plugin code): what it throws becomes the
// Status naming the policy, as a failed Result does.
template <typename F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return InvalidArgument(e.what());
  }
}

// `s` with `who` in front of its message.
Status named(const Status& s, const std::string& who) { return Status(s.code(), who + s.message()); }

// A plugin's bind, its failure named: a returned one after `who` (and
// `plugin`, which the plugin's own message may not say), a thrown one after
// `who` (a guard turns a throw into a PluginFailure naming the plugin, but
// not the policy).
template <typename F>
Status bind_named(F&& bind, const std::string& who, const std::string& plugin = "") {
  try {
    if (Status s = bind(); !s.ok()) return named(s, who + plugin);
  } catch (const PluginFailure& e) {
    return InvalidArgument(who + e.what());
  }
  return Status::Ok();
}

// Request `i` of tenant `tc`'s stream needs more than its model's context
// window (`mc` does not cut it).
Status over_window(const ExperimentConfig& cfg, const TenantConfig& tc, const ModelConfig& mc, std::size_t i,
                   const Request& r, std::int64_t ctx_window) {
  return InvalidArgument(
      cfg.path + ": tenants." + tc.name + ".stream: request " + std::to_string(i) +
      (tc.stream.path.empty()
           ? std::string()
           : " (of trace " + tc.stream.path + ", arriving at " + std::to_string(r.arrival_s) + " s of the window)") +
      " needs " + std::to_string(r.input_tokens + r.output_tokens) + " tokens (" + std::to_string(r.input_tokens) +
      " in, " + std::to_string(r.output_tokens) + " out), more than model '" + mc.name + "''s context window of " +
      std::to_string(ctx_window) + " (on_overflow = \"truncate\" cuts them)");
}

// The tenants of `policy`, each instance with its share of its stream.
Status build_tenants(const ExperimentConfig& cfg, const BuildOptions& opt, PolicyParts& p) {
  // Only what the measurement window offers is replayed: a request that
  // arrives after it could neither finish nor be fairly scored.
  const double window = cfg.duration_s > 0 ? cfg.duration_s : -1;
  for (const std::string& name : p.policy.tenants) {
    auto found = tenant_config(cfg, name);
    if (!found.ok()) return found.status();
    const TenantConfig& tc = *found.value();
    // Seeded by the tenant's place in the config, not in the policy, so
    // every policy that runs a tenant gets the same requests.
    const auto place = static_cast<std::uint64_t>(&tc - cfg.tenants.data());
    auto made = opt.stream ? Result<Trace>(opt.stream(tc)) : make_stream(tc, cfg.seed + place, window);
    if (!made.ok()) return made.status();
    Trace stream = std::move(made).value();
    OfferedLoad offered{tc.name};
    const double span = window > 0 ? window : stream.window_s;
    // A synthetic stream was cut at the window and counted what it left out;
    // a trace is read whole and counted here.
    p.requests_beyond_window += stream.beyond_cut;
    for (const Request& r : stream.requests) {
      if (window > 0 && r.arrival_s >= window) {
        ++p.requests_beyond_window;
        continue;
      }
      ++offered.requests;
      offered.input_tokens += r.input_tokens;
      // (a request asking for 0 tokens still makes its first, as the
      // engine runs it: offered as 1, as the requests CSV shows it)
      offered.output_tokens += std::max<std::int64_t>(1, r.output_tokens);
    }
    offered.window_s = span;
    p.offered.push_back(offered);
    // Every request fits its model's context window, or is cut to it when
    // the model says so (counted); it is never simulated past it.
    const ModelConfig& mc = model_of(cfg, tc);
    const auto model_index = static_cast<std::size_t>(&mc - cfg.models.data());
    const std::int64_t ctx_window = p.models.of(p.tmpls[model_index])->context_window();
    // (Those past the window are not replayed: neither refused nor counted.)
    std::size_t truncated = 0;
    for (std::size_t i = 0; i < stream.requests.size(); ++i) {
      Request& r = stream.requests[i];
      if (r.input_tokens + r.output_tokens <= ctx_window || (window > 0 && r.arrival_s >= window)) continue;
      if (!mc.truncate_overflow) return over_window(cfg, tc, mc, i, r, ctx_window);
      r.output_tokens = std::min<std::int64_t>(r.output_tokens, ctx_window - 1);
      r.input_tokens = ctx_window - r.output_tokens;
      ++truncated;
    }
    if (truncated) {
      p.requests_truncated += truncated;
      note_once("slicesched: tenant '" + tc.name + "': " + std::to_string(truncated) + " request(s) cut to model '" +
                mc.name + "''s context window of " + std::to_string(ctx_window) + " tokens");
    }
    // Instances deal the one stream round-robin.
    const auto instances = static_cast<std::size_t>(instances_of(p.policy, tc));
    for (std::size_t k = 0; k < instances; ++k) {
      TenantSpec spec;
      spec.name = instances == 1 ? tc.name : tc.name + "#" + std::to_string(k);
      spec.priority = tc.priority;
      spec.online = tc.online;
      spec.requests.window_s = stream.window_s;
      for (std::size_t i = k; i < stream.requests.size(); i += instances) {
        Request r = stream.requests[i];
        if (window > 0 && r.arrival_s >= window) break;
        r.arrival_s /= opt.time_scale;
        spec.requests.requests.push_back(r);
      }
      spec.token_budget = tc.token_budget;
      spec.chunked_prefill = tc.chunked_prefill;
      spec.max_seqs = tc.max_seqs;
      spec.kv_budget_tokens = tc.kv_budget_tokens;
      spec.lanes = lanes_of(p.policy, tc);
      spec.prefill_lanes = prefill_lanes_of(p.policy, tc);
      if (tc.swap_preempted || spec.prefill_lanes > 0) {  // (the config checked that host_link is set)
        const LinkClassConfig& host = cfg.link_classes[static_cast<std::size_t>(cfg.host_link)];
        if (tc.swap_preempted) spec.preemption = TenantSpec::Preemption::kSwap;
        // Each GPU of a tensor-parallel group copies its own share of a
        // cache over its own host link: N links at once. Over a mixed
        // cluster, the smallest group's N (the tenant may run anywhere).
        const auto fewest =
            std::min_element(cfg.accelerators.begin(), cfg.accelerators.end(),
                             [](const AcceleratorConfig& a, const AcceleratorConfig& b) { return a.tp < b.tp; });
        spec.host_link_bytes_per_s = host.bandwidth_bytes_per_s * (fewest == cfg.accelerators.end() ? 1 : fewest->tp);
        spec.host_link_latency = static_cast<Nanos>(host.latency_s * 1e9);
      }
      p.tenants.emplace_back(static_cast<std::uint32_t>(p.tenants.size()), std::move(spec), p.tmpls[model_index],
                             p.models.shared(p.tmpls[model_index]));
      p.online.push_back(tc.online);
    }
  }
  return Status::Ok();
}

// An iteration's time as the policy's estimator predicts it on the first
// accelerator's type (the sum of its operators at these dims; no
// transfers): what a co-batch slowdown bound compares.
Tenant::IterationCost iteration_cost(const PolicyParts& p, TemplateId tmpl) {
  const GraphTemplate& t = p.templates->get(tmpl);
  const Model* model = p.models.of(tmpl);
  const Estimator* est = p.plugins.estimator.get();
  const AccelTypeId type = p.accels->type(0);
  return [&t, model, est, type](const IterationDims& d) {
    Binding b(t.dims().size());
    for (const auto& [name, value] : model->bind(d))
      if (const int id = t.dims().find(name); id >= 0) b.set(static_cast<DimId>(id), value);
    double seconds = 0;
    std::array<double, kMaxFeatures> x{};
    for (const TemplateOp& op : t.ops()) {
      for (std::size_t f = 0; f < op.features.size(); ++f) {
        auto v = op.features[f].eval(b, t.dims());
        x[f] = v.ok() ? static_cast<double>(v.value()) : 0;
      }
      seconds += est->predict_op(op.kind, type, std::span<const double>(x.data(), op.features.size()));
    }
    return seconds;
  };
}

// Cross-tenant batches (co_batch): hosts take riders from the rider
// tenants' queues; same model only, instance k to host k when dealt.
Status wire_co_batch(const ExperimentConfig& cfg, PolicyParts& p) {
  auto instances = [&](const std::string& name) {
    std::vector<Tenant*> out;
    for (Tenant& t : p.tenants)
      if (t.spec().name == name || t.spec().name.rfind(name + "#", 0) == 0) out.push_back(&t);
    return out;
  };
  const std::string who = cfg.path + ": policy '" + p.policy.name + "': co_batch.riders.";
  for (const PolicyConfig::CoBatch& c : p.policy.co_batch) {
    const std::vector<Tenant*> riders = instances(c.rider);
    std::vector<Tenant*> hosts;
    for (const std::string& h : c.hosts)
      for (Tenant* t : instances(h)) hosts.push_back(t);
    // One rider instance lends to every host, instance k of one per host to
    // host k, and every instance to a single host.
    if (riders.size() != 1 && riders.size() != hosts.size() && hosts.size() != 1)
      return InvalidArgument(who + c.rider + ": expected one instance of '" + c.rider + "', one per host (" +
                             std::to_string(hosts.size()) + ") or a single host, got " + std::to_string(riders.size()) +
                             " instances");
    for (std::size_t k = 0; k < std::max(hosts.size(), riders.size()); ++k) {
      Tenant* rider = riders.size() == 1 ? riders[0] : riders[k];
      Tenant* host = hosts.size() == 1 ? hosts[0] : hosts[k];
      if (rider->tmpl() != host->tmpl())
        return InvalidArgument(who + c.rider + ": host '" + host->spec().name + "' serves model '" +
                               p.templates->get(host->tmpl()).name() + "', '" + c.rider + "' model '" +
                               p.templates->get(rider->tmpl()).name() +
                               "' (a batch runs one model; models are told apart by name, so two [[models]] entries "
                               "alike are two models, each with its weights: give both tenants one)");
      host->add_rider_source(rider);
      host->set_keep_riders(p.policy.co_batch_keep_riders);
      if (p.policy.co_batch_slowdown >= 0)
        host->set_rider_bound(iteration_cost(p, host->tmpl()), p.policy.co_batch_slowdown);
    }
    const auto& only = p.policy.co_batch_rides_only;
    if (!p.policy.co_batch_own_iterations || std::find(only.begin(), only.end(), c.rider) != only.end())
      for (Tenant* r : riders) r->set_rides_only(true);
  }
  return Status::Ok();
}

// An accelerator type's datasheet scales the templates' priors, term by
// term (core/graph.cppm, PriorTerm): written for an H100, they would have
// every type predict alike until the estimator learns (a mixed cluster's
// first what-ifs then chose by the order its accelerators are listed in).
// A type without a datasheet ("cpu" in live configs) keeps them.
Status seed_type_priors(const ExperimentConfig& cfg, EstimatorSet& set, const TemplateRegistry& templates,
                        const AcceleratorSet& accels) {
  for (AccelTypeId t = 0; t < accels.type_count(); ++t) {
    const AcceleratorType* sheet = find_type(cfg.accelerator_types, accels.base_type_name(t));
    if (!sheet || !(sheet->peak_flops > 0) || !(sheet->hbm_bytes_per_s > 0)) continue;
    // A tensor-parallel group starts as tp GPUs' peaks (its all-reduces
    // are learned from what the backend reports).
    const double tp = accels.type_tp(t);
    const double compute = kPriorPeakFlops / (sheet->peak_flops * tp),
                 memory = kPriorBytesPerS / (sheet->hbm_bytes_per_s * tp);
    if (compute == 1.0 && memory == 1.0) continue;
    for (TemplateId m = 0; m < templates.size(); ++m)
      for (const TemplateOp& op : templates.get(m).ops()) {
        if (op.prior_terms.empty()) continue;
        std::vector<double> scaled(op.prior);
        for (std::size_t i = 0; i < scaled.size(); ++i)
          scaled[i] *= op.prior_terms[i] == PriorTerm::kCompute  ? compute
                       : op.prior_terms[i] == PriorTerm::kMemory ? memory
                                                                 : 1.0;
        if (Status s = set.set_op_prior_for_type(op.kind, t, scaled); !s.ok()) return s;
      }
  }
  return Status::Ok();
}

// The estimator predicts for the what-if and learns from the backend's
// feedback; the linear built-in starts from the template and link-class
// priors (and [estimators] prior), a model without a linear form from
// whatever it knows itself.
Status seed_estimator(const ExperimentConfig& cfg, const BuildOptions& opt, PolicyParts& p) {
  p.linear = p.plugins.estimator->linear();
  if (!p.linear) {
    std::fprintf(stderr,
                 "slicesched: policy '%s': estimator '%s' has no linear form: it starts without the priors from "
                 "the model, the link classes and [estimators] prior\n",
                 p.policy.name.c_str(), p.policy.estimator.name.c_str());
    return Status::Ok();
  }
  if (Status s = p.plugins.estimator->seed_linear([&](EstimatorSet& set) {
        if (Status s = seed_priors(set, *p.templates, *p.accels); !s.ok()) return s;
        if (Status s = seed_type_priors(cfg, set, *p.templates, *p.accels); !s.ok()) return s;
        return opt.prior ? apply_as_prior(*opt.prior, set, *p.templates, *p.accels) : Status::Ok();
      });
      !s.ok())
    return s;
  p.prior_applied = opt.prior != nullptr;
  return Status::Ok();
}

// The window's end and the faults, in time order, on the run's clock: a
// fault's at_s and duration_s are in the streams' seconds, so time_scale
// compresses them exactly as it compresses arrivals and the window (a fault
// at 1 s of a 4 s stream served at time_scale 4 comes at 0.25 s of run time).
EngineOptions engine_options(const ExperimentConfig& cfg, const BuildOptions& opt, const AcceleratorSet& accels) {
  EngineOptions e;
  const auto run_ns = [&](double stream_s) { return static_cast<Nanos>(stream_s / opt.time_scale * 1e9); };
  e.stop_at = cfg.duration_s > 0 ? run_ns(cfg.duration_s) : -1;
  for (const FaultConfig& f : cfg.faults) {  // (names were checked when the config was read)
    const auto a = static_cast<AccelId>(accels.find(f.accelerator));
    e.faults.push_back({run_ns(f.at_s), a, true});
    if (f.duration_s > 0) e.faults.push_back({run_ns(f.at_s + f.duration_s), a, false});
  }
  std::stable_sort(e.faults.begin(), e.faults.end(),
                   [](const FaultEvent& x, const FaultEvent& y) { return x.at < y.at; });
  return e;
}

}  // namespace

std::size_t PolicyParts::requests() const {
  std::size_t n = 0;
  for (const Tenant& t : tenants) n += t.records().size();
  return n;
}

Result<PolicyPlugins> build_plugins(const ExperimentConfig& cfg, const PolicyConfig& policy,
                                    const PluginRegistries& plugins, const AcceleratorSet& accels) {
  return guarded([&]() -> Result<PolicyPlugins> {
    const std::string who = "policy '" + policy.name + "': ";
    PolicyPlugins p;
    std::vector<PluginPtr<PartitionSet>> sets;
    // Every plugin behind a guard: whatever it throws names it, and its
    // calls and their time are counted (PluginRecord).
    auto guarded_plugin = [&](const auto& registry, const PluginChoice& c, auto ptr) {
      auto use = std::make_shared<PluginUse>();
      p.records.push_back(
          {registry.kind(), c.name, c.args, plugin_library_path(ptr.get_deleter().library), use, std::nullopt});
      return guard(std::move(ptr), registry.kind() + " '" + c.name + "'", std::move(use));
    };
    for (const auto& choice : policy.partition_sets) {
      auto args = tenant_ids(cfg, policy, choice.args);
      if (!args.ok()) return args.status();
      auto made = plugins.partition.create(choice.name, std::move(args).value());
      if (!made.ok()) return named(made.status(), who);
      sets.push_back(guarded_plugin(plugins.partition, choice, std::move(made).value()));
    }
    p.partitions = std::make_unique<UnionPartitionSet>(std::move(sets));
    if (Status s = bind_named([&] { return p.partitions->bind(accels); }, who); !s.ok()) return s;
    if (policy.stages.empty()) {
      auto made = plugins.placement.create(policy.placement.name, policy.placement.args);
      if (!made.ok()) return named(made.status(), who);
      p.placement = guarded_plugin(plugins.placement, policy.placement, std::move(made).value());
    } else {
      // A list of stages, each its own guarded plugin, acting as one policy.
      std::vector<plugins::FilterStage> filters;
      std::vector<plugins::ScoreStage> scores;
      for (const StageChoice& st : policy.stages) {
        const PluginChoice& c = st.plugin;
        if (st.kind == StageChoice::Kind::kFilter) {
          auto made = plugins.filter.create(c.name, c.args);
          if (!made.ok()) return named(made.status(), who);
          filters.push_back({guarded_plugin(plugins.filter, c, std::move(made).value()), c.name});
        } else {
          auto made = plugins.score.create(c.name, c.args);
          if (!made.ok()) return named(made.status(), who);
          scores.push_back({guarded_plugin(plugins.score, c, std::move(made).value()), c.name, st.weight});
          p.records.back().weight = st.weight;
        }
      }
      p.placement = PluginPtr<PlacementPolicy>(new plugins::StagedPlacement(std::move(filters), std::move(scores)),
                                               PluginDeleter{});
    }
    auto arbiter = plugins.arbiter.create(policy.arbiter.name, policy.arbiter.args);
    if (!arbiter.ok()) return named(arbiter.status(), who);
    p.arbiter = guarded_plugin(plugins.arbiter, policy.arbiter, std::move(arbiter).value());
    auto estimator = plugins.estimator.create(policy.estimator.name, policy.estimator.args);
    if (!estimator.ok()) return named(estimator.status(), who);
    p.estimator = guarded_plugin(plugins.estimator, policy.estimator, std::move(estimator).value());
    return p;
  });
}

Status check_traces_fit(const ExperimentConfig& cfg) {
  const double window = cfg.duration_s > 0 ? cfg.duration_s : -1;
  for (const TenantConfig& tc : cfg.tenants) {
    const ModelConfig& mc = model_of(cfg, tc);
    if (tc.stream.kind != StreamConfig::Kind::kTrace || mc.truncate_overflow) continue;
    const auto place = static_cast<std::uint64_t>(&tc - cfg.tenants.data());
    auto stream = make_stream(tc, cfg.seed + place, window);
    if (!stream.ok()) return stream.status();
    auto model = make_model(mc);
    if (!model.ok()) return model.status();
    const std::int64_t ctx_window = model.value()->context_window();
    for (std::size_t i = 0; i < stream.value().requests.size(); ++i) {
      const Request& r = stream.value().requests[i];
      if (r.input_tokens + r.output_tokens > ctx_window) return over_window(cfg, tc, mc, i, r, ctx_window);
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<PolicyParts>> build_policy(const ExperimentConfig& cfg, const PolicyConfig& policy,
                                                  const PluginRegistries& plugins, const BuildOptions& opt) {
  return guarded([&]() -> Result<std::unique_ptr<PolicyParts>> {
    if (Status s = check_weights_fit(cfg); !s.ok()) return s;
    auto p = std::make_unique<PolicyParts>();
    p->policy = policy;
    auto accels = make_cluster(cfg);
    if (!accels.ok()) return accels.status();
    p->accels = std::move(accels).value();
    p->templates = std::make_shared<TemplateRegistry>();
    for (const ModelConfig& mc : cfg.models) {
      auto model = build_model(mc);
      if (!model.ok()) return model.status();
      auto id = p->templates->add(model.value()->make_template());
      if (!id.ok()) return id.status();
      p->tmpls.push_back(id.value());
      p->models.add(id.value(), std::move(model).value());
    }
    p->tmpl = p->tmpls.front();
    p->gmg = std::make_unique<Gmg>(p->templates, p->accels);
    // Each accelerator holds the weights of the models resident on it; the
    // GMG refuses to issue an operator where its model's weights are absent.
    const auto held = residency(cfg);
    for (AccelId a = 0; a < p->accels->size(); ++a)
      for (std::size_t m : held[a])
        if (Status s = p->gmg->place_weights(p->tmpls[m], a); !s.ok()) return s;
    // A spread model: each accelerator holds its share's operators only.
    for (std::size_t m = 0; m < cfg.models.size(); ++m) {
      const auto at = spread_holders(cfg, cfg.models[m]);
      const auto& ops = p->templates->get(p->tmpls[m]).ops();
      for (std::size_t i = 0; i < at.size(); ++i)
        if (Status s = p->gmg->place_weights(p->tmpls[m], ops[i].name, static_cast<AccelId>(at[i])); !s.ok()) return s;
    }
    auto made = build_plugins(cfg, policy, plugins, *p->accels);
    if (!made.ok()) return made.status();
    p->plugins = std::move(made).value();
    if (Status s = seed_estimator(cfg, opt, *p); !s.ok()) return s;
    if (Status s = build_tenants(cfg, opt, *p); !s.ok()) return s;
    if (Status s = wire_co_batch(cfg, *p); !s.ok()) return s;

    SchedulerOptions sopt;
    sopt.issued_budget = policy.issued_budget;
    sopt.batch_cap = policy.batch_cap;
    sopt.parallel = opt.parallel;
    sopt.prune = !opt.explain;
    if (opt.explain && opt.explain_s >= 0) sopt.prune_after = static_cast<Nanos>(opt.explain_s * 1e9);
    sopt.scoped = policy.scoped_what_if;
    sopt.horizon = policy.horizon_s < 0 ? -1 : static_cast<Nanos>(policy.horizon_s * 1e9);
    // The what-if workers' arbiters count into the backend arbiter's record.
    std::shared_ptr<PluginUse> arbiter_use;
    for (const PluginRecord& r : p->plugins.records)
      if (r.kind == plugins.arbiter.kind()) arbiter_use = r.use;
    sopt.arbiter = [&plugins, &choice = p->policy.arbiter, arbiter_use]() -> Result<PluginPtr<TransferArbiter>> {
      auto made = plugins.arbiter.create(choice.name, choice.args);
      if (!made.ok()) return made.status();
      return guard(std::move(made).value(), plugins.arbiter.kind() + " '" + choice.name + "'", arbiter_use);
    };
    // What the policy may read besides the GMG: the estimator, to price work.
    if (Status s = bind_named(
            [&] { return p->plugins.placement->bind(PolicyContext{.estimator = p->plugins.estimator.get()}); },
            "policy '" + policy.name + "': ", "placement '" + placement_label(policy) + "': ");
        !s.ok())
      return s;
    p->scheduler =
        std::make_unique<Scheduler>(*p->plugins.placement, *p->plugins.partitions, *p->plugins.estimator, sopt);
    p->engine = engine_options(cfg, opt, *p->accels);
    return p;
  });
}

std::string placement_label(const PolicyConfig& policy) {
  return policy.stages.empty() ? policy.placement.name : std::string("stages");
}

Result<const PolicyConfig*> find_policy(const ExperimentConfig& cfg, const std::optional<std::string>& name,
                                        bool first_by_default) {
  std::string names;
  for (const auto& p : cfg.policies) names += (names.empty() ? "" : ", ") + p.name;
  if (name) {
    for (const auto& p : cfg.policies)
      if (p.name == *name) return &p;
    return NotFound("no policy named '" + *name + "' in " + cfg.path + " (policies: " + names + ")");
  }
  if (cfg.policies.empty()) return NotFound(cfg.path + " has no policies");
  if (first_by_default || cfg.policies.size() == 1) return &cfg.policies.front();
  return InvalidArgument(cfg.path + " has " + std::to_string(cfg.policies.size()) +
                         " policies; pick one with --policy (" + names + ")");
}

Result<CalibrationProfile> read_profile(const ExperimentConfig& cfg, const std::string& key, const std::string& path) {
  auto profile = read_calibration(path);
  if (!profile.ok()) return Status(profile.status().code(), cfg.path + ": " + key + ": " + profile.status().message());
  TemplateRegistry templates;
  for (const ModelConfig& mc : cfg.models) {
    auto model = make_model(mc);
    if (!model.ok()) return model.status();
    if (auto added = templates.add(model.value()->make_template()); !added.ok()) return added.status();
    // Fits are found by the model's name: another model of that name would
    // play them at the measured one's speed.
    const CalibrationProfile& p = profile.value();
    if (!p.models.empty() && !p.find_model(mc.name) &&
        std::any_of(p.ops.begin(), p.ops.end(), [&](const CalibrationProfile::Op& o) { return o.tmpl == mc.name; }))
      return FailedPrecondition(cfg.path + ": " + key + ": " + path + ": has fits for model '" + mc.name +
                                "' but no shape for it in models (the shapes it gives: " +
                                std::to_string(p.models.size()) + "); measure it again");
    if (const auto* measured = p.find_model(mc.name))
      if (const std::string ours = shape_text(*model.value()); measured->shape != ours)
        return FailedPrecondition(cfg.path + ": " + key + ": " + path + ": model '" + mc.name + "' was measured as " +
                                  measured->shape + "; the config's is " + ours +
                                  " (measure it again, or give the model another name)");
  }
  if (Status s = check_features(profile.value(), templates); !s.ok())
    return Status(s.code(), cfg.path + ": " + key + ": " + path + ": " + s.message());
  return std::move(profile).value();
}

Result<std::optional<CalibrationProfile>> read_prior(const ExperimentConfig& cfg) {
  if (cfg.estimator_prior.empty()) return std::optional<CalibrationProfile>();
  auto profile = read_profile(cfg, "estimators.prior", cfg.estimator_prior);
  if (!profile.ok()) return profile.status();
  return std::optional<CalibrationProfile>(std::move(profile).value());
}

Status load_plugins(const ExperimentConfig& cfg, PluginRegistries& into) {
  if (Status s = plugins::register_builtins(into); !s.ok()) return s;
  for (std::size_t i = 0; i < cfg.plugin_paths.size(); ++i)
    if (Status s = load_plugin_library(cfg.plugin_paths[i], into); !s.ok())
      return Status(s.code(), cfg.path + ": plugins.paths[" + std::to_string(i) + "]: " + s.message());
  return Status::Ok();
}

}  // namespace slicesched
