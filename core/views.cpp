module;
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

module slicesched.core.views;

namespace slicesched {

std::vector<RetainedState> retained_states(const Gmg& gmg) {
  std::vector<RetainedState> out;
  for (OpId id = 0; id < gmg.slot_count(); ++id) {
    if (!gmg.contains(id)) continue;
    const OpRecord& r = gmg.op(id);
    // Issued: reserved where it runs; done: held until taken over or released.
    if (r.retained_bytes <= 0 || r.accel == kNoAccel || r.state == OpState::kUnscheduled) continue;
    if (r.state == OpState::kDone && !r.retained_held) continue;
    out.push_back({r.tenant, r.instance, id, r.accel, r.retained_bytes, r.retained_attached});
  }
  return out;
}

std::vector<RetainedTotal> retained_by_tenant(const Gmg& gmg) {
  std::map<std::pair<std::uint32_t, AccelId>, RetainedTotal> sums;
  for (const RetainedState& s : retained_states(gmg)) {
    RetainedTotal& t = sums[{s.tenant, s.accel}];
    t.tenant = s.tenant;
    t.accel = s.accel;
    t.bytes += s.bytes;
    ++t.states;
  }
  std::vector<RetainedTotal> out;
  out.reserve(sums.size());
  for (const auto& [key, t] : sums) out.push_back(t);
  return out;
}

AccelId retained_home(const Gmg& gmg, std::uint32_t tenant) {
  AccelId home = kNoAccel;
  std::int64_t most = 0;
  for (const RetainedTotal& t : retained_by_tenant(gmg))
    if (t.tenant == tenant && t.bytes > most) home = t.accel, most = t.bytes;
  return home;
}

Result<double> price_op(const Estimator& est, const Gmg& gmg, OpId op, AccelId accel) {
  if (!gmg.contains(op)) return InvalidArgument("price_op: operator " + std::to_string(op) + " is not live");
  if (!gmg.accels().contains(accel))
    return InvalidArgument("price_op: accelerator " + std::to_string(accel) + " is not in the cluster (it has " +
                           std::to_string(gmg.accels().size()) + ")");
  return est.predict_op(gmg.op(op).kind, gmg.accels().type(accel), gmg.features(op));
}

Result<double> price_template_op(const Estimator& est, const Gmg& gmg, TemplateId tmpl, std::string_view op_name,
                                 std::span<const DimValue> dims, AccelId accel) {
  const GraphTemplate& t = gmg.templates().get(tmpl);
  const std::string who = "price_template_op: template '" + t.name() + "'";
  const int index = t.find_op(op_name);
  if (index < 0) return InvalidArgument(who + " has no operator '" + std::string(op_name) + "'");
  if (!gmg.accels().contains(accel))
    return InvalidArgument(who + ": accelerator " + std::to_string(accel) + " is not in the cluster (it has " +
                           std::to_string(gmg.accels().size()) + ")");
  Binding binding(t.dims().size());
  for (const DimValue& d : dims) {
    const int id = t.dims().find(d.name);
    if (id < 0) return InvalidArgument(who + " has no dim '" + std::string(d.name) + "'");
    binding.set(static_cast<DimId>(id), d.value);
  }
  const TemplateOp& op = t.ops()[static_cast<std::size_t>(index)];
  std::array<double, kMaxFeatures> features{};
  for (std::size_t i = 0; i < op.features.size(); ++i) {
    auto v = op.features[i].eval(binding, t.dims());
    if (!v.ok()) return InvalidArgument(who + ", operator '" + op.name + "': " + v.status().message());
    features[i] = static_cast<double>(v.value());
  }
  return est.predict_op(op.kind, gmg.accels().type(accel),
                        std::span<const double>(features.data(), op.features.size()));
}

}  // namespace slicesched
