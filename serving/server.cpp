module;
#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <malloc.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
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
import slicesched.core.ids;
import slicesched.core.sampling;
import slicesched.workload.trace;

namespace slicesched::serving {

namespace {

using json = nlohmann::ordered_json;

// How often a waiting handler looks whether the server stopped.
constexpr auto kWaitSlice = std::chrono::milliseconds(100);

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump_text(body), "application/json");
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

// `store_error`: why the store refuses writes now ("" when it takes them):
// an unfinished batch is paused meanwhile, and says why in its errors.
json batch_json(const BatchInfo& b, const std::string& store_error = "") {
  const bool cancelled = b.status == "cancelling" || b.status == "cancelled";
  auto id_or_null = [](const std::string& s) { return s.empty() ? json() : json(s); };
  json errors = nullptr;
  if (!store_error.empty() && b.status == "in_progress")
    errors = {{"object", "list"},
              {"data", json::array({{{"code", "store_write_failed"},
                                     {"message", "paused: " + store_error +
                                                     " (results are kept and written again; no new line starts)"},
                                     {"param", nullptr},
                                     {"line", nullptr}}})}};
  return {{"id", b.id},
          {"object", "batch"},
          {"endpoint", b.endpoint},
          {"errors", errors},
          {"input_file_id", b.input_file_id},
          {"completion_window", b.completion_window},
          {"status", b.status},
          {"output_file_id", id_or_null(b.output_file_id)},
          {"error_file_id", id_or_null(b.error_file_id)},
          {"created_at", b.created_at},
          {"in_progress_at", b.created_at},
          {"completed_at", b.completed_at > 0 ? json(b.completed_at) : json()},
          {"expires_at", b.expires_at > 0 ? json(b.expires_at) : json()},
          {"cancelling_at", cancelled ? json(b.ended_at > 0 ? b.ended_at : b.created_at) : json()},
          {"cancelled_at", b.status == "cancelled" ? json(b.ended_at) : json()},
          {"expired_at", b.status == "expired" ? json(b.ended_at) : json()},
          {"request_counts", {{"total", b.total}, {"completed", b.completed}, {"failed", b.failed}}},
          {"metadata", json::parse(b.metadata, nullptr, false).is_discarded() ? json() : json::parse(b.metadata)}};
}

// One HTTP completion in flight: the engine thread adds tokens and the end;
// the client's handler thread waits for them.
class Completion final : public RequestSink {
 public:
  Completion(std::atomic<std::int64_t>& admitted, std::atomic<std::int64_t>& tenant_inflight, const ServedModel& model,
             const GenerationOptions& gen)
      : watch(model, gen), admitted_(admitted), tenant_inflight_(tenant_inflight) {}
  void on_token(std::int64_t token, Nanos) override {
    std::lock_guard lk(mu);
    tokens.push_back(token);
    watch.add(token);
    cv.notify_all();
  }
  void on_logprob(const TokenLogprob& lp) override {
    std::lock_guard lk(mu);
    logprobs.push_back(lp);
  }
  bool complete() const override {
    std::lock_guard lk(mu);
    return watch.stopped();
  }
  void on_end(std::int64_t prompt, std::int64_t, const std::string& err, Nanos) override {
    {
      std::lock_guard lk(mu);
      watch.end();
      ended = true;
      error = err;
      prompt_tokens = prompt;
      cv.notify_all();
    }
    release();
  }
  // Nobody waits for the result any more (the client disconnected): the
  // engine ends the request (RequestSink::abandoned).
  bool abandoned() const override { return gone.load(); }
  void abandon() { gone = true; }
  // Frees the request's admission slot (once).
  void release() {
    if (!released.exchange(true)) {
      admitted_.fetch_sub(1);
      tenant_inflight_.fetch_sub(1);
    }
  }

  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<std::int64_t> tokens;
  std::vector<TokenLogprob> logprobs;  // parallel to tokens when asked for
  StopWatch watch;
  bool ended = false;
  std::string error;
  std::int64_t prompt_tokens = 0;

