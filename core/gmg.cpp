module;
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

module slicesched.core.gmg;

namespace slicesched {

namespace {

std::string shape_str(const ConcreteShape& s) {
  std::string r = "[";
  for (int i = 0; i < s.rank; ++i) r += (i ? ", " : "") + std::to_string(s.dims[i]);
  return r + "] " + std::string(dtype_name(s.dtype));
}

// Evaluates a tensor spec under a binding; `what` prefixes errors.
// `what` names the tensor in an error; it is called only on one, so the
// hot path (an instantiation per iteration) builds no strings.
template <typename What>
Result<ConcreteShape> eval_tensor(const TensorSpec& t, const Binding& b, const DimTable& dims, const What& what) {
  if (t.shape.size() > static_cast<std::size_t>(kMaxRank))
    return InvalidArgument(what() + ": rank " + std::to_string(t.shape.size()) + " exceeds the maximum " +
                           std::to_string(kMaxRank));
  ConcreteShape s;
  s.rank = static_cast<std::uint8_t>(t.shape.size());
  s.dtype = t.dtype;
  for (std::size_t i = 0; i < t.shape.size(); ++i) {
    auto v = t.shape[i].eval(b, dims);
    if (!v.ok()) return InvalidArgument(what() + ": " + v.status().message());
    s.dims[i] = v.value();
  }
  return s;
}

template <typename What>
Result<std::int64_t> bytes_of(const ConcreteShape& s, const What& what) {
  std::int64_t n = dtype_bytes(s.dtype);
  for (int i = 0; i < s.rank; ++i)
    if (__builtin_mul_overflow(n, s.dims[i], &n)) return InvalidArgument(what() + ": tensor size overflows 64 bits");
  return n;
}

}  // namespace

Gmg::Gmg(std::shared_ptr<const TemplateRegistry> templates, std::shared_ptr<const AcceleratorSet> accels)
    : templates_(std::move(templates)), accels_(std::move(accels)) {
  hbm_.resize(accels_->size());
  last_done_.assign(accels_->size(), -1);
  done_resident_.assign(accels_->size(), 0);
  down_.assign(accels_->size(), 0);
  down_count_ = 0;
}

std::string Gmg::op_name(OpId id) const {
  if (id >= ops_.size() || !ops_[id].live) return "op #" + std::to_string(id) + " (not live)";
  const OpRecord& r = ops_[id];
  const GraphTemplate& t = templates_->get(r.tmpl);
  return t.name() + "#" + std::to_string(r.instance) + "/" + t.ops()[r.tmpl_op].name;
}

Status Gmg::place_weights(TemplateId tmpl, AccelId accel) {
  if (tmpl >= templates_->size()) return NotFound("no template with id " + std::to_string(tmpl));
  for (const auto& op : templates_->get(tmpl).ops()) {
    Status s = place_weights(tmpl, op.name, accel);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status Gmg::place_weights(TemplateId tmpl, std::string_view op_name, AccelId accel) {
  if (tmpl >= templates_->size()) return NotFound("no template with id " + std::to_string(tmpl));
  const GraphTemplate& t = templates_->get(tmpl);
  if (!accels_->contains(accel))
    return NotFound("template '" + t.name() + "': no accelerator " + std::to_string(accel) + " (cluster has " +
                    std::to_string(accels_->size()) + ")");
  int idx = t.find_op(op_name);
  if (idx < 0) return NotFound("template '" + t.name() + "' has no op '" + std::string(op_name) + "'");
  const TemplateOp& op = t.ops()[idx];
  weights_.resize(static_cast<std::size_t>(templates_->op_kind_count()) * accels_->size(), 0);
  std::uint8_t& w = weights_[static_cast<std::size_t>(op.kind) * accels_->size() + accel];
  if (!w) {
    w = 1;
    hbm_[accel].weights += op.weight_bytes;
  }
  return Status::Ok();
}

// One cache line, so a snapshot build reads one line per operator.
static_assert(sizeof(OpRow) == 64);

OpId Gmg::alloc_op() {
  ++live_;
  return free_ops_.take(
      [&] {
        ops_.emplace_back();
        rows_.emplace_back();
        frontier_pos_.emplace_back();
        features_.emplace_back();
        shapes_.emplace_back();
        dims_.emplace_back();
      },
      [&](OpId id) {
        ops_[id] = OpRecord{};
        rows_[id] = OpRow{};
        frontier_pos_[id] = FrontierPos{};
      },
      ops_.size());
}

std::uint32_t Gmg::add_edge(OpId src, OpId dst, std::int64_t bytes, bool retained) {
  const std::uint32_t e = free_edges_.take(edges_);
  edges_[e] = Edge{src, dst, ops_[src].first_out, ops_[dst].first_in, bytes, retained, -1};
  ops_[src].first_out = e;
  ops_[dst].first_in = e;
  return e;
}

void Gmg::frontier_add(std::vector<OpId>& f, FrontierField pos, OpId id) {
  if (frontier_pos_[id].*pos != kNoEdge) return;
  frontier_pos_[id].*pos = static_cast<std::uint32_t>(f.size());
  f.push_back(id);
}

void Gmg::frontier_remove(std::vector<OpId>& f, FrontierField pos, OpId id) {
  std::uint32_t p = frontier_pos_[id].*pos;
  if (p == kNoEdge) return;
  OpId last = f.back();
  f[p] = last;
  frontier_pos_[last].*pos = p;
  f.pop_back();
  frontier_pos_[id].*pos = kNoEdge;
}

// Copies what a snapshot build reads of `id` into its row, where most of
// it changes (an op inserted or issued). Where a mutation changes a field
// or two, it copies just those (feature_count lives in the row only and
// is set once, at instantiate).
void Gmg::sync_row(OpId id) { rows_[id] = row_of(ops_[id], rows_[id].feature_count); }

// Checks everything first (dims, ports, every shape), so a failed
// instantiate leaves the GMG unchanged; then inserts.
Result<InstanceInfo> Gmg::instantiate(const InstanceSpec& spec) {
  if (spec.tmpl >= templates_->size()) return NotFound("no template with id " + std::to_string(spec.tmpl));
  const GraphTemplate& t = templates_->get(spec.tmpl);
  if (spec.priority < -32768 || spec.priority > 32767)
    return InvalidArgument(where(t) + ": priority " + std::to_string(spec.priority) + " is outside [-32768, 32767]");
  auto binding = bind_dims(t, spec);
  if (!binding.ok()) return binding.status();
  auto ports = resolve_ports(t, spec);
  if (!ports.ok()) return ports.status();
  if (Status s = check_ports(t, binding.value(), ports.value()); !s.ok()) return s;
  auto ev = evaluate_ops(t, binding.value(), ports.value());
  if (!ev.ok()) return ev.status();
  InstanceInfo info = insert_ops(spec, binding.value(), ev.value());
  link_inputs(t, info, ports.value());
  return info;
}

std::string Gmg::where(const GraphTemplate& t) { return "template '" + t.name() + "'"; }

// The instance's dim values by name (every name must be one of t's dims).
Result<Binding> Gmg::bind_dims(const GraphTemplate& t, const InstanceSpec& spec) {
  Binding binding(t.dims().size());
  for (const auto& [name, value] : spec.dims) {
    int id = t.dims().find(name);
    if (id < 0) {
      std::string known;
      for (std::size_t i = 0; i < t.dims().size(); ++i) known += (i ? ", " : "") + t.dims().name(static_cast<DimId>(i));
      return InvalidArgument(where(t) + " has no dim '" + name + "' (its dims: " + known + ")");
    }
    binding.set(static_cast<DimId>(id), value);
  }
  return binding;
}

// Per template port, its binding (null: unbound). A producer must be live
// and still hold what the port takes: its output, or its retained state
// (which nobody else has attached to).
Result<std::vector<const PortBinding*>> Gmg::resolve_ports(const GraphTemplate& t, const InstanceSpec& spec) const {
  std::vector<const PortBinding*> port_of(t.ports().size(), nullptr);
  for (const auto& pb : spec.ports) {
    int p = t.find_port(pb.port);
    if (p < 0) return InvalidArgument(where(t) + " has no port '" + pb.port + "'");
    if (port_of[p]) return InvalidArgument(where(t) + ": port '" + pb.port + "' is bound twice");
    if (!contains(pb.producer))
      return NotFound(where(t) + ": port '" + pb.port + "' is bound to " + op_name(pb.producer));
    const OpRecord& prod = ops_[pb.producer];
    if (pb.retained) {
      if (prod.retained_bytes == 0 && !templates_->get(prod.tmpl).ops()[prod.tmpl_op].retained)
        return FailedPrecondition(where(t) + ": port '" + pb.port + "' attaches to the retained state of " +
                                  op_name(pb.producer) + ", which retains nothing");
      if (prod.retained_attached)
        return FailedPrecondition(where(t) + ": port '" + pb.port + "': the retained state of " + op_name(pb.producer) +
                                  " is already attached by another instance");
      if (prod.state == OpState::kDone && !prod.retained_held)
        return FailedPrecondition(where(t) + ": port '" + pb.port + "': the retained state of " + op_name(pb.producer) +
                                  " was released");
    } else if (prod.state == OpState::kDone && !prod.output_held) {
      return FailedPrecondition(where(t) + ": port '" + pb.port + "': the output of " + op_name(pb.producer) +
                                " was already freed");
    }
    port_of[p] = &pb;
  }
  return port_of;
}

const ConcreteShape& Gmg::bound_shape(const PortBinding& pb) const {
  return pb.retained ? shapes_[pb.producer].retained : shapes_[pb.producer].output;
}

// Every required port is bound, and each bound port's tensor, evaluated
// under the binding, is exactly what its producer holds.
Status Gmg::check_ports(const GraphTemplate& t, const Binding& binding,
                        std::span<const PortBinding* const> ports) const {
  for (std::size_t p = 0; p < ports.size(); ++p) {
    if (!ports[p] && !t.ports()[p].optional)
      return InvalidArgument(where(t) + ": required port '" + t.ports()[p].name + "' is not bound");
    if (!ports[p]) continue;
    const PortBinding& pb = *ports[p];
    auto want = eval_tensor(t.ports()[p].tensor, binding, t.dims(),
                            [&] { return where(t) + " port '" + t.ports()[p].name + "'"; });
    if (!want.ok()) return want.status();
    const ConcreteShape& have = bound_shape(pb);
    if (!(want.value() == have))
      return InvalidArgument(where(t) + ": port '" + pb.port + "' expects " + shape_str(want.value()) + " but " +
                             op_name(pb.producer) + (pb.retained ? " retains " : " produces ") + shape_str(have));
  }
  return Status::Ok();
}

// Every operator's shapes, sizes and features under the binding, and each
// input it declares a shape for checked against what feeds it (an earlier
// op of the instance, or a port's producer).
Result<std::vector<Gmg::OpEval>> Gmg::evaluate_ops(const GraphTemplate& t, const Binding& binding,
                                                   std::span<const PortBinding* const> ports) const {
  const auto& tops = t.ops();
  std::vector<OpEval> ev(tops.size());
  for (std::size_t i = 0; i < tops.size(); ++i) {
    const TemplateOp& op = tops[i];
    auto ow = [&] { return where(t) + " op '" + op.name + "'"; };
    auto out = eval_tensor(op.output, binding, t.dims(), [&] { return ow() + " output"; });
    if (!out.ok()) return out.status();
    ev[i].out = out.value();
    auto ob = bytes_of(ev[i].out, ow);
    if (!ob.ok()) return ob.status();
    ev[i].out_bytes = ob.value();
    auto ws = op.workspace_bytes.eval(binding, t.dims());
    if (!ws.ok()) return InvalidArgument(ow() + " workspace: " + ws.status().message());
    ev[i].ws = ws.value();
    if (op.retained) {
      auto r = eval_tensor(op.retained->tensor, binding, t.dims(),
                           [&] { return ow() + " retained '" + op.retained->name + "'"; });
      if (!r.ok()) return r.status();
      ev[i].ret = r.value();
      auto rb = bytes_of(ev[i].ret, ow);
      if (!rb.ok()) return rb.status();
      ev[i].ret_bytes = rb.value();
    }
    for (std::size_t f = 0; f < op.features.size(); ++f) {
      auto v = op.features[f].eval(binding, t.dims());
      if (!v.ok()) return InvalidArgument(ow() + " feature " + std::to_string(f) + ": " + v.status().message());
      ev[i].feat[f] = static_cast<double>(v.value());
    }
    for (const auto& in : op.inputs) {
      if (!in.expect) continue;
      auto want = eval_tensor(*in.expect, binding, t.dims(), [&] { return ow() + " input '" + in.from + "'"; });
      if (!want.ok()) return want.status();
      const ConcreteShape* have = nullptr;  // null: an optional port the host feeds
      if (!in.is_port)
        have = &ev[in.index].out;
      else if (ports[in.index])
        have = &bound_shape(*ports[in.index]);
      if (have && !(*have == want.value()))
        return InvalidArgument(ow() + ": input '" + in.from + "' expects " + shape_str(want.value()) + " but gets " +
                               shape_str(*have));
    }
  }
  return ev;
}

// The instance's operators, unscheduled and unlinked, in template order.
InstanceInfo Gmg::insert_ops(const InstanceSpec& spec, const Binding& binding, std::span<const OpEval> ev) {
  const auto& tops = templates_->get(spec.tmpl).ops();
  InstanceInfo info;
  info.id = next_instance_++;
  info.ops.reserve(tops.size());
  for (std::size_t i = 0; i < tops.size(); ++i) {
    OpId id = alloc_op();
    OpRecord& r = ops_[id];
    r.live = true;
    r.instance = info.id;
    r.tmpl = spec.tmpl;
    r.tmpl_op = static_cast<std::uint32_t>(i);
    r.kind = tops[i].kind;
    r.priority = spec.priority;
    r.tenant = spec.tenant;
    rows_[id].feature_count = static_cast<std::uint8_t>(tops[i].features.size());
    r.out_bytes = ev[i].out_bytes;
    r.workspace_bytes = ev[i].ws;
    r.retained_bytes = ev[i].ret_bytes;
    r.weight_bytes = tops[i].weight_bytes;
    features_[id] = ev[i].feat;
    std::copy(binding.values.begin(), binding.values.end(), dims_[id].begin());
    shapes_[id] = {ev[i].out, ev[i].ret};
    info.ops.push_back(id);
  }
  return info;
}

// An edge per input, from an earlier op of the instance or from a port's
// producer (which may be issued or done already: then the producer joins the
// scheduled frontier), with the dependency counts; then the ops whose
// inputs are all placed join the unscheduled frontier.
void Gmg::link_inputs(const GraphTemplate& t, const InstanceInfo& info, std::span<const PortBinding* const> ports) {
  const auto& tops = t.ops();
  for (std::size_t i = 0; i < tops.size(); ++i) {
    OpId dst = info.ops[i];
    for (const auto& in : tops[i].inputs) {
      OpId src;
      bool retained = false;
      if (!in.is_port) {
        src = info.ops[in.index];
      } else {
        if (!ports[in.index]) continue;  // optional port fed by the host
        src = ports[in.index]->producer;
        retained = ports[in.index]->retained;
      }
      OpRecord& s = ops_[src];
      add_edge(src, dst, retained ? s.retained_bytes : s.out_bytes, retained);
      if (retained) s.retained_attached = true;
      ++s.pending_succs;
      ++s.unscheduled_succs;
      rows_[src].pending_succs = s.pending_succs;
      rows_[src].unscheduled_succs = s.unscheduled_succs;
      if (s.state == OpState::kUnscheduled)
        ++ops_[dst].unscheduled_preds;
      else
        frontier_add(frontier_s_, &FrontierPos::s, src);
    }
  }
  for (OpId id : info.ops) {
    if (ops_[id].unscheduled_preds == 0) frontier_add(frontier_u_, &FrontierPos::u, id);
    sync_row(id);
  }
}

// The checks of issue(), with `unscheduled_preds` as the caller counts them.
Status Gmg::check_one(OpId id, AccelId accel, std::uint32_t unscheduled_preds) const {
  if (!contains(id)) return NotFound("issue: " + op_name(id));
  const OpRecord& r = ops_[id];
  if (r.state != OpState::kUnscheduled)
    return FailedPrecondition("issue: " + op_name(id) + " is already " +
                              (r.state == OpState::kIssued ? "issued" : "done"));
  if (!accels_->contains(accel))
    return NotFound("issue: " + op_name(id) + " onto accelerator " + std::to_string(accel) +
                    ", which does not exist (cluster has " + std::to_string(accels_->size()) + ")");
  if (unscheduled_preds > 0)
    return FailedPrecondition("issue: " + op_name(id) + " has " + std::to_string(unscheduled_preds) +
                              " unscheduled predecessor(s)");
  if (down_[accel])
    return FailedPrecondition("issue: " + op_name(id) + " onto accelerator " + accels_->operator[](accel).name +
                              ", which is lost");
  if (r.weight_bytes > 0 && !weights_on(r.kind, accel))
    return FailedPrecondition("issue: the weights of " + op_name(id) + " are not resident on accelerator " +
                              accels_->operator[](accel).name);
  return Status::Ok();
}

Status Gmg::check_issue(std::span<const OpId> ops, std::span<const AccelId> accels) const {
  if (accels.size() != ops.size())
    return InvalidArgument("issue: " + std::to_string(ops.size()) + " operator(s) but " +
                           std::to_string(accels.size()) + " accelerator(s)");
  if (Status s = check_batch(ops); !s.ok()) return s;
  for (std::size_t k = 0; k < ops.size(); ++k)
    if (!placeable(ops[k], accels[k])) return check_one(ops[k], accels[k], 0);  // (names what is wrong)
  return Status::Ok();
}

Status Gmg::check_batch(std::span<const OpId> ops) const {
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const OpId id = ops[k];
    const auto earlier = ops.first(k);
    if (std::find(earlier.begin(), earlier.end(), id) != earlier.end())
      return FailedPrecondition("issue: " + op_name(id) + " is already issued");
    if (!contains(id)) return NotFound("issue: " + op_name(id));
    const OpRecord& r = ops_[id];
    std::uint32_t unscheduled = r.unscheduled_preds;
    // Predecessors issued earlier in the batch no longer count.
    for (std::uint32_t e = r.first_in; e != kNoEdge && unscheduled > 0; e = edges_[e].next_in)
      if (std::find(earlier.begin(), earlier.end(), edges_[e].src) != earlier.end()) --unscheduled;
    if (r.state != OpState::kUnscheduled)
      return FailedPrecondition("issue: " + op_name(id) + " is already " +
                                (r.state == OpState::kIssued ? "issued" : "done"));
    if (unscheduled > 0)
      return FailedPrecondition("issue: " + op_name(id) + " has " + std::to_string(unscheduled) +
                                " unscheduled predecessor(s)");
  }
  return Status::Ok();
}

IssuedWorkspaces Gmg::issued_workspaces() const {
  IssuedWorkspaces w;
  issued_workspaces_into(w);
  return w;
}

void Gmg::issued_workspaces_into(IssuedWorkspaces& w) const {
  const std::size_t n = accels_->size();
  w.room.assign(n, {});
  // First the issued operators' summed workspace in `free`, then the room.
  for (OpId id : issued_ops_) {
    const OpRecord& r = ops_[id];
    if (r.accel >= n) continue;
    w.room[r.accel].free += r.workspace_bytes;
    w.room[r.accel].largest = std::max(w.room[r.accel].largest, r.workspace_bytes);
  }
  for (std::size_t a = 0; a < n; ++a) w.room[a].free += accels_->hbm_bytes(a) - hbm_[a].total();
}

Gmg::MemoryNeed& Gmg::MemoryNeeds::at(AccelId a) {
  for (std::size_t i = 0; i < n_few; ++i)
    if (few[i].a == a) return few[i];
  for (MemoryNeed& n : more)
    if (n.a == a) return n;
  if (n_few < few.size()) return few[n_few++] = MemoryNeed{a, 0, 0};
  return more.emplace_back(MemoryNeed{a, 0, 0});
}

Status Gmg::check_memory(std::span<const OpId> ops, std::span<const AccelId> accels, AccelId* over, bool alone,
                         const IssuedWorkspaces* issued, std::span<const std::int64_t> kept) const {
  // Per accelerator of the batch (a handful: a small list, not a map):
  // what it adds besides workspaces, and its largest workspace. One
  // operator runs at a time on an accelerator, so only one workspace is
  // ever live there: the account holds the largest, not their sum.
  MemoryNeeds needs;
  auto accel_of = [&](OpId src) {
    for (std::size_t k = 0; k < ops.size(); ++k)
      if (ops[k] == src) return accels[k];
    return ops_[src].accel;
  };
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const OpRecord& r = ops_[ops[k]];
    MemoryNeed& n = needs.at(accels[k]);
    const std::int64_t c = copies(accels[k]);
    n.bytes += r.out_bytes * c + r.retained_bytes;
    n.workspace = std::max(n.workspace, r.workspace_bytes);
    for (std::uint32_t e = r.first_in; e != kNoEdge; e = edges_[e].next_in) {
      const Edge& edge = edges_[e];
      if (accel_of(edge.src) != accels[k]) needs.at(accels[k]).bytes += edge.bytes * c;
      // Alone, the batch still holds what it takes over until it is done.
      if (alone && edge.retained && ops_[edge.src].retained_held) needs.at(ops_[edge.src].accel).bytes += edge.bytes;
    }
  }
  return memory_verdict(needs, ops, accels, over, alone, issued, kept);
}

BatchMemory Gmg::batch_memory(std::span<const OpId> ops) const {
  BatchMemory m;
  m.ops.assign(ops.begin(), ops.end());
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const OpRecord& r = ops_[ops[k]];
    m.bytes.push_back(r.out_bytes + r.retained_bytes);
    m.out.push_back(r.out_bytes);
    m.workspace.push_back(r.workspace_bytes);
    m.first_input.push_back(static_cast<std::uint32_t>(m.inputs.size()));
    for (std::uint32_t e = r.first_in; e != kNoEdge; e = edges_[e].next_in) {
      const Edge& edge = edges_[e];
      // As check_memory's accel_of: the first place in the batch, else where it is.
      std::uint32_t producer = BatchMemory::kOutside;
      for (std::size_t p = 0; p < ops.size() && producer == BatchMemory::kOutside; ++p)
        if (ops[p] == edge.src) producer = static_cast<std::uint32_t>(p);
      m.inputs.push_back({producer, ops_[edge.src].accel, edge.bytes});
    }
  }
  m.first_input.push_back(static_cast<std::uint32_t>(m.inputs.size()));
  return m;
}

