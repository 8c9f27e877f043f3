// Engine observers that keep what reports show of a run besides its
// metrics (engine.metrics): the timeline of intervals for traces, the
// scheduler's decisions for --explain, and the what-if's prediction error.
// Each is an EngineObserver; none is thread-safe (the engine's thread).
module;
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

export module slicesched.engine.recorders;
import slicesched.engine.observer;
import slicesched.core.gmg;
import slicesched.core.graph;
import slicesched.core.ids;
import slicesched.engine.tenant;

export namespace slicesched {

// Every interval that starts before `until` (ns on the run's clock; < 0:
// none), in the order they end: what a Chrome trace shows. Bounded so a
// long run's trace costs what its first minutes cost.
class TimelineRecorder final : public EngineObserver {
 public:
  explicit TimelineRecorder(Nanos until) : until_(until) {}
  void on_finish(const RunRecord& r) override {
    if (r.start < until_) log_.push_back(r);
  }
  std::vector<RunRecord>& log() { return log_; }

 private:
  Nanos until_;
  std::vector<RunRecord> log_;
};

// How far the what-if's predictions were from what happened, per operator
// kind, over every operator that finished with a prediction (the placement
// the policy picked, within the horizon). Relative errors of the actual
// value: MAPE is the mean |predicted - actual| / actual, bias the mean
// (actual - predicted) / actual, so a positive bias means slower than
// predicted. Duration: finish - start; completion: finish - issue (queueing
// included, what the policy ranks candidates by).
struct PredictionError {
  std::string kind;
  std::size_t ops = 0;
  double duration_mape_pct = 0, duration_bias_pct = 0;
  double completion_mape_pct = 0, completion_bias_pct = 0;
};

class PredictionRecorder final : public EngineObserver {
 public:
  void on_finish(const RunRecord& r) override;
  // Per kind in kind-id order (names from `templates`), then "all".
  // Empty when nothing was predicted (a static policy).
  std::vector<PredictionError> errors(const TemplateRegistry& templates) const;

 private:
  struct Sums {
    std::size_t n = 0;
    double dur_abs = 0, dur_bias = 0, done_abs = 0, done_bias = 0;
  };
  std::vector<Sums> by_kind_;  // by OpKindId (a handful of kinds)
};

// The scheduler's rounds as JSON lines (DIR/decisions.jsonl, and the
// Chrome trace's "scheduler" lane): for each round that starts before
// `until`, the batch and the requests it serves, every candidate with its
// predicted mean completion and makespan or why it was infeasible, and the
// pick. Request ids are global: a request's row in the requests CSV (the
// tenants' records one tenant after another).
class DecisionLog final : public EngineObserver {
 public:
  // `tenant_names` and `tenant_requests` (each tenant's number of requests)
  // per tenant, in the engine's order; `policy` is written on every line.
  DecisionLog(std::string policy, std::vector<std::string> tenant_names,
              const std::vector<std::size_t>& tenant_requests, Nanos until);
  void on_decision(const Gmg& gmg, const Decision& d) override;
  void on_request(const RequestEvent& e, const RequestRecord& record) override;
  bool iterations() const override { return true; }

  struct Line {
    Nanos t = 0;
    std::string json;  // one line, no newline
  };
  const std::vector<Line>& lines() const { return lines_; }

 private:
  std::string policy_;
  std::vector<std::string> tenants_;
  std::vector<std::uint64_t> first_id_;  // per tenant: the global id of its first request
  Nanos until_;
  std::uint64_t round_ = 0;
  std::unordered_map<InstanceId, std::vector<std::uint64_t>> requests_of_;  // iterations seen before `until`
  std::vector<Line> lines_;
};

}  // namespace slicesched
