module;
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

module slicesched.compose.live_http;

import slicesched.core.status;
import slicesched.core.ids;
import slicesched.core.graph;
import slicesched.core.gmg;
import slicesched.core.tokenizer;
import slicesched.config;
import slicesched.engine.observer;
import slicesched.engine.tenant;
import slicesched.engine.inbox;
import slicesched.compose.live;
import slicesched.serving.api;
import slicesched.serving.batch_store;
import slicesched.serving.batches;
import slicesched.serving.metrics;
import slicesched.serving.server;
import slicesched.tokenizer;

namespace slicesched {

namespace {

// HOST:PORT, the port in [0, 65535] (0: any free port).
Result<std::pair<std::string, int>> parse_listen(const std::string& listen) {
  const auto colon = listen.rfind(':');
  const Status bad = InvalidArgument("--listen: expected HOST:PORT (e.g. 127.0.0.1:8000), got '" + listen + "'");
  if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size()) return bad;
  const std::string port = listen.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5) return bad;
  const int p = std::stoi(port);
  if (p > 65535) return bad;
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return std::pair<std::string, int>{host, p};
}

std::vector<std::string> accel_names(const ExperimentConfig& cfg) {
  std::vector<std::string> names;
  for (const auto& a : cfg.accelerators) names.push_back(a.name);
  return names;
}

}  // namespace

void HttpFront::LostObserver::on_accelerator(AccelId a, bool down, Nanos t, Nanos back) {
  std::optional<std::chrono::steady_clock::time_point> due;
  if (down && back >= t) due = std::chrono::steady_clock::now() + std::chrono::nanoseconds(back - t);
  std::lock_guard lk(lost->mu);
  if (a >= lost->accel.size()) return;
  lost->accel[a] = down;
  lost->back[a] = due;
}

HttpFront::HttpFront(const ExperimentConfig& cfg, std::vector<std::string> accels)
    : cfg_(cfg), metrics_(std::move(accels)), lost_(std::make_shared<Lost>()) {
  lost_->accel.assign(cfg.accelerators.size(), false);
  lost_->back.assign(cfg.accelerators.size(), std::nullopt);
  lost_observer_.lost = lost_;
  observers_[0] = &metrics_;
  observers_[1] = &lost_observer_;
}

Result<std::unique_ptr<HttpFront>> HttpFront::open(const ExperimentConfig& cfg, const std::string& listen,
                                                   const std::string& batch_store, const HttpExtras& extras) {
  auto address = parse_listen(listen);
  if (!address.ok()) return address.status();
  std::unique_ptr<HttpFront> f(new HttpFront(cfg, accel_names(cfg)));
  f->host_ = address->first;
  f->port_ = address->second;
  f->batch_store_ = batch_store;
  f->extras_ = extras;
  if (!batch_store.empty()) {
    auto store = serving::BatchStore::open(batch_store);
    if (!store.ok()) return store.status();
    f->store_ = std::move(store).value();
  }
  for (const ModelConfig& m : cfg.models) {
    // The shapes as the model has them: for a checkpoint (or hf_config)
    // its config.json's vocab_size and max_position_embeddings, not the
    // TOML keys' defaults (a 4096-token checkpoint was served with 8192).
    auto made = make_model(m);
    if (!made.ok()) return made.status();
    auto mt = model_tokenizer(m);
    if (!mt.ok()) return mt.status();
    serving::ServedModel served{.name = m.name,
                                .vocab = made.value()->config().vocab,
                                .context_window = made.value()->context_window(),
                                .max_prompt_tokens = cfg.serve.max_prompt_tokens,
                                .tokenizer = mt.value()};
    auto eos = model_eos_ids(m, mt->tokenizer.get());
    if (!eos.ok()) return eos.status();
    served.eos_ids = std::move(eos).value();
    // Chat: the model's own template (or --chat-template), rendered by jinja2.
    auto tmpl = model_chat_template(m, extras.chat_template);
    if (!tmpl.ok()) return tmpl.status();
    if (tmpl.value()) {
      // Compiled now: a malformed template is the operator's error, not
      // every chat request's.
      if (Status st = check_chat_template(tmpl.value()->text); !st.ok())
        return Status(st.code(), tmpl.value()->source + ": " + st.message());
      served.chat_template = [t = std::make_shared<const ChatTemplate>(std::move(*tmpl.value()))](
                                 const nlohmann::ordered_json& messages) -> Result<std::string> {
        return render_chat_template(t->text, messages.dump(), t->bos, t->eos);
      };
    }
    f->models_.push_back(std::move(served));
  }
  return f;
}