Status Gmg::check_memory(const BatchMemory& m, std::span<const AccelId> accels, AccelId* over,
                         const IssuedWorkspaces* issued) const {
  MemoryNeeds needs;
  // A contiguous split puts runs of operators on one accelerator: its
  // entry is looked up once per run (entries are added in the same order,
  // so the verdict checks them in the same order).
  MemoryNeed* n = nullptr;
  for (std::size_t k = 0; k < m.ops.size(); ++k) {
    const AccelId here = accels[k];
    if (!n || n->a != here) n = &needs.at(here);
    const std::int64_t c = copies(here);
    n->bytes += m.bytes[k] + m.out[k] * (c - 1);
    n->workspace = std::max(n->workspace, m.workspace[k]);
    for (std::uint32_t i = m.first_input[k]; i < m.first_input[k + 1]; ++i) {
      const BatchMemory::Input& in = m.inputs[i];
      if ((in.producer != BatchMemory::kOutside ? accels[in.producer] : in.at) != here) n->bytes += in.bytes * c;
    }
  }
  return memory_verdict(needs, m.ops, accels, over, false, issued);
}

Status Gmg::memory_verdict(const MemoryNeeds& needs, std::span<const OpId> ops, std::span<const AccelId> accels,
                           AccelId* over, bool alone, const IssuedWorkspaces* issued,
                           std::span<const std::int64_t> kept) const {
  auto refuse = [&](AccelId a, std::int64_t bytes, std::int64_t free) {
    if (over) *over = a;
    OpId first = ops.front();
    for (std::size_t k = 0; k < ops.size(); ++k)
      if (accels[k] == a) {
        first = ops[k];
        break;
      }
    const std::int64_t cap = accels_->hbm_bytes(a);
    return ResourceExhausted("HBM: " + op_name(first) + " on " + accels_->operator[](a).name + " needs " +
                             std::to_string(bytes) + " bytes, " + std::to_string(free) + " of " + std::to_string(cap) +
                             " are free");
  };
  for (std::size_t i = 0; i < needs.n_few + needs.more.size(); ++i) {
    const MemoryNeed& n = i < needs.n_few ? needs.few[i] : needs.more[i - needs.n_few];
    const AccelId a = n.a;
    const std::int64_t keep = !alone && a < kept.size() ? kept[a] : 0;
    if (!alone && issued && a < issued->room.size()) {
      // The round's table: held + bytes > cap, as below, read as
      // bytes > cap - held from one entry.
      const IssuedWorkspaces::Room& r = issued->room[a];
      const std::int64_t bytes = n.bytes + std::max(n.workspace, r.largest);
      if (bytes + keep > r.free) return refuse(a, bytes, r.free);
      continue;
    }
    // What the accelerator holds or reserved, its issued operators'
    // workspaces counted as their largest.
    std::int64_t held = hbm_[a].weights, workspace = n.workspace;
    if (!alone) {
      std::int64_t issued_ws = 0;
      for (OpId id : issued_ops_)
        if (ops_[id].accel == a) {
          issued_ws += ops_[id].workspace_bytes;
          workspace = std::max(workspace, ops_[id].workspace_bytes);
        }
      held = hbm_[a].total() - issued_ws;
    }
    const std::int64_t cap = accels_->hbm_bytes(a), bytes = n.bytes + workspace;
    if (held + bytes + keep > cap) return refuse(a, bytes, cap - held);
  }
  return Status::Ok();
}

