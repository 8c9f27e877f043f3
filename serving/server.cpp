module;
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

module slicesched.serving.server;

namespace slicesched::serving {

namespace {

using json = nlohmann::json;

// How often a waiting handler looks whether the server stopped.
constexpr auto kWaitSlice = std::chrono::milliseconds(100);

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void reply_error(httplib::Response& res, const ApiError& e) { reply(res, e.status, error_body(e)); }

ApiError not_found(const std::string& what) { return ApiError{.status = 404, .message = what, .code = "not_found"}; }

json file_json(const FileInfo& f) {
  return {{"id", f.id},
          {"object", "file"},
          {"bytes", f.bytes},
          {"created_at", f.created_at},
          {"filename", f.filename},
          {"purpose", f.purpose},
          {"status", "processed"}};
}

json batch_json(const BatchInfo& b) {
  auto id_or_null = [](const std::string& s) { return s.empty() ? json() : json(s); };
  return {{"id", b.id},
          {"object", "batch"},
          {"endpoint", b.endpoint},
          {"errors", nullptr},
          {"input_file_id", b.input_file_id},
          {"completion_window", b.completion_window},
          {"status", b.status},
          {"output_file_id", id_or_null(b.output_file_id)},
          {"error_file_id", id_or_null(b.error_file_id)},
          {"created_at", b.created_at},
          {"in_progress_at", b.created_at},
          {"completed_at", b.completed_at > 0 ? json(b.completed_at) : json()},
          {"request_counts", {{"total", b.total}, {"completed", b.completed}, {"failed", b.failed}}},
          {"metadata", nullptr}};
}

// One HTTP completion in flight: the engine thread adds tokens and the end;
// the client's handler thread waits for them.
class Completion final : public RequestSink {
 public:
  Completion(std::atomic<std::int64_t>& admitted, std::atomic<std::int64_t>& tenant_inflight)
      : admitted_(admitted), tenant_inflight_(tenant_inflight) {}
  void on_token(std::int64_t token, Nanos) override {
    std::lock_guard lk(mu);
    tokens.push_back(token);
    cv.notify_all();
  }
  void on_end(std::int64_t prompt, std::int64_t, const std::string& err, Nanos) override {
    {
      std::lock_guard lk(mu);
      ended = true;
      error = err;
      prompt_tokens = prompt;
      cv.notify_all();
    }
    release();
  }
  // Frees the request's admission slot (once).
  void release() {
    if (!released.exchange(true)) {
      admitted_.fetch_sub(1);
      tenant_inflight_.fetch_sub(1);
    }
  }

  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::int64_t> tokens;
  bool ended = false;
  std::string error;
  std::int64_t prompt_tokens = 0;

 private:
  std::atomic<std::int64_t>& admitted_;
  std::atomic<std::int64_t>& tenant_inflight_;
  std::atomic<bool> released{false};
};

// Debian's libcpp-httplib is built with a listen backlog of 5
// (CPPHTTPLIB_LISTEN_BACKLOG, compiled into the library, not the header):
// 32 clients connecting at once overflow it, and the kernel drops or
// resets the excess connections. listen() again on the bound socket raises
// the backlog; the library does not hand out its descriptor, so it is found
// as the listening socket bound to `port`. Returns whether it was.
bool raise_backlog(int port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return false;
  bool raised = false;
  while (dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == dirfd(dir)) continue;
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int bound = -1;
    if (addr.ss_family == AF_INET) bound = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) bound = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (bound == port && ::listen(fd, SOMAXCONN) == 0) raised = true;
  }
  closedir(dir);
  return raised;
}

}  // namespace

struct HttpServer::Impl {
  ServerOptions opt;
  std::vector<ServedModel> models;
  RequestInbox& inbox;
  ServingMetrics& metrics;
  BatchStore* store;
  BatchRunner* runner;
  httplib::Server svr;
  std::thread thread;
  int port = 0;
  std::atomic<bool> stopped{false};
  std::atomic<std::int64_t> admitted{0};
  std::atomic<std::uint64_t> rejected_busy{0}, rejected_bad{0}, completions{0};
  std::vector<std::unique_ptr<std::atomic<std::int64_t>>> tenant_inflight;
  const std::int64_t started = unix_now();

