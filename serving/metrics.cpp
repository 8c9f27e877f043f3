module;
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

module slicesched.serving.metrics;
import slicesched.core.ids;

namespace slicesched::serving {

namespace prom {

std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

std::string label(const char* key, const std::string& value) {
  std::string v;
  for (char c : value) {
    if (c == '\\' || c == '"') v += '\\';
    if (c == '\n') {
      v += "\\n";
      continue;
    }
    v += c;
  }
  return std::string(key) + "=\"" + v + "\"";
}

void head(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace prom

using prom::head;
using prom::label;
using prom::num;

void Histogram::add(double v) {
  std::size_t b = 0;
  while (b < kBounds.size() && v > kBounds[b]) ++b;
  if (b < kBounds.size()) ++counts_[b];
  ++count_;
  sum_ += v;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  const std::string sep = labels.empty() ? "" : ",";
  std::uint64_t cum = 0;
  for (std::size_t b = 0; b < kBounds.size(); ++b) {
    cum += counts_[b];
    out += name + "_bucket{" + labels + sep + "le=\"" + num(kBounds[b]) + "\"} " + std::to_string(cum) + "\n";
  }
  out += name + "_bucket{" + labels + sep + "le=\"+Inf\"} " + std::to_string(count_) + "\n";
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out += name + "_sum" + braces + " " + num(sum_) + "\n";
  out += name + "_count" + braces + " " + std::to_string(count_) + "\n";
}

ServingMetrics::ServingMetrics(std::vector<std::string> accels)
    : accels_(std::move(accels)), busy_s_(accels_.size(), 0.0) {}

void ServingMetrics::set_tenants(std::vector<std::string> tenants, std::vector<bool> online) {
  std::lock_guard lk(mu_);
  tenants_ = std::move(tenants);
  online_ = std::move(online);
  per_tenant_.assign(tenants_.size(), {});
}

std::int64_t ServingMetrics::second_now() const {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start_).count();
}

void ServingMetrics::on_request(const RequestEvent& e, const RequestRecord& r) {
  std::lock_guard lk(mu_);
  vllm_request(e, r);
  if (e.tenant >= per_tenant_.size()) return;
  PerTenant& t = per_tenant_[e.tenant];
  const bool online = online_[e.tenant];
  switch (e.kind) {
    case RequestEvent::Kind::kArrived:
      ++t.arrived;
      break;
    case RequestEvent::Kind::kFirstToken:
      if (online) ttft_.add(static_cast<double>(r.first_token - r.arrival) / 1e9);
      break;
    case RequestEvent::Kind::kDone:
    case RequestEvent::Kind::kFailed: {
      ++(e.kind == RequestEvent::Kind::kDone ? t.done : t.failed);
      t.tokens += r.generated;
      if (online && e.kind == RequestEvent::Kind::kDone && r.generated > 1 && r.first_token >= 0)
        tpot_.add(static_cast<double>(r.done - r.first_token) / 1e9 / static_cast<double>(r.generated - 1));
      // Tokens count for the second the request ended in: the rate is of
      // requests' output, as clients see it.
      const std::int64_t s = second_now();
      if (window_.empty() || window_.back().first != s) window_.emplace_back(s, 0);
      window_.back().second += r.generated;
      while (!window_.empty() && window_.front().first <= s - kWindowS) window_.pop_front();
      break;
    }
    case RequestEvent::Kind::kIteration:
      break;
  }
}

void ServingMetrics::on_finish(const RunRecord& r) {
  if (r.to != kNoAccel) return;  // transfers are not operator time
  std::lock_guard lk(mu_);
  if (r.accel < busy_s_.size()) busy_s_[r.accel] += static_cast<double>(r.finish - r.start) / 1e9;
}

void ServingMetrics::on_decision(const Gmg&, const Decision& d) {
  std::lock_guard lk(mu_);
  ++rounds_;
  rounds_issued_ += d.pick.has_value();
}

std::string ServingMetrics::render(const std::string& extra) const {
  std::lock_guard lk(mu_);
  const double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string out;
  head(out, "slicesched_uptime_seconds", "gauge", "Seconds since the server started serving.");
  out += "slicesched_uptime_seconds " + num(up) + "\n";
  head(out, "slicesched_queue_depth", "gauge", "Requests a tenant holds: arrived and not ended (waiting or running).");
  for (std::size_t t = 0; t < tenants_.size(); ++t) {
    const PerTenant& p = per_tenant_[t];
    out += "slicesched_queue_depth{" + label("tenant", tenants_[t]) + "} " +
           std::to_string(p.arrived - p.done - p.failed) + "\n";
  }
  head(out, "slicesched_requests_total", "counter", "Requests by tenant and state (arrived, done, failed).");
  for (std::size_t t = 0; t < tenants_.size(); ++t) {
    const PerTenant& p = per_tenant_[t];
    const std::string l = label("tenant", tenants_[t]);
    out += "slicesched_requests_total{" + l + ",state=\"arrived\"} " + std::to_string(p.arrived) + "\n";
    out += "slicesched_requests_total{" + l + ",state=\"done\"} " + std::to_string(p.done) + "\n";
    out += "slicesched_requests_total{" + l + ",state=\"failed\"} " + std::to_string(p.failed) + "\n";
  }
  head(out, "slicesched_generated_tokens_total", "counter", "Output tokens of ended requests, by tenant.");
  for (std::size_t t = 0; t < tenants_.size(); ++t)
    out += "slicesched_generated_tokens_total{" + label("tenant", tenants_[t]) + "} " +
           std::to_string(per_tenant_[t].tokens) + "\n";
  std::int64_t recent = 0;
  const std::int64_t s = second_now();
  for (const auto& [sec, n] : window_)
    if (sec > s - kWindowS) recent += n;
  head(out, "slicesched_tokens_per_second", "gauge",
       "Output tokens of requests that ended in the last 10 s (or since the start), per second.");
  out += "slicesched_tokens_per_second " +
         num(static_cast<double>(recent) / std::min<double>(kWindowS, std::max(up, 1e-9))) + "\n";
  head(out, "slicesched_ttft_seconds", "histogram", "Time to first token of online requests (queue + prefill).");
  ttft_.render(out, "slicesched_ttft_seconds", "");
  head(out, "slicesched_tpot_seconds", "histogram", "Time per output token after the first, online requests.");
  tpot_.render(out, "slicesched_tpot_seconds", "");
  head(out, "slicesched_accelerator_busy_seconds_total", "counter", "Operator time run on each accelerator.");
  for (std::size_t a = 0; a < accels_.size(); ++a)
    out +=
        "slicesched_accelerator_busy_seconds_total{" + label("accelerator", accels_[a]) + "} " + num(busy_s_[a]) + "\n";
  head(out, "slicesched_accelerator_busy_fraction", "gauge",
       "Busy fraction of each accelerator since the server started.");
  for (std::size_t a = 0; a < accels_.size(); ++a)
    out += "slicesched_accelerator_busy_fraction{" + label("accelerator", accels_[a]) + "} " +
           num(up > 0 ? busy_s_[a] / up : 0) + "\n";
  head(out, "slicesched_scheduling_rounds_total", "counter",
       "Scheduling rounds (paper Algorithm 1): a batch of operators tried against the candidate placements.");
  out += "slicesched_scheduling_rounds_total " + std::to_string(rounds_) + "\n";
  head(out, "slicesched_scheduling_rounds_issued_total", "counter", "Scheduling rounds that issued their batch.");
  out += "slicesched_scheduling_rounds_issued_total " + std::to_string(rounds_issued_) + "\n";
  vllm_render(out);
  out += extra;
  return out;
}

}  // namespace slicesched::serving
