// CUDA runtime and NCCL calls of the live runtime (cuda.h). Of LibTorch
// only c10's stream registry (the calling thread's current stream), not
// ATen: this file compiles in a few seconds.
#include "cuda.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace slicesched::rt::cuda {

namespace {

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw std::runtime_error(what + ": " + cudaGetErrorString(e));
}

void check(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess) throw std::runtime_error(what + ": " + ncclGetErrorString(r));
}

std::string dev(int d) { return "cuda:" + std::to_string(d); }

void need_device(int d) {
  const int n = device_count();
  if (n == 0) throw std::runtime_error(dev(d) + ": no CUDA device is visible");
  if (d < 0 || d >= n) throw std::runtime_error(dev(d) + ": only " + std::to_string(n) + " CUDA device(s) visible");
}

// Restores the calling thread's current device on scope exit.
class DeviceScope {
 public:
  explicit DeviceScope(int d) {
    check(cudaGetDevice(&prev_), "cudaGetDevice");
    check(cudaSetDevice(d), "cudaSetDevice(" + dev(d) + ")");
  }
  ~DeviceScope() { cudaSetDevice(prev_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_ = 0;
};

struct Events {
  cudaEvent_t a = nullptr, b = nullptr;
  int device = 0;
  explicit Events(int d) : device(d) {
    DeviceScope s(d);
    check(cudaEventCreate(&a), "cudaEventCreate on " + dev(d));
    if (cudaError_t e = cudaEventCreate(&b); e != cudaSuccess) {
      cudaEventDestroy(a);
      check(e, "cudaEventCreate on " + dev(d));
    }
  }
  ~Events() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  std::int64_t wait_ns() const {
    check(cudaEventSynchronize(b), "cudaEventSynchronize on " + dev(device));
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime on " + dev(device));
    return static_cast<std::int64_t>(static_cast<double>(ms) * 1e6);
  }
};

cudaStream_t current_stream(int d) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(d)).stream();
}

}  // namespace

int device_count() {
  int n = 0;
  // No driver, no device: both mean "none visible" here.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::pair<std::int64_t, std::int64_t> mem_info(int d) {
  need_device(d);
  DeviceScope s(d);
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo on " + dev(d));
  return {static_cast<std::int64_t>(free), static_cast<std::int64_t>(total)};
}

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  for (int d = 0; d < device_count(); ++d) {
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, d), "cudaGetDeviceProperties on " + dev(d));
    DeviceInfo i;
    i.index = d;
    i.name = p.name;
    i.major = p.major;
    i.minor = p.minor;
    i.multiprocessors = p.multiProcessorCount;
    std::tie(i.free_bytes, i.total_bytes) = mem_info(d);
    out.push_back(std::move(i));
  }
  return out;
}

void release_cached() {
  if (device_count() > 0) c10::cuda::CUDACachingAllocator::emptyCache();
}

std::string versions() {
  int rt = 0, drv = 0, nccl = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  ncclGetVersion(&nccl);
  auto cuda = [](int v) {
    return v == 0 ? std::string("none") : std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return "CUDA runtime " + cuda(rt) + ", driver " + cuda(drv) + ", NCCL " + std::to_string(nccl / 10000) + "." +
         std::to_string(nccl / 100 % 100) + "." + std::to_string(nccl % 100);
}

std::vector<std::pair<int, int>> enable_peer_access(const std::vector<int>& ds) {
  std::vector<std::pair<int, int>> enabled;
  for (int a : ds) need_device(a);
  for (int a : ds) {
    DeviceScope s(a);
    for (int b : ds) {
      if (a == b) continue;
      int can = 0;
      check(cudaDeviceCanAccessPeer(&can, a, b), "cudaDeviceCanAccessPeer(" + dev(a) + ", " + dev(b) + ")");
      if (!can) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
      } else {
        check(e, "cudaDeviceEnablePeerAccess(" + dev(a) + " -> " + dev(b) + ")");
      }
      enabled.emplace_back(a, b);
    }
  }
  return enabled;
}

// ---- EventTimer -------------------------------------------------------------------------------------------------

struct EventTimer::Impl {
  Events ev;
  explicit Impl(int d) : ev(d) {}
};

EventTimer::EventTimer(int d) {
  need_device(d);
  impl_ = std::make_unique<Impl>(d);
}
EventTimer::~EventTimer() = default;

void EventTimer::start() {
  check(cudaEventRecord(impl_->ev.a, current_stream(impl_->ev.device)), "cudaEventRecord on " + dev(impl_->ev.device));
}
void EventTimer::stop() {
  check(cudaEventRecord(impl_->ev.b, current_stream(impl_->ev.device)), "cudaEventRecord on " + dev(impl_->ev.device));
}
std::int64_t EventTimer::wait_ns() { return impl_->ev.wait_ns(); }

// ---- NcclLinks --------------------------------------------------------------------------------------------------