  Impl(ServerOptions o, std::vector<ServedModel> m, RequestInbox& i, ServingMetrics& me, BatchStore* s, BatchRunner* r)
      : opt(std::move(o)), models(std::move(m)), inbox(i), metrics(me), store(s), runner(r) {
    std::uint32_t tenants = 0;
    for (const ServedModel& sm : models)
      for (const auto& list : {sm.online, sm.offline})
        for (std::uint32_t t : list) tenants = std::max(tenants, t + 1);
    for (std::uint32_t t = 0; t < tenants; ++t)
      tenant_inflight.push_back(std::make_unique<std::atomic<std::int64_t>>(0));
  }

  void routes();
  void completion(const httplib::Request& req, httplib::Response& res);
  void upload(const httplib::Request& req, httplib::Response& res);
  void create_batch(const httplib::Request& req, httplib::Response& res);
  // The lines of a batch input file, each body validated; or the first bad line.
  std::variant<std::vector<BatchLine>, ApiError> parse_jsonl(const std::string& content) const;
  // Waits until `c` ended or the server stopped; false when it stopped first.
  bool wait_end(Completion& c, std::unique_lock<std::mutex>& lk) {
    while (!c.ended) {
      if (stopped) return false;
      c.cv.wait_for(lk, kWaitSlice);
    }
    return true;
  }
};

int HttpServer::pick_tenant(const std::vector<std::uint32_t>& tenants, const std::vector<std::int64_t>& inflight) {
  int best = -1;
  for (std::uint32_t t : tenants)
    if (best < 0 || (t < inflight.size() && inflight[t] < inflight[static_cast<std::size_t>(best)]))
      best = static_cast<int>(t);
  return best;
}

