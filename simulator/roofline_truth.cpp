module;
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

module slicesched.simulator.roofline_truth;
import slicesched.core.graph;

namespace slicesched {

bool plays_profile(const TypedTruthOptions& opt, std::string_view type) {
  return opt.layers && (opt.layers_type.empty() || same_type(opt.types, opt.layers_type, type));
}

const LayerProfile* played_profile(const TypedTruthOptions& opt, std::string_view type, int tp) {
  if (!plays_profile(opt, type)) return nullptr;
  if (tp == 1) return &*opt.layers;
  for (const auto& [n, profile] : opt.layers_tp)
    if (n == tp) return &profile;
  return nullptr;
}

const RooflineFit& fit_for(const TypedTruthOptions& opt, std::string_view type) {
  for (const auto& [name, fit] : opt.type_fits)
    if (same_type(opt.types, name, type)) return fit;
  return opt.fit;
}

double roofline_op_seconds(const AcceleratorType& t, const RooflineFit& f, const Model& model, std::size_t op,
                           const IterationDims& d) {
  const auto calls = model.kernels(op, d);
  return calls_seconds(t, f, model.shape(), calls);
}

double roofline_iteration_seconds(const AcceleratorType& t, const RooflineFit& f, const Model& model,
                                  const IterationDims& d) {
  double sum = 0;
  for (std::size_t op = 0; op < model.ops().size(); ++op) sum += roofline_op_seconds(t, f, model, op, d);
  return sum;
}

double ring_all_reduce_seconds(const LinkClass& link, int tp, double bytes) {
  if (tp < 2) return 0;
  const double steps = 2.0 * (tp - 1);
  return steps * (link.latency_s + bytes / tp / link.bandwidth_bytes_per_s);
}

double tp_collectives_seconds(const DenseShape& full, std::span<const SublayerCall> calls,
                              const std::function<double(double)>& all_reduce) {
  double s = 0;
  for (const SublayerCall& c : calls) {
    const double row_bytes = static_cast<double>(full.elem_bytes) *
                             static_cast<double>(c.layer == Sublayer::kLmHead ? full.vocab : full.hidden);
    switch (c.layer) {
      case Sublayer::kEmbedding:
      case Sublayer::kOProj:
      case Sublayer::kDownProj:
      case Sublayer::kLmHead:
        if (c.rows > 0) s += c.count * all_reduce(c.rows * row_bytes);
        break;
      default:
        break;
    }
  }
  return s;
}

TypedGroundTruth::TypedGroundTruth(TypedTruthOptions opt, const AcceleratorSet& accels, std::uint64_t seed,
                                   double op_cv, double transfer_cv)
    : opt_(std::move(opt)),
      accels_(accels),
      op_noise_(seed, op_cv),
      transfer_noise_(seed ^ 0x9e3779b97f4a7c15ull, transfer_cv) {
  for (std::size_t t = 0; t < accels_.type_count(); ++t) {
    const auto id = static_cast<AccelTypeId>(t);
    const std::string& name = accels_.base_type_name(id);
    const int tp = accels_.type_tp(id);
    measured_.push_back(played_profile(opt_, name, tp));
    by_type_.push_back(measured_.back() ? nullptr : find_type(opt_.types, name));
    sheets_.push_back(find_type(opt_.types, name));
    fits_.push_back(&fit_for(opt_, name));
    const TransferProfile* ar = nullptr;
    for (const auto& [n, profile] : opt_.all_reduce)
      if (n == tp) ar = &profile;
    all_reduce_.push_back(ar);
  }
}

double TypedGroundTruth::all_reduce_seconds(AccelId a, double bytes) const {
  const AccelTypeId type = accels_.type(a);
  // The group's own tp_link first (config/config.cppm, AcceleratorConfig).
  const int link = a < opt_.tp_links.size() ? opt_.tp_links[a] : -1;
  if (link < 0)
    if (const TransferProfile* p = all_reduce_[type]) return p->seconds(static_cast<std::int64_t>(std::ceil(bytes)));
  return ring_all_reduce_seconds(accels_.link(static_cast<LinkClassId>(link < 0 ? 0 : link)), accels_.type_tp(type),
                                 bytes);
}

Status TypedGroundTruth::check() const {
  for (std::size_t t = 0; t < by_type_.size(); ++t) {
    const auto id = static_cast<AccelTypeId>(t);
    const std::string& name = accels_.type_name(id);
    if (!measured_[t] && !by_type_[t])
      return NotFound("ground truth: accelerator type '" + name + "' has neither a measured profile nor a datasheet");
  }
  return Status::Ok();
}

Result<double> TypedGroundTruth::op_seconds(const Gmg& gmg, OpId op) {
  const OpRecord& r = gmg.op(op);
  const AccelTypeId type = accels_.type(r.accel);
  const AcceleratorType* sheet = type < by_type_.size() ? by_type_[type] : nullptr;
  const Model* m = models_.of(r.tmpl);
  // A model the profile did not measure plays the roofline here too.
  if (!sheet && m &&
      std::find(opt_.off_profile_models.begin(), opt_.off_profile_models.end(), m->name()) !=
          opt_.off_profile_models.end()) {
    sheet = type < sheets_.size() ? sheets_[type] : nullptr;
    if (!sheet)
      return NotFound("ground truth for " + gmg.op_name(op) + ": model '" + m->name() +
                      "' is not the measured profile's and type " + accels_.type_name(type) +
                      " has no datasheet for the roofline");
  }
  const int tp = accels_.type_tp(type);
  const GraphTemplate& t = gmg.templates().get(r.tmpl);
  if (!sheet) {
    const LayerProfile* layers = type < measured_.size() ? measured_[type] : nullptr;
    if (!layers)
      return NotFound("ground truth for " + gmg.op_name(op) + ": no datasheet for type " + accels_.type_name(type));
    auto s = ProfileGroundTruth::measured_seconds(*layers, models_, gmg, op);
    if (!s.ok()) return s.status();
    if (tp == 1 || !m) return op_noise_.sample(s.value());
    // A rank's measured kernels, then the group's all-reduces (the
    // profile times one rank alone; none overlaps, as vLLM runs them).
    const auto calls = m->kernels(r.tmpl_op, m->dims_of(t, gmg.dims(op)));
    const double collectives =
        tp_collectives_seconds(m->shape(), calls, [&](double bytes) { return all_reduce_seconds(r.accel, bytes); });
    return op_noise_.sample(s.value() + collectives);
  }
  if (!m)
    return NotFound("ground truth for " + gmg.op_name(op) + ": the roofline needs the model behind template '" +
                    t.name() + "' (set_models)");
  const auto calls = m->kernels(r.tmpl_op, m->dims_of(t, gmg.dims(op)));
  if (calls.empty()) return InvalidArgument("ground truth for " + gmg.op_name(op) + ": its model gives no kernels");
  if (tp == 1) return op_noise_.sample(calls_seconds(*sheet, *fits_[type], m->shape(), calls));
  // A tensor-parallel group: every rank runs its share at once, then the
  // ranks all-reduce (no overlap, as vLLM runs them).
  const double compute = calls_seconds(*sheet, *fits_[type], tp_rank_shape(m->shape(), tp), calls);
  const double collectives =
      tp_collectives_seconds(m->shape(), calls, [&](double bytes) { return all_reduce_seconds(r.accel, bytes); });
  return op_noise_.sample(compute + collectives);
}

double TypedGroundTruth::transfer_seconds(AccelId from, AccelId to, std::int64_t bytes) {
  if (opt_.transfers) return transfer_noise_.sample(opt_.transfers->seconds(bytes));
  const LinkClass& link = accels_.link(accels_.link_class(from, to));
  return transfer_noise_.sample(link.latency_s + static_cast<double>(bytes) / link.bandwidth_bytes_per_s);
}

}  // namespace slicesched
