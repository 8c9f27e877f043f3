// The CUDA- and NCCL-specific part of the live runtime: device facts,
// peer access, device-side timing with CUDA events, and NCCL point-to-point
// transfers. Plain C++ with no CUDA, NCCL or LibTorch include (cuda.cpp holds
// them), so executor code includes it cheaply. "The calling thread's current
// stream" is LibTorch's (c10::cuda::getCurrentCUDAStream): the one
// LlamaModel::bind_thread_stream sets and the operators queue on.
//
// Compiled and linked in every build. Where no CUDA device is visible,
// device_count() is 0, devices() is empty and every call that needs a
// device throws std::runtime_error saying so; nothing else changes.
//
// Devices are CUDA ordinals (the N of "cuda:N"). Failure: a CUDA or NCCL
// error throws std::runtime_error whose message names the call, the
// device(s) and the library's own error string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace slicesched::rt::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0, multiprocessors = 0;
  std::int64_t total_bytes = 0, free_bytes = 0;  // cudaMemGetInfo at the call
};

// Visible devices (CUDA_VISIBLE_DEVICES applies). 0 / empty without CUDA.
int device_count();
std::vector<DeviceInfo> devices();
// cudaMemGetInfo of one device: {free, total} bytes.
std::pair<std::int64_t, std::int64_t> mem_info(int device);
// Hands the memory LibTorch's caching allocator holds but no tensor uses
// back to CUDA (emptyCache), so that mem_info sees it as free: an earlier
// phase of the same process (e.g. bench accuracy's calibration) must not
// count against the next one. No-op without CUDA.
void release_cached();
// The versions in use, for reports: "CUDA runtime 13.2, driver 13.0, NCCL 2.30.7".
std::string versions();

// Enables peer access both ways between every pair of `devices` that the
// hardware allows (cudaDeviceCanAccessPeer); returns the ordered pairs
// (a, b) where a now reads b's memory directly. Idempotent: a pair already
// enabled counts as enabled. Call before any work; process-wide.
std::vector<std::pair<int, int>> enable_peer_access(const std::vector<int>& devices);

// Device-side timing of work queued on the calling thread's current stream
// of one device: start() and stop() record CUDA events on it; wait_ns()
// blocks until the stop event has happened (an event sync, not a stream or
// device sync) and returns the device time between the two events. Reusable;
// one thread at a time.
class EventTimer {
 public:
  explicit EventTimer(int device);
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start();
  void stop();
  std::int64_t wait_ns();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// NCCL point-to-point transfers between CUDA devices of this process. One
// communicator per ordered pair (from, to) of the given devices, created
// here at start-up (ncclCommInitAll over {from, to}; a single-rank one
// for from == to, where NCCL sends to itself), so that each communicator
// carries one direction only and is used by one thread: the receiving
// accelerator's transfer thread (docs/live.md has the argument for why the
// executor's arbitration keeps this free of NCCL deadlocks).
class NcclLinks {
 public:
  // `devices`: distinct ordinals. Throws runtime_error if NCCL cannot set
  // up a communicator (naming the pair).
  explicit NcclLinks(const std::vector<int>& devices);
  ~NcclLinks();
  NcclLinks(const NcclLinks&) = delete;
  NcclLinks& operator=(const NcclLinks&) = delete;

  bool connects(int from, int to) const;
  std::size_t communicators() const;
  // Moves `bytes` from `src` (memory on device `from`) into `dst` (on `to`):
  // ncclSend on the calling thread's current stream of `from` and ncclRecv
  // on its current stream of `to`, in one NCCL group, then waits for both
  // (event syncs) and returns the device time of the receive. For from ==
  // to both halves go on the one stream. Pair not connected: logic_error.
  std::int64_t send_recv(const void* src, void* dst, std::size_t bytes, int from, int to);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A fresh ncclUniqueId (NCCL's own bootstrap), as its 128 raw bytes. The
// calling process hosts the id's bootstrap root until every rank of the
// communicator made from it has joined, so it must outlive their init and
// the ranks must reach it over the network. Needs no CUDA device. Throws
// runtime_error when NCCL cannot make one.
std::string nccl_unique_id();
// The GPU's UUID, 32 hex digits: the same physical GPU has the same UUID
// in every process on every host. Throws like mem_info.
std::string device_uuid(int device);

// NCCL communicators between processes: each link is a two-rank
// communicator whose other rank lives in another process (another
// executor), carrying one direction only. All of a process's links are
// initialized together in one NCCL group (non-blocking), so that the
// blocking part of one link's init cannot wait for a peer that is itself
// waiting inside another link's init. A link is then used by one thread
// at a time: the sender's or the receiver's.
class NcclPeers {
 public:
  struct Link {
    std::string name;  // for messages: "cpu0 (cuda:0) -> gpu1 (cuda:1)"
    std::string id;    // nccl_unique_id() bytes, the same on both ranks
    int rank = 0;      // 0: the sending side, 1: the receiving side
    int device = 0;    // this rank's CUDA ordinal
  };
  // Joins every link; waits up to `timeout_ms` for all of them (the peers
  // run the same constructor at about the same time). Throws runtime_error
  // naming the first link that failed or was still pending at the timeout
  // (all are aborted then).
  NcclPeers(std::vector<Link> links, int timeout_ms);
  ~NcclPeers();
  NcclPeers(const NcclPeers&) = delete;
  NcclPeers& operator=(const NcclPeers&) = delete;

  std::size_t size() const;
  // Sends (rank 0) or receives (rank 1) `bytes` at `data` (memory on the
  // link's device) over link `i`, queued on the calling thread's current
  // stream of that device, then waits until it is done and returns its
  // device time. Not done within `timeout_ms` (the peer died or never
  // posted its half): the link is aborted, unusable from then on, and this
  // throws runtime_error naming it. Wrong side or index: logic_error.
  std::int64_t send(std::size_t i, const void* data, std::size_t bytes, int timeout_ms);
  std::int64_t recv(std::size_t i, void* data, std::size_t bytes, int timeout_ms);

 private:
  std::int64_t transfer(std::size_t i, void* data, std::size_t bytes, int timeout_ms, bool sending);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace slicesched::rt::cuda