struct NcclLinks::Impl {
  // (from, to) -> {from's rank, to's rank}; one communicator (both ranks
  // the same) when from == to.
  std::map<std::pair<int, int>, std::pair<ncclComm_t, ncclComm_t>> comms;
  ~Impl() {
    for (auto& [pair, c] : comms) {
      ncclCommDestroy(c.first);
      if (c.second != c.first) ncclCommDestroy(c.second);
    }
  }
};

NcclLinks::NcclLinks(const std::vector<int>& ds) : impl_(std::make_unique<Impl>()) {
  for (int d : ds) need_device(d);
  for (std::size_t i = 0; i < ds.size(); ++i)
    for (std::size_t j = i + 1; j < ds.size(); ++j)
      if (ds[i] == ds[j]) throw std::invalid_argument("NcclLinks: " + dev(ds[i]) + " listed twice");
  for (int a : ds) {
    for (int b : ds) {
      const std::string what = "ncclCommInitAll(" + dev(a) + " -> " + dev(b) + ")";
      if (a == b) {
        ncclComm_t c = nullptr;
        int list[1] = {a};
        check(ncclCommInitAll(&c, 1, list), what);
        impl_->comms[{a, b}] = {c, c};
      } else {
        ncclComm_t c[2] = {nullptr, nullptr};
        int list[2] = {a, b};
        check(ncclCommInitAll(c, 2, list), what);
        impl_->comms[{a, b}] = {c[0], c[1]};
      }
    }
  }
}

NcclLinks::~NcclLinks() = default;

bool NcclLinks::connects(int from, int to) const { return impl_->comms.count({from, to}) > 0; }
std::size_t NcclLinks::communicators() const { return impl_->comms.size(); }

std::int64_t NcclLinks::send_recv(const void* src, void* dst, std::size_t bytes, int from, int to) {
  auto it = impl_->comms.find({from, to});
  if (it == impl_->comms.end())
    throw std::logic_error("NcclLinks: no communicator for " + dev(from) + " -> " + dev(to));
  const auto [send_comm, recv_comm] = it->second;
  const std::string what = "NCCL " + dev(from) + " -> " + dev(to);
  cudaStream_t rs = current_stream(to);
  cudaStream_t ss = from == to ? rs : current_stream(from);
  // Events of this thread's transfers: created once per (thread, device).
  thread_local std::map<int, std::unique_ptr<Events>> events;
  auto ev = [&](int d) -> Events& {
    auto& e = events[d];
    if (!e) e = std::make_unique<Events>(d);
    return *e;
  };
  Events& rev = ev(to);
  {
    DeviceScope s(to);
    check(cudaEventRecord(rev.a, rs), what + ": cudaEventRecord");
  }
  // One rank of a two-rank communicator: the peer is rank 1 for the
  // sender, rank 0 for the receiver; a single-rank one sends to itself.
  const int send_peer = from == to ? 0 : 1, recv_peer = 0;
  check(ncclGroupStart(), what + ": ncclGroupStart");
  ncclResult_t r = ncclSend(src, bytes, ncclChar, send_peer, send_comm, ss);
  if (r == ncclSuccess) r = ncclRecv(dst, bytes, ncclChar, recv_peer, recv_comm, rs);
  const ncclResult_t end = ncclGroupEnd();
  check(r != ncclSuccess ? r : end, what);
  {
    DeviceScope s(to);
    check(cudaEventRecord(rev.b, rs), what + ": cudaEventRecord");
  }
  if (from != to) {
    Events& sev = ev(from);
    DeviceScope s(from);
    check(cudaEventRecord(sev.b, ss), what + ": cudaEventRecord");
    check(cudaEventSynchronize(sev.b), what + ": cudaEventSynchronize (send)");
  }
  return rev.wait_ns();
}

// ---- NcclPeers --------------------------------------------------------------------------------------------------

std::string nccl_unique_id() {
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return std::string(id.internal, sizeof id.internal);
}

std::string device_uuid(int d) {
  need_device(d);
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, d), "cudaGetDeviceProperties on " + dev(d));
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (char c : p.uuid.bytes) {
    out.push_back(hex[(static_cast<unsigned char>(c) >> 4) & 0xf]);
    out.push_back(hex[static_cast<unsigned char>(c) & 0xf]);
  }
  return out;
}

namespace {

using Deadline = std::chrono::steady_clock::time_point;

Deadline after_ms(int ms) { return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms); }

