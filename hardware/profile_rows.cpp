// Measured profiles as roofline rows: each row's kernel, its FLOPs and
// bytes from the model's shapes, and its measured time.
module;
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

module slicesched.hardware.roofline;
import slicesched.core.csv;

namespace slicesched {

namespace {

// A finite number filling the whole field.
bool number(std::string_view s, double& v) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size() && std::isfinite(v);
}

Work work_of(const DenseShape& s, Sublayer l, double rows) { return sublayer_work(s, {l, rows, 1, 0, 1}); }

Work sum(Work a, const Work& b) {
  a.flops += b.flops;
  a.bytes += b.bytes;
  a.cache_bytes += b.cache_bytes;
  return a;
}

// Vidur's kernels in our terms: the fused projections are one GEMM each
// (their works summed, one launch), "add" is the residual add (a pure
// stream: the streaming kind).
bool vidur_work(const std::string& op, const DenseShape& s, double n, Work& w) {
  if (op == "emb")
    w = work_of(s, Sublayer::kEmbedding, n);
  else if (op == "input_layernorm" || op == "post_attention_layernorm")
    w = work_of(s, Sublayer::kInputNorm, n);
  else if (op == "attn_pre_proj")
    w = sum(sum(work_of(s, Sublayer::kQProj, n), work_of(s, Sublayer::kKProj, n)), work_of(s, Sublayer::kVProj, n));
  else if (op == "attn_rope")
    w = work_of(s, Sublayer::kRope, n);
  else if (op == "attn_post_proj")
    w = work_of(s, Sublayer::kOProj, n);
  else if (op == "mlp_up_proj")  // a gated MLP's gate and up, fused; a plain MLP's fc1
    w = s.gated_mlp ? sum(work_of(s, Sublayer::kGateProj, n), work_of(s, Sublayer::kUpProj, n))
                    : work_of(s, Sublayer::kUpProj, n);
  else if (op == "mlp_act")
    w = work_of(s, Sublayer::kActFn, n);
  else if (op == "mlp_down_proj")
    w = work_of(s, Sublayer::kDownProj, n);
  else if (op == "add")
    w = work_of(s, Sublayer::kResidualAdd, n);
  else
    return false;
  return true;
}

}  // namespace