HttpFront::~HttpFront() { (void)stop(); }

std::function<void(AccelId)> HttpFront::lost_hook() {
  return [lost = lost_](AccelId a) {
    std::lock_guard lk(lost->mu);
    if (a >= lost->accel.size()) return;
    lost->accel[a] = true;
    lost->back[a].reset();  // an executor is lost for good
  };
}

std::vector<serving::ModelDown> HttpFront::models_down() const {
  const auto held = residency(cfg_);
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lk(lost_->mu);
  std::vector<serving::ModelDown> down;
  for (std::size_t m = 0; m < cfg_.models.size(); ++m) {
    std::string names, first_back;
    bool left = false;
    std::optional<std::chrono::steady_clock::time_point> back;  // the soonest of its accelerators back
    for (AccelId a = 0; a < held.size(); ++a)
      if (std::find(held[a].begin(), held[a].end(), m) != held[a].end()) {
        left = left || !lost_->accel[a];
        names += (names.empty() ? "" : ", ") + cfg_.accelerators[a].name;
        if (lost_->back[a] && (!back || *lost_->back[a] < *back)) {
          back = lost_->back[a];
          first_back = cfg_.accelerators[a].name;
        }
      }
    if (left) {
      down.push_back({});
      continue;
    }
    std::string why = "model '" + cfg_.models[m].name + "' cannot be served: every accelerator holding it is lost";
    if (!back) {
      down.push_back({.why = why + " for good (" + names + ")"});
      continue;
    }
    // Whole seconds, rounded up: a client retrying then finds it back.
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(*back - now).count();
    const int in_s = static_cast<int>(std::max<std::int64_t>(1, (ns + 999'999'999) / 1'000'000'000));
    down.push_back({.why = why + " (" + names + "); " + first_back + " is due back in " + std::to_string(in_s) +
                           " s (its [[faults]] duration_s)",
                    .back_in_s = in_s});
  }
  return down;
}

Status HttpFront::start(LiveSession& session) {
  const std::vector<ServedTenant>& tenants = session.tenants();
  std::vector<std::string> names;
  std::vector<bool> online;
  for (std::uint32_t t = 0; t < tenants.size(); ++t) {
    names.push_back(tenants[t].name);
    online.push_back(tenants[t].online);
    auto& m = models_[tenants[t].model];
    (tenants[t].online ? m.online : m.offline).push_back(t);
    // The request priorities it takes (its [[tenants]] entry; an
    // instance "name#k" is its entry's).
    if (tenants[t].online) {
      const std::string base = tenants[t].name.substr(0, tenants[t].name.rfind('#'));
      std::pair<std::int64_t, std::int64_t> range{INT32_MIN, INT32_MAX};
      for (const TenantConfig& tc : cfg_.tenants)
        if (tc.name == tenants[t].name || tc.name == base) range = {tc.request_priority_min, tc.request_priority_max};
      m.online_priorities.push_back(range);
    }
    // A request goes to a tenant whose KV budget holds it: past the largest,
    // none does (refused at parsing); the others are chosen among.
    (tenants[t].online ? m.online_tokens_max : m.offline_tokens_max).push_back(tenants[t].kv_budget_tokens);
    m.request_tokens_max = std::max(m.request_tokens_max, tenants[t].kv_budget_tokens);
  }
  std::vector<std::string> model_of;
  std::vector<std::int64_t> kv_budget;
  for (const ServedTenant& t : tenants) {
    model_of.push_back(models_[t.model].name);
    kv_budget.push_back(t.kv_budget_tokens);
  }
  metrics_.set_models(std::move(model_of), std::move(kv_budget));
  metrics_.set_tenants(std::move(names), std::move(online));
  RequestInbox& inbox = session.inbox();
  if (store_) {
    // Batch lines go to their model's offline tenants in turn.
    auto route = [this](const std::string& body) -> std::variant<serving::Routed, serving::ApiError> {
      auto parsed = serving::parse_completion(std::string_view(body), models_);
      if (auto* e = std::get_if<serving::ApiError>(&parsed)) return *e;
      auto& r = std::get<serving::CompletionRequest>(parsed);
      const serving::ServedModel& m = models_[r.model];
      if (m.offline.empty())
        return serving::ApiError{.message = "model '" + m.name + "' has no offline tenant in the served policy"};
      // In turn, among those whose KV budget holds the line.
      const auto prompt = static_cast<std::int64_t>(r.prompt.size());
      auto first_holding = [&] {
        std::size_t k = 0;
        while (k < m.offline.size() &&
               !serving::ServedModel::holds(m.offline_tokens_max, (next_offline_ + k) % m.offline.size(),
                                            prompt + r.max_tokens))
          ++k;
        return k;
      };
      std::size_t k = first_holding();
      if (k == m.offline.size() && !m.offline_tokens_max.empty() &&
          serving::refit_default_max_tokens(
              r, false, *std::max_element(m.offline_tokens_max.begin(), m.offline_tokens_max.end())))
        k = first_holding();
      if (k == m.offline.size())
        return serving::ApiError{.message = "prompt (" + std::to_string(r.prompt.size()) + " tokens) + max_tokens (" +
                                            std::to_string(r.max_tokens) +
                                            ") exceeds what any offline tenant of model '" + m.name +
                                            "' may hold (their kv_budget_tokens)",
                                 .param = "max_tokens"};
      const std::size_t pick = (next_offline_ + k) % m.offline.size();
      next_offline_ = pick + 1;
      const std::uint32_t tenant = m.offline[pick];
      return serving::Routed{LiveRequest{tenant, std::move(r.prompt), r.max_tokens, nullptr, r.gen.sampling}, &m,
                             r.gen};
    };
    runner_ = std::make_unique<serving::BatchRunner>(*store_, inbox, route, cfg_.serve.batch_inflight);
  }
  serving::ServerOptions sopt{.host = host_,
                              .port = port_,
                              .max_queue = cfg_.serve.max_queue,
                              .retry_after_s = static_cast<int>(cfg_.serve.retry_after_s),
                              .http_threads = static_cast<int>(cfg_.serve.http_threads),
                              .max_body_bytes = static_cast<std::size_t>(cfg_.serve.max_body_mib) << 20,
                              .header_timeout_s = static_cast<int>(cfg_.serve.header_timeout_s),
                              .body_timeout_s = static_cast<int>(cfg_.serve.body_timeout_s),
                              .max_connections = static_cast<int>(cfg_.serve.max_connections),
                              .models_down = [this] { return models_down(); },
                              .api_key = extras_.api_key};
  server_ = std::make_unique<serving::HttpServer>(sopt, models_, inbox, metrics_, store_.get(), runner_.get());
  if (Status s = server_->start(); !s.ok()) return s;
  if (runner_) runner_->start();
  std::string served;
  for (const auto& m : models_) served += (served.empty() ? "" : ", ") + m.name;
  std::fprintf(stderr, "slicesched: listening on http://%s:%d (models: %s; batch API %s)\n",
               host_.find(':') != std::string::npos ? ("[" + host_ + "]").c_str() : host_.c_str(), server_->port(),
               served.c_str(), store_ ? ("on, " + batch_store_).c_str() : "off");
  std::fflush(stderr);
  return Status::Ok();
}

Status HttpFront::stop() {
  if (stopped_) return Status::Ok();
  stopped_ = true;
  Status s = runner_ ? runner_->stop() : Status::Ok();
  if (server_) server_->stop();
  return s;
}

}  // namespace slicesched
