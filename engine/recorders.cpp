module;
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

module slicesched.engine.recorders;
import slicesched.core.plugin;

namespace slicesched {

void PredictionRecorder::on_finish(const RunRecord& r) {
  if (r.to != kNoAccel || r.failed || r.predicted_start < 0 || r.predicted_finish < 0 || r.issued < 0) return;
  const auto actual_dur = static_cast<double>(r.finish - r.start);
  const auto actual_done = static_cast<double>(r.finish - r.issued);
  if (!(actual_dur > 0) || !(actual_done > 0)) return;  // nothing to be relative to
  const auto pred_dur = static_cast<double>(r.predicted_finish - r.predicted_start);
  const auto pred_done = static_cast<double>(r.predicted_finish - r.issued);
  if (r.kind >= by_kind_.size()) by_kind_.resize(r.kind + 1u);
  Sums& s = by_kind_[r.kind];
  ++s.n;
  s.dur_abs += std::abs(pred_dur - actual_dur) / actual_dur;
  s.dur_bias += (actual_dur - pred_dur) / actual_dur;
  s.done_abs += std::abs(pred_done - actual_done) / actual_done;
  s.done_bias += (actual_done - pred_done) / actual_done;
}

std::vector<PredictionError> PredictionRecorder::errors(const TemplateRegistry& templates) const {
  std::vector<PredictionError> out;
  Sums all;
  auto row = [](std::string kind, const Sums& s) {
    const double n = static_cast<double>(s.n);
    return PredictionError{std::move(kind),      s.n, 100 * s.dur_abs / n, 100 * s.dur_bias / n, 100 * s.done_abs / n,
                           100 * s.done_bias / n};
  };
  for (OpKindId kind = 0; kind < by_kind_.size(); ++kind) {
    const Sums& s = by_kind_[kind];
    if (s.n == 0) continue;
    out.push_back(row(templates.kind_name(kind), s));
    all.n += s.n;
    all.dur_abs += s.dur_abs;
    all.dur_bias += s.dur_bias;
    all.done_abs += s.done_abs;
    all.done_bias += s.done_bias;
  }
  if (all.n > 0) out.push_back(row("all", all));
  return out;
}

DecisionLog::DecisionLog(std::string policy, std::vector<std::string> tenant_names,
                         const std::vector<std::size_t>& tenant_requests, Nanos until)
    : policy_(std::move(policy)), tenants_(std::move(tenant_names)), until_(until) {
  std::uint64_t next = 0;
  for (std::size_t n : tenant_requests) {
    first_id_.push_back(next);
    next += n;
  }
}

void DecisionLog::on_request(const RequestEvent& e, const RequestRecord& /*record*/) {
  if (e.kind != RequestEvent::Kind::kIteration || e.t >= until_) return;
  requests_of_[e.instance].push_back(first_id_[e.tenant] + e.request);
}

namespace {

double seconds(Nanos t) { return static_cast<double>(t) / 1e9; }

// Why a candidate was not feasible, in words, naming the operator and the
// accelerator where the outcome says which.
std::string why(const Gmg& gmg, const Outcome& o) {
  auto op = [&] {
    return gmg.contains(o.at_op)
               ? gmg.templates().kind_name(gmg.op(o.at_op).kind) + " (op " + std::to_string(o.at_op) + ")"
               : "op " + std::to_string(o.at_op);
  };
  auto accel = [&] {
    return gmg.accels().contains(o.at_accel) ? gmg.accels()[o.at_accel].name : "an unknown accelerator";
  };
  switch (o.why) {
    case Outcome::Why::kNone:
      return "";
    case Outcome::Why::kNotSimulated:
      return "not simulated (the policy does not simulate)";
    case Outcome::Why::kOutOfMemory:
      return "out of memory: " + op() + " on " + accel();
    case Outcome::Why::kNotPlaceable:
      if (!gmg.accels().contains(o.at_accel)) return "not placeable: " + op() + " on an unknown accelerator";
      if (gmg.is_down(o.at_accel)) return "not placeable: " + accel() + " is lost";
      return "not placeable: " + op() + "'s weights are absent from " + accel();
    case Outcome::Why::kMalformed:
      return "malformed: not one accelerator per batch operator";
    case Outcome::Why::kDominated:
      return "dominated: stopped early, it could not beat a candidate already simulated";
  }
  return "";
}

}  // namespace

void DecisionLog::on_decision(const Gmg& gmg, const Decision& d) {
  if (d.now >= until_) {
    requests_of_.clear();
    return;
  }
  ++round_;
  const Batch& b = *d.batch;
  nlohmann::json j;
  j["policy"] = policy_;
  j["t"] = seconds(d.now);
  j["round"] = round_;
  j["tenant"] = b.tenant < tenants_.size() ? tenants_[b.tenant] : std::to_string(b.tenant);
  nlohmann::json ops = nlohmann::json::array(), requests = nlohmann::json::array();
  std::vector<InstanceId> instances;
  for (OpId id : b.ops) {
    const OpRecord& r = gmg.op(id);
    ops.push_back({{"op", id}, {"kind", gmg.templates().kind_name(r.kind)}, {"instance", r.instance}});
    if (std::find(instances.begin(), instances.end(), r.instance) == instances.end()) instances.push_back(r.instance);
  }
  for (InstanceId i : instances)
    if (auto it = requests_of_.find(i); it != requests_of_.end())
      for (std::uint64_t q : it->second) requests.push_back(q);
  j["batch"] = std::move(ops);
  j["requests"] = std::move(requests);
  j["simulated"] = d.simulated;
  nlohmann::json cands = nlohmann::json::array();
  for (std::size_t c = 0; c < d.candidates.size(); ++c) {
    const Candidate& cand = d.candidates[c];
    const Outcome& o = d.outcomes[c];
    nlohmann::json x;
    x["label"] = cand.label;
    if (o.feasible) {
      x["mean_completion_s"] = o.mean_completion_s;
      x["makespan_s"] = o.makespan_s;
      std::size_t past = 0;
      for (Nanos f : o.finish) past += f < 0;
      if (past) x["past_horizon_ops"] = past;  // counted as finishing at the horizon's end
    } else if (d.simulated) {
      x["infeasible"] = why(gmg, o);
    }
    cands.push_back(std::move(x));
  }
  j["candidates"] = std::move(cands);
  j["pick"] = d.pick ? nlohmann::json(d.candidates[*d.pick].label) : nlohmann::json(nullptr);
  // Labels are the plugin's and need not be unique: the index says which.
  if (d.pick) j["pick_index"] = *d.pick;
  if (!d.waited.empty()) j["waited"] = d.waited;
  if (d.chooser)
    if (std::vector<std::string> why = d.chooser->reasons(); !why.empty()) j["reasons"] = std::move(why);
  // A plugin's label or reason need not be UTF-8; JSON must be (a bad byte
  // failed the whole policy under --explain): bad bytes become U+FFFD.
  lines_.push_back({d.now, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)});
}

}  // namespace slicesched
