// The CUDA and NCCL parts of the live runtime on a real GPU (executor/torch/
// cuda.h and the CUDA paths of runtime.h). Registered with ctest as
// `cuda_tests` and `nccl_tests`; where no CUDA device is visible the binary
// says so in one line and exits 77, which ctest reports as skipped
// (scripts/gpu-check.sh runs them on a machine with GPUs).
#define CATCH_CONFIG_RUNNER
#include "executor/torch/cuda.h"

#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "executor/torch/runtime.h"

using namespace slicesched::rt;

namespace {

LlamaConfig small(const std::string& dtype) {
  LlamaConfig c;
  c.name = "llama-small";
  c.vocab = 32000;
  c.hidden = 1024;
  c.layers = 4;
  c.heads = 8;
  c.kv_heads = 2;
  c.mlp = 2816;
  c.groups = 2;
  c.dtype = dtype;
  c.seed = 3;
  return c;
}

void load_all(LlamaModel& m, const std::string& dev) {
  m.load("embed", dev);
  for (int g = 0; g < m.config().groups; ++g) m.load("layers" + std::to_string(g), dev);
  m.load("head", dev);
}

const std::vector<std::vector<std::int64_t>> kPrompts = {{1, 2, 3, 4, 5, 6, 7, 8}, {900, 7, 300, 42, 9}};

}  // namespace

TEST_CASE("devices report their memory, and peer access can be enabled", "[cuda]") {
  const auto ds = cuda::devices();
  REQUIRE(ds.size() == static_cast<std::size_t>(cuda::device_count()));
  for (const auto& d : ds) {
    INFO(d.name);
    CHECK(d.total_bytes > 0);
    CHECK(d.free_bytes > 0);
    CHECK(d.free_bytes <= d.total_bytes);
    CHECK(d.multiprocessors > 0);
  }
  std::vector<int> all;
  for (const auto& d : ds) all.push_back(d.index);
  const auto pairs = cuda::enable_peer_access(all);
  CHECK(pairs.size() <= all.size() * (all.size() - 1));
  CHECK(cuda::enable_peer_access(all) == pairs);  // idempotent
  CHECK_THROWS_WITH(cuda::mem_info(cuda::device_count()), Catch::Contains("CUDA device(s) visible"));
}

TEST_CASE("CUDA events time an operator on the thread's own stream", "[cuda]") {
  LlamaModel m(small("bfloat16"));
  load_all(m, "cuda:0");
  LlamaModel::bind_thread_stream("cuda:0");
  cuda::EventTimer timer(0);
  StepPlan plan{{SeqStep{0, 0, std::vector<std::int64_t>(2048, 5)}}};
  Value kv;
  const auto t0 = std::chrono::steady_clock::now();
  timer.start();
  Value x = m.embed(plan, "cuda:0");
  x = m.layers(0, x, Value(), plan, "cuda:0", kv);
  timer.stop();
  const std::int64_t device_ns = timer.wait_ns();
  const auto host_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  CHECK(device_ns > 0);
  CHECK(device_ns <= host_ns);
  // The timer's wait drained the work it timed.
  CHECK(x.tokens() == 2048);
  CHECK(kv.cached_tokens(0) == 2048);
}

TEST_CASE("the model on a GPU: ops spread over two accelerators of it equal its reference", "[cuda]") {
  for (const std::string dtype : {"float32", "bfloat16"}) {
    INFO("dtype " << dtype);
    LlamaModel m(small(dtype));
    const int max_new = 6;
    const auto reference = m.generate_reference(kPrompts, max_new, "cuda:0");
    // Two "accelerators" on cuda:0 are two threads with streams of their
    // own; values move through the host (pinned) and back, every step.
    LlamaModel::bind_thread_stream("cuda:0");
    std::vector<Value> kv(2);
    StepPlan plan{{SeqStep{0, 0, kPrompts[0]}, SeqStep{1, 0, kPrompts[1]}}};
    std::vector<std::vector<std::int64_t>> got(2);
    for (int it = 0; it < max_new; ++it) {
      Value x = m.embed(plan, "cuda:0");
      for (int g = 0; g < 2; ++g) {
        x = LlamaModel::copy_to(LlamaModel::copy_to(x, "cpu"), "cuda:0");
        x = m.layers(g, x, kv[std::size_t(g)], plan, "cuda:0", kv[std::size_t(g)]);
      }
      const auto next = m.head(x, plan, "cuda:0");
      for (std::size_t i = 0; i < 2; ++i) {
        got[i].push_back(next[i]);
        plan.seqs[i].position += static_cast<std::int64_t>(plan.seqs[i].tokens.size());
        plan.seqs[i].tokens = {next[i]};
      }
    }
    CHECK(got == reference);
  }
}