HttpServer::HttpServer(ServerOptions opt, std::vector<ServedModel> models, RequestInbox& inbox, ServingMetrics& metrics,
                       BatchStore* store, BatchRunner* runner)
    : impl_(std::make_unique<Impl>(std::move(opt), std::move(models), inbox, metrics, store, runner)) {
  impl_->routes();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::port() const { return impl_->port; }

Status HttpServer::start() {
  Impl& m = *impl_;
  const int threads = m.opt.http_threads;
  m.svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  m.svr.set_payload_max_length(m.opt.max_body_bytes);
  m.port = m.opt.port == 0 ? m.svr.bind_to_any_port(m.opt.host)
                           : (m.svr.bind_to_port(m.opt.host, m.opt.port) ? m.opt.port : -1);
  if (m.port < 0)
    return FailedPrecondition("cannot listen on " + m.opt.host + ":" + std::to_string(m.opt.port) +
                              " (address in use, or not an address of this host?)");
  if (!raise_backlog(m.port))
    std::fprintf(stderr, "slicesched: warning: could not raise the listen backlog of port %d above 5\n", m.port);
  m.thread = std::thread([&m] { m.svr.listen_after_bind(); });
  return Status::Ok();
}

void HttpServer::stop() {
  Impl& m = *impl_;
  if (m.stopped.exchange(true)) return;
  // Requests pushed but never taken (the engine ended on an error) hear so.
  m.inbox.close();
  for (LiveRequest& r : m.inbox.take())
    if (r.sink) r.sink->on_end(static_cast<std::int64_t>(r.prompt.size()), 0, kCancelledError, 0);
  m.svr.stop();
  if (m.thread.joinable()) m.thread.join();
}

void HttpServer::Impl::routes() {
  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (inbox.closed())  // (a drain closed it)
      reply(res, 503, {{"status", "draining"}});
    else
      reply(res, 200, {{"status", "ok"}});
  });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    for (const ServedModel& m : models)
      data.push_back({{"id", m.name}, {"object", "model"}, {"created", started}, {"owned_by", "slicesched"}});
    reply(res, 200, {{"object", "list"}, {"data", data}});
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::string extra;
    extra += "# HELP slicesched_http_admitted Online completions admitted and not ended (max_queue bounds it).\n";
    extra +=
        "# TYPE slicesched_http_admitted gauge\nslicesched_http_admitted " + std::to_string(admitted.load()) + "\n";
    extra += "# HELP slicesched_http_max_queue The configured bound on admitted online completions.\n";
    extra +=
        "# TYPE slicesched_http_max_queue gauge\nslicesched_http_max_queue " + std::to_string(opt.max_queue) + "\n";
    extra += "# HELP slicesched_http_completions_total Completions admitted.\n";
    extra += "# TYPE slicesched_http_completions_total counter\nslicesched_http_completions_total " +
             std::to_string(completions.load()) + "\n";
    extra += "# HELP slicesched_http_rejected_total Requests refused: 429 (queue full) or 4xx (bad request).\n";
    extra += "# TYPE slicesched_http_rejected_total counter\n";
    extra += "slicesched_http_rejected_total{reason=\"queue_full\"} " + std::to_string(rejected_busy.load()) + "\n";
    extra += "slicesched_http_rejected_total{reason=\"bad_request\"} " + std::to_string(rejected_bad.load()) + "\n";
    if (runner) {
      extra += "# HELP slicesched_batch_lines_inflight Batch request lines in the engine now.\n";
      extra += "# TYPE slicesched_batch_lines_inflight gauge\nslicesched_batch_lines_inflight " +
               std::to_string(runner->inflight()) + "\n";
    }
    res.set_content(metrics.render(extra), "text/plain; version=0.0.4");
  });
  svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { completion(req, res); });

  auto no_store = [this](httplib::Response& res) {
    if (store) return false;
    reply_error(res, not_found("the batch API is off: this server has no [serve] batch_store"));
    return true;
  };
  svr.Post("/v1/files", [this, no_store](const httplib::Request& req, httplib::Response& res) {
    if (!no_store(res)) upload(req, res);
  });
  svr.Get(R"(/v1/files/([A-Za-z0-9_\-]+))", [this, no_store](const httplib::Request& req, httplib::Response& res) {
    if (no_store(res)) return;
    auto f = store->file(req.matches[1]);
    if (!f.ok())
      return reply_error(res, ApiError{.status = 500, .message = f.status().message(), .type = "server_error"});
    if (!f.value()) return reply_error(res, not_found("no file '" + std::string(req.matches[1]) + "'"));
    reply(res, 200, file_json(*f.value()));
  });
  svr.Get(R"(/v1/files/([A-Za-z0-9_\-]+)/content)",
          [this, no_store](const httplib::Request& req, httplib::Response& res) {
            if (no_store(res)) return;
            auto c = store->file_content(req.matches[1]);
            if (!c.ok())
              return reply_error(res, ApiError{.status = 500, .message = c.status().message(), .type = "server_error"});
            if (!c.value()) return reply_error(res, not_found("no file '" + std::string(req.matches[1]) + "'"));
            res.set_content(*c.value(), "application/jsonl");
          });
  svr.Post("/v1/batches", [this, no_store](const httplib::Request& req, httplib::Response& res) {
    if (!no_store(res)) create_batch(req, res);
  });
  svr.Get("/v1/batches", [this, no_store](const httplib::Request&, httplib::Response& res) {
    if (no_store(res)) return;
    auto all = store->batches();
    if (!all.ok())
      return reply_error(res, ApiError{.status = 500, .message = all.status().message(), .type = "server_error"});
    json data = json::array();
    for (const BatchInfo& b : all.value()) data.push_back(batch_json(b));
    reply(res, 200, {{"object", "list"}, {"data", data}, {"has_more", false}});
  });
  svr.Get(R"(/v1/batches/([A-Za-z0-9_\-]+))", [this, no_store](const httplib::Request& req, httplib::Response& res) {
    if (no_store(res)) return;
    auto b = store->batch(req.matches[1]);
    if (!b.ok())
      return reply_error(res, ApiError{.status = 500, .message = b.status().message(), .type = "server_error"});
    if (!b.value()) return reply_error(res, not_found("no batch '" + std::string(req.matches[1]) + "'"));
    reply(res, 200, batch_json(*b.value()));
  });

  // An unknown path gets a JSON error too (a handler's own error keeps its body).
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    reply_error(res, ApiError{.status = res.status, .message = "no endpoint " + req.method + " " + req.path});
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    reply_error(res, ApiError{.status = 500, .message = what, .type = "server_error"});
  });
}

