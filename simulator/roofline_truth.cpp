module;
#include <cstdint>
#include <string>
#include <utility>

module slicesched.simulator.roofline;

namespace slicesched {

TypedGroundTruth::TypedGroundTruth(TypedTruthOptions opt, const AcceleratorSet& accels, std::uint64_t seed,
                                   double op_cv, double transfer_cv)
    : opt_(std::move(opt)),
      accels_(accels),
      op_noise_(seed, op_cv),
      transfer_noise_(seed ^ 0x9e3779b97f4a7c15ull, transfer_cv) {
  for (std::size_t t = 0; t < accels_.type_count(); ++t) {
    const std::string& name = accels_.type_name(static_cast<AccelTypeId>(t));
    const bool measured = opt_.layers && (opt_.layers_type.empty() || opt_.layers_type == name);
    by_type_.push_back(measured ? nullptr : find_type(opt_.types, name));
  }
}

Status TypedGroundTruth::check() const {
  for (std::size_t t = 0; t < by_type_.size(); ++t) {
    const std::string& name = accels_.type_name(static_cast<AccelTypeId>(t));
    const bool measured = opt_.layers && (opt_.layers_type.empty() || opt_.layers_type == name);
    if (!measured && !by_type_[t])
      return NotFound("ground truth: accelerator type '" + name + "' has neither a measured profile nor a datasheet");
  }
  return Status::Ok();
}

Result<double> TypedGroundTruth::op_seconds(const Gmg& gmg, OpId op) {
  const OpRecord& r = gmg.op(op);
  const GraphTemplate& t = gmg.templates().get(r.tmpl);
  auto dims = gmg.dims(op);
  const int tokens = t.dims().find("tokens"), context = t.dims().find("context");
  const int sequences = t.dims().find("sequences");
  if (tokens < 0) return InvalidArgument("ground truth: template '" + t.name() + "' has no dim 'tokens'");
  const std::int64_t ctx = context < 0 ? 0 : dims[context];
  const std::int64_t seqs = sequences < 0 ? 1 : dims[sequences];
  const std::string& name = t.ops()[r.tmpl_op].name;
  const AccelTypeId type = accels_.type(r.accel);
  const AcceleratorType* sheet = type < by_type_.size() ? by_type_[type] : nullptr;
  if (!sheet) {
    if (!opt_.layers)
      return NotFound("ground truth for " + gmg.op_name(op) + ": no datasheet for type " + accels_.type_name(type));
    // As ProfileGroundTruth: the head at the sampled positions.
    const std::int64_t positions = name == "head" && sequences >= 0 ? seqs : dims[tokens];
    auto s = opt_.layers->op_seconds(name, positions, ctx);
    if (!s.ok()) return InvalidArgument("ground truth for " + gmg.op_name(op) + ": " + s.status().message());
    return op_noise_.sample(s.value());
  }
  if (const Model* m = models_.of(r.tmpl)) {
    const auto calls = m->kernels(r.tmpl_op, m->dims_of(t, dims));
    if (calls.empty()) return InvalidArgument("ground truth for " + gmg.op_name(op) + ": no kernels for " + name);
    return op_noise_.sample(calls_seconds(*sheet, opt_.fit, m->shape(), calls));
  }
  const auto calls = llama_op_calls(name, static_cast<double>(dims[tokens]), static_cast<double>(seqs),
                                    static_cast<double>(ctx), opt_.layers_per_group);
  if (calls.empty()) return InvalidArgument("ground truth for " + gmg.op_name(op) + ": unknown operator " + name);
  return op_noise_.sample(calls_seconds(*sheet, opt_.fit, opt_.shape, calls));
}

double TypedGroundTruth::transfer_seconds(AccelId from, AccelId to, std::int64_t bytes) {
  if (opt_.transfers) return transfer_noise_.sample(opt_.transfers->seconds(bytes));
  const LinkClass& link = accels_.link(accels_.link_class(from, to));
  return transfer_noise_.sample(link.latency_s + static_cast<double>(bytes) / link.bandwidth_bytes_per_s);
}

}  // namespace slicesched