TEST_CASE("NCCL moves bytes exactly between every ordered pair of GPUs, itself included", "[nccl]") {
  std::vector<int> all;
  for (int d = 0; d < cuda::device_count(); ++d) all.push_back(d);
  cuda::NcclLinks links(all);
  CHECK(links.communicators() == all.size() * all.size());
  const std::size_t n = (8u << 20) + 3;  // not a multiple of anything NCCL likes
  std::vector<unsigned char> host(n), back(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned char>(i * 131 + 7);
  for (int from : all)
    for (int to : all) {
      INFO("cuda:" << from << " -> cuda:" << to);
      REQUIRE(links.connects(from, to));
      void *src = nullptr, *dst = nullptr;
      REQUIRE(cudaSetDevice(from) == cudaSuccess);
      REQUIRE(cudaMalloc(&src, n) == cudaSuccess);
      REQUIRE(cudaMemcpy(src, host.data(), n, cudaMemcpyHostToDevice) == cudaSuccess);
      REQUIRE(cudaSetDevice(to) == cudaSuccess);
      REQUIRE(cudaMalloc(&dst, n) == cudaSuccess);
      REQUIRE(cudaMemset(dst, 0, n) == cudaSuccess);
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      const std::int64_t ns = links.send_recv(src, dst, n, from, to);
      CHECK(ns > 0);
      REQUIRE(cudaMemcpy(back.data(), dst, n, cudaMemcpyDeviceToHost) == cudaSuccess);
      CHECK(back == host);
      cudaFree(dst);
      cudaSetDevice(from);
      cudaFree(src);
    }
  CHECK_THROWS_AS(links.send_recv(nullptr, nullptr, 1, 0, cuda::device_count()), std::logic_error);
}

TEST_CASE("copy_to over NCCL gives the same value as a LibTorch copy", "[nccl]") {
  LlamaModel m(small("bfloat16"));
  const int last = cuda::device_count() - 1;
  const std::string a = "cuda:0", b = "cuda:" + std::to_string(last);
  load_all(m, a);
  LlamaModel::bind_thread_stream(a);
  LlamaModel::bind_thread_stream(b);
  StepPlan plan{{SeqStep{0, 0, kPrompts[0]}, SeqStep{1, 0, kPrompts[1]}}};
  Value kv;
  Value x = m.layers(0, m.embed(plan, a), Value(), plan, a, kv);
  LlamaModel::synchronize(a);
  cuda::NcclLinks links(last == 0 ? std::vector<int>{0} : std::vector<int>{0, last});
  for (const Value& v : {x, kv}) {
    const Value by_nccl = LlamaModel::copy_to(v, b, &links);
    const Value by_copy = LlamaModel::copy_to(v, b);
    LlamaModel::synchronize(b);
    CHECK(by_nccl.device() == b);
    CHECK(by_nccl.bytes() == v.bytes());
    CHECK(by_nccl.to_floats() == v.to_floats());
    CHECK(by_nccl.to_floats() == by_copy.to_floats());
    CHECK(by_nccl.sequences() == v.sequences());
  }
}

int main(int argc, char* argv[]) {
  if (cuda::device_count() == 0) {
    std::printf("no CUDA device is visible: CUDA and NCCL tests skipped\n");
    return 77;
  }
  std::printf("%s; %d device(s)\n", cuda::versions().c_str(), cuda::device_count());
  return Catch::Session().run(argc, argv);
}