Status Gmg::cancel(std::span<const OpId> ops) {
  auto inside = [&](OpId id) { return std::find(ops.begin(), ops.end(), id) != ops.end(); };
  for (OpId id : ops) {
    if (!contains(id)) return NotFound("cancel: " + op_name(id));
    if (ops_[id].state != OpState::kUnscheduled)
      return FailedPrecondition("cancel: " + op_name(id) + " is " +
                                (ops_[id].state == OpState::kIssued ? "issued" : "done"));
    for (std::uint32_t e = ops_[id].first_out; e != kNoEdge; e = edges_[e].next_out)
      if (!inside(edges_[e].dst))
        return FailedPrecondition("cancel: " + op_name(id) + " feeds " + op_name(edges_[e].dst) +
                                  ", which is not cancelled with it");
  }
  for (OpId id : ops) {
    OpRecord& r = ops_[id];
    // Inputs from outside: the producer loses a successor (and, for a
    // retained state, its consumer).
    for (std::uint32_t e = r.first_in; e != kNoEdge;) {
      const std::uint32_t next = edges_[e].next_in;
      const OpId src = edges_[e].src;
      if (!inside(src)) {
        OpRecord& p = ops_[src];
        std::uint32_t* link = &p.first_out;
        while (*link != e) link = &edges_[*link].next_out;
        *link = edges_[e].next_out;
        if (edges_[e].retained) p.retained_attached = false;
        --p.pending_succs;
        if (--p.unscheduled_succs == 0) frontier_remove(frontier_s_, &FrontierPos::s, src);
        rows_[src].pending_succs = p.pending_succs;
        rows_[src].unscheduled_succs = p.unscheduled_succs;
        maybe_free_output(src);
      }
      e = next;
    }
  }
  // Edges inside the set, then the slots.
  for (OpId id : ops) {
    for (std::uint32_t e = ops_[id].first_in; e != kNoEdge; e = edges_[e].next_in) free_edges_.give_back(e);
    frontier_remove(frontier_u_, &FrontierPos::u, id);
    ops_[id] = OpRecord{};
    rows_[id] = OpRow{};
    free_ops_.give_back(id);
    --live_;
  }
  return Status::Ok();
}

