// What GET /metrics shows (Prometheus text format): an engine observer that
// counts requests, tokens, scheduling rounds and accelerator busy time, and
// keeps TTFT and TPOT histograms. Fixed-size state: a server that runs for
// weeks holds the same few kilobytes.
//
// Threading: the engine thread calls the observer hooks; render() is called
// from HTTP threads at any time. One mutex guards everything (the hooks do a
// few additions under it).
module;
#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

export module slicesched.serving.metrics;
import slicesched.core.gmg;
import slicesched.engine.observer;
import slicesched.engine.tenant;

export namespace slicesched::serving {

// A Prometheus histogram with fixed bucket bounds (seconds).
class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                  0.25,  0.5,    1,     2.5,  5,     10,   30};
  void add(double v);
  // The histogram's lines for metric `name` with `labels` ("" or `k="v"`).
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::array<std::uint64_t, kBounds.size()> counts_{};  // per bucket, not cumulative
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

class ServingMetrics final : public EngineObserver {
 public:
  // Accelerator names in engine order.
  explicit ServingMetrics(std::vector<std::string> accels);
  // Tenant names in engine order, and whether each is online (SLO-bound:
  // its TTFT and TPOT are the histograms'). Before the run starts.
  void set_tenants(std::vector<std::string> tenants, std::vector<bool> online);

  void on_request(const RequestEvent& e, const RequestRecord& r) override;
  void on_finish(const RunRecord& r) override;
  void on_decision(const Gmg& gmg, const Decision& d) override;
  // kIteration events: vllm:num_requests_running, the queue time and the KV use.
  bool iterations() const override { return true; }

  // The model each tenant serves (by tenant, engine order) and each
  // tenant's KV budget in tokens: the vLLM-named metrics are per model
  // (label model_name). Before the run starts; without it they are empty.
  void set_models(std::vector<std::string> model_of_tenant, std::vector<std::int64_t> kv_budget_tokens);

  // The whole exposition; `extra` (already in the text format) is appended:
  // the front end's own gauges (in-flight HTTP requests, rejections).
  std::string render(const std::string& extra = {}) const;

 private:
  // vLLM's metric names beside ours (vllm_metrics.cpp): per model, what a
  // dashboard built for vLLM reads. State bounded by the requests in flight.
  struct Vllm {
    struct PerModel {
      std::int64_t waiting = 0, running = 0, kv_tokens = 0, kv_budget = 0;
      std::uint64_t prompt_tokens = 0, generation_tokens = 0, stop = 0, length = 0, abort = 0;
      Histogram ttft, itl, e2e, queue;
    };
    std::vector<std::string> names;     // models
    std::vector<std::size_t> model_of;  // per tenant
    std::vector<PerModel> models;
    struct Live {
      bool running = false;
      std::int64_t kv_tokens = 0;
    };
    std::unordered_map<std::uint64_t, Live> live;  // (tenant << 32 | request) -> state
  } vllm_;
  void vllm_request(const RequestEvent& e, const RequestRecord& r);  // under mu_
  void vllm_render(std::string& out) const;                          // under mu_

  mutable std::mutex mu_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::vector<std::string> tenants_, accels_;
  std::vector<bool> online_;
  struct PerTenant {
    std::uint64_t arrived = 0, done = 0, failed = 0;
    std::int64_t tokens = 0;
  };
  std::vector<PerTenant> per_tenant_;
  std::vector<double> busy_s_;  // per accelerator
  std::uint64_t rounds_ = 0, rounds_issued_ = 0;
  Histogram ttft_, tpot_;
  // Tokens per whole second of the last kWindowS seconds, for tokens/s.
  static constexpr int kWindowS = 10;
  std::deque<std::pair<std::int64_t, std::int64_t>> window_;  // (second, tokens)
  std::int64_t second_now() const;
};

}  // namespace slicesched::serving

// Prometheus text-format pieces shared by metrics.cpp and vllm_metrics.cpp
// (module-internal: not exported).
namespace slicesched::serving::prom {
std::string num(double v);                                                          // %.9g
std::string label(const char* key, const std::string& value);                       // key="escaped value"
void head(std::string& out, const char* name, const char* type, const char* help);  // # HELP / # TYPE
}  // namespace slicesched::serving::prom