 private:
  std::atomic<std::int64_t>& admitted_;
  std::atomic<std::int64_t>& tenant_inflight_;
  std::atomic<bool> released{false}, gone{false};
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

using Clock = std::chrono::steady_clock;

// A request body this large is followed by malloc_trim.
constexpr std::size_t kTrimAfterBytes = 1u << 20;

// The front door's limits and what they refused (read by /metrics).
struct Guard {
  std::chrono::seconds header_timeout{10}, body_timeout{60};
  std::size_t max_body = 64u << 20;
  int max_connections = 512;
  std::atomic<bool> stopping{false};  // the server stops: reads give up at once
  std::atomic<int> open{0};
  std::atomic<std::uint64_t> header_timeouts{0}, body_timeouts{0}, too_large{0}, too_many{0};
};

// One connection's state, shared by its stream and (through t_conn, on the
// connection's thread) the server's handlers, which move it along:
// headers (a deadline), body (a deadline and a byte bound), handling (none).
struct Conn {
  enum class Phase { kHeaders, kBody, kHandling };
  explicit Conn(int f) : fd(f) {}
  int fd;
  Phase phase = Phase::kHeaders;
  Clock::time_point deadline{};
  std::size_t body_read = 0;
  bool got_bytes = false;      // this request sent something
  bool dead = false;           // a refusal went out: nothing more is written, the connection closes
  bool close = false;          // close after this request
  bool unstated_body = false;  // no Content-Length, not chunked: the body is empty
};
thread_local Conn* t_conn = nullptr;

// 503 while the server drains (a signal) or for a request its shutdown cut
// short: another replica can take it now (Retry-After), and not on this
// connection, which closes after the reply instead of waiting on a server
// that refuses everything until it exits.
void refuse_draining(httplib::Response& res, const std::string& message) {
  res.set_header("Retry-After", "1");
  if (t_conn) t_conn->close = true;
  reply_error(res, ApiError{.status = 503, .message = message, .type = "server_error"});
}

std::string http_reason(int status) {
  switch (status) {
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

// Writes a whole response with OpenAI's error body straight to the socket
// (a refusal before httplib wrote anything), best effort, within a second.
void write_refusal(int fd, const ApiError& e, int retry_after_s = 0) {
  const std::string body = dump_text(error_body(e));
  std::string r =
      "HTTP/1.1 " + std::to_string(e.status) + " " + http_reason(e.status) +
      "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n";
  if (retry_after_s > 0) r += "Retry-After: " + std::to_string(retry_after_s) + "\r\n";
  r += "\r\n" + body;
  std::size_t sent = 0;
  const auto until = Clock::now() + std::chrono::seconds(1);
  while (sent < r.size() && Clock::now() < until) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::send(fd, r.data() + sent, r.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    sent += static_cast<std::size_t>(n);
  }
}

ApiError timeout_error(const Conn& c, const Guard& g) {
  const bool headers = c.phase == Conn::Phase::kHeaders;
  return ApiError{.status = 408,
                  .message = std::string(headers ? "the request line and headers" : "the request body") +
                             " did not arrive within " +
                             std::to_string(headers ? g.header_timeout.count() : g.body_timeout.count()) +
                             " s ([serve] " + (headers ? "header_timeout_s" : "body_timeout_s") + ")",
                  .code = headers ? "header_timeout" : "body_timeout"};
}

ApiError too_large_error(const Guard& g) {
  return ApiError{
      .status = 413,
      .message = "the request body is larger than " + std::to_string(g.max_body >> 20) + " MiB ([serve] max_body_mib)",
      .code = "body_too_large"};
}

// A socket stream with the front door's deadlines: a read past the phase's
// deadline answers 408 itself (when the client sent anything) and fails; a
// body read past max_body answers 413 and fails. Reads are buffered (httplib
// reads headers a byte at a time).
class GuardedStream final : public httplib::Stream {
 public:
  GuardedStream(Conn& c, Guard& g) : c_(c), g_(g) {}

  bool is_readable() const override {
    pollfd p{c_.fd, POLLIN, 0};
    return pos_ < end_ || ::poll(&p, 1, 0) > 0;
  }
  // False once the client hung up (its half closed, or the connection
  // reset): a stream to it stops there.
  bool is_writable() const override {
    if (c_.dead) return false;
    pollfd p{c_.fd, POLLOUT | POLLRDHUP, 0};
    if (::poll(&p, 1, kWriteTimeoutMs) <= 0) return false;
    return !(p.revents & (POLLRDHUP | POLLHUP | POLLERR));
  }
  ssize_t read(char* ptr, size_t size) override {
    if (c_.dead) return -1;
    if (c_.unstated_body && c_.phase == Conn::Phase::kBody) return 0;
    if (pos_ == end_) {
      const ssize_t n = fill();
      if (n <= 0) return n;
    }
    const std::size_t n = std::min(size, end_ - pos_);
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    if (c_.phase == Conn::Phase::kBody) {
      c_.body_read += n;
      if (c_.body_read > g_.max_body) {
        ++g_.too_large;
        refuse(too_large_error(g_));
        return -1;
      }
    }
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (c_.dead) return -1;
    for (;;) {
      pollfd p{c_.fd, POLLOUT, 0};
      const int r = ::poll(&p, 1, kWriteTimeoutMs);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return -1;
      const ssize_t n = ::send(c_.fd, ptr, size, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      return n;
    }
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(false, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(true, ip, port); }
  socket_t socket() const override { return c_.fd; }

  // Bytes read from the socket and not yet taken (a pipelined request).
  bool buffered() const { return pos_ < end_; }
  // Answers `e` and marks the connection dead (nothing after it goes out).
  void refuse(const ApiError& e) {
    if (!c_.dead) write_refusal(c_.fd, e);
    c_.dead = c_.close = true;
  }

 private:
  static constexpr int kWriteTimeoutMs = 10000;  // a client that reads nothing for this long is gone
  static constexpr int kIdleReadMs = 30000;      // while handling (never, in practice: handlers do not read)
  static constexpr int kSliceMs = 100;

  ssize_t fill() {
    const auto idle_until = Clock::now() + std::chrono::milliseconds(kIdleReadMs);
    for (;;) {
      if (g_.stopping) return -1;
      const bool timed = c_.phase != Conn::Phase::kHandling;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>((timed ? c_.deadline : idle_until) - Clock::now())
              .count();
      if (left <= 0) return timed ? expire() : -1;
      pollfd p{c_.fd, POLLIN, 0};
      // (in slices: a stopping server is seen within one)
      const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, kSliceMs)));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return -1;
      if (r == 0) continue;
      const ssize_t n = ::recv(c_.fd, buf_, sizeof buf_, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        c_.got_bytes = true;
        pos_ = 0;
        end_ = static_cast<std::size_t>(n);
      }
      return n;
    }
  }
  ssize_t expire() {
    // An idle keep-alive connection that sent nothing just closes.
    if (c_.got_bytes || c_.phase == Conn::Phase::kBody) {
      ++(c_.phase == Conn::Phase::kHeaders ? g_.header_timeouts : g_.body_timeouts);
      refuse(timeout_error(c_, g_));
    }
    c_.dead = c_.close = true;
    return -1;
  }
  void address(bool local, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    ip.clear();
    port = -1;
    if ((local ? getsockname(c_.fd, reinterpret_cast<sockaddr*>(&a), &len)
               : getpeername(c_.fd, reinterpret_cast<sockaddr*>(&a), &len)) != 0)
      return;
    char s[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
      inet_ntop(AF_INET, &v4->sin_addr, s, sizeof s);
      port = ntohs(v4->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
      inet_ntop(AF_INET6, &v6->sin6_addr, s, sizeof s);
      port = ntohs(v6->sin6_port);
    }
    ip = s;
  }

  Conn& c_;
  Guard& g_;
  char buf_[4096];
  std::size_t pos_ = 0, end_ = 0;
};

// httplib's server with the front door's limits: each connection runs
// through a GuardedStream (deadlines, body bound) on a thread of its own
// (ElasticPool), at most max_connections at once; past that, a connection
// gets 503 naming the limit and is closed without being read.
class GuardedServer final : public httplib::Server {
 public:
  explicit GuardedServer(Guard& g) : g_(g) {}

 private:
  bool process_and_close_socket(socket_t sock) override {
    Conn c(sock);
    GuardedStream strm(c, g_);
    const int open = g_.open.fetch_add(1) + 1;
    if (open > g_.max_connections) {
      ++g_.too_many;
      write_refusal(sock,
                    ApiError{.status = 503,
                             .message = "too many connections: " + std::to_string(g_.max_connections) +
                                        " are open ([serve] max_connections); retry later",
                             .type = "server_error",
                             .code = "too_many_connections"},
                    1);
    } else {
      t_conn = &c;
      for (std::size_t count = keep_alive_max_count_; count > 0 && svr_sock_ != INVALID_SOCKET; --count) {
        c.phase = Conn::Phase::kHeaders;
        c.deadline = Clock::now() + g_.header_timeout;
        c.got_bytes = c.unstated_body = false;
        if (!strm.buffered() &&
            !wait_request(
                sock, std::min<std::chrono::seconds>(std::chrono::seconds(keep_alive_timeout_sec_), g_.header_timeout)))
          break;
        bool closed = false;
        c.body_read = 0;
        const bool served = process_request(strm, count == 1, closed, nullptr);
        // A large body (up to max_body_mib) was read into memory and is
        // freed now: hand the free pages back to the kernel, or the
        // allocator's arenas keep them (32 bodies of 24-50 MB held 1 GB).
        if (c.body_read >= kTrimAfterBytes) malloc_trim(0);
        if (!served || closed || c.close) break;
      }
      t_conn = nullptr;
    }
    g_.open.fetch_sub(1);
    // A lingering close: what the client still sends (a refused body) is
    // read and dropped for a moment, so the refusal reaches it instead of
    // a reset.
    ::shutdown(sock, SHUT_WR);
    if (c.dead) {
      char drop[16384];
      const auto until = Clock::now() + std::chrono::seconds(1);
      while (Clock::now() < until) {
        pollfd p{sock, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        if (::recv(sock, drop, sizeof drop, 0) <= 0) break;
      }
    }
    ::close(sock);
    return true;
  }
  // Waits for the next request's first byte, in slices, so a stopping
  // server is seen; false on timeout, hang-up or stop.
  bool wait_request(int sock, std::chrono::seconds timeout) {
    const auto until = Clock::now() + timeout;
    while (svr_sock_ != INVALID_SOCKET) {
      pollfd p{sock, POLLIN, 0};
      const int r = ::poll(&p, 1, 50);
      if (r > 0) return (p.revents & POLLIN) != 0;
      if (r < 0 && errno != EINTR) return false;
      if (Clock::now() >= until) return false;
    }
    return false;
  }

  Guard& g_;
};

// httplib's TaskQueue with a thread per connection: `base` threads start at
// once and more start (up to `most`) when every one is busy, so a slow
// client holds its own thread, never one another client waits for.
class ElasticPool final : public httplib::TaskQueue {
 public:
  ElasticPool(std::size_t base, std::size_t most) : most_(std::max(base, most)) {
    std::lock_guard lk(mu_);
    for (std::size_t i = 0; i < base; ++i) spawn();
  }
  ~ElasticPool() override { shutdown(); }
  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard lk(mu_);
      jobs_.push_back(std::move(fn));
      if (idle_ < jobs_.size() && threads_.size() < most_) spawn();
    }
    cv_.notify_one();
  }
  void shutdown() override {
    {
      std::lock_guard lk(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void spawn() {  // (under mu_)
    threads_.emplace_back([this] {
      std::unique_lock lk(mu_);
      for (;;) {
        ++idle_;
        cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
        --idle_;
        if (jobs_.empty()) return;  // stopping, nothing left
        auto fn = std::move(jobs_.front());
        jobs_.pop_front();
        lk.unlock();
        fn();
        lk.lock();
      }
    });
  }

  const std::size_t most_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  std::size_t idle_ = 0;
  bool stop_ = false;
};

// Moves this thread's connection to its next phase.
void enter_body(std::chrono::seconds timeout) {
  if (Conn* c = t_conn) {
    c->phase = Conn::Phase::kBody;
    c->deadline = Clock::now() + timeout;
    c->body_read = 0;
  }
}
void enter_handling() {
  if (Conn* c = t_conn) c->phase = Conn::Phase::kHandling;
}

}  // namespace

struct HttpServer::Impl {
  ServerOptions opt;
  std::vector<ServedModel> models;
  RequestInbox& inbox;
  ServingMetrics& metrics;
  BatchStore* store;
  BatchRunner* runner;
  Guard guard;
  GuardedServer svr{guard};
  std::thread thread;
  int port = 0;
  std::atomic<bool> stopped{false};
  std::atomic<std::int64_t> admitted{0};
  std::atomic<std::uint64_t> rejected_busy{0}, rejected_bad{0}, rejected_auth{0}, completions{0};
  std::vector<std::unique_ptr<std::atomic<std::int64_t>>> tenant_inflight;
  const std::int64_t started = unix_now();

  Impl(ServerOptions o, std::vector<ServedModel> m, RequestInbox& i, ServingMetrics& me, BatchStore* s, BatchRunner* r)
      : opt(std::move(o)), models(std::move(m)), inbox(i), metrics(me), store(s), runner(r) {
    guard.header_timeout = std::chrono::seconds(opt.header_timeout_s);
    guard.body_timeout = std::chrono::seconds(opt.body_timeout_s);
    guard.max_body = opt.max_body_bytes;
    guard.max_connections = opt.max_connections;
    std::uint32_t tenants = 0;
    for (const ServedModel& sm : models)
      for (const auto& list : {sm.online, sm.offline})
        for (std::uint32_t t : list) tenants = std::max(tenants, t + 1);
    for (std::uint32_t t = 0; t < tenants; ++t)
      tenant_inflight.push_back(std::make_unique<std::atomic<std::int64_t>>(0));
  }

  void routes();
  void completion(const httplib::Request& req, httplib::Response& res, bool chat);
  void upload(const httplib::Request& req, httplib::Response& res);
  void create_batch(const httplib::Request& req, httplib::Response& res);
  // The lines of a batch input file, each body validated; or the first bad line.
  std::variant<std::vector<BatchLine>, ApiError> parse_jsonl(const std::string& content) const;
  // Waits until `c` ended or the server stopped; false when it stopped
  // first, or the client hung up (then `c` is abandoned: the engine drops it).
  bool wait_end(Completion& c, std::unique_lock<std::mutex>& lk) {
    const int fd = t_conn ? t_conn->fd : -1;
    while (!c.ended) {
      if (stopped) return false;
      c.cv.wait_for(lk, kWaitSlice);
      if (fd >= 0 && !c.ended) {
        pollfd p{fd, POLLRDHUP, 0};
        if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
          c.abandon();
          return false;
        }
      }
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
  // Request bodies of up to max_body_mib live in memory while read. glibc
  // serves a large block with mmap (handed back when freed) only below its
  // dynamic threshold, which a freed large block raises to 32 MiB: from
  // then on such bodies come from the arenas and their pages stay (32
  // bodies of 24-50 MB took RSS from 450 MB to 1 GB and left 650 MB). A
  // fixed threshold keeps every block of 4 MiB or more on mmap.
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  const auto threads = static_cast<std::size_t>(m.opt.http_threads);
  // One thread per open connection, up to the cap (and a few beyond it
  // that only answer "too many connections").
  const auto most = static_cast<std::size_t>(m.opt.max_connections) + 8;
  m.svr.new_task_queue = [threads, most] { return new ElasticPool(std::min(threads, most), most); };
  m.svr.set_payload_max_length(m.opt.max_body_bytes);
  // httplib's default sets SO_REUSEPORT, with which a second server binds
  // the same port and the kernel splits the clients between the two: a
  // port in use must be refused instead.
  m.svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  errno = 0;
  m.port = m.opt.port == 0 ? m.svr.bind_to_any_port(m.opt.host)
                           : (m.svr.bind_to_port(m.opt.host, m.opt.port) ? m.opt.port : -1);
  if (m.port < 0) {
    const int err = errno;
    return FailedPrecondition("cannot listen on " + m.opt.host + ":" + std::to_string(m.opt.port) + " (" +
                              (err == EADDRINUSE ? std::string("address in use: another server listens there")
                               : err != 0        ? std::string(std::strerror(err))
                                                 : std::string("not an address of this host?")) +
                              ")");
  }
  if (!raise_backlog(m.port))
    std::fprintf(stderr, "slicesched: warning: could not raise the listen backlog of port %d above 5\n", m.port);
  m.thread = std::thread([&m] { m.svr.listen_after_bind(); });
  return Status::Ok();
}

void HttpServer::stop() {
  Impl& m = *impl_;
  if (m.stopped.exchange(true)) return;
  m.guard.stopping = true;
  // Requests pushed but never taken (the engine ended on an error) hear so.
  m.inbox.close();
  for (LiveRequest& r : m.inbox.take())
    if (r.sink) r.sink->on_end(static_cast<std::int64_t>(r.prompt.size()), 0, kCancelledError, 0);
  m.svr.stop();
  if (m.thread.joinable()) m.thread.join();
}

void HttpServer::Impl::routes() {
  // After the headers, before the body: the body's deadline starts, and a
  // Content-Length past the bound is refused before a byte of it is read.
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    enter_body(guard.body_timeout);
    // Every refusal here: answered before the body is read (the body, if
    // any, is not read: the connection closes), counted under its reason.
    auto refuse = [&](std::atomic<std::uint64_t>& counter, const ApiError& e) {
      enter_handling();
      if (t_conn) t_conn->close = true;
      ++counter;
      reply_error(res, e);
      return httplib::Server::HandlerResponse::Handled;
    };
    // A body whose length the headers do not state is empty (RFC 9112
    // 6.3), where httplib would read until the client closes; whatever the
    // client sent after the headers is not a next request either.
    const bool body_method = req.method == "POST" || req.method == "PUT" || req.method == "PATCH";
    if (body_method && t_conn && !req.has_header("Content-Length") &&
        req.get_header_value("Transfer-Encoding").find("chunked") == std::string::npos)
      t_conn->unstated_body = t_conn->close = true;
    // A GET (or HEAD, DELETE) with a body: httplib does not read it, so it
    // was read as the next request on the connection (a completion sent
    // inside a GET /health's body ran, past a proxy that guards /v1/ only).
    // Refused, and the connection closes unread.
    if (!body_method && ((req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0") ||
                         req.has_header("Transfer-Encoding")))
      return refuse(rejected_bad,
                    ApiError{.message = req.method + " with a body (Content-Length or Transfer-Encoding): "
                                                     "expected none on this method",
                             .param = "Content-Length",
                             .code = "bad_http_request"});
    // A header name with whitespace in it ("Transfer-Encoding : chunked"):
    // RFC 9112 5.1 says refuse it; a proxy may read the header this one
    // ignored (here the length was taken, past a transfer coding).
    for (const auto& [name, value] : req.headers)
      if (name.find_first_of(" \t") != std::string::npos)
        return refuse(rejected_bad, ApiError{.message = "the header name '" + name.substr(0, 40) +
                                                        "' has whitespace in it (RFC 9112 5.1): refused",
                                             .param = name.substr(0, 40),
                                             .code = "bad_http_request"});
    // A transfer coding this server reads is "chunked", once: another
    // (or chunked then identity) left the body to the timeout, or was
    // read as chunked though the last coding said otherwise.
    if (req.has_header("Transfer-Encoding") &&
        (req.get_header_value_count("Transfer-Encoding") > 1 || req.get_header_value("Transfer-Encoding") != "chunked"))
      return refuse(rejected_bad,
                    ApiError{.message = "Transfer-Encoding: expected \"chunked\" (once), got '" +
                                        req.get_header_value("Transfer-Encoding").substr(0, 40) + "'" +
                                        (req.get_header_value_count("Transfer-Encoding") > 1 ? " and more" : ""),
                             .param = "Transfer-Encoding",
                             .code = "bad_http_request"});
    // Both a length and a transfer coding: a proxy in front may have taken
    // either, and what it forwards after the body is then read as another
    // request (smuggled). RFC 9112 6.1: the connection must close after it;
    // refused, and closed unread.
    if (req.has_header("Content-Length") && req.has_header("Transfer-Encoding"))
      return refuse(rejected_bad,
                    ApiError{.message = "Content-Length and Transfer-Encoding together: the request states its "
                                        "length twice; send one",
                             .param = "Transfer-Encoding",
                             .code = "bad_http_request"});
    // Two lengths that disagree (which one a proxy took is unknowable).
    if (const std::size_t n = req.get_header_value_count("Content-Length"); n > 1)
      for (std::size_t i = 1; i < n; ++i)
        if (req.get_header_value("Content-Length", i) != req.get_header_value("Content-Length"))
          return refuse(rejected_bad, ApiError{.message = "Content-Length: the request states two different lengths",
                                               .param = "Content-Length",
                                               .code = "bad_http_request"});
    if (const std::string enc = req.get_header_value("Content-Encoding"); !enc.empty() && enc != "identity")
      return refuse(rejected_bad, ApiError{.status = 415,
                                           .message = "Content-Encoding: '" + enc.substr(0, 40) +
                                                      "' is not accepted; send the body uncompressed",
                                           .param = "Content-Encoding",
                                           .code = "unsupported_media_type"});
    if (req.has_header("Content-Length")) {
      const std::string v = req.get_header_value("Content-Length");
      const bool number = !v.empty() && v.size() <= 19 && v.find_first_not_of("0123456789") == std::string::npos;
      if (!number)
        return refuse(rejected_bad,
                      ApiError{.message = "Content-Length: expected a number of bytes, got '" + v.substr(0, 40) + "'",
                               .param = "Content-Length",
                               .code = "bad_http_request"});
      if (std::stoull(v) > opt.max_body_bytes) return refuse(guard.too_large, too_large_error(guard));
    }
    // The API key, before the body is read: /v1/* only (probes and
    // scrapers of /health and /metrics carry none).
    if (!opt.api_key.empty() && req.path.rfind("/v1/", 0) == 0 &&
        req.get_header_value("Authorization") != "Bearer " + opt.api_key)
      return refuse(rejected_auth,
                    ApiError{.status = 401,
                             .message = req.has_header("Authorization")
                                            ? "Incorrect API key provided (Authorization: Bearer <key>, the key "
                                              "serve was started with: --api-key or SLICESCHED_API_KEY)"
                                            : "You didn't provide an API key: send Authorization: Bearer <key> "
                                              "(this server was started with --api-key or SLICESCHED_API_KEY)",
                             .code = "invalid_api_key"});
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    enter_handling();
    if (inbox.closed())  // (a drain closed it)
      return reply(res, 503, {{"status", "draining"}});
    const std::vector<ModelDown> down = opt.models_down ? opt.models_down() : std::vector<ModelDown>{};
    if (!down.empty() && std::all_of(down.begin(), down.end(), [](const ModelDown& d) { return !d.why.empty(); })) {
      // Back when the soonest of them is.
      int back = -1;
      for (const ModelDown& d : down)
        if (d.back_in_s > 0 && (back < 0 || d.back_in_s < back)) back = d.back_in_s;
      if (back > 0) res.set_header("Retry-After", std::to_string(back));
      return reply(res, 503, {{"status", "unavailable"}, {"reason", down.front().why}});
    }
    reply(res, 200, {{"status", "ok"}});
  });
  // Ready: every model can be served (each has an accelerator left).
  svr.Get("/health/ready", [this](const httplib::Request&, httplib::Response& res) {
    enter_handling();
    if (inbox.closed()) return reply(res, 503, {{"status", "draining"}});
    const std::vector<ModelDown> down = opt.models_down ? opt.models_down() : std::vector<ModelDown>{};
    for (const ModelDown& d : down)
      if (!d.why.empty()) {
        if (d.back_in_s > 0) res.set_header("Retry-After", std::to_string(d.back_in_s));
        return reply(res, 503, {{"status", "not_ready"}, {"reason", d.why}});
      }
    reply(res, 200, {{"status", "ready"}});
  });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    enter_handling();
    json data = json::array();
    for (const ServedModel& m : models)
      data.push_back({{"id", m.name}, {"object", "model"}, {"created", started}, {"owned_by", "slicesched"}});
    reply(res, 200, {{"object", "list"}, {"data", data}});
  });
  svr.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    enter_handling();
    const std::string id = req.matches[1];
    for (const ServedModel& m : models)
      if (m.name == id)
        return reply(res, 200, {{"id", m.name}, {"object", "model"}, {"created", started}, {"owned_by", "slicesched"}});
    reply_error(res, ApiError{.status = 404,
                              .message = "model '" + id + "' does not exist",
                              .param = "model",
                              .code = "model_not_found"});
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    enter_handling();
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
    extra += "slicesched_http_rejected_total{reason=\"unauthorized\"} " + std::to_string(rejected_auth.load()) + "\n";
    extra += "slicesched_http_rejected_total{reason=\"header_timeout\"} " +
             std::to_string(guard.header_timeouts.load()) + "\n";
    extra +=
        "slicesched_http_rejected_total{reason=\"body_timeout\"} " + std::to_string(guard.body_timeouts.load()) + "\n";
    extra +=
        "slicesched_http_rejected_total{reason=\"body_too_large\"} " + std::to_string(guard.too_large.load()) + "\n";
    extra += "slicesched_http_rejected_total{reason=\"too_many_connections\"} " +
             std::to_string(guard.too_many.load()) + "\n";
    extra += "# HELP slicesched_http_connections Open HTTP connections (max_connections bounds them).\n";
    extra += "# TYPE slicesched_http_connections gauge\nslicesched_http_connections " +
             std::to_string(guard.open.load()) + "\n";
    if (runner) {
      extra += "# HELP slicesched_batch_lines_inflight Batch request lines in the engine now.\n";
      extra += "# TYPE slicesched_batch_lines_inflight gauge\nslicesched_batch_lines_inflight " +
               std::to_string(runner->inflight()) + "\n";
      extra += "# HELP slicesched_batch_results_unwritten Batch results the store refused, kept to write again.\n";
      extra += "# TYPE slicesched_batch_results_unwritten gauge\nslicesched_batch_results_unwritten " +
               std::to_string(runner->unwritten()) + "\n";
      extra += "# HELP slicesched_batch_store_failed_writes_total Writes of batch results the store refused.\n";
      extra +=
          "# TYPE slicesched_batch_store_failed_writes_total counter\nslicesched_batch_store_failed_writes_total " +
          std::to_string(runner->failed_writes()) + "\n";
    }
    res.set_content(metrics.render(extra), "text/plain; version=0.0.4");
  });
  svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    enter_handling();
    completion(req, res, false);
  });
  svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    enter_handling();
    completion(req, res, true);
  });

  auto no_store = [this](httplib::Response& res) {
    enter_handling();
    if (store) return false;
    reply_error(res, not_found("the batch API is off: this server has no [serve] batch_store"));
    return true;
  };
  svr.Post("/v1/files", [this, no_store](const httplib::Request& req, httplib::Response& res) {
    if (!no_store(res)) upload(req, res);
  });
  svr.Get("/v1/files", [this, no_store](const httplib::Request&, httplib::Response& res) {
    if (no_store(res)) return;
    auto all = store->files();
    if (!all.ok())
      return reply_error(res, ApiError{.status = 500, .message = all.status().message(), .type = "server_error"});
    json data = json::array();
    for (const FileInfo& f : all.value()) data.push_back(file_json(f));
    reply(res, 200, {{"object", "list"}, {"data", data}, {"has_more", false}});
  });
  svr.Delete(R"(/v1/files/([A-Za-z0-9_\-]+))", [this, no_store](const httplib::Request& req, httplib::Response& res) {
    if (no_store(res)) return;
    const std::string id = req.matches[1];
    auto gone = store->delete_file(id);
    if (!gone.ok())
      return reply_error(res,
                         gone.status().code() == StatusCode::kFailedPrecondition
                             ? ApiError{.status = 409, .message = gone.status().message(), .code = "file_in_use"}
                             : ApiError{.status = 500, .message = gone.status().message(), .type = "server_error"});
    if (!gone.value()) return reply_error(res, not_found("no file '" + id + "'"));
    reply(res, 200, {{"id", id}, {"object", "file"}, {"deleted", true}});
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
  svr.Get("/v1/batches", [this, no_store](const httplib::Request& req, httplib::Response& res) {
    if (no_store(res)) return;
    // OpenAI's pagination: newest first, `limit` (1-100, default 20) after
    // the batch `after` (a cursor: the last id of the previous page).
    std::size_t limit = 20;
    if (req.has_param("limit")) {
      const std::string v = req.get_param_value("limit");
      if (v.empty() || v.size() > 3 || v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) < 1 ||
          std::stoi(v) > 100)
        return reply_error(res,
                           ApiError{.message = "limit: expected an integer in [1, 100], got '" + v.substr(0, 20) + "'",
                                    .param = "limit"});
      limit = static_cast<std::size_t>(std::stoi(v));
    }
    auto all = store->batches();
    if (!all.ok())
      return reply_error(res, ApiError{.status = 500, .message = all.status().message(), .type = "server_error"});
    std::size_t from = 0;
    if (req.has_param("after")) {
      const std::string after = req.get_param_value("after");
      while (from < all.value().size() && all.value()[from].id != after) ++from;
      if (from == all.value().size())
        return reply_error(res,
                           ApiError{.status = 404, .message = "after: no batch '" + after + "'", .param = "after"});
      ++from;
    }
    json data = json::array();
    const std::string failing = runner ? runner->store_error() : std::string();
    for (std::size_t i = from; i < all.value().size() && data.size() < limit; ++i)
      data.push_back(batch_json(all.value()[i], failing));
    const bool more = from + data.size() < all.value().size();
    reply(res, 200,
          {{"object", "list"},
           {"data", data},
           {"first_id", data.empty() ? json() : data.front()["id"]},
           {"last_id", data.empty() ? json() : data.back()["id"]},
           {"has_more", more}});
  });
  svr.Post(
      R"(/v1/batches/([A-Za-z0-9_\-]+)/cancel)", [this, no_store](const httplib::Request& req, httplib::Response& res) {
        if (no_store(res)) return;
        if (!runner)
          return reply_error(
              res, ApiError{.status = 503, .message = "the batch runner is not running", .type = "server_error"});
        auto b = runner->cancel(req.matches[1]);
        if (!b.ok())
          return reply_error(res, ApiError{.status = 500, .message = b.status().message(), .type = "server_error"});
        if (!b.value()) return reply_error(res, not_found("no batch '" + std::string(req.matches[1]) + "'"));
        reply(res, 200, batch_json(*b.value()));
      });
  svr.Get(R"(/v1/batches/([A-Za-z0-9_\-]+))", [this, no_store](const httplib::Request& req, httplib::Response& res) {
    if (no_store(res)) return;
    auto b = store->batch(req.matches[1]);
    if (!b.ok())
      return reply_error(res, ApiError{.status = 500, .message = b.status().message(), .type = "server_error"});
    if (!b.value()) return reply_error(res, not_found("no batch '" + std::string(req.matches[1]) + "'"));
    reply(res, 200, batch_json(*b.value(), runner ? runner->store_error() : std::string()));
  });

  // httplib's own refusals get a JSON error naming what was wrong (a
  // handler's own error keeps its body).
  svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    enter_handling();
    if (!res.body.empty()) return;
    ApiError e{.status = res.status};
    switch (res.status) {
      case 404:
        e.message = "no endpoint " + req.method + " " + req.path;
        e.code = "not_found";
        break;
      case 413:
        e = too_large_error(guard);
        break;
      case 414:
        e.message =
            "the request line's URI is longer than " + std::to_string(CPPHTTPLIB_REQUEST_URI_MAX_LENGTH) + " bytes";
        e.code = "uri_too_long";
        break;
      case 400:
        e.message = "a malformed HTTP request (its request line, a header, Content-Length or the chunked body)";
        e.code = "bad_http_request";
        break;
      default:
        e.message = "HTTP " + std::to_string(res.status) + " on " + req.method + " " + req.path;
        if (res.status >= 500) e.type = "server_error";
    }
    // (after a malformed request the connection is not trusted further)
    if (res.status != 404 && t_conn) t_conn->close = true;
    reply_error(res, e);
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

void HttpServer::Impl::completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  auto parsed =
      chat ? parse_chat(std::string_view(req.body), models) : parse_completion(std::string_view(req.body), models);
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    ++rejected_bad;
    return reply_error(res, *e);
  }
  CompletionRequest r = std::get<CompletionRequest>(std::move(parsed));
  const ServedModel& model = models[r.model];
  std::vector<std::int64_t> loads;
  for (const auto& t : tenant_inflight) loads.push_back(t->load());
  // The tenants that take the request's priority and whose KV budget holds
  // it; the least loaded of them.
  std::vector<std::uint32_t> takers;
  std::string ranges;
  bool by_priority = false;
  std::int64_t budget_max = 0;  // the largest KV budget of those that take the priority
  const auto prompt = static_cast<std::int64_t>(r.prompt.size());
  auto collect = [&] {
    takers.clear();
    ranges.clear();
    // (parse_completion refused a sum past request_tokens_max, so no overflow)
    const std::int64_t total = prompt + r.max_tokens;
    for (std::size_t i = 0; i < model.online.size(); ++i) {
      if (i < model.online_priorities.size()) {
        const auto [lo, hi] = model.online_priorities[i];
        ranges += (ranges.empty() ? "" : ", ") + ("[" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
        if (r.gen.priority < lo || r.gen.priority > hi) continue;
      }
      by_priority = true;
      if (i < model.online_tokens_max.size()) budget_max = std::max(budget_max, model.online_tokens_max[i]);
      if (ServedModel::holds(model.online_tokens_max, i, total)) takers.push_back(model.online[i]);
    }
  };
  collect();
  if (takers.empty() && refit_default_max_tokens(r, chat, budget_max)) collect();
  if (!model.online.empty() && !by_priority)
    return reply_error(res, ApiError{.status = 400,
                                     .message = "priority: no tenant of model '" + model.name + "' takes priority " +
                                                std::to_string(r.gen.priority) + " (its online tenants take " + ranges +
                                                ": [[tenants]] request_priorities)",
                                     .param = "priority"});
  if (!model.online.empty() && takers.empty()) {
    // (As parse_common: a max_tokens the client did not send is not named.)
    const std::string what = "what the tenants of model '" + model.name + "' that take priority " +
                             std::to_string(r.gen.priority) + " may hold (their kv_budget_tokens)";
    const bool prompt_alone = budget_max > 0 && prompt >= budget_max;
    return reply_error(
        res, ApiError{.status = 400,
                      .message = !r.max_tokens_given ? "prompt (" + std::to_string(prompt) +
                                                           " tokens) leaves no room for output in " + what
                                                     : "prompt (" + std::to_string(prompt) + " tokens) + max_tokens (" +
                                                           std::to_string(r.max_tokens) + ") exceeds " + what,
                      .param = prompt_alone ? (chat ? "messages" : "prompt") : "max_tokens"});
  }
  const int tenant = HttpServer::pick_tenant(takers, loads);
  if (tenant < 0)
    return reply_error(res,
                       ApiError{.status = 400,
                                .message = "model '" + model.name +
                                           "' has no online tenant in the served policy (it takes batch jobs only)",
                                .param = "model"});
  // A model whose every accelerator is lost cannot run it: 503, saying so.
  if (opt.models_down) {
    const std::vector<ModelDown> down = opt.models_down();
    if (r.model < down.size() && !down[r.model].why.empty()) {
      // (OpenAI's clients retry a 503, honouring Retry-After.)
      if (down[r.model].back_in_s > 0) res.set_header("Retry-After", std::to_string(down[r.model].back_in_s));
      return reply_error(res, ApiError{.status = 503,
                                       .message = down[r.model].why,
                                       .type = "server_error",
                                       .param = "model",
                                       .code = "model_unavailable"});
    }
  }
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
  auto c = std::make_shared<Completion>(admitted, *tenant_inflight[static_cast<std::size_t>(tenant)], model, r.gen);
  const std::int64_t prompt_tokens = static_cast<std::int64_t>(r.prompt.size());
  const bool want_logprobs = r.gen.sampling->logprobs >= 0;
  if (!inbox.push(
          LiveRequest{static_cast<std::uint32_t>(tenant), std::move(r.prompt), r.max_tokens, c, r.gen.sampling})) {
    c->release();
    return refuse_draining(res, "the server is shutting down; no new requests");
  }
  const std::uint64_t n = ++completions;  // (unique per server run, whatever other threads do)
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(n) + "-" + std::to_string(unix_now());
  const std::int64_t created = unix_now();
  // The log-probabilities of tokens [from, to) in the endpoint's shape.
  // `offset`: where a completion's text_offset starts, then where it ends.
  auto lp_json = [&model, chat, want_logprobs](std::span<const std::int64_t> tokens, std::span<const TokenLogprob> lp,
                                               std::size_t& offset) -> json {
    if (!want_logprobs) return nullptr;
    return chat ? chat_logprobs(model, tokens, lp) : completion_logprobs(model, tokens, lp, offset, &offset);
  };
  if (!r.stream) {
    std::unique_lock lk(c->mu);
    if (!wait_end(*c, lk)) {
      if (c->abandoned()) {
        // The client hung up (closed, or half-closed its side, which is
        // how it says so): nothing goes out, not even an empty 200.
        if (t_conn) t_conn->dead = t_conn->close = true;
        return;
      }
      return reply_error(res, ApiError{.status = 503, .message = "the server stopped", .type = "server_error"});
    }
    // Cut short by the shutdown: the server's state, not the request's
    // fault, and another replica may serve it (503, as for a stream's end).
    if (c->error == kCancelledError) return refuse_draining(res, c->error);
    if (!c->error.empty())
      return reply_error(res, ApiError{.status = 500, .message = c->error, .type = "server_error"});
    const std::string text =
        c->watch.watches_text() ? c->watch.text() : decode(model, std::span(c->tokens).first(c->watch.text_tokens()));
    std::size_t from = 0;
    const json lp = lp_json(c->tokens, c->logprobs, from);
    return reply(
        res, 200,
        chat ? chat_body(id, created, model.name, prompt_tokens, c->tokens, text, c->watch.finish_reason(), lp)
             : completion_body(id, created, model.name, prompt_tokens, c->tokens, text, c->watch.finish_reason(), lp));
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, c, id, created, &model, prompt_tokens, chat, lp_json, usage_chunk = r.include_usage,
       every_usage = r.continuous_usage, sent = std::size_t{0}, sent_text = std::size_t{0}, lp_offset = std::size_t{0},
       started = false, text = std::make_shared<StreamDecoder>(model),
       all = std::vector<std::int64_t>{}](std::size_t, httplib::DataSink& sink) mutable {
        auto send = [&](const json& in) {
          // stream_options.continuous_usage_stats: every event says the usage so far (vLLM's).
          json j = in;
          if (every_usage && !j.contains("usage") && !j.contains("error"))
            j["usage"] = {
                {"prompt_tokens", prompt_tokens},
                {"completion_tokens", static_cast<std::int64_t>(all.size() > sent ? all.size() : sent)},
                {"total_tokens", prompt_tokens + static_cast<std::int64_t>(all.size() > sent ? all.size() : sent)}};
          const std::string ev = "data: " + dump_text(j) + "\n\n";
          return sink.write(ev.data(), ev.size());
        };
        // One event: `tokens` (completions only) and the text they add.
        auto event = [&](std::span<const std::int64_t> tokens, const std::string& piece, const json& lp) {
          if (!chat) return send(chunk_body(id, created, model.name, tokens, piece, lp));
          json delta = {{"content", piece}};
          if (!started) delta["role"] = "assistant";
          started = true;
          return send(chat_chunk_body(id, created, model.name, delta, nullptr, lp));
        };
        std::unique_lock lk(c->mu);
        while (sent == c->tokens.size() && !c->ended && !stopped) {
          c->cv.wait_for(lk, kWaitSlice);
          if (sent == c->tokens.size() && !c->ended && !stopped) {
            // Nothing new: is the client still there? (Not under the lock:
            // the engine thread takes it for every token.)
            lk.unlock();
            const bool there = sink.is_writable();
            lk.lock();
            if (!there && !c->ended) {
              c->abandon();
              return false;
            }
          }
        }
        // One event per token, in order (with stop strings: the text that
        // is settled, no stop string can begin in it any more).
        std::vector<std::int64_t> fresh(c->tokens.begin() + static_cast<std::ptrdiff_t>(sent), c->tokens.end());
        std::vector<TokenLogprob> fresh_lp;
        if (c->logprobs.size() > sent)
          fresh_lp.assign(c->logprobs.begin() + static_cast<std::ptrdiff_t>(sent), c->logprobs.end());
        const bool ended = c->ended;
        const std::size_t text_tokens = c->watch.text_tokens();
        const bool by_text = c->watch.watches_text();
        const std::size_t upto = !by_text ? 0 : ended ? c->watch.text().size() : c->watch.settled();
        const std::string settled = upto > sent_text ? c->watch.text().substr(sent_text, upto - sent_text) : "";
        const char* finish = c->watch.finish_reason();
        const std::string error = ended ? c->error : (stopped ? std::string("the server stopped") : std::string());
        lk.unlock();
        if (by_text) {
          if (!fresh.empty() || !settled.empty()) {
            all.insert(all.end(), fresh.begin(), fresh.end());
            // (text_offset continues from the tokens sent before, as the
            // whole reply's offsets would run)
            if (!event(fresh, settled, lp_json(fresh, fresh_lp, lp_offset))) return false;
            sent += fresh.size();
            sent_text += settled.size();
          }
        } else {
          for (std::size_t i = 0; i < fresh.size(); ++i) {
            const std::int64_t one[] = {fresh[i]};
            all.push_back(fresh[i]);  // (each token's text in context: the stream's text is the reply's)
            const std::string piece = all.size() <= text_tokens ? text->next(all) : std::string();
            const json lp = i < fresh_lp.size() ? lp_json(one, std::span(fresh_lp).subspan(i, 1), lp_offset) : json();
            if (!event(one, piece, lp)) return false;
            ++sent;
          }
        }
        if (!ended && error.empty()) return sink.is_writable();
        if (!error.empty()) {
          send(error_body(ApiError{.status = 500, .message = error, .type = "server_error"}));
        } else {
          if (!by_text)
            if (const std::string held = text->flush(std::span(all).first(std::min(all.size(), text_tokens)));
                !held.empty())
              event({}, held, nullptr);
          const json usage = {{"prompt_tokens", prompt_tokens},
                              {"completion_tokens", static_cast<std::int64_t>(sent)},
                              {"total_tokens", prompt_tokens + static_cast<std::int64_t>(sent)}};
          if (chat) {
            json last = chat_chunk_body(id, created, model.name, json::object(), finish);
            send(last);
            if (usage_chunk) {
              last["choices"] = json::array();
              last["usage"] = usage;
              send(last);
            }
          } else {
            // The finish event carries the usage, unless include_usage
            // asked for it in an event of its own: then once, there (a
            // client adding up every event's usage counted it twice).
            json f = final_chunk_body(id, created, model.name, prompt_tokens, static_cast<std::int64_t>(sent), finish);
            if (usage_chunk) {
              json u = f;
              if (!every_usage) f["usage"] = nullptr;  // (continuous: every event has it)
              send(f);
              u["choices"] = json::array();
              send(u);
            } else {
              send(f);
            }
          }
        }
        const std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
        sink.done();
        return true;
      },
      // A stream that did not end well lost its client: the engine drops
      // the request (its sequence leaves the batch, its KV cache goes).
      [c](bool success) {
        std::lock_guard lk(c->mu);
        if (!success && !c->ended) c->abandon();
      });
}

