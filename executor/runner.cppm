// What the live executor runs: the computation behind each operator and
// the copy behind each transfer. The executor owns queues, ordering,
// arbitration and memory accounting; an OpRunner owns the values (tensors)
// and the math. The LibTorch Llama runner implements it; so can any other
// model runtime.
module;
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

export module slicesched.executor.runner;
import slicesched.core.backend;
import slicesched.core.gmg;
import slicesched.core.ids;
import slicesched.core.sampling;
import slicesched.core.status;

export namespace slicesched {

// A value on one accelerator: an operator's output or retained state, or a
// received copy. Opaque to the executor; `bytes` is what it occupies, the
// figure the executor's memory accounting charges.
struct Payload {
  std::shared_ptr<const void> value;
  std::int64_t bytes = 0;
  explicit operator bool() const { return value != nullptr; }
};

// One operator's results.
struct OpResult {
  Payload output;                      // what successors read
  Payload retained;                    // state a later instance takes over (e.g. a KV cache)
  std::vector<std::int64_t> tokens;    // sampled tokens, for heads
  std::vector<TokenLogprob> logprobs;  // parallel to tokens when asked for (Feedback::logprobs)
  // The operator's time as the device measured it (CUDA events), or -1:
  // the executor then times the call on the host. What estimators learn.
  Nanos device_ns = -1;
};

// One transfer's result: the value on the destination, and the copy's time
// as the device measured it (or -1, as for OpResult).
struct CopyResult {
  Payload value;
  Nanos device_ns = -1;
};

class OpRunner {
 public:
  virtual ~OpRunner() = default;
  // Engine thread, when `op` is submitted: captures from the GMG what run()
  // needs (the GMG keeps changing afterwards, and workers must not read it).
  // Fails on an operator the runner cannot compute.
  virtual Result<std::shared_ptr<const void>> prepare(const Gmg& gmg, OpId op) = 0;
  // Worker thread of `accel`: computes the operator. `inputs` follow the
  // operator's GMG input edges in order (retained edges carry the producer's
  // retained state), each already on `accel`. May throw; the executor turns
  // an exception into a failed operator. Concurrent calls come from
  // different accelerators' workers.
  virtual Result<OpResult> run(AccelId accel, const void* prepared, std::span<const Payload> inputs) = 0;
  // Transfer thread of `to`: a copy of `value` on accelerator `to`.
  virtual Result<CopyResult> copy(const Payload& value, AccelId to) = 0;
  // Plans of the iterations to come (engine thread, before submission).
  virtual Status on_iteration(InstanceId /*instance*/, IterationPlan /*plan*/) { return Status::Ok(); }
  // The instance was taken back before it ran (Backend::drop_iteration):
  // forget its plan. Engine thread.
  virtual void drop_iteration(InstanceId /*instance*/) {}
  // Backend::swap_out: keeps sequences `seqs` of `tenant` in host memory,
  // their parts of `caches` (one retained KV value per layer group, done).
  // Engine thread. Runners that cannot refuse (the default).
  virtual Status swap_out(std::uint32_t /*tenant*/, std::span<const std::uint64_t> /*seqs*/,
                          std::span<const Payload> /*caches*/) {
    return FailedPrecondition("this runner cannot keep KV caches in host memory (preemption_mode = \"swap\")");
  }
  // Backend::forget_swapped. Engine thread.
  virtual void forget_swapped(std::uint32_t /*tenant*/, std::span<const std::uint64_t> /*seqs*/) {}
};

}  // namespace slicesched