Status Gmg::issue(OpId id, AccelId accel, Nanos t) {
  if (Status s = check_one(id, accel, contains(id) ? ops_[id].unscheduled_preds : 0); !s.ok()) return s;
  OpRecord& r = ops_[id];
  r.state = OpState::kIssued;
  r.accel = accel;
  r.issue_t = t;
  r.issue_seq = ++issue_seq_;
  ++issued_;
  issued_ops_.insert(std::lower_bound(issued_ops_.begin(), issued_ops_.end(), id), id);
  advance_clock(t);
  // Reserve what the executor will allocate: output, workspace, retained
  // state, and a receive buffer for every remote input.
  const std::int64_t c = copies(accel);
  hbm_[accel].transient += r.out_bytes * c + r.workspace_bytes;
  r.output_held = true;
  if (r.retained_bytes > 0) {
    hbm_[accel].retained += r.retained_bytes;
    r.retained_held = true;
  }
  frontier_remove(frontier_u_, &FrontierPos::u, id);
  if (r.unscheduled_succs > 0) frontier_add(frontier_s_, &FrontierPos::s, id);
  sync_row(id);
  for (std::uint32_t e = r.first_in; e != kNoEdge; e = edges_[e].next_in) {
    const OpId src = edges_[e].src;
    OpRecord& p = ops_[src];
    if (p.accel != accel) hbm_[accel].transient += edges_[e].bytes * c;
    if (--p.unscheduled_succs == 0) frontier_remove(frontier_s_, &FrontierPos::s, src);
    rows_[src].unscheduled_succs = p.unscheduled_succs;
  }
  for (std::uint32_t e = r.first_out; e != kNoEdge; e = edges_[e].next_out) {
    OpId s = edges_[e].dst;
    if (--ops_[s].unscheduled_preds == 0) frontier_add(frontier_u_, &FrontierPos::u, s);
  }
  return Status::Ok();
}

