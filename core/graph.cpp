module;
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

module slicesched.core.graph;

namespace slicesched {

std::int64_t dtype_bytes(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kI64:
      return 8;
    case DType::kI32:
      return 4;
    case DType::kI8:
      return 1;
  }
  return 1;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI64:
      return "i64";
    case DType::kI32:
      return "i32";
    case DType::kI8:
      return "i8";
  }
  return "?";
}

int GraphTemplate::find_op(std::string_view name) const {
  for (std::size_t i = 0; i < ops_.size(); ++i)
    if (ops_[i].name == name) return static_cast<int>(i);
  return -1;
}

int GraphTemplate::find_port(std::string_view name) const {
  for (std::size_t i = 0; i < ports_.size(); ++i)
    if (ports_[i].name == name) return static_cast<int>(i);
  return -1;
}

TemplateBuilder::TemplateBuilder(std::string name) { t_.name_ = std::move(name); }

Expr TemplateBuilder::dim(std::string_view name) { return Expr::dim(t_.dims_.intern(name)); }

Result<Expr> TemplateBuilder::expr(std::string_view text) { return Expr::parse(text, t_.dims_); }

TemplateBuilder& TemplateBuilder::port(std::string name, TensorSpec tensor, bool optional) {
  t_.ports_.push_back({std::move(name), std::move(tensor), optional});
  return *this;
}

TemplateBuilder::OpBuilder TemplateBuilder::op(std::string name) {
  ops_.push_back(std::make_unique<TemplateOp>());
  ops_.back()->name = std::move(name);
  return OpBuilder(ops_.back().get());
}

using OB = TemplateBuilder::OpBuilder;
OB& OB::input(std::string from) {
  op_->inputs.push_back({std::move(from), std::nullopt});
  return *this;
}
OB& OB::input(std::string from, TensorSpec expect) {
  op_->inputs.push_back({std::move(from), std::move(expect)});
  return *this;
}
OB& OB::output(TensorSpec t) {
  op_->output = std::move(t);
  return *this;
}
OB& OB::workspace(Expr bytes) {
  op_->workspace_bytes = std::move(bytes);
  return *this;
}
OB& OB::retain(std::string name, TensorSpec t) {
  op_->retained = RetainedSpec{std::move(name), std::move(t)};
  return *this;
}
OB& OB::features(std::vector<Expr> f) {
  op_->features = std::move(f);
  return *this;
}
OB& OB::prior(std::vector<double> p, std::vector<PriorTerm> terms) {
  op_->prior = std::move(p);
  op_->prior_terms = std::move(terms);
  return *this;
}
OB& OB::weights(std::int64_t bytes) {
  op_->weight_bytes = bytes;
  return *this;
}

