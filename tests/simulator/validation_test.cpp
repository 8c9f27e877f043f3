// The roofline against physics and published measurements
// (simulator/validation.cppm): a decode step of many sequences over a long
// context costs near its memory-bandwidth floor because the KV cache is read
// at its own efficiency, the published CSV reads with one-line errors, and
// a GPU faster than its datasheet is caught beating its floor.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

import slicesched.simulator.validation;
import slicesched.config.accelerators;
import slicesched.models.dense;
import slicesched.hardware.roofline;
import slicesched.models.work;

using namespace slicesched;
namespace fs = std::filesystem;

namespace {

const std::string kPublished = std::string(SLICESCHED_SOURCE_DIR) + "/data/validation/trtllm_a100.csv";

AcceleratorType a100() {
  auto t = find_accelerator_type("A100", default_accelerator_dir());
  REQUIRE(t.ok());
  return t.value();
}

RooflineFit shipped_fit() {
  auto f = load_roofline_fit(default_roofline_fit(default_accelerator_dir()));
  REQUIRE(f.ok());
  return f.value();
}

// Writes `text` to `file` and reads it back as a roofline fit file.
auto load_fit_text(const fs::path& file, const std::string& text) {
  std::ofstream(file) << text;  // closed at the end of the statement
  return load_roofline_fit(file.string());
}

std::shared_ptr<const DenseDecoder> model(const std::string& name) {
  auto p = dense_preset(name);
  REQUIRE(p.has_value());
  auto m = DenseDecoder::make(*p);
  REQUIRE(m.ok());
  return m.value();
}

}  // namespace

TEST_CASE("a 256-sequence decode step costs near its memory-bandwidth floor", "[validation][roofline]") {
  const AcceleratorType gpu = a100();
  const RooflineFit fit = shipped_fit();
  const auto m = model("llama2-7b");
  // 256 sequences, 192 tokens cached each (128 in, 64 out so far): 25 GB of
  // KV cache beside 13.5 GB of weights.
  const DecodeStep s = decode_step(gpu, fit, gpu, *m, 256, 256 * 192);
  const double ratio = s.simulated_s / s.floor_s;
  // The floor overlaps everything (max of all FLOPs at peak, all bytes at
  // peak bandwidth); the step runs its compute-bound GEMMs (256 rows) and
  // its bandwidth-bound attention one after the other, so it cannot reach it.
  CHECK(ratio >= 1.0);
  CHECK(ratio < 2.0);
  // The attention kernels alone: within 30 % of reading the cache at peak
  // bandwidth (1/0.87 for the cache, plus the new tokens' q, k, v at the
  // attention kind's own efficiency).
  const Work attn = sublayer_work(m->shape(), {Sublayer::kAttn, 256, 256, 256 * 192, 32});
  REQUIRE(attn.cache_bytes > 25e9);
  const double attn_ratio = kernel_seconds(gpu, fit, attn, 32) / (attn.cache_bytes / gpu.hbm_bytes_per_s);
  CHECK(attn_ratio >= 1.0);
  CHECK(attn_ratio < 1.3);
  // Read at the attention kind's memory efficiency instead (fitted on rows
  // with an empty cache), the same step costs several times its floor.
  RooflineFit slow = fit;
  slow[WorkKind::kKvRead].memory = fit[WorkKind::kAttention].memory;
  REQUIRE(slow[WorkKind::kAttention].memory < 0.5);
  CHECK(decode_step(gpu, slow, gpu, *m, 256, 256 * 192).simulated_s / s.floor_s > 3.0);
}

