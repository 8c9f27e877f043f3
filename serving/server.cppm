// The HTTP front end of `slicesched serve --listen`: OpenAI-compatible
// completions (streamed as server-sent events, one per token), the model
// list, health, Prometheus metrics, and the batch API (files, batches, the
// output file). Built on cpp-httplib's thread-pool server (docs/serving.md
// says why); this interface keeps its header out of every importer.
//
// Requests go into the engine's inbox for their model's online tenant (the
// least loaded one); batch lines go through the BatchRunner to its offline
// tenant. Backpressure: past `max_queue` online requests admitted and not
// ended, a request gets 429 with Retry-After; nothing queues without bound.
// The front door: a thread per open connection (at most max_connections,
// past it 503), a deadline for a request's headers and one for its body
// (408), a body bound enforced while reading (413), each refusal an
// OpenAI-style error naming its key. A client that goes away abandons its
// request (the engine drops it). /health and /health/ready say whether the
// models can be served (ServerOptions::models_down).
module;
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

export module slicesched.serving.server;
import slicesched.serving.api;
import slicesched.serving.metrics;
import slicesched.serving.batches;
import slicesched.core.status;
import slicesched.engine.inbox;
import slicesched.serving.batch_store;

export namespace slicesched::serving {

// Why a served model cannot be served now, and when it may be again.
struct ModelDown {
  std::string why;     // "": it can be served
  int back_in_s = -1;  // seconds until an accelerator holding it is due back (>= 1); -1: none is
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;              // 0: any free port (see HttpServer::port)
  std::int64_t max_queue = 64;  // online requests admitted and not ended; past it, 429
  int retry_after_s = 1;        // the 429's Retry-After
  int http_threads = 64;        // threads started at once; more start, up to max_connections, when all are busy
  std::size_t max_body_bytes = 64u << 20;  // larger: 413, refused from Content-Length or while reading
  // Front-door limits, each refusal an OpenAI-style error naming its key:
  int header_timeout_s = 10;  // a request's line and headers must arrive within this (else 408)
  int body_timeout_s = 60;    // its body within this, once the headers are in (else 408)
  int max_connections = 512;  // open connections at once, each on a thread; past it, 503 at once
  // Per served model (by index): why it cannot be served now (every
  // accelerator holding it lost), `why` empty while it can. /health and
  // /health/ready read it, and a completion for a model that cannot be
  // served gets 503 with the reason, and Retry-After when one of its
  // accelerators is due back. Called from HTTP threads. Null: always
  // servable.
  std::function<std::vector<ModelDown>()> models_down;
  // Non-empty: every /v1/* request must carry "Authorization: Bearer
  // <api_key>" (else 401 in OpenAI's error shape); /health, /health/ready
  // and /metrics stay open for probes and scrapers.
  std::string api_key;
};

// Threading: start and stop from the owner's thread; the
// handlers run on the server's pool. `inbox`, `metrics`, `store` and
// `runner` are the caller's and must outlive the server; without a store
// (null) the batch endpoints answer 404 saying so.
class HttpServer {
 public:
  HttpServer(ServerOptions opt, std::vector<ServedModel> models, RequestInbox& inbox, ServingMetrics& metrics,
             BatchStore* store, BatchRunner* runner);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  // Binds and serves on a thread of its own. Fails with one line when the
  // address cannot be bound.
  Status start();
  // The port bound (after start).
  int port() const;
  // Call once the engine stopped: requests still waiting for it end (a
  // stream with an error event, a reply with 503), then the server stops
  // listening and its threads are joined.
  void stop();

  // The routing rule (exposed for tests): the online tenant of `model` with
  // the fewest requests in flight, or -1 when the model has none.
  static int pick_tenant(const std::vector<std::uint32_t>& tenants, const std::vector<std::int64_t>& inflight);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace slicesched::serving
