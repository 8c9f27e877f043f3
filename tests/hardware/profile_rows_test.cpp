// Measured profiles read as roofline rows (hardware/profile_rows.cpp, through
// core's CSV reader): the rows of both formats, and one-line errors that
// name the file and the line.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

import slicesched.hardware.roofline;
import slicesched.models.work;

using namespace slicesched;
namespace fs = std::filesystem;

namespace {

std::string write(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("slicesched_profile_rows_" + name);
  std::ofstream(p) << text;
  return p.string();
}

std::string error_of(const std::string& path) {
  auto r = read_profile_rows(path, DenseShape{}, 1, "H100");
  REQUIRE_FALSE(r.ok());
  const std::string m = r.status().message();
  CHECK(m.find('\n') == std::string::npos);
  return m;
}

const std::string kVidurHeader = "num_tokens,num_tensor_parallel_workers,n_embd,time_stats.mlp_up_proj.median\n";

}  // namespace

TEST_CASE("profile rows: both formats, blank lines and carriage returns") {
  const std::string llmss = write("llmss.csv",
                                  "layer_name,input,kv_cache,tp_size,latency(ns)\r\n"
                                  "q_proj,16,0,1,2000\r\n\r\n"
                                  "q_proj,16,0,2,1000\r\n"      // another tp: skipped
                                  "q_proj,16,512,1,9000\r\n");  // a filled cache: skipped
  auto rows = read_profile_rows(llmss, DenseShape{}, 1, "H100");
  REQUIRE(rows.ok());
  REQUIRE(rows->size() == 1);
  CHECK((*rows)[0].op == "q_proj");
  CHECK((*rows)[0].seconds == Approx(2e-6));

  const std::string vidur = write("vidur.csv", kVidurHeader + "32,1,4096,0.5\n32,2,4096,0.25\n");
  auto v = read_profile_rows(vidur, DenseShape{}, 1, "A100");
  REQUIRE(v.ok());
  REQUIRE(v->size() == 1);
  CHECK((*v)[0].seconds == Approx(0.5e-3));

  // A plain MLP's mlp_up_proj is its fc1 alone; a gated one's the gate and
  // up fused.
  DenseShape plain;
  plain.gated_mlp = false;
  const std::string fc1 = write("fc1.csv",
                                "num_tokens,num_tensor_parallel_workers,use_gated_mlp,"
                                "time_stats.mlp_up_proj.median\n32,1,False,0.5\n");
  auto p = read_profile_rows(fc1, plain, 1, "A100");
  REQUIRE(p.ok());
  REQUIRE(p->size() == 1);
  CHECK((*p)[0].work.flops == sublayer_work(plain, {Sublayer::kUpProj, 32}).flops);
  CHECK((*v)[0].work.flops == 2 * (*p)[0].work.flops);
}

TEST_CASE("profile rows: errors name the file and the line") {
  CHECK(error_of("/nonexistent/p.csv") == "/nonexistent/p.csv: cannot open (No such file or directory)");
  const std::string empty = write("empty.csv", "");
  CHECK(error_of(empty) == empty + ":1: empty file, expected a CSV header line");
  const std::string short_row = write("short.csv", kVidurHeader + "32,1,4096,0.5\n32,1\n");
  CHECK(error_of(short_row) == short_row + ":3: expected 4 fields as in the header, found 2");
  const std::string bad_tokens = write("tokens.csv", kVidurHeader + "many,1,4096,0.5\n");
  CHECK(error_of(bad_tokens) == bad_tokens + ":2: expected numeric num_tokens and num_tensor_parallel_workers");
  const std::string bad_time = write("time.csv", kVidurHeader + "32,1,4096,slow\n");
  CHECK(error_of(bad_time) == bad_time + ":2: time_stats.mlp_up_proj.median: expected a number");
  // A time of 0 is no measurement (an all-zero profile printed a MAPE of 0).
  const std::string zero = write("zero.csv", kVidurHeader + "32,1,4096,0\n");
  CHECK(error_of(zero) == zero + ":2: time_stats.mlp_up_proj.median is 0, expected a time in (0, 3.6e6] ms (one hour)");
  const std::string zero_ns = write("zero_ns.csv", "layer_name,input,kv_cache,tp_size,latency(ns)\nq_proj,16,0,1,0\n");
  CHECK(error_of(zero_ns) == zero_ns + ":2: latency(ns) is 0, expected a time in (0, 3.6e12] ns (one hour)");
  const std::string wrong_model = write("embd.csv", kVidurHeader + "32,1,8192,0.5\n");
  CHECK(error_of(wrong_model) == wrong_model + ":2: n_embd is 8192, the model's is 4096 (hidden size)");
  // Llama-2-7B's rows (n_embd 4096 too) against Llama-3-8B's shapes: its
  // MLP width and KV heads, and whether the MLP is gated, are checked.
  const std::string header =
      "num_tokens,num_tensor_parallel_workers,n_embd,n_head,n_kv_head,n_expanded_embd,"
      "vocab_size,use_gated_mlp,time_stats.mlp_up_proj.median\n";
  const std::string llama2 = write("llama2.csv", header + "32,1,4096,32,8,11008,32768,True,0.5\n");
  CHECK(error_of(llama2) == llama2 + ":2: n_expanded_embd is 11008, the model's is 14336 (MLP width)");
  const std::string kv = write("kv.csv", header + "32,1,4096,32,32,14336,128256,True,0.5\n");
  CHECK(error_of(kv) == kv + ":2: n_kv_head is 32, the model's is 8 (KV heads)");
  const std::string plain = write("plain.csv", header + "32,1,4096,32,8,14336,128256,False,0.5\n");
  CHECK(error_of(plain) == plain + ":2: use_gated_mlp is False, the model's is True (a gated MLP)");
  const std::string bad_llmss =
      write("llmss_bad.csv", "layer_name,input,kv_cache,tp_size,latency(ns)\nq_proj,16,0,1,fast\n");
  CHECK(error_of(bad_llmss) ==
        bad_llmss + ":2: expected layer_name and four numbers (input, kv_cache, tp_size, latency(ns))");
  // An LLMServingSim table times Llama's block: a plain MLP has no gate.
  DenseShape no_gate;
  no_gate.gated_mlp = false;
  const std::string gate =
      write("gate.csv", "layer_name,input,kv_cache,tp_size,latency(ns)\nq_proj,16,0,1,2000\ngate_proj,16,0,1,2000\n");
  auto g = read_profile_rows(gate, no_gate, 1, "H100");
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().message() == gate +
                                    ":3: layer_name gate_proj: the model's layer has no such kernel (attention and MLP "
                                    "in parallel, or a plain MLP): this table measured another block");
  const std::string unknown = write("unknown.csv", "a,b\n1,2\n");
  CHECK(error_of(unknown).starts_with(unknown + ": not a profile this reads"));
}