void Gmg::maybe_free_output(OpId id) {
  OpRecord& r = ops_[id];
  if (r.state == OpState::kDone && r.output_held && r.pending_succs == 0) {
    const std::int64_t held = r.out_bytes * copies(r.accel);
    hbm_[r.accel].transient -= held;
    done_resident_[r.accel] -= held;
    r.output_held = false;
    rows_[id].output_held = false;
    note_release(id, Release::Value::kOutput);
  }
  note_retire_candidate(id);
}

// Called once the flag of `value` is cleared: `last` when both are.
void Gmg::note_release(OpId id, Release::Value value) {
  const OpRecord& r = ops_[id];
  releases_.push_back({id, r.issue_seq, value, !r.output_held && !r.retained_held});
}

void Gmg::note_retire_candidate(OpId id) {
  const OpRecord& r = ops_[id];
  if (r.state == OpState::kDone && !r.output_held && !r.retained_held && r.pending_succs == 0)
    retire_candidates_.push_back(id);
}

Status Gmg::complete(OpId id, Nanos t, Nanos measured) {
  if (!contains(id)) return NotFound("complete: " + op_name(id));
  OpRecord& r = ops_[id];
  if (r.state != OpState::kIssued)
    return FailedPrecondition("complete: " + op_name(id) + " is " +
                              (r.state == OpState::kDone ? "already done" : "not issued"));
  if (t < r.issue_t)
    return InvalidArgument("complete: " + op_name(id) + " done at " + std::to_string(t) + " ns, before its issue at " +
                           std::to_string(r.issue_t) + " ns");
  if (measured < 0 || measured > t - r.issue_t)
    return InvalidArgument("complete: " + op_name(id) + " measured " + std::to_string(measured) + " ns, expected 0.." +
                           std::to_string(t - r.issue_t) + " ns (issue to done)");
  r.state = OpState::kDone;
  r.done_t = t;
  r.measured = measured;
  rows_[id].state = OpState::kDone;
  rows_[id].since = t;
  --issued_;
  issued_ops_.erase(std::lower_bound(issued_ops_.begin(), issued_ops_.end(), id));
  done_resident_[r.accel] +=
      (r.output_held ? r.out_bytes * copies(r.accel) : 0) + (r.retained_held ? r.retained_bytes : 0);
  advance_clock(t);
  if (t > last_done_[r.accel]) last_done_[r.accel] = t;
  hbm_[r.accel].transient -= r.workspace_bytes;
  for (std::uint32_t e = r.first_in; e != kNoEdge; e = edges_[e].next_in) {
    const Edge& edge = edges_[e];
    OpRecord& p = ops_[edge.src];
    if (p.accel != r.accel) hbm_[r.accel].transient -= edge.bytes * copies(r.accel);
    if (edge.retained && p.retained_held) {
      // The consumer took the state over (e.g. a KV cache grown in place).
      hbm_[p.accel].retained -= p.retained_bytes;
      if (p.state == OpState::kDone) done_resident_[p.accel] -= p.retained_bytes;
      p.retained_held = false;
      rows_[edge.src].retained_held = false;
      note_release(edge.src, Release::Value::kRetained);
    }
    rows_[edge.src].pending_succs = --p.pending_succs;
    maybe_free_output(edge.src);
  }
  maybe_free_output(id);
  return Status::Ok();
}