void HttpServer::Impl::completion(const httplib::Request& req, httplib::Response& res) {
  auto parsed = parse_completion(std::string_view(req.body), models);
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    ++rejected_bad;
    return reply_error(res, *e);
  }
  CompletionRequest r = std::get<CompletionRequest>(std::move(parsed));
  const ServedModel& model = models[r.model];
  std::vector<std::int64_t> loads;
  for (const auto& t : tenant_inflight) loads.push_back(t->load());
  const int tenant = HttpServer::pick_tenant(model.online, loads);
  if (tenant < 0)
    return reply_error(res,
                       ApiError{.status = 400,
                                .message = "model '" + model.name +
                                           "' has no online tenant in the served policy (it takes batch jobs only)",
                                .param = "model"});
  // Admission: a slot below max_queue, or 429 now.
  if (admitted.fetch_add(1) >= opt.max_queue) {
    admitted.fetch_sub(1);
    ++rejected_busy;
    res.set_header("Retry-After", std::to_string(opt.retry_after_s));
    return reply_error(res, ApiError{.status = 429,
                                     .message = "server busy: " + std::to_string(opt.max_queue) +
                                                " requests in flight ([serve] max_queue); retry after " +
                                                std::to_string(opt.retry_after_s) + " s",
                                     .type = "rate_limit_error",
                                     .code = "queue_full"});
  }
  tenant_inflight[static_cast<std::size_t>(tenant)]->fetch_add(1);
  auto c = std::make_shared<Completion>(admitted, *tenant_inflight[static_cast<std::size_t>(tenant)]);
  const std::int64_t prompt_tokens = static_cast<std::int64_t>(r.prompt.size());
  if (!inbox.push(LiveRequest{static_cast<std::uint32_t>(tenant), std::move(r.prompt), r.max_tokens, c})) {
    c->release();
    return reply_error(
        res,
        ApiError{.status = 503, .message = "the server is shutting down; no new requests", .type = "server_error"});
  }
  const std::uint64_t n = ++completions;  // (unique per server run, whatever other threads do)
  const std::string id = "cmpl-" + std::to_string(n) + "-" + std::to_string(unix_now());
  const std::int64_t created = unix_now();
  if (!r.stream) {
    std::unique_lock lk(c->mu);
    if (!wait_end(*c, lk))
      return reply_error(res, ApiError{.status = 503, .message = "the server stopped", .type = "server_error"});
    if (!c->error.empty())
      return reply_error(res, ApiError{.status = 500, .message = c->error, .type = "server_error"});
    return reply(res, 200,
                 completion_body(id, created, model.name, prompt_tokens, c->tokens, decode(model, c->tokens)));
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [this, c, id, created, &model, prompt_tokens, usage_chunk = r.include_usage,
                            sent = std::size_t{0}](std::size_t, httplib::DataSink& sink) mutable {
        auto send = [&](const json& j) {
          const std::string ev = "data: " + j.dump() + "\n\n";
          return sink.write(ev.data(), ev.size());
        };
        std::unique_lock lk(c->mu);
        while (sent == c->tokens.size() && !c->ended && !stopped) c->cv.wait_for(lk, kWaitSlice);
        // One event per token, in order.
        std::vector<std::int64_t> fresh(c->tokens.begin() + static_cast<std::ptrdiff_t>(sent), c->tokens.end());
        const bool ended = c->ended;
        const std::string error = ended ? c->error : (stopped ? std::string("the server stopped") : std::string());
        lk.unlock();
        for (std::int64_t t : fresh) {
          const std::int64_t one[] = {t};
          if (!send(chunk_body(id, created, model.name, one, decode(model, one)))) return false;
          ++sent;
        }
        if (!ended && error.empty()) return sink.is_writable();
        if (!error.empty()) {
          send(error_body(ApiError{.status = 500, .message = error, .type = "server_error"}));
        } else {
          send(final_chunk_body(id, created, model.name, prompt_tokens, static_cast<std::int64_t>(sent)));
          if (usage_chunk) {
            json u = final_chunk_body(id, created, model.name, prompt_tokens, static_cast<std::int64_t>(sent));
            u["choices"] = json::array();
            send(u);
          }
        }
        const std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
        sink.done();
        return true;
      });
}

