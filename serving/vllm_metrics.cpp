// The vLLM metric names (vLLM's docs, "Production Metrics"), per served
// model with the label model_name, beside slicesched's own: a dashboard
// built for vLLM reads them as they are. docs/serving.md maps each to what
// it measures here.
module;
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

module slicesched.serving.metrics;
import slicesched.core.ids;

namespace slicesched::serving {

namespace {

using prom::head;
using prom::num;

std::string model_label(const std::string& name) { return prom::label("model_name", name); }

double seconds(Nanos ns) { return static_cast<double>(ns) / 1e9; }

}  // namespace

void ServingMetrics::set_models(std::vector<std::string> model_of_tenant, std::vector<std::int64_t> kv_budget) {
  std::lock_guard lk(mu_);
  Vllm& v = vllm_;
  v.names.clear();
  v.model_of.clear();
  for (const std::string& m : model_of_tenant) {
    std::size_t i = 0;
    while (i < v.names.size() && v.names[i] != m) ++i;
    if (i == v.names.size()) v.names.push_back(m);
    v.model_of.push_back(i);
  }
  v.models.assign(v.names.size(), {});
  for (std::size_t t = 0; t < v.model_of.size() && t < kv_budget.size(); ++t)
    v.models[v.model_of[t]].kv_budget += kv_budget[t];
}

void ServingMetrics::vllm_request(const RequestEvent& e, const RequestRecord& r) {
  Vllm& v = vllm_;
  if (e.tenant >= v.model_of.size()) return;
  Vllm::PerModel& m = v.models[v.model_of[e.tenant]];
  const std::uint64_t key = (static_cast<std::uint64_t>(e.tenant) << 32) | e.request;
  switch (e.kind) {
    case RequestEvent::Kind::kArrived:
      v.live[key] = {};
      ++m.waiting;
      break;
    case RequestEvent::Kind::kIteration: {
      const auto it = v.live.find(key);
      if (it == v.live.end()) break;
      if (!it->second.running) {  // its first iteration: it left the queue
        it->second.running = true;
        --m.waiting, ++m.running;
        m.queue.add(seconds(e.t - r.arrival));
      }
      // What its KV cache holds through this iteration: prompt and output so far.
      const std::int64_t held = r.input_tokens + r.generated;
      m.kv_tokens += held - it->second.kv_tokens;
      it->second.kv_tokens = held;
      break;
    }
    case RequestEvent::Kind::kFirstToken:
      m.ttft.add(seconds(r.first_token - r.arrival));
      break;
    case RequestEvent::Kind::kDone:
    case RequestEvent::Kind::kFailed: {
      if (const auto it = v.live.find(key); it != v.live.end()) {
        (it->second.running ? m.running : m.waiting) -= 1;
        m.kv_tokens -= it->second.kv_tokens;
        v.live.erase(it);
      }
      m.prompt_tokens += static_cast<std::uint64_t>(r.input_tokens);
      m.generation_tokens += static_cast<std::uint64_t>(r.generated);
      if (e.kind == RequestEvent::Kind::kFailed) {
        ++m.abort;
        break;
      }
      // A stop condition (EOS, stop string or token) ended it, as its reply
      // says "stop", even on the max_tokens-th token (vLLM checks stops first);
      // otherwise it reached max_tokens.
      ++(r.stopped ? m.stop : m.length);
      m.e2e.add(seconds(r.done - r.arrival));
      // Each gap between output tokens, as the request's mean gap (the
      // engine reports a request's first and last token times).
      if (r.generated > 1 && r.first_token >= 0) {
        const double gap = seconds(r.done - r.first_token) / static_cast<double>(r.generated - 1);
        for (std::int64_t i = 1; i < r.generated; ++i) m.itl.add(gap);
      }
      break;
    }
  }
}

void ServingMetrics::vllm_render(std::string& out) const {
  const Vllm& v = vllm_;
  if (v.names.empty()) return;
  auto gauge = [&](const char* name, const char* help, auto value) {
    head(out, name, "gauge", help);
    for (std::size_t i = 0; i < v.names.size(); ++i)
      out += std::string(name) + "{" + model_label(v.names[i]) + "} " + value(v.models[i]) + "\n";
  };
  gauge("vllm:num_requests_running", "Requests in an iteration now (vLLM's name).",
        [](const Vllm::PerModel& m) { return std::to_string(m.running); });
  gauge("vllm:num_requests_waiting", "Requests admitted and waiting for their first iteration (vLLM's name).",
        [](const Vllm::PerModel& m) { return std::to_string(m.waiting); });
  gauge("vllm:kv_cache_usage_perc",
        "Fraction of the model's tenants' KV budget (kv_budget_tokens) its running requests hold, 0-1 (vLLM's "
        "name).",
        [](const Vllm::PerModel& m) {
          return num(m.kv_budget > 0 ? static_cast<double>(m.kv_tokens) / static_cast<double>(m.kv_budget) : 0);
        });
  auto counter = [&](const char* name, const char* help, auto value) {
    head(out, name, "counter", help);
    for (std::size_t i = 0; i < v.names.size(); ++i)
      out += std::string(name) + "{" + model_label(v.names[i]) + "} " + std::to_string(value(v.models[i])) + "\n";
  };
  counter("vllm:prompt_tokens_total", "Prompt tokens of ended requests (vLLM's name).",
          [](const Vllm::PerModel& m) { return m.prompt_tokens; });
  counter("vllm:generation_tokens_total", "Output tokens of ended requests (vLLM's name).",
          [](const Vllm::PerModel& m) { return m.generation_tokens; });
  head(out, "vllm:request_success_total", "counter",
       "Ended requests by finished_reason: stop (EOS, a stop string or token), length (max_tokens), abort (failed "
       "or cancelled) (vLLM's name).");
  for (std::size_t i = 0; i < v.names.size(); ++i) {
    const Vllm::PerModel& m = v.models[i];
    const std::string l = model_label(v.names[i]);
    out += "vllm:request_success_total{" + l + ",finished_reason=\"stop\"} " + std::to_string(m.stop) + "\n";
    out += "vllm:request_success_total{" + l + ",finished_reason=\"length\"} " + std::to_string(m.length) + "\n";
    out += "vllm:request_success_total{" + l + ",finished_reason=\"abort\"} " + std::to_string(m.abort) + "\n";
  }
  using ModelHistogram = Histogram Vllm::PerModel::*;  // which of a model's histograms
  auto histogram = [&](const char* name, const char* help, ModelHistogram h) {
    head(out, name, "histogram", help);
    for (std::size_t i = 0; i < v.names.size(); ++i) (v.models[i].*h).render(out, name, model_label(v.names[i]));
  };
  histogram("vllm:time_to_first_token_seconds", "Arrival to first output token (vLLM's name).", &Vllm::PerModel::ttft);
  histogram("vllm:inter_token_latency_seconds",
            "Gap between output tokens, each request's gaps counted at its mean (vLLM's name).", &Vllm::PerModel::itl);
  histogram("vllm:e2e_request_latency_seconds", "Arrival to last token of finished requests (vLLM's name).",
            &Vllm::PerModel::e2e);
  histogram("vllm:request_queue_time_seconds", "Arrival to first iteration (vLLM's name).", &Vllm::PerModel::queue);
}

}  // namespace slicesched::serving