std::variant<std::vector<BatchLine>, ApiError> HttpServer::Impl::parse_jsonl(const std::string& content) const {
  std::vector<BatchLine> lines;
  std::set<std::string> ids;
  std::size_t pos = 0, number = 0;
  // Every bad line is reported, not only the first (up to kListed of them
  // in the message, and how many there are).
  constexpr std::size_t kListed = 50;
  std::vector<std::string> bad_lines;
  std::size_t bad_count = 0;
  auto bad = [&](const std::string& what) {
    if (++bad_count <= kListed) bad_lines.push_back("line " + std::to_string(number) + ": " + what);
  };
  while (pos < content.size()) {
    std::size_t end = content.find('\n', pos);
    if (end == std::string::npos) end = content.size();
    std::string text = content.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    if (auto deep = too_deep(text)) {
      bad(*deep);
      continue;
    }
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded()) {
      bad("not valid JSON");
      continue;
    }
    if (!j.is_object()) {
      bad("expected a JSON object");
      continue;
    }
    const auto cid = j.find("custom_id");
    if (cid == j.end() || !cid->is_string()) {
      bad("custom_id: required (a string)");
      continue;
    }
    if (!ids.insert(cid->get<std::string>()).second) {
      bad("custom_id '" + cid->get<std::string>() + "' is used twice (each line needs its own)");
      continue;
    }
    if (const auto m = j.find("method"); m != j.end() && *m != "POST") {
      bad("method: expected \"POST\"");
      continue;
    }
    const auto url = j.find("url");
    if (url == j.end() || *url != "/v1/completions") {
      bad("url: expected \"/v1/completions\"");
      continue;
    }
    const auto body = j.find("body");
    if (body == j.end()) {
      bad("body: required (a completion request)");
      continue;
    }
    json b = *body;
    if (b.is_object() && b.contains("stream") && b["stream"] == true) {
      bad("body: stream is not allowed in a batch");
      continue;
    }
    auto parsed = parse_completion(b, models);
    if (auto* e = std::get_if<ApiError>(&parsed)) {
      bad("body: " + e->message);
      continue;
    }
    const ServedModel& m = models[std::get<CompletionRequest>(parsed).model];
    if (m.offline.empty()) {
      bad("body: model '" + m.name + "' has no offline tenant in the served policy to run batch jobs");
      continue;
    }
    lines.push_back({cid->get<std::string>(), b.dump()});
  }
  if (bad_count == 1) return ApiError{.status = 400, .message = bad_lines.front(), .param = "file"};
  if (bad_count > 1) {
    std::string msg = std::to_string(bad_count) + " bad lines: ";
    for (std::size_t i = 0; i < bad_lines.size(); ++i) msg += (i ? "; " : "") + bad_lines[i];
    if (bad_count > bad_lines.size()) msg += "; ... (" + std::to_string(bad_count - bad_lines.size()) + " more)";
    return ApiError{.status = 400, .message = msg, .param = "file"};
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
  if (auto deep = too_deep(req.body)) return reply_error(res, ApiError{.message = "the request body: " + *deep});
  json j = json::parse(req.body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return reply_error(res, ApiError{.message = "the request body must be a JSON object"});
  const auto fid = j.find("input_file_id");
  if (fid == j.end() || !fid->is_string())
    return reply_error(res, ApiError{.message = "input_file_id: required (a string)", .param = "input_file_id"});
  const auto endpoint = j.find("endpoint");
  if (endpoint == j.end() || *endpoint != "/v1/completions")
    return reply_error(res, ApiError{.message = "endpoint: expected \"/v1/completions\"", .param = "endpoint"});
  // completion_window: OpenAI takes "24h"; any "<N>h", "<N>m" or "<N>s" up
  // to 24 hours is honoured too (expires_at; the lines not started by then
  // are given up).
  std::string window = "24h";
  std::int64_t window_s = 24 * 3600;
  if (const auto w = j.find("completion_window"); w != j.end()) {
    const std::string v = w->is_string() ? w->get<std::string>() : std::string();
    const bool shaped = v.size() >= 2 && v.size() <= 6 && std::string("hms").find(v.back()) != std::string::npos &&
                        v.find_first_not_of("0123456789") == v.size() - 1;
    const std::int64_t n = shaped ? std::stoll(v.substr(0, v.size() - 1)) : 0;
    const std::int64_t secs = n * (v.back() == 'h' ? 3600 : v.back() == 'm' ? 60 : 1);
    if (!shaped || secs < 1 || secs > 24 * 3600)
      return reply_error(res, ApiError{.message = "completion_window: expected \"24h\" (or <N>h, <N>m, <N>s up to "
                                                  "24 hours), got " +
                                                  w->dump(),
                                       .param = "completion_window"});
    window = v;
    window_s = secs;
  }
  // metadata: OpenAI's, up to 16 string pairs, kept and shown as given.
  std::string metadata = "null";
  if (const auto m = j.find("metadata"); m != j.end() && !m->is_null()) {
    if (!m->is_object() || m->size() > 16)
      return reply_error(
          res, ApiError{.message = "metadata: expected an object of at most 16 string values", .param = "metadata"});
    for (const auto& [k, v] : m->items())
      if (!v.is_string() || k.size() > 64 || v.get<std::string>().size() > 512)
        return reply_error(res, ApiError{.message = "metadata." + k +
                                                    ": expected a string of at most 512 "
                                                    "characters (keys at most 64)",
                                         .param = "metadata"});
    metadata = m->dump();
  }
  if (inbox.closed()) return refuse_draining(res, "the server is shutting down; no new batches");
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
  auto b = store->create_batch(fid->get<std::string>(), "/v1/completions", window,
                               std::get<std::vector<BatchLine>>(lines), window_s, metadata);
  if (!b.ok())
    return reply_error(res, ApiError{.status = 500, .message = b.status().message(), .type = "server_error"});
  if (runner) runner->wake();
  reply(res, 200, batch_json(b.value()));
}

}  // namespace slicesched::serving
