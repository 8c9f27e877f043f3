// Every bad profile input is refused with one line that names the file, the
// line and what was expected.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <string_view>

import slicesched.simulator.profile;
import slicesched.core.status;

using namespace slicesched;
namespace fs = std::filesystem;

namespace {

const fs::path kLayersH100 =
    fs::path(SLICESCHED_SOURCE_DIR) / "data" / "profiles" / "llmservingsim_H100_Llama-3.1-8B_tp1_layers.csv";

const std::string kLayersHeader = "layer_name,input,kv_cache,tp_size,latency(ns)\n";
const std::string kNetHeader = "time_stats.send_recv.median,size,devices_per_node\n";

// Every op the profile needs at 1 token, `latency` ns each, except `skip`.
std::string all_ops(std::string_view skip = "", std::string_view latency = "100") {
  std::string s = kLayersHeader;
  for (auto ops : {LayerProfile::layer_ops(), LayerProfile::embed_ops(), LayerProfile::head_ops()}) {
    for (auto op : ops) {
      if (op != skip)
        for (const char* n : {"1", "2"}) s += std::string(op) + "," + n + ",0,1," + std::string(latency) + "\n";
    }
  }
  return s;
}

template <typename T>
std::string error_of(const Result<T>& r) {
  REQUIRE_FALSE(r.ok());
  const std::string m = r.status().message();
  CHECK(m.find('\n') == std::string::npos);
  return m;
}

std::string layers_error(const std::string& csv, int tp = 1) { return error_of(LayerProfile::parse(csv, "t.csv", tp)); }
std::string net_error(const std::string& csv, bool within = true) {
  return error_of(TransferProfile::parse(csv, "n.csv", within));
}

}  // namespace

TEST_CASE("profile errors: files") {
  REQUIRE(LayerProfile::parse(all_ops(), "t.csv").ok());

  auto missing = LayerProfile::load("/nonexistent/layers.csv");
  CHECK(error_of(missing) == "/nonexistent/layers.csv: cannot open (No such file or directory)");
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK(error_of(TransferProfile::load("/nonexistent/net.csv")) ==
        "/nonexistent/net.csv: cannot open (No such file or directory)");
  const std::string dir = fs::temp_directory_path().string();
  CHECK(error_of(LayerProfile::load(dir)) == dir + ": is a directory, expected a CSV file");

  CHECK(layers_error("") == "t.csv:1: empty file, expected a CSV header line");
  CHECK(layers_error("\n  \n") == "t.csv:1: empty file, expected a CSV header line");
  CHECK(net_error("") == "n.csv:1: empty file, expected a CSV header line");
}