TEST_CASE("published rows read with their line, and bad ones name it", "[validation]") {
  auto rows = read_published(kPublished);
  REQUIRE(rows.ok());
  REQUIRE(rows->size() == 15);
  const PublishedRow& first = rows->front();
  CHECK(first.line == 2);
  CHECK(first.model == "llama2-7b");
  CHECK(first.gpu == "A100-80GB");
  CHECK(first.batch == 1);
  CHECK(first.input_tokens == 128);
  CHECK(first.metric == "ttft_ms");
  CHECK(first.value == 16.0);
  CHECK(rows->back().model == "mistral-7b");
  CHECK(rows->back().value == 1576);

  const fs::path p = fs::temp_directory_path() / ("slicesched_published_" + std::to_string(getpid()) + ".csv");
  std::ofstream(p) << "source,version,model,precision,gpu,batch,input_tokens,output_tokens,metric,value\n"
                   << "x,v,llama2-7b,fp16,A100-80GB,0,128,1,ttft_ms,16.0\n";
  auto bad = read_published(p.string());
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == p.string() + ":2: batch: expected a positive integer, got \"0\"");
  // A spreadsheet's byte-order mark before the header is not part of it; a
  // column named twice is refused (which one would be read?).
  std::ofstream(p) << "\xEF\xBB\xBFsource,version,model,precision,gpu,batch,input_tokens,output_tokens,metric,value\n"
                   << "x,v,llama2-7b,fp16,A100-80GB,1,128,1,ttft_ms,16.0\n";
  CHECK(read_published(p.string()).ok());
  std::ofstream(p) << "source,version,model,precision,gpu,batch,input_tokens,output_tokens,metric,value,value\n"
                   << "x,v,llama2-7b,fp16,A100-80GB,1,128,1,ttft_ms,16.0,17.0\n";
  CHECK(read_published(p.string()).status().message() ==
        p.string() + ":1: value: the column appears twice (expected one)");
  fs::remove(p);
  // A FIFO would be read forever, a folder is not a file.
  const fs::path fifo = fs::temp_directory_path() / ("slicesched_published_fifo_" + std::to_string(getpid()));
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(read_published(fifo.string()).status().message() ==
        fifo.string() + ": not a regular file (a FIFO, device or socket), expected a CSV file");
  fs::remove(fifo);
  CHECK(read_published(fs::temp_directory_path().string()).status().message() ==
        fs::temp_directory_path().string() + ": is a folder, expected a CSV file");
}

TEST_CASE("no replayed row beats its physical floor, a too-fast GPU does", "[validation][floor]") {
  const AcceleratorType gpu = a100();
  const RooflineFit fit = shipped_fit();
  auto rows = read_published(kPublished);
  REQUIRE(rows.ok());
  AcceleratorType fast = gpu;  // a datasheet ten times better than the real one
  fast.peak_flops *= 10;
  fast.hbm_bytes_per_s *= 10;
  std::size_t caught = 0;
  for (const PublishedRow& r : *rows) {
    const auto m = model(r.model);
    const StaticBatch b = replay_static_batch(gpu, fit, gpu, *m, r.batch, r.input_tokens, r.output_tokens);
    CHECK(b.decode_steps == r.output_tokens - 1);
    const RowFigures f = row_figures(r, b);
    INFO("line " << r.line);
    CHECK_FALSE(f.beats_floor);
    CHECK(f.simulated > 0);
    const RowFigures too_fast =
        row_figures(r, replay_static_batch(fast, fit, gpu, *m, r.batch, r.input_tokens, r.output_tokens));
    caught += too_fast.beats_floor ? 1 : 0;
  }
  CHECK(caught == rows->size());
}

TEST_CASE("fixed costs add per iteration and per request", "[validation]") {
  const AcceleratorType gpu = a100();
  const RooflineFit fit = shipped_fit();
  const auto m = model("llama2-7b");
  const StaticBatch none = replay_static_batch(gpu, fit, gpu, *m, 4, 128, 10);
  const StaticBatch some = replay_static_batch(gpu, fit, gpu, *m, 4, 128, 10, {1e-3, 2e-3});
  // 10 iterations (one prefill, nine decode steps) and 4 requests.
  CHECK_THAT(some.total_s() - none.total_s(), Catch::Matchers::WithinRel(10 * 1e-3 + 4 * 2e-3, 1e-9));
  CHECK(some.floor_total_s() == none.floor_total_s());
}