Status Gmg::complete_transfer(OpId src, OpId dst, Nanos t) {
  if (!contains(src) || !contains(dst)) return NotFound("complete_transfer: " + op_name(contains(src) ? dst : src));
  for (std::uint32_t e = ops_[dst].first_in; e != kNoEdge; e = edges_[e].next_in) {
    if (edges_[e].src != src) continue;
    if (ops_[src].state != OpState::kDone)
      return FailedPrecondition("complete_transfer: " + op_name(src) + " is not done");
    if (ops_[dst].state == OpState::kUnscheduled)
      return FailedPrecondition("complete_transfer: " + op_name(dst) + " is not issued");
    if (ops_[src].accel == ops_[dst].accel)
      return FailedPrecondition("complete_transfer: " + op_name(src) + " and " + op_name(dst) +
                                " are on the same accelerator");
    edges_[e].arrived = t;
    advance_clock(t);
    return Status::Ok();
  }
  return NotFound("complete_transfer: no edge from " + op_name(src) + " to " + op_name(dst));
}

Status Gmg::release_retained(OpId id) {
  if (!contains(id)) return NotFound("release_retained: " + op_name(id));
  OpRecord& r = ops_[id];
  if (r.retained_bytes == 0) return FailedPrecondition("release_retained: " + op_name(id) + " retains nothing");
  if (r.retained_attached)
    return FailedPrecondition("release_retained: the retained state of " + op_name(id) +
                              " is attached by a later instance, which frees it");
  if (r.state != OpState::kDone) return FailedPrecondition("release_retained: " + op_name(id) + " is not done");
  if (!r.retained_held) return FailedPrecondition("release_retained: " + op_name(id) + " was already released");
  hbm_[r.accel].retained -= r.retained_bytes;
  done_resident_[r.accel] -= r.retained_bytes;
  r.retained_held = false;
  rows_[id].retained_held = false;
  note_release(id, Release::Value::kRetained);
  note_retire_candidate(id);
  return Status::Ok();
}