Result<GraphTemplate> TemplateBuilder::build() && {
  const std::string where = "template '" + t_.name_ + "'";
  auto op_error = [&](const TemplateOp& op, const std::string& what) {
    return InvalidArgument(where + " op '" + op.name + "': " + what);
  };
  if (ops_.empty()) return InvalidArgument(where + ": has no operators");

  // Names: ops and ports share one namespace, since inputs name either.
  std::unordered_map<std::string, int> names;  // >= 0: op index, < 0: -(port+1)
  for (std::size_t i = 0; i < t_.ports_.size(); ++i) {
    if (!names.emplace(t_.ports_[i].name, -static_cast<int>(i) - 1).second)
      return InvalidArgument(where + ": duplicate name '" + t_.ports_[i].name + "'");
  }
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    if (ops_[i]->name.empty()) return InvalidArgument(where + ": an operator has an empty name");
    if (!names.emplace(ops_[i]->name, static_cast<int>(i)).second)
      return InvalidArgument(where + ": duplicate name '" + ops_[i]->name + "'");
  }

  // Resolve inputs and check per-op declarations.
  for (auto& op : ops_) {
    if (op->features.size() > static_cast<std::size_t>(kMaxFeatures))
      return op_error(*op, "has " + std::to_string(op->features.size()) + " features, at most " +
                               std::to_string(kMaxFeatures) + " are supported");
    if (!op->prior.empty() && op->prior.size() != op->features.size())
      return op_error(*op, "prior has " + std::to_string(op->prior.size()) + " coefficients for " +
                               std::to_string(op->features.size()) + " features");
    if (!op->prior_terms.empty() && op->prior_terms.size() != op->prior.size())
      return op_error(*op, "prior has " + std::to_string(op->prior.size()) + " coefficients and " +
                               std::to_string(op->prior_terms.size()) + " terms");
    if (op->weight_bytes < 0) return op_error(*op, "weights must be >= 0 bytes");
    for (auto& in : op->inputs) {
      auto it = names.find(in.from);
      if (it == names.end()) return op_error(*op, "input '" + in.from + "' names no operator or port");
      in.is_port = it->second < 0;
      in.index = static_cast<std::uint32_t>(in.is_port ? -it->second - 1 : it->second);
      if (!in.is_port && ops_[in.index].get() == op.get())
        return op_error(*op, "takes its own output as input (cycle)");
      const TensorSpec& produced = in.is_port ? t_.ports_[in.index].tensor : ops_[in.index]->output;
      if (in.expect) {
        if (in.expect->shape.size() != produced.shape.size())
          return op_error(*op, "input '" + in.from + "' expects rank " + std::to_string(in.expect->shape.size()) +
                                   " but '" + in.from + "' has rank " + std::to_string(produced.shape.size()));
        if (in.expect->dtype != produced.dtype)
          return op_error(*op, "input '" + in.from + "' expects " + std::string(dtype_name(in.expect->dtype)) +
                                   " but '" + in.from + "' is " + std::string(dtype_name(produced.dtype)));
      }
    }
  }

  if (t_.dims_.size() > static_cast<std::size_t>(kMaxDims))
    return InvalidArgument(where + ": has " + std::to_string(t_.dims_.size()) + " dims, at most " +
                           std::to_string(kMaxDims) + " are supported");

  // Kahn's algorithm over the operator edges; leftovers lie on a cycle.
  const std::size_t n = ops_.size();
  std::vector<std::vector<std::uint32_t>> succs(n);
  std::vector<std::uint32_t> indeg(n, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (const auto& in : ops_[i]->inputs)
      if (!in.is_port) {
        succs[in.index].push_back(static_cast<std::uint32_t>(i));
        ++indeg[i];
      }
  std::vector<std::uint32_t> order;
  order.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    if (indeg[i] == 0) order.push_back(static_cast<std::uint32_t>(i));
  for (std::size_t head = 0; head < order.size(); ++head)
    for (std::uint32_t s : succs[order[head]])
      if (--indeg[s] == 0) order.push_back(s);
  if (order.size() != n) {
    for (std::size_t i = 0; i < n; ++i)
      if (indeg[i] > 0) return op_error(*ops_[i], "lies on a cycle");
  }

  // Store in topological order and remap input indices.
  std::vector<std::uint32_t> new_index(n);
  for (std::size_t k = 0; k < n; ++k) new_index[order[k]] = static_cast<std::uint32_t>(k);
  t_.ops_.clear();
  t_.ops_.reserve(n);
  for (std::uint32_t old : order) {
    TemplateOp op = std::move(*ops_[old]);
    for (auto& in : op.inputs)
      if (!in.is_port) in.index = new_index[in.index];
    t_.ops_.push_back(std::move(op));
  }
  ops_.clear();
  return std::move(t_);
}

Result<TemplateId> TemplateRegistry::add(GraphTemplate t) {
  if (find(t.name())) return AlreadyExists("template '" + t.name() + "' is already registered");
  t.id_ = static_cast<TemplateId>(templates_.size());
  for (std::uint32_t i = 0; i < t.ops_.size(); ++i) {
    t.ops_[i].kind = next_kind_++;
    kinds_.emplace_back(t.id_, i);
  }
  templates_.push_back(std::make_shared<const GraphTemplate>(std::move(t)));
  return templates_.back()->id();
}

std::optional<TemplateId> TemplateRegistry::find(std::string_view name) const {
  for (const auto& t : templates_)
    if (t->name() == name) return t->id();
  return std::nullopt;
}

std::string TemplateRegistry::kind_name(OpKindId kind) const {
  if (kind >= kinds_.size()) return "?";
  const auto& [tid, idx] = kinds_[kind];
  return templates_[tid]->name() + "/" + templates_[tid]->ops()[idx].name;
}

}  // namespace slicesched