TEST_CASE("a per-sequence fixed cost is paid by every sequence of every iteration", "[validation]") {
  const AcceleratorType gpu = a100();
  const RooflineFit fit = shipped_fit();
  const auto m = model("llama2-7b");
  const StaticBatch none = replay_static_batch(gpu, fit, gpu, *m, 4, 128, 10);
  const StaticBatch some = replay_static_batch(gpu, fit, gpu, *m, 4, 128, 10, {0, 0, 5e-5});
  // 10 iterations of 4 sequences; the prefill alone (the TTFT) pays 4.
  CHECK_THAT(some.total_s() - none.total_s(), Catch::Matchers::WithinRel(10 * 4 * 5e-5, 1e-9));
  CHECK_THAT(some.prefill_s - none.prefill_s, Catch::Matchers::WithinRel(4 * 5e-5, 1e-9));
}

TEST_CASE("the overlap exponent charges both bounds near the ridge point and neither far from it", "[roofline]") {
  AcceleratorType t;
  t.name = "X";
  t.peak_flops = 100e12;
  t.hbm_bytes_per_s = 1e12;
  RooflineFit plain, smooth;
  smooth[WorkKind::kGemm].overlap_p = 2;
  // At the ridge: 1 ms of compute and 1 ms of memory.
  const Work ridge{WorkKind::kGemm, 100e9, 1e9};
  CHECK_THAT(kernel_seconds(t, plain, ridge), Catch::Matchers::WithinRel(1e-3, 1e-12));
  CHECK_THAT(kernel_seconds(t, smooth, ridge), Catch::Matchers::WithinRel(std::sqrt(2.0) * 1e-3, 1e-12));
  // Far below it (memory-bound, compute 1000x less): nearly the plain roofline.
  const Work gemv{WorkKind::kGemm, 100e6, 1e9};
  CHECK_THAT(kernel_seconds(t, smooth, gemv), Catch::Matchers::WithinRel(1e-3, 1e-6));
}

TEST_CASE("a float32 model computes at the type's FP32 rate, not its tensor peak", "[roofline]") {
  AcceleratorType t;
  t.name = "X";
  t.peak_flops = 1000e12;
  t.fp32_flops = 50e12;
  t.hbm_bytes_per_s = 1e12;
  const RooflineFit plain;
  // A 4,096-token prefill's q_proj: compute-bound at either rate.
  const SublayerCall q{Sublayer::kQProj, 4096, 1, 0, 1};
  DenseShape bf16, fp32;
  fp32.elem_bytes = 4;
  const double flops = sublayer_work(bf16, q).flops;
  REQUIRE(flops == sublayer_work(fp32, q).flops);
  CHECK_THAT(calls_seconds(t, plain, bf16, std::span(&q, 1)), Catch::Matchers::WithinRel(flops / 1000e12, 1e-9));
  CHECK_THAT(calls_seconds(t, plain, fp32, std::span(&q, 1)), Catch::Matchers::WithinRel(flops / 50e12, 1e-9));
}

TEST_CASE("a fit recovers the overlap exponent of rows made with one", "[roofline]") {
  AcceleratorType t;
  t.name = "X";
  t.peak_flops = 100e12;
  t.hbm_bytes_per_s = 1e12;
  const std::vector<AcceleratorType> types{t};
  RooflineFit truth;
  truth[WorkKind::kGemm] = {0.8, 0.9, 5e-6, 2};
  std::vector<ProfileRow> rows;
  for (double n = 1; n <= 8192; n *= 2) {  // a 4096 x 4096 GEMM of n tokens, across the ridge
    const Work w{WorkKind::kGemm, 2 * n * 4096 * 4096, 2 * (4096.0 * 4096 + n * 8192)};
    rows.push_back({"gemm", w, 1, n, kernel_seconds(t, truth, w), "X"});
  }
  auto fit = fit_roofline(rows, types);
  REQUIRE(fit.ok());
  const KindEfficiency& e = (*fit)[WorkKind::kGemm];
  CHECK(e.overlap_p == 2);
  CHECK_THAT(e.compute, Catch::Matchers::WithinAbs(0.8, 0.011));
  CHECK_THAT(e.memory, Catch::Matchers::WithinAbs(0.9, 0.011));
  auto err = roofline_error(rows, types, *fit);
  REQUIRE(err.ok());
  CHECK(err->overall_pct < 1);
}