TEST_CASE("profile errors: layer table") {
  CHECK(layers_error("layer_name,input,kv_cache,tp_size,latency\nrope,1,0,1,5\n") ==
        "t.csv:1: missing column 'latency(ns)' (header has: layer_name,input,kv_cache,tp_size,latency)");
  CHECK(layers_error("\nlayer_name,tokens,kv_cache,tp_size,latency(ns)\n") ==
        "t.csv:2: missing column 'input' (header has: layer_name,tokens,kv_cache,tp_size,latency(ns))");

  CHECK(layers_error(kLayersHeader + "rope,1,0,1,5\nrope,2,0,1,fast\n") ==
        "t.csv:3: column 'latency(ns)' is 'fast', expected a non-negative number");
  CHECK(layers_error(kLayersHeader + "rope,1,0,1,-5\n") ==
        "t.csv:2: column 'latency(ns)' is '-5', expected a non-negative number");
  CHECK(layers_error(kLayersHeader + "rope,1,0,1,\n") ==
        "t.csv:2: column 'latency(ns)' is '', expected a non-negative number");
  CHECK(layers_error(kLayersHeader + "rope,1,0,1,nan\n") ==
        "t.csv:2: column 'latency(ns)' is 'nan', expected a non-negative number");
  CHECK(layers_error(kLayersHeader + "rope,1.5,0,1,5\n") ==
        "t.csv:2: column 'input' is '1.5', expected an integer >= 1");
  CHECK(layers_error(kLayersHeader + "rope,0,0,1,5\n") == "t.csv:2: column 'input' is '0', expected an integer >= 1");
  CHECK(layers_error(kLayersHeader + "rope,1,-1,1,5\n") ==
        "t.csv:2: column 'kv_cache' is '-1', expected an integer >= 0");
  CHECK(layers_error(kLayersHeader + "rope,1,0,x,5\n") == "t.csv:2: column 'tp_size' is 'x', expected an integer >= 1");
  CHECK(layers_error(kLayersHeader + "rope,1,0,1\n") == "t.csv:2: expected 5 fields as in the header, found 4");
  CHECK(layers_error(kLayersHeader + "\nrope,1,0,1,5,6\n") == "t.csv:3: expected 5 fields as in the header, found 6");

  CHECK(layers_error(all_ops("rope")) ==
        "t.csv: op 'rope' has no rows with tp_size 1 and kv_cache 0 (expected ops: input_layernorm, q_proj, k_proj, "
        "v_proj, rope, attn, o_proj, post_layernorm, gate_proj, up_proj, act_fn, down_proj, embedding, "
        "final_layernorm, lm_head)");
  CHECK(layers_error(all_ops("lm_head")).starts_with("t.csv: op 'lm_head' has no rows with tp_size 1 and kv_cache 0"));
  CHECK(layers_error(kLayersHeader) == "t.csv: no rows with tp_size 1 (the file has tp_size none: no data rows)");
  // A time of 0 is a failed measurement (found by an outside probe: an
  // all-zero profile simulated TTFTs of 0 s).
  CHECK(layers_error(all_ops("", "0")) == "t.csv:2: column 'latency(ns)' is '0', expected > 0 ns (a measured time)");
  REQUIRE(LayerProfile::parse(all_ops() + "q_proj,1,5,1,900\nq_proj,2,0,1,150\n", "t.csv").ok());
  // As spreadsheets and pandas write it: a byte-order mark is read past; a
  // quoted field or a column named twice is refused (both were read wrong).
  REQUIRE(LayerProfile::parse("\xEF\xBB\xBF" + all_ops(), "t.csv").ok());
  CHECK(layers_error("layer_name,input,kv_cache,tp_size,latency(ns)\n\"q_proj\",1,0,1,100\n") ==
        "t.csv:2: field 1 (\"q_proj\") is in quotes: expected plain comma-separated values, without quoting");
  CHECK(layers_error("layer_name,input,kv_cache,tp_size,latency(ns),latency(ns)\nq_proj,1,0,1,100,200\n") ==
        "t.csv:1: column 'latency(ns)' appears twice (fields 5 and 6): expected each column once");
  CHECK(layers_error(kLayersHeader + "q_proj,99999999999999999999,0,1,100\n") ==
        "t.csv:2: column 'input' is '99999999999999999999', expected an integer in [1, 9223372036854775807]");
  // One count cannot tell how an op grows (found by an outside probe: every
  // prompt, 100 or 3,000 tokens, took the same 68.5 ms).
  std::string one = kLayersHeader;
  for (auto ops : {LayerProfile::layer_ops(), LayerProfile::embed_ops(), LayerProfile::head_ops()})
    for (auto op : ops)
      one +=
          std::string(op) + (op == "attn" ? ",512,0,1,100\n" : ",512,0,1,100\n" + std::string(op) + ",1024,0,1,200\n");
  CHECK(layers_error(one) ==
        "t.csv: op 'attn' is measured at one token count only (512, tp_size 1): expected rows at two or more counts, "
        "to tell how its time grows with tokens");

  auto tp2 = LayerProfile::load(kLayersH100, 2);
  CHECK(error_of(tp2) == kLayersH100.string() + ": no rows with tp_size 2 (the file has tp_size 1)");
  CHECK(tp2.status().code() == StatusCode::kNotFound);
  CHECK(layers_error(all_ops(), -1) == "t.csv: tp_size must be >= 0, got -1");
  // tp_size 0: the file's one size (a rank of a group); two sizes are refused.
  auto own = LayerProfile::load(kLayersH100, 0);
  REQUIRE(own.ok());
  CHECK(own->tp_size() == 1);
  CHECK(layers_error(kLayersHeader + "q_proj,1,0,1,5\nq_proj,1,0,2,5\n", 0) ==
        "t.csv: expected the rows of one tensor-parallel size (tp_size), found tp_size 1, 2");

  LayerProfileOptions bad;
  bad.hbm_bytes_per_s = 0;
  CHECK(error_of(LayerProfile::parse(all_ops(), "t.csv", 1, bad)) ==
        "t.csv: invalid options: hbm_bytes_per_s must be > 0");
  bad = {};
  bad.groups = 0;
  CHECK(error_of(LayerProfile::parse(all_ops(), "t.csv", 1, bad)) ==
        "t.csv: invalid options: layers_per_group and groups must be >= 1");
}

TEST_CASE("profile errors: transfer table") {
  REQUIRE(TransferProfile::parse(kNetHeader + "0.01,2048,2\n", "n.csv").ok());
  CHECK(net_error(",time_stats.send_recv.mean,size,devices_per_node\n0,0.01,2048,2\n") ==
        "n.csv:1: missing column 'time_stats.send_recv.median' (header has: "
        ",time_stats.send_recv.mean,size,devices_per_node)");
  CHECK(net_error("time_stats.send_recv.median,size\n0.01,2048\n") ==
        "n.csv:1: missing column 'devices_per_node' (header has: time_stats.send_recv.median,size)");
  CHECK(net_error(kNetHeader + "0.01,2048,2\nslow,4096,2\n") ==
        "n.csv:3: column 'time_stats.send_recv.median' is 'slow', expected a positive number");
  CHECK(net_error(kNetHeader + "0,2048,2\n") ==
        "n.csv:2: column 'time_stats.send_recv.median' is '0', expected a positive number");
  CHECK(net_error(kNetHeader + "0.01,2 KB,2\n") == "n.csv:2: column 'size' is '2 KB', expected an integer >= 1");
  CHECK(net_error(kNetHeader + "0.01,2048,0\n") ==
        "n.csv:2: column 'devices_per_node' is '0', expected an integer >= 1");
  CHECK(net_error(kNetHeader + "0.01,2048\n") == "n.csv:2: expected 3 fields as in the header, found 2");
  CHECK(net_error(kNetHeader + "0.01,2048,2\n", false) ==
        "n.csv: no rows with devices_per_node 1 (transfers across nodes)");
  CHECK(net_error(kNetHeader + "0.01,2048,1\n") ==
        "n.csv: no rows with devices_per_node > 1 (transfers within a node)");
}