std::variant<std::vector<BatchLine>, ApiError> HttpServer::Impl::parse_jsonl(const std::string& content) const {
  std::vector<BatchLine> lines;
  std::set<std::string> ids;
  std::size_t pos = 0, number = 0;
  auto bad = [&](const std::string& what) {
    return ApiError{.status = 400, .message = "line " + std::to_string(number) + ": " + what, .param = "file"};
  };
  while (pos < content.size()) {
    std::size_t end = content.find('\n', pos);
    if (end == std::string::npos) end = content.size();
    std::string text = content.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded()) return bad("not valid JSON");
    if (!j.is_object()) return bad("expected a JSON object");
    const auto cid = j.find("custom_id");
    if (cid == j.end() || !cid->is_string()) return bad("custom_id: required (a string)");
    if (!ids.insert(cid->get<std::string>()).second)
      return bad("custom_id '" + cid->get<std::string>() + "' is used twice (each line needs its own)");
    if (const auto m = j.find("method"); m != j.end() && *m != "POST") return bad("method: expected \"POST\"");
    const auto url = j.find("url");
    if (url == j.end() || *url != "/v1/completions") return bad("url: expected \"/v1/completions\"");
    const auto body = j.find("body");
    if (body == j.end()) return bad("body: required (a completion request)");
    json b = *body;
    if (b.is_object() && b.contains("stream") && b["stream"] == true)
      return bad("body: stream is not allowed in a batch");
    auto parsed = parse_completion(b, models);
    if (auto* e = std::get_if<ApiError>(&parsed)) return bad("body: " + e->message);
    const ServedModel& m = models[std::get<CompletionRequest>(parsed).model];
    if (m.offline.empty())
      return bad("body: model '" + m.name + "' has no offline tenant in the served policy to run batch jobs");
    lines.push_back({cid->get<std::string>(), b.dump()});
  }
  if (lines.empty()) return ApiError{.status = 400, .message = "the file has no request lines", .param = "file"};
  return lines;
}

void HttpServer::Impl::upload(const httplib::Request& req, httplib::Response& res) {
  if (!req.is_multipart_form_data() || !req.has_file("file"))
    return reply_error(
        res, ApiError{.message = "expected a multipart form with a 'file' (and purpose=batch)", .param = "file"});
  const auto purpose = req.has_file("purpose") ? req.get_file_value("purpose").content : std::string();
  if (purpose != "batch")
    return reply_error(res,
                       ApiError{.message = "purpose: expected \"batch\", got \"" + purpose + "\"", .param = "purpose"});
  const auto file = req.get_file_value("file");
  auto lines = parse_jsonl(file.content);
  if (auto* e = std::get_if<ApiError>(&lines)) {
    ++rejected_bad;
    return reply_error(res, *e);
  }
  auto f = store->add_file(file.filename.empty() ? "upload.jsonl" : file.filename, purpose, file.content);
  if (!f.ok())
    return reply_error(res, ApiError{.status = 500, .message = f.status().message(), .type = "server_error"});
  reply(res, 200, file_json(f.value()));
}

void HttpServer::Impl::create_batch(const httplib::Request& req, httplib::Response& res) {
  json j = json::parse(req.body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return reply_error(res, ApiError{.message = "the request body must be a JSON object"});
  const auto fid = j.find("input_file_id");
  if (fid == j.end() || !fid->is_string())
    return reply_error(res, ApiError{.message = "input_file_id: required (a string)", .param = "input_file_id"});
  const auto endpoint = j.find("endpoint");
  if (endpoint == j.end() || *endpoint != "/v1/completions")
    return reply_error(res, ApiError{.message = "endpoint: expected \"/v1/completions\"", .param = "endpoint"});
  std::string window = "24h";
  if (const auto w = j.find("completion_window"); w != j.end()) {
    if (*w != "24h")
      return reply_error(res, ApiError{.message = "completion_window: expected \"24h\"", .param = "completion_window"});
  }
  if (inbox.closed())
    return reply_error(
        res, ApiError{.status = 503, .message = "the server is shutting down; no new batches", .type = "server_error"});
  auto info = store->file(fid->get<std::string>());
  if (!info.ok())
    return reply_error(res, ApiError{.status = 500, .message = info.status().message(), .type = "server_error"});
  if (!info.value() || info.value()->purpose != "batch")
    return reply_error(res, ApiError{.status = 404,
                                     .message = "no batch input file '" + fid->get<std::string>() + "'",
                                     .param = "input_file_id"});
  auto content = store->file_content(fid->get<std::string>());
  if (!content.ok() || !content.value())
    return reply_error(res, ApiError{.status = 500, .message = "cannot read the input file", .type = "server_error"});
  auto lines = parse_jsonl(*content.value());
  if (auto* e = std::get_if<ApiError>(&lines)) return reply_error(res, *e);
  auto b =
      store->create_batch(fid->get<std::string>(), "/v1/completions", window, std::get<std::vector<BatchLine>>(lines));
  if (!b.ok())
    return reply_error(res, ApiError{.status = 500, .message = b.status().message(), .type = "server_error"});
  if (runner) runner->wake();
  reply(res, 200, batch_json(b.value()));
}

}  // namespace slicesched::serving