TEST_CASE("kv_read streams at the rate the memory-bound GEMMs stream their weights", "[roofline]") {
  AcceleratorType t;
  t.name = "X";
  t.peak_flops = 100e12;
  t.hbm_bytes_per_s = 1e12;  // ridge: 100 FLOP/byte
  const std::vector<AcceleratorType> types{t};
  // GEMMs whose matrix-vector rows stream at 0.7 of peak bandwidth while the
  // rows near and past the ridge behave as an (0.8, 0.9, p = 2) roofline:
  // one memory efficiency cannot say both, and the fit's is traded against
  // the overlap and the overhead; the stream's rate is what a KV cache
  // read, a batch of matrix-vector products, runs at.
  RooflineFit truth;
  truth[WorkKind::kGemm] = {0.8, 0.9, 5e-6, 2};
  std::vector<ProfileRow> rows;
  for (double n = 1; n <= 8192; n *= 2) {
    const Work w{WorkKind::kGemm, 2 * n * 4096 * 4096, 2 * (4096.0 * 4096 + n * 8192)};
    const double s = n <= 8 ? w.bytes / (0.7 * t.hbm_bytes_per_s) + 5e-6 : kernel_seconds(t, truth, w);
    rows.push_back({"gemm", w, 1, n, s, "X"});
  }
  auto fit = fit_roofline(rows, types);
  REQUIRE(fit.ok());
  CHECK((*fit)[WorkKind::kGemm].memory > 0.75);
  CHECK_THAT((*fit)[WorkKind::kKvRead].memory, Catch::Matchers::WithinAbs(0.7, 0.03));
  CHECK((*fit)[WorkKind::kKvRead].overhead_s == 0);
}

TEST_CASE("a fit file from before streaming was its own kind costs a residual add as elementwise", "[roofline]") {
  const auto path = fs::temp_directory_path() / "slicesched_old_fit.toml";
  auto f = load_fit_text(path,
                         "[roofline]\n[roofline.gemm]\ncompute = 0.8\nmemory = 0.9\n[roofline.attention]\n"
                         "compute = 0.2\nmemory = 0.1\n[roofline.elementwise]\nmemory = 0.6\noverhead_us = 4\n"
                         "[roofline.embedding]\nmemory = 0.2\n");
  fs::remove(path);
  REQUIRE(f.ok());
  CHECK((*f)[WorkKind::kStreaming].memory == 0.6);
  CHECK((*f)[WorkKind::kStreaming].overhead_s == (*f)[WorkKind::kElementwise].overhead_s);
  CHECK(work_kind_name(WorkKind::kStreaming) == "streaming");
}

TEST_CASE("overlap_p reads and writes, and an old fit file plays the plain roofline", "[roofline]") {
  RooflineFit f = shipped_fit();
  f[WorkKind::kGemm].overlap_p = 1.5;
  f[WorkKind::kAttention].overlap_p = std::numeric_limits<double>::infinity();
  const fs::path dir = fs::temp_directory_path() / ("overlap_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto back = load_fit_text(dir / "fit.toml", roofline_fit_toml(f, {"test"}));
  REQUIRE(back.ok());
  CHECK((*back)[WorkKind::kGemm].overlap_p == 1.5);
  CHECK(std::isinf((*back)[WorkKind::kAttention].overlap_p));
  auto bad = load_fit_text(dir / "bad.toml",
                           "[roofline]\n[roofline.gemm]\noverlap_p = 0.5\n[roofline.attention]\n"
                           "[roofline.elementwise]\n[roofline.embedding]\n");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        (dir / "bad.toml").string() + ":3: roofline.gemm.overlap_p: expected a number >= 1 (or inf)");
  fs::remove_all(dir);
}