// Polls a non-blocking communicator until its pending operation (init,
// or a group's enqueue) is no longer in progress: its final state, or
// ncclInProgress at the deadline.
ncclResult_t settle(ncclComm_t c, Deadline until) {
  for (;;) {
    ncclResult_t r = ncclSuccess;
    if (ncclResult_t q = ncclCommGetAsyncError(c, &r); q != ncclSuccess) return q;
    if (r != ncclInProgress || std::chrono::steady_clock::now() >= until) return r;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace

struct NcclPeers::Impl {
  std::vector<Link> links;
  std::vector<ncclComm_t> comms;  // null once aborted
  ~Impl() {
    for (ncclComm_t c : comms)
      if (c) ncclCommDestroy(c);
  }
};

NcclPeers::NcclPeers(std::vector<Link> links, int timeout_ms) : impl_(std::make_unique<Impl>()) {
  impl_->links = std::move(links);
  impl_->comms.assign(impl_->links.size(), nullptr);
  for (const Link& l : impl_->links) {
    need_device(l.device);
    if (l.id.size() != sizeof(ncclUniqueId) || (l.rank != 0 && l.rank != 1))
      throw std::invalid_argument("NCCL link " + l.name + ": a malformed id or rank");
  }
  if (impl_->links.empty()) return;
  auto abort_all = [&] {
    for (ncclComm_t& c : impl_->comms)
      if (c) {
        ncclCommAbort(c);
        c = nullptr;
      }
  };
  int prev = 0;
  check(cudaGetDevice(&prev), "cudaGetDevice");
  // Non-blocking: every init returns at once and completes in the
  // background, so all of this process's links progress together and the
  // wait below can give up.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclGroupStart();
  std::size_t failed = 0;
  for (std::size_t i = 0; r == ncclSuccess && i < impl_->links.size(); ++i) {
    const Link& l = impl_->links[i];
    ncclUniqueId id;
    std::memcpy(id.internal, l.id.data(), sizeof id.internal);
    cudaSetDevice(l.device);
    r = ncclCommInitRankConfig(&impl_->comms[i], 2, id, l.rank, &config);
    if (r == ncclInProgress) r = ncclSuccess;
    failed = i;
  }
  const ncclResult_t end = ncclGroupEnd();
  cudaSetDevice(prev);
  if (r != ncclSuccess || (end != ncclSuccess && end != ncclInProgress)) {
    abort_all();
    check(r != ncclSuccess ? r : end, "ncclCommInitRankConfig(" + impl_->links[failed].name + ")");
  }
  const Deadline until = after_ms(timeout_ms);
  for (std::size_t i = 0; i < impl_->links.size(); ++i) {
    const ncclResult_t s = settle(impl_->comms[i], until);
    if (s == ncclSuccess) continue;
    const std::string why = s == ncclInProgress ? "its peer did not join within " + std::to_string(timeout_ms) + " ms"
                                                : std::string(ncclGetErrorString(s));
    abort_all();
    throw std::runtime_error("NCCL link " + impl_->links[i].name + ": " + why);
  }
}

NcclPeers::~NcclPeers() = default;

std::size_t NcclPeers::size() const { return impl_->links.size(); }

std::int64_t NcclPeers::send(std::size_t i, const void* data, std::size_t bytes, int timeout_ms) {
  return transfer(i, const_cast<void*>(data), bytes, timeout_ms, true);
}
std::int64_t NcclPeers::recv(std::size_t i, void* data, std::size_t bytes, int timeout_ms) {
  return transfer(i, data, bytes, timeout_ms, false);
}

std::int64_t NcclPeers::transfer(std::size_t i, void* data, std::size_t bytes, int timeout_ms, bool sending) {
  if (i >= impl_->links.size()) throw std::logic_error("NcclPeers: no link " + std::to_string(i));
  const Link& l = impl_->links[i];
  if ((l.rank == 0) != sending)
    throw std::logic_error("NcclPeers: link " + l.name + (sending ? " receives here" : " sends here"));
  ncclComm_t c = impl_->comms[i];
  const std::string what = std::string(sending ? "NCCL send on " : "NCCL receive on ") + l.name;
  if (!c) throw std::runtime_error(what + ": the link was aborted by an earlier timeout");
  DeviceScope scope(l.device);
  cudaStream_t st = current_stream(l.device);
  thread_local std::map<int, std::unique_ptr<Events>> events;  // this thread's, per device
  auto& ev = events[l.device];
  if (!ev) ev = std::make_unique<Events>(l.device);
  check(cudaEventRecord(ev->a, st), what + ": cudaEventRecord");
  const int peer = 1 - l.rank;
  ncclResult_t r =
      sending ? ncclSend(data, bytes, ncclChar, peer, c, st) : ncclRecv(data, bytes, ncclChar, peer, c, st);
  const Deadline until = after_ms(timeout_ms);
  if (r == ncclInProgress) r = settle(c, until);
  if (r != ncclSuccess) {
    if (r == ncclInProgress) {
      ncclCommAbort(c);
      impl_->comms[i] = nullptr;
      throw std::runtime_error(what + ": not queued within " + std::to_string(timeout_ms) + " ms (aborted)");
    }
    check(r, what);
  }
  check(cudaEventRecord(ev->b, st), what + ": cudaEventRecord");
  // Polled, not synchronized: a peer that never posts its half would
  // block an event sync forever; the abort frees the stream instead.
  for (;;) {
    const cudaError_t q = cudaEventQuery(ev->b);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) check(q, what);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(c, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      ncclCommAbort(c);
      impl_->comms[i] = nullptr;
      check(async, what);
    }
    if (std::chrono::steady_clock::now() >= until) {
      ncclCommAbort(c);
      impl_->comms[i] = nullptr;
      throw std::runtime_error(what + ": not done within " + std::to_string(timeout_ms) +
                               " ms (the peer died or never posted its half; link aborted)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return ev->wait_ns();
}

}  // namespace slicesched::rt::cuda
