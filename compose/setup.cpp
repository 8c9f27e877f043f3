module;
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

module slicesched.compose.setup;
import slicesched.core.ids;
import slicesched.core.graph;

namespace slicesched {

void note_once(const std::string& line) {
  static std::mutex mu;
  static std::set<std::string> printed;
  std::lock_guard lock(mu);
  if (printed.insert(line).second) std::fprintf(stderr, "%s\n", line.c_str());
}

Result<Trace> make_stream(const TenantConfig& t, std::uint64_t seed, double window_s) {
  const StreamConfig& s = t.stream;
  switch (s.kind) {
    case StreamConfig::Kind::kTrace: {
      auto trace = read_trace(s.path, s.trace);
      if (!trace.ok()) return Status(trace.status().code(), "tenant '" + t.name + "': " + trace.status().message());
      if (trace->skipped_lines > 0)
        note_once("slicesched: tenant '" + t.name + "': skipped " + std::to_string(trace->skipped_lines) +
                  " corrupt line(s) of " + s.path + " (first: " + trace->first_skipped + ")");
      return std::move(trace).value();
    }
    case StreamConfig::Kind::kConstant:
      return constant_rate(s.rate_per_s, s.duration_s, s.input_tokens, s.output_tokens, window_s);
    case StreamConfig::Kind::kPoisson:
      return poisson(s.rate_per_s, s.duration_s, s.input_tokens, s.output_tokens, seed, window_s);
  }
  return Trace{};
}

Result<std::shared_ptr<AcceleratorSet>> make_cluster(const ExperimentConfig& cfg) {
  auto set = std::make_shared<AcceleratorSet>();
  for (const auto& l : cfg.link_classes)
    if (auto added = set->add_link_class(l.name, l.bandwidth_bytes_per_s, l.latency_s); !added.ok())
      return added.status();
  for (const auto& a : cfg.accelerators)
    if (auto added = set->add(a.name, a.type, a.hbm_bytes, a.tp); !added.ok()) return added.status();
  for (const auto& l : cfg.links) {
    const auto cls = static_cast<LinkClassId>(std::max(0, find_link_class(cfg, l.link_class)));
    if (Status s = set->link(static_cast<AccelId>(set->find(l.a)), static_cast<AccelId>(set->find(l.b)), cls); !s.ok())
      return s;
  }
  return set;
}

Result<std::shared_ptr<const DenseDecoder>> build_model(const ModelConfig& m) { return make_model(m); }

Status check_weights_fit(const ExperimentConfig& cfg) {
  std::vector<std::shared_ptr<const DenseDecoder>> models;
  for (const auto& m : cfg.models) {
    auto model = build_model(m);
    if (!model.ok()) return model.status();
    models.push_back(std::move(model).value());
  }
  std::vector<std::int64_t> weights;
  for (const auto& m : models) weights.push_back(m->weight_bytes());
  const auto held = residency(cfg);
  // The shares of spread models, per accelerator.
  std::vector<std::int64_t> shares(cfg.accelerators.size(), 0);
  std::vector<std::string> share_of(cfg.accelerators.size());
  for (std::size_t k = 0; k < cfg.models.size(); ++k) {
    const ModelConfig& m = cfg.models[k];
    const auto at = spread_holders(cfg, m);
    if (at.empty()) continue;
    const GraphTemplate t = models[k]->make_template();
    for (std::size_t i = 0; i < at.size(); ++i) {
      shares[at[i]] += t.ops()[i].weight_bytes;
      if (share_of[at[i]].find("'" + m.name + "'") == std::string::npos)
        share_of[at[i]] += (share_of[at[i]].empty() ? "'" : ", '") + m.name + "' (its share)";
    }
  }
  for (std::size_t i = 0; i < cfg.accelerators.size(); ++i) {
    const auto& a = cfg.accelerators[i];
    std::int64_t need = shares[i];
    std::string who = share_of[i];
    for (std::size_t m : held[i]) {
      need += weights[m];
      who += (who.empty() ? "'" : ", '") + cfg.models[m].name + "'";
    }
    if (need == 0) continue;
    if (a.hbm_bytes <= need) {
      auto size = [](std::int64_t b) {
        char s[32];
        if (b >= (1ll << 30))
          std::snprintf(s, sizeof s, "%.2f GiB", static_cast<double>(b) / 1073741824.0);
        else
          std::snprintf(s, sizeof s, "%.2f MiB", static_cast<double>(b) / 1048576.0);
        return std::string(s);
      };
      // Two sizes that round alike are given in bytes too.
      const bool alike = size(a.hbm_bytes) == size(need);
      auto shown = [&](std::int64_t b) { return size(b) + (alike ? " (" + std::to_string(b) + " bytes)" : ""); };
      return InvalidArgument(
          cfg.path + ": cluster: accelerator '" + a.name + "' has " + shown(a.hbm_bytes) + " of HBM" +
          (a.tp > 1 ? " (its group of " + std::to_string(a.tp) + " GPUs, less what each rank holds a copy of)" : "") +
          "; " +
          (held[i].size() == 1 && shares[i] == 0 ? cfg.models[held[i][0]].name + "'s weights alone need "
                                                 : "the weights of " + who + " need ") +
          shown(need));
    }
  }
  return Status::Ok();
}

Result<const TenantConfig*> tenant_config(const ExperimentConfig& cfg, const std::string& name) {
  auto it = std::find_if(cfg.tenants.begin(), cfg.tenants.end(), [&](const TenantConfig& t) { return t.name == name; });
  if (it == cfg.tenants.end()) return NotFound(cfg.path + ": no tenant named '" + name + "'");
  return &*it;
}

Result<PluginArgs> tenant_ids(const ExperimentConfig& cfg, const PolicyConfig& p, PluginArgs args) {
  if (!args.is_object() || !args.contains("tenants") || !args["tenants"].is_object()) return args;
  PluginArgs ids = PluginArgs::object();
  for (auto it_ = args["tenants"].begin(); it_ != args["tenants"].end(); ++it_) {
    const std::string name = it_.key();
    const auto& groups = it_.value();
    auto it = std::find(p.tenants.begin(), p.tenants.end(), name);
    if (it == p.tenants.end())
      return InvalidArgument("policy '" + p.name + "': partition set pins tenant '" + name +
                             "', which the policy does not run");
    // Tenant ids count instances: the policy's tenants in order, each
    // taking as many ids as it has instances.
    std::size_t first = 0;
    for (auto t = p.tenants.begin(); t != it + 1; ++t) {
      auto tc = tenant_config(cfg, *t);
      if (!tc.ok()) return tc.status();
      if (t != it) first += static_cast<std::size_t>(instances_of(p, **tc));
    }
    const auto instances = static_cast<std::size_t>(instances_of(p, *tenant_config(cfg, name).value()));
    // A list of lists pins instance by instance; a flat list every instance alike.
    const bool per_instance = groups.is_array() && !groups.empty() && groups[0].is_array();
    if (per_instance && groups.size() != instances)
      return InvalidArgument("policy '" + p.name + "': partition set pins tenant '" + name +
                             "' instance by instance: expected " + std::to_string(instances) +
                             " list(s) of groups (its instances), got " + std::to_string(groups.size()));
    for (std::size_t i = 0; i < instances; ++i) ids[std::to_string(first + i)] = per_instance ? groups[i] : groups;
  }
  args["tenants"] = ids;
  return args;
}

}  // namespace slicesched