TEST_CASE("attention slower than the fit's GEMMs on one type carries by SMs and clock, not by tensor peak",
          "[roofline]") {
  // "H" has a tensor peak its attention cannot use; "A" has a third of the
  // peak but 70 % of H's SM cycles a second.
  AcceleratorType h, a;
  h.name = "H";
  h.peak_flops = 1000e12;
  h.hbm_bytes_per_s = 3e12;
  h.sms = 100;
  h.sm_clock_hz = 2e9;
  a.name = "A";
  a.peak_flops = 300e12;
  a.hbm_bytes_per_s = 2e12;
  a.sms = 100;
  a.sm_clock_hz = 1.4e9;
  const std::vector<AcceleratorType> types{h, a};
  RooflineFit truth;
  truth[WorkKind::kGemm] = {0.8, 0.9, 5e-6};
  truth[WorkKind::kAttention] = {0.2, 0.5, 5e-6};
  std::vector<ProfileRow> rows;
  for (double n = 1; n <= 8192; n *= 2) {
    const Work g{WorkKind::kGemm, 2 * n * 4096 * 4096, 2 * (4096.0 * 4096 + n * 8192)};
    rows.push_back({"gemm", g, 1, n, kernel_seconds(h, truth, g), "H"});
    const Work at{WorkKind::kAttention, 4 * n * n * 4096, 8 * n * 4096};
    rows.push_back({"attn", at, 1, n, kernel_seconds(h, truth, at), "H"});
  }
  auto fit = fit_roofline(rows, types);
  REQUIRE(fit.ok());
  const KindEfficiency& e = (*fit)[WorkKind::kAttention];
  CHECK(e.compute == (*fit)[WorkKind::kGemm].compute);
  CHECK_THAT(e.sm_flops_per_cycle, Catch::Matchers::WithinRel(0.2 * 1000e12 / (100 * 2e9), 0.02));
  CHECK((*fit)[WorkKind::kGemm].sm_flops_per_cycle == 0);
  const Work big{WorkKind::kAttention, 1e15, 1e9};  // compute-bound on both
  // On the type it was fitted on, the same time as the plain efficiency.
  CHECK_THAT(kernel_seconds(h, *fit, big), Catch::Matchers::WithinRel(kernel_seconds(h, truth, big), 0.02));
  // On A, its SMs' rate (1,000 FLOPs per cycle at 1.4 GHz), not 0.2 of A's peak.
  CHECK_THAT(kernel_seconds(a, *fit, big), Catch::Matchers::WithinRel(1e15 / (100 * 1.4e9 * 1000) + 5e-6, 0.02));

  // A kind that reaches the GEMMs' share of the peak keeps a plain efficiency.
  truth[WorkKind::kAttention] = {0.85, 0.5, 5e-6};
  for (auto& r : rows)
    if (r.work.kind == WorkKind::kAttention) r.seconds = kernel_seconds(h, truth, r.work);
  auto plain = fit_roofline(rows, types);
  REQUIRE(plain.ok());
  CHECK((*plain)[WorkKind::kAttention].sm_flops_per_cycle == 0);
  CHECK_THAT((*plain)[WorkKind::kAttention].compute, Catch::Matchers::WithinAbs(0.85, 0.011));

  // It writes and reads back; a negative ceiling is refused with its key.
  const fs::path dir = fs::temp_directory_path() / ("smflops_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto back = load_fit_text(dir / "fit.toml", roofline_fit_toml(*fit, {"test"}));
  REQUIRE(back.ok());
  CHECK_THAT((*back)[WorkKind::kAttention].sm_flops_per_cycle, Catch::Matchers::WithinRel(e.sm_flops_per_cycle, 1e-8));
  auto bad = load_fit_text(dir / "bad.toml",
                           "[roofline]\n[roofline.gemm]\n[roofline.attention]\nsm_flops_per_cycle = -1\n"
                           "[roofline.elementwise]\n[roofline.embedding]\n");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        (dir / "bad.toml").string() + ":4: roofline.attention.sm_flops_per_cycle: expected a number in [0, 1e9]");
  fs::remove_all(dir);
}
