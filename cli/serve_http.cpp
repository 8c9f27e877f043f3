module;
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

module slicesched.cli.serve_http;

import slicesched.serving.server;
import slicesched.tokenizer;
import slicesched.compose.setup;
import slicesched.core.tokenizer;
import slicesched.engine.inbox;
import slicesched.engine.observer;
import slicesched.serving.api;
import slicesched.serving.batch_store;
import slicesched.serving.batches;
import slicesched.serving.metrics;
import slicesched.core.status;
import slicesched.core.ids;

namespace slicesched::cli {

namespace {

// HOST:PORT, the port in [0, 65535] (0: any free port).
std::pair<std::string, int> parse_listen(const std::string& listen) {
  const auto colon = listen.rfind(':');
  auto bad = [&] { fail("--listen: expected HOST:PORT (e.g. 127.0.0.1:8000), got '" + listen + "'"); };
  if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size()) bad();
  const std::string port = listen.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5) bad();
  const int p = std::stoi(port);
  if (p > 65535) bad();
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, p};
}

}  // namespace

PolicyRun serve_http(const ExperimentConfig& cfg, const PolicyConfig& policy, const PluginRegistries& plugins,
                     const CalibrationProfile* prior, const std::string& listen, const std::string& batch_store,
                     const LiveRunOptions& base, std::atomic<std::atomic<int>*>& wake, const HttpExtras& extras) {
  const auto [host, port] = parse_listen(listen);
  std::unique_ptr<serving::BatchStore> store;
  if (!batch_store.empty()) store = value_or_fail(serving::BatchStore::open(batch_store));

  std::vector<std::string> accels;
  for (const auto& a : cfg.accelerators) accels.push_back(a.name);
  serving::ServingMetrics metrics(accels);
  std::vector<serving::ServedModel> models;
  for (const ModelConfig& m : cfg.models) {
    // The shapes as the model has them: for a checkpoint (or hf_config)
    // its config.json's vocab_size and max_position_embeddings, not the
    // TOML keys' defaults (a 4096-token checkpoint was served with 8192).
    const auto made = value_or_fail(make_model(m));
    const ModelTokenizer mt = value_or_fail(model_tokenizer(m));
    serving::ServedModel served{.name = m.name,
                                .vocab = made->config().vocab,
                                .context_window = made->context_window(),
                                .max_prompt_tokens = cfg.serve.max_prompt_tokens,
                                .tokenizer = mt};
    served.eos_ids = value_or_fail(model_eos_ids(m, mt.tokenizer.get()));
    // Chat: the model's own template (or --chat-template), rendered by jinja2.
    if (auto tmpl = value_or_fail(model_chat_template(m, extras.chat_template)))
      served.chat_template = [t = std::make_shared<const ChatTemplate>(std::move(*tmpl))](
                                 const nlohmann::json& messages) -> Result<std::string> {
        return render_chat_template(t->text, messages.dump(), t->bos, t->eos);
      };
    models.push_back(std::move(served));
  }

  RequestInbox inbox;
  std::unique_ptr<serving::BatchRunner> runner;
  std::unique_ptr<serving::HttpServer> server;
  // Batch lines go to their model's offline tenants in turn.
  std::size_t next_offline = 0;
  auto route = [&models, &next_offline](const std::string& body) -> std::variant<serving::Routed, serving::ApiError> {
    auto parsed = serving::parse_completion(std::string_view(body), models);
    if (auto* e = std::get_if<serving::ApiError>(&parsed)) return *e;
    auto& r = std::get<serving::CompletionRequest>(parsed);
    const serving::ServedModel& m = models[r.model];
    if (m.offline.empty())
      return serving::ApiError{.message = "model '" + m.name + "' has no offline tenant in the served policy"};
    const std::uint32_t tenant = m.offline[next_offline++ % m.offline.size()];
    return serving::Routed{LiveRequest{tenant, std::move(r.prompt), r.max_tokens, nullptr, r.gen.sampling}, &m, r.gen};
  };

  // Health: the accelerators lost now (executor processes gone, or taken
  // by the config's [[faults]] until their duration ends); a model can be
  // served while one accelerator holding it is left.
  struct Lost {
    std::mutex mu;
    std::vector<bool> accel;
  };
  // The engine's word on each loss and return (its thread; the HTTP
  // threads read under the lock).
  struct LostObserver final : EngineObserver {
    std::shared_ptr<Lost> lost;
    void on_accelerator(AccelId a, bool down, Nanos) override {
      std::lock_guard lk(lost->mu);
      if (a < lost->accel.size()) lost->accel[a] = down;
    }
  };
  auto lost = std::make_shared<Lost>();
  lost->accel.assign(cfg.accelerators.size(), false);
  const auto held = residency(cfg);
  auto models_down = [lost, held, &cfg]() {
    std::lock_guard lk(lost->mu);
    std::vector<std::string> down;
    for (std::size_t m = 0; m < cfg.models.size(); ++m) {
      std::string names;
      bool left = false;
      for (AccelId a = 0; a < held.size(); ++a)
        if (std::find(held[a].begin(), held[a].end(), m) != held[a].end()) {
          left = left || !lost->accel[a];
          names += (names.empty() ? "" : ", ") + cfg.accelerators[a].name;
        }
      down.push_back(left ? std::string()
                          : "model '" + cfg.models[m].name +
                                "' cannot be served: every accelerator holding it is lost (" + names + ")");
    }
    return down;
  };

  LiveRunOptions opt = base;
  opt.progress = false;  // (no stream to count progress against)
  opt.on_lost = [lost](AccelId a) {
    std::lock_guard lk(lost->mu);
    if (a < lost->accel.size()) lost->accel[a] = true;
  };
  opt.inbox = &inbox;
  LostObserver lost_observer;
  lost_observer.lost = lost;
  EngineObserver* observers[] = {&metrics, &lost_observer};
  opt.observers = observers;
  opt.on_ready = [&](const std::vector<ServedTenant>& tenants) {
    std::vector<std::string> names;
    std::vector<bool> online;
    for (std::uint32_t t = 0; t < tenants.size(); ++t) {
      names.push_back(tenants[t].name);
      online.push_back(tenants[t].online);
      auto& m = models[tenants[t].model];
      (tenants[t].online ? m.online : m.offline).push_back(t);
      // The request priorities it takes (its [[tenants]] entry; an
      // instance "name#k" is its entry's).
      if (tenants[t].online) {
        const std::string base = tenants[t].name.substr(0, tenants[t].name.rfind('#'));
        std::pair<std::int64_t, std::int64_t> range{INT32_MIN, INT32_MAX};
        for (const TenantConfig& tc : cfg.tenants)
          if (tc.name == tenants[t].name || tc.name == base) range = {tc.request_priority_min, tc.request_priority_max};
        m.online_priorities.push_back(range);
      }
      // A request must fit every tenant that may run it.
      if (m.request_tokens_max == 0 || tenants[t].kv_budget_tokens < m.request_tokens_max)
        m.request_tokens_max = tenants[t].kv_budget_tokens;
    }
    std::vector<std::string> model_of;
    std::vector<std::int64_t> kv_budget;
    for (const ServedTenant& t : tenants) {
      model_of.push_back(models[t.model].name);
      kv_budget.push_back(t.kv_budget_tokens);
    }
    metrics.set_models(std::move(model_of), std::move(kv_budget));
    metrics.set_tenants(std::move(names), std::move(online));
    if (store) runner = std::make_unique<serving::BatchRunner>(*store, inbox, route, cfg.serve.batch_inflight);
    serving::ServerOptions sopt{.host = host,
                                .port = port,
                                .max_queue = cfg.serve.max_queue,
                                .retry_after_s = static_cast<int>(cfg.serve.retry_after_s),
                                .http_threads = static_cast<int>(cfg.serve.http_threads),
                                .max_body_bytes = static_cast<std::size_t>(cfg.serve.max_body_mib) << 20,
                                .header_timeout_s = static_cast<int>(cfg.serve.header_timeout_s),
                                .body_timeout_s = static_cast<int>(cfg.serve.body_timeout_s),
                                .max_connections = static_cast<int>(cfg.serve.max_connections),
                                .models_down = models_down,
                                .api_key = extras.api_key};
    server = std::make_unique<serving::HttpServer>(sopt, models, inbox, metrics, store.get(), runner.get());
    check(server->start());
    if (runner) runner->start();
    std::string served;
    for (const auto& m : models) served += (served.empty() ? "" : ", ") + m.name;
    std::fprintf(stderr, "slicesched: listening on http://%s:%d (models: %s; batch API %s)\n",
                 host.find(':') != std::string::npos ? ("[" + host + "]").c_str() : host.c_str(), server->port(),
                 served.c_str(), store ? ("on, " + batch_store).c_str() : "off");
    std::fflush(stderr);
  };

  wake = &inbox.counter();
  struct Unset {
    std::atomic<std::atomic<int>*>& wake;
    ~Unset() { wake = nullptr; }
  } unset{wake};
  // Whatever way the run ends: batch results that arrived are written, and
  // every waiting client is answered, before the server goes.
  auto shut = [&] {
    Status s = runner ? runner->stop() : Status::Ok();
    if (server) server->stop();
    return s;
  };
  PolicyRun run;
  try {
    run = run_live(cfg, policy, plugins, prior, opt);
  } catch (...) {
    (void)shut();
    throw;
  }
  check(shut());
  return run;
}

}  // namespace slicesched::cli