std::size_t Gmg::retire() {
  std::size_t n = 0;
  for (OpId id : retire_candidates_) {
    OpRecord& r = ops_[id];
    // A candidate may have gained a successor or been retired already.
    if (!r.live || r.state != OpState::kDone || r.output_held || r.retained_held || r.pending_succs != 0) continue;
    // Unlink incoming edges from their producers' out-lists.
    for (std::uint32_t e = r.first_in; e != kNoEdge;) {
      std::uint32_t next = edges_[e].next_in;
      OpRecord& p = ops_[edges_[e].src];
      std::uint32_t* link = &p.first_out;
      while (*link != e) link = &edges_[*link].next_out;
      *link = edges_[e].next_out;
      free_edges_.give_back(e);
      e = next;
    }
    // Outgoing edges point at done consumers; unlink them from theirs.
    for (std::uint32_t e = r.first_out; e != kNoEdge;) {
      std::uint32_t next = edges_[e].next_out;
      const OpId dst = edges_[e].dst;
      std::uint32_t* link = &ops_[dst].first_in;
      while (*link != e) link = &edges_[*link].next_in;
      *link = edges_[e].next_in;
      rows_[dst].first_in = ops_[dst].first_in;
      free_edges_.give_back(e);
      e = next;
    }
    frontier_remove(frontier_s_, &FrontierPos::s, id);
    r = OpRecord{};
    rows_[id] = OpRow{};
    free_ops_.give_back(id);
    --live_;
    ++n;
  }
  retire_candidates_.clear();
  return n;
}

}  // namespace slicesched