Result<std::vector<ProfileRow>> read_profile_rows(const std::string& path, const DenseShape& shape, int tp,
                                                  const std::string& type) {
  if (tp < 1) return InvalidArgument(path + ": tensor parallelism must be >= 1");
  const DenseShape s = tp_rank_shape(shape, tp);
  auto text = csv::read_text(path);
  if (!text.ok()) return text.status();
  auto opened = csv::CsvReader::open(*text, path);
  if (!opened.ok()) return opened.status();
  csv::CsvReader& in = *opened;
  const std::vector<std::string>& header = in.header();
  auto col = [&](std::string_view name) {
    auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? -1 : static_cast<int>(it - header.begin());
  };
  std::vector<ProfileRow> rows;
  csv::CsvRow row;
  const auto layer = decoder_layer_sublayers(shape);  // the kernels the model's layer runs
  const int name_c = col("layer_name"), input_c = col("input"), kv_c = col("kv_cache"), tp_c = col("tp_size"),
            ns_c = col("latency(ns)");
  const int tokens_c = col("num_tokens"), vtp_c = col("num_tensor_parallel_workers");
  if (name_c >= 0 && input_c >= 0 && kv_c >= 0 && tp_c >= 0 && ns_c >= 0) {  // LLMServingSim
    for (;;) {
      auto more = in.next(row);
      if (!more.ok()) return more.status();
      if (!*more) break;
      const auto& f = row.fields;
      double n, kv, t, ns;
      if (!number(f[input_c], n) || !number(f[kv_c], kv) || !number(f[tp_c], t) || !number(f[ns_c], ns))
        return InvalidArgument(in.at(row.line,
                                     "expected layer_name and four numbers (input, kv_cache, tp_size, "
                                     "latency(ns))"));
      // (as the simulator reads them: a measured time in (0, one hour]; a 0
      // is a failed measurement, and a MAPE against it means nothing)
      if (!(ns > 0) || ns > 3.6e12)
        return InvalidArgument(in.at(
            row.line, "latency(ns) is " + std::string(f[ns_c]) + ", expected a time in (0, 3.6e12] ns (one hour)"));
      if (t != tp || kv != 0) continue;
      const std::string name(f[name_c]);
      const auto l = sublayer_from_name(name);
      if (!l) continue;
      // A kernel the model's layer does not run (gate_proj for a plain MLP,
      // post_layernorm for a parallel block): the table measured another
      // block. (Its format carries no shapes, so sizes cannot be checked.)
      if (*l != Sublayer::kEmbedding && *l != Sublayer::kFinalNorm && *l != Sublayer::kLmHead &&
          std::find(layer.begin(), layer.end(), *l) == layer.end())
        return InvalidArgument(in.at(row.line, "layer_name " + name +
                                                   ": the model's layer has no such kernel (attention and MLP in "
                                                   "parallel, or a plain MLP): this table measured another block"));
      rows.push_back({name, work_of(s, *l, n), 1, n, ns * 1e-9, type});
    }
  } else if (tokens_c >= 0 && vtp_c >= 0) {  // Vidur compute
    std::vector<std::pair<std::string, int>> ops;
    for (std::size_t i = 0; i < header.size(); ++i) {
      const std::string& h = header[i];
      constexpr std::string_view pre = "time_stats.", post = ".median";
      if (h.starts_with(pre) && h.ends_with(post) && h.size() > pre.size() + post.size())
        ops.emplace_back(h.substr(pre.size(), h.size() - pre.size() - post.size()), static_cast<int>(i));
    }
    if (ops.empty()) return InvalidArgument(in.at(in.header_line(), "no time_stats.<op>.median columns"));
    struct ShapeColumn {
      std::string name;
      int column;
      std::int64_t expected;
      bool flag;
      std::string what;
    };
    std::vector<ShapeColumn> shape_columns;
    const auto check = [&](const std::string& name, std::int64_t expected, bool flag, const std::string& what) {
      if (const int c = col(name); c >= 0) shape_columns.push_back({name, c, expected, flag, what});
    };
    check("n_embd", shape.hidden, false, "hidden size");
    check("n_head", shape.heads, false, "attention heads");
    check("n_kv_head", shape.kv_heads, false, "KV heads");
    check("n_expanded_embd", shape.mlp, false, "MLP width");
    check("use_gated_mlp", shape.gated_mlp ? 1 : 0, true, "a gated MLP");
    for (;;) {
      auto more = in.next(row);
      if (!more.ok()) return more.status();
      if (!*more) break;
      const auto& f = row.fields;
      double n, t;
      if (!number(f[tokens_c], n) || !number(f[vtp_c], t))
        return InvalidArgument(in.at(row.line, "expected numeric num_tokens and num_tensor_parallel_workers"));
      if (t != tp) continue;
      // The row's model must be the one whose shapes cost it: Llama-2-7B's
      // and Llama-3-8B's rows share n_embd but not their MLP or KV heads.
      // (vocab_size is not compared: no kernel these rows time reads the
      // vocabulary, and Vidur pads Llama 2's 32,000 to 32,768.)
      for (const ShapeColumn& sc : shape_columns) {
        const std::string_view v = f[sc.column];
        double x = 0;
        const bool match = sc.flag ? (v == "True" || v == "False") && (v == "True") == (sc.expected != 0)
                                   : number(v, x) && x == static_cast<double>(sc.expected);
        if (!match)
          return InvalidArgument(
              in.at(row.line, sc.name + " is " + std::string(v) + ", the model's is " +
                                  (sc.flag ? (sc.expected ? "True" : "False") : std::to_string(sc.expected)) + " (" +
                                  sc.what + ")"));
      }
      for (const auto& [op, c] : ops) {
        Work w;
        double ms;
        if (!vidur_work(op, s, n, w)) continue;
        if (!number(f[c], ms))
          return InvalidArgument(in.at(row.line, "time_stats." + op + ".median: expected a number"));
        if (!(ms > 0) || ms > 3.6e6)
          return InvalidArgument(in.at(row.line, "time_stats." + op + ".median is " + std::string(f[c]) +
                                                     ", expected a time in (0, 3.6e6] ms (one hour)"));
        rows.push_back({op, w, 1, n, ms * 1e-3, type});
      }
    }
  } else {
    return InvalidArgument(path +
                           ": not a profile this reads (expected an LLMServingSim layers CSV with layer_name, input, "
                           "kv_cache, tp_size, latency(ns), or a Vidur compute CSV with num_tokens, "
                           "num_tensor_parallel_workers and time_stats.<op>.median)");
  }
  if (rows.empty()) return NotFound(path + ": no rows with tensor parallelism " + std::to_string(tp));
  return rows;
}

}  // namespace slicesched
