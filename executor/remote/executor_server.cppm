// The executor process's side (`slicesched executor`): owns one host's
// accelerators and runs what the scheduler's RemoteRunner sends, with the
// LibTorch Llama runner, exactly as the single-process live cluster's
// threads do: one worker thread per accelerator runs its operators in the
// order they arrive (the scheduler's LiveCluster already applied the queue
// rules and the arbiter, and sends an accelerator one operator at a time),
// one transfer thread per accelerator receives copies into it. Values
// stay here until the scheduler releases them; each accelerator's bytes
// (weights, held values) are accounted against its budget, and an
// operator or copy that would exceed it is refused, never attempted.
// Copies from another host come from that host's executor, never through
// the scheduler: between GPUs over an NCCL link the scheduler set up at
// connect time (kNcclInit; the source sends on its accelerator's send
// thread, the destination receives on its transfer thread), otherwise
// pulled as bytes over ZeroMQ.
//
// Liveness: after the scheduler's hello, heartbeats go to it every
// heartbeat_ms; a scheduler silent for timeout_ms is gone, and the
// process ends (no orphan executors hold devices).
//
// Handshake and lease: a hello must carry the fingerprint this executor
// was started with (wire::Fingerprint: protocol, host entry, models'
// shapes, vocabulary, dtype, weights), else it is refused naming the first
// field that differs. The scheduler whose hello is accepted holds the
// executor: another scheduler's hello is refused, naming the holder, while
// the holder's heartbeats keep coming (a lease renewed by heartbeats), and
// only the holder may run, copy, release or shut down.
module;
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

export module slicesched.executor.remote.executor_server;
import slicesched.executor.llama_runner;
import slicesched.core.ids;
import slicesched.core.status;

export namespace slicesched {

struct ExecutorServerOptions {
  std::string listen;  // ZeroMQ endpoint to bind ("tcp://0.0.0.0:5555", "ipc:///tmp/x")
  std::string host;    // this host's [[hosts]] name
  int heartbeat_ms = 200, timeout_ms = 3000;
  struct Accel {
    AccelId id = kNoAccel;  // the scheduler's (config order, all hosts)
    std::string name, device;
    std::int64_t budget = 0, weights = 0;
  };
  std::vector<Accel> accels;  // this host's, weights already loaded by the runner
  // What a scheduler's hello must carry (wire::Fingerprint).
  std::vector<std::pair<std::string, std::string>> fingerprint;
};

class ExecutorServer {
 public:
  // `runner` (devices indexed by the scheduler's AccelId) must outlive
  // the server.
  ExecutorServer(LlamaRunner& runner, ExecutorServerOptions opt);
  ~ExecutorServer();
  ExecutorServer(const ExecutorServer&) = delete;
  ExecutorServer& operator=(const ExecutorServer&) = delete;

  // Binds `listen`; fails, one line, when the endpoint cannot be bound.
  // Call on the thread that then calls serve().
  Status bind();
  // Serves (binding first if bind() was not called) until the scheduler
  // says shutdown (Ok), goes silent after its hello (Aborted, naming how
  // long), or `*stop` becomes non-zero (Ok; null: never); a signal that
  // interrupts a wait is not an error. Called once, on the thread that owns
  // the server.
  Status serve(const std::atomic<int>* stop);
  // One line of what crossed into and out of this executor: copies
  // received over NCCL, as bytes over ZeroMQ, within the process, and
  // values sent over NCCL. Call after serve() returns.
  std::string summary() const;

  struct State;

 private:
  std::unique_ptr<State> st_;
};

}  // namespace slicesched
