module;
#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

module slicesched.engine.tenant;

namespace slicesched {

namespace {
Nanos to_ns(double s) { return static_cast<Nanos>(s * 1e9 + 0.5); }
}  // namespace

Tenant::Tenant(std::uint32_t id, TenantSpec spec, TemplateId tmpl) : id_(id), spec_(std::move(spec)), tmpl_(tmpl) {
  records_.reserve(spec_.requests.requests.size());
  for (const Request& r : spec_.requests.requests)
    records_.push_back(
        {id_, to_ns(r.arrival_s), -1, -1, r.input_tokens, std::max<std::int64_t>(1, r.output_tokens), 0});
}

Nanos Tenant::next_arrival() const { return next_request_ < records_.size() ? records_[next_request_].arrival : -1; }

void Tenant::deliver_arrivals(Nanos t) {
  while (next_request_ < records_.size() && records_[next_request_].arrival <= t) waiting_.push_back(next_request_++);
}

bool Tenant::finished() const { return done_ == records_.size(); }

Result<std::optional<InstanceInfo>> Tenant::maybe_start_iteration(Gmg& gmg, Nanos t) {
  if (in_flight_) return std::optional<InstanceInfo>{};
  // Decodes first (each one token), then admit waiting prefills FIFO while
  // the token, sequence and KV budgets allow.
  std::int64_t tokens = static_cast<std::int64_t>(running_.size());
  std::int64_t context = 0, kv_after = 0;
  for (const Seq& s : running_) {
    context += s.context;
    kv_after += s.context + 1;
  }
  bool admitted = false;
  while (!waiting_.empty()) {
    const RequestRecord& r = records_[waiting_.front()];
    // The queue's head is admitted even over the token budget (a long
    // prompt must not wait for every decode to drain), but never over the
    // KV budget unless nothing else holds KV (then it could never fit).
    const bool tokens_ok = tokens + r.input_tokens <= spec_.token_budget || !admitted;
    const bool kv_ok = kv_after + r.input_tokens + r.output_tokens <= spec_.kv_budget_tokens || running_.empty();
    const bool seqs_ok = static_cast<std::int64_t>(running_.size()) < spec_.max_seqs;
    if (!(tokens_ok && kv_ok && seqs_ok)) break;
    running_.push_back({waiting_.front(), 0, true});
    admitted = true;
    tokens += r.input_tokens;
    kv_after += r.input_tokens;
    waiting_.pop_front();
  }
  if (tokens == 0) {
    // Idle: nobody will take the cache over.
    for (OpId op : kv_ops_)
      if (Status s = gmg.release_retained(op); !s.ok()) return s;
    kv_ops_.clear();
    kv_tokens_ = 0;
    return std::optional<InstanceInfo>{};
  }
  const GraphTemplate& tmpl = gmg.templates().get(tmpl_);
  InstanceSpec spec;
  spec.tmpl = tmpl_;
  spec.priority = spec_.priority;
  spec.tenant = id_;
  spec.dims = {{"tokens", tokens}, {"context", context}, {"kv_prev", kv_tokens_}};
  for (OpId op : kv_ops_) {
    // Each retaining op attaches through the port its template op reads.
    const auto& top = tmpl.ops()[gmg.op(op).tmpl_op];
    for (const auto& in : top.inputs)
      if (in.is_port) spec.ports.push_back({in.from, op, true});
  }
  auto inst = gmg.instantiate(spec);
  if (!inst.ok()) return inst.status();
  kv_ops_.clear();
  head_ = kNoOp;
  for (std::size_t i = 0; i < inst->ops.size(); ++i) {
    const OpRecord& r = gmg.op(inst->ops[i]);
    if (r.retained_bytes > 0) kv_ops_.push_back(inst->ops[i]);
    if (i + 1 == inst->ops.size()) head_ = inst->ops[i];  // topological order: the head is last
  }
  kv_tokens_ = context + tokens;
  in_flight_ = true;
  (void)t;
  return std::optional<InstanceInfo>{std::move(inst).value()};
}

void Tenant::on_op_done(OpId op, Nanos t) {
  if (!in_flight_ || op != head_) return;
  in_flight_ = false;
  std::vector<Seq> still;
  for (Seq& s : running_) {
    RequestRecord& r = records_[s.request];
    if (s.prefill) {
      r.first_token = t;
      s.context = r.input_tokens;
      s.prefill = false;
    } else {
      s.context += 1;
    }
    if (++r.generated >= r.output_tokens) {
      r.done = t;
      ++done_;
    } else {
      still.push_back(s);
    }
  }
  running_ = std::move(still);
}

}  // namespace slicesched
