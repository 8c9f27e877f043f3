// The scheduler side of multi-process live serving: an OpRunner whose
// accelerators belong to executor processes (`slicesched executor`), each
// owning one host's accelerators. The LiveCluster keeps its queue rules,
// arbiter and memory accounting; this runner forwards each operator and
// copy to the executor that owns the accelerator, over the control
// channel (executor/remote/wire). Values stay in the executors: a Payload
// here is a handle (executor, value id, bytes), and dropping the last
// handle tells the executor to free the value. A copy between hosts goes
// straight from the source executor to the destination executor (NCCL
// between GPUs, else bytes over ZeroMQ); the tensor never passes through
// this process.
//
// Liveness: executors send heartbeats, and so does this runner. An
// executor silent for `timeout_ms` (killed, crashed, cut off) is lost for
// good: the loss callback hears each of its accelerators (LiveCluster::lose,
// before anything else, so what ran there reports lost), then its
// outstanding calls fail, and later calls to it fail at once.
//
// Threading: one I/O thread owns the sockets; run() and copy() may be
// called from any threads (the cluster's workers) and block until the
// executor answers or is lost.
module;
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

export module slicesched.executor.remote.remote_runner;
import slicesched.executor.runner;
import slicesched.models.model;
import slicesched.core.backend;
import slicesched.core.gmg;
import slicesched.core.ids;
import slicesched.core.status;

export namespace slicesched {

struct ExecutorEndpoint {
  std::string host;     // [[hosts]] name
  std::string address;  // where its executor listens ("tcp://h:p", "ipc://path")
  // What its executor must have been started with (wire::Fingerprint:
  // protocol, this host entry, the models); connect() refuses it otherwise.
  std::vector<std::pair<std::string, std::string>> fingerprint;
};

struct RemoteOptions {
  int heartbeat_ms = 200;  // how often each side says it is alive
  int timeout_ms = 3000;   // silence after which an executor is lost
  int connect_ms = 60000;  // how long connect() waits for an executor's hello (it loads weights first)
  // Makes one ncclUniqueId (rt::cuda::nccl_unique_id; this process hosts
  // its bootstrap root). Null: no NCCL links, every copy between
  // executors goes as bytes over ZeroMQ ([live] transport = "copy", or a
  // build without LibTorch).
  std::function<std::string()> nccl_id;
  // Who this scheduler is, as an executor held by it names it to another
  // scheduler it refuses ("host pid N, serve CONFIG").
  std::string name = "a scheduler";
  // connect() gives up, Cancelled, once this is non-zero (a signal); null: never.
  const std::atomic<int>* stop = nullptr;
};

// One model the executors serve: the operators of template `tmpl` are the
// config's model number `model`, mapped through the contract (roles).
struct RemoteModel {
  TemplateId tmpl = 0;
  std::size_t model = 0;
  std::shared_ptr<const Model> contract;
};

class RemoteRunner final : public OpRunner {
 public:
  // `accel_host[a]`: the index into `hosts` of accelerator a's executor.
  // Connects nothing yet.
  RemoteRunner(std::vector<ExecutorEndpoint> hosts, std::vector<std::size_t> accel_host,
               std::vector<RemoteModel> models, RemoteOptions opt = {});
  // Stops the I/O thread; outstanding calls fail. Executors are not told
  // to exit (shutdown() does that).
  ~RemoteRunner() override;
  RemoteRunner(const RemoteRunner&) = delete;
  RemoteRunner& operator=(const RemoteRunner&) = delete;

  // Called (from the I/O thread) once per accelerator of a lost executor.
  // Set before connect().
  void on_lost(std::function<void(AccelId)> f) { lost_cb_ = std::move(f); }
  // Says hello to every executor and waits for each (up to connect_ms, or
  // until opt.stop): each must speak this protocol version, have the
  // fingerprint its endpoint gives (else refused naming the first field
  // that differs), serve no other live scheduler, and own exactly the
  // accelerators the config gives its host (`names[a]` for accelerator a).
  // Then, with opt.nccl_id, sets up the NCCL links between executors
  // (wire::plan_nccl_links over the GPUs their hellos name): one id per
  // link, sent with each executor's rank to both of its executors, which
  // join all their links in one NCCL group; waits for every executor
  // (up to connect_ms). Returns the resident weight bytes per accelerator
  // the executors loaded. Fails with one line naming the host and address
  // (or the NCCL link).
  Result<std::vector<std::int64_t>> connect(const std::vector<std::string>& names);
  // Tells every executor still alive to exit (best effort, no wait).
  void shutdown();
  // Executors lost so far (by heartbeat silence).
  std::size_t lost_executors() const { return lost_count_.load(); }
  // NCCL links set up by connect() (0 before it, or without GPUs on two
  // executors).
  std::size_t nccl_links() const { return links_.size(); }

  Result<std::shared_ptr<const void>> prepare(const Gmg& gmg, OpId op) override;
  Result<OpResult> run(AccelId accel, const void* prepared, std::span<const Payload> inputs) override;
  Result<CopyResult> copy(const Payload& value, AccelId to) override;
  Status on_iteration(InstanceId instance, IterationPlan plan) override;
  void drop_iteration(InstanceId instance) override;

  struct Channel;  // shared with value handles, which outlive nothing but may outlive a call

 private:
  Result<std::vector<std::int64_t>> connect_all(const std::vector<std::string>& names);
  void io_loop();
  void declare_dead(std::size_t exec, const std::string& why);
  Status connect_nccl(const std::vector<std::string>& gpu, const std::vector<std::string>& names,
                      std::chrono::steady_clock::time_point deadline);

  std::vector<ExecutorEndpoint> hosts_;
  std::vector<std::size_t> accel_host_;
  std::vector<RemoteModel> models_;
  RemoteOptions opt_;
  std::function<void(AccelId)> lost_cb_;
  // (from, to) -> link number; written by connect(), read-only after.
  std::map<std::pair<AccelId, AccelId>, std::uint64_t> links_;
  std::shared_ptr<Channel> ch_;
  std::atomic<std::size_t> lost_count_{0};
  std::mutex plans_mu_;
  std::unordered_map<InstanceId, std::shared_ptr<const std::string>> plans_;  // plan JSON per instance
  std::thread io_;
};

}  // namespace slicesched
