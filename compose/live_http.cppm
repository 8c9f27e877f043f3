// The HTTP front end of a live session (`serve --listen`): OpenAI-compatible
// completions go to the online tenant bound to their model, batch lines to
// its offline tenants (serving/). Opened before the session (what can fail
// without devices fails first), started once the session is ready, stopped
// after its run.
module;
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

export module slicesched.compose.live_http;
import slicesched.core.status;
import slicesched.core.ids;
import slicesched.core.graph;
import slicesched.core.gmg;
import slicesched.config;
import slicesched.engine.observer;
import slicesched.engine.tenant;
import slicesched.compose.live;
import slicesched.serving.api;
import slicesched.serving.batch_store;
import slicesched.serving.batches;
import slicesched.serving.metrics;
import slicesched.serving.server;

export namespace slicesched {

// The front end's options from the command line.
struct HttpExtras {
  std::string chat_template;  // a Jinja file overriding every model's chat template ("": theirs)
  std::string api_key;        // "": /v1/* open; else Bearer auth on it
};

class HttpFront {
 public:
  // Reads `listen` ("HOST:PORT", port 0: any free one), opens the batch
  // store (`batch_store`, "": batch API off) and each model's tokenizer,
  // end-of-sequence ids and chat template. Fails with one line (a bad
  // address, a store that cannot be opened, a tokenizer).
  static Result<std::unique_ptr<HttpFront>> open(const ExperimentConfig& cfg, const std::string& listen,
                                                 const std::string& batch_store, const HttpExtras& extras);
  // stop(), its Status unread: whatever way serving ends, clients are answered.
  ~HttpFront();
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // LiveOptions::on_lost: /health says at once what an executor took with it.
  std::function<void(AccelId)> lost_hook();
  // The engine observers serving needs (Prometheus metrics, accelerator losses).
  std::span<EngineObserver* const> observers() { return observers_; }
  // Routes to `session`'s tenants, pushes into its inbox, and starts
  // listening. `session` must outlive stop().
  Status start(LiveSession& session);
  // Writes the batch results that arrived, answers every waiting client and
  // stops the server. Call once the run is over; idempotent.
  Status stop();

 private:
  HttpFront(const ExperimentConfig& cfg, std::vector<std::string> accels);
  // Health: the accelerators lost now (executor processes gone, or taken
  // by the config's [[faults]] until their duration ends); a model can be
  // served while one accelerator holding it is left.
  struct Lost {
    std::mutex mu;
    std::vector<bool> accel;
    // When a lost accelerator is due back, on the steady clock: its
    // [[faults]] entry's duration_s, counted from the loss; none for a loss
    // for good (an entry without a duration, a dead executor).
    std::vector<std::optional<std::chrono::steady_clock::time_point>> back;
  };
  // The engine's word on each loss and return (its thread; the HTTP
  // threads read under the lock).
  struct LostObserver final : EngineObserver {
    std::shared_ptr<Lost> lost;
    void on_accelerator(AccelId a, bool down, Nanos t, Nanos back) override;
  };
  std::vector<serving::ModelDown> models_down() const;

  const ExperimentConfig& cfg_;
  std::string host_;
  int port_ = 0;
  std::string batch_store_;
  HttpExtras extras_;
  serving::ServingMetrics metrics_;
  std::vector<serving::ServedModel> models_;
  std::shared_ptr<Lost> lost_;
  LostObserver lost_observer_;
  EngineObserver* observers_[2];
  std::size_t next_offline_ = 0;  // batch lines go to their model's offline tenants in turn
  std::unique_ptr<serving::BatchStore> store_;
  std::unique_ptr<serving::BatchRunner> runner_;
  std::unique_ptr<serving::HttpServer> server_;
  bool stopped_ = false;
};

}  // namespace slicesched
