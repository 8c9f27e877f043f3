module;
#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

module slicesched.simulator.validation;
import slicesched.core.files;
import slicesched.core.graph;
import slicesched.models.model;
import slicesched.simulator.roofline_truth;

namespace slicesched {

namespace {

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == ',')
      out.emplace_back();
    else if (c != '\r')
      out.back() += c;
  }
  return out;
}

const char* const kColumns[] = {"source", "version",      "model",         "precision", "gpu",
                                "batch",  "input_tokens", "output_tokens", "metric",    "value"};

// What of the weights an iteration must read, in bytes: every decoder
// layer's, and the head's (final norm and LM head; with tied embeddings the
// table, wherever the template keeps it). The embedding table is not read
// whole: an iteration gathers one row per new token.
struct WeightSplit {
  double layers = 0, head = 0, table = 0;
};
WeightSplit split_of(const Model& m) {
  const DenseShape sh = m.shape();
  const GraphTemplate t = m.make_template();
  WeightSplit w;
  w.table = static_cast<double>(sh.vocab * sh.hidden * sh.elem_bytes);
  double embed = 0;
  for (std::size_t i = 0; i < m.ops().size() && i < t.ops().size(); ++i) {
    const auto bytes = static_cast<double>(t.ops()[i].weight_bytes);
    if (m.ops()[i].role == OpRole::kEmbed)
      embed += bytes;
    else if (m.ops()[i].role == OpRole::kHead)
      w.head += bytes;
    else
      w.layers += bytes;
  }
  // Tied: the head's matrix is the table the embedding op holds.
  if (w.head < w.table && embed >= w.table) w.head += w.table;
  return w;
}

// The floor of one iteration of `tokens` new tokens over `sequences`
// sequences: the FLOPs of every layer for each token and of the LM head for
// each sequence's last token at peak; the layers' and head's weights, the
// gathered embedding rows and the KV cache it attends to at peak bandwidth.
double floor_seconds(const AcceleratorType& d, const Model& m, const WeightSplit& w, double tokens, double sequences,
                     double context) {
  const DenseShape sh = m.shape();
  const double elem = static_cast<double>(sh.elem_bytes);
  const double flops = 2 * (w.layers / elem) * tokens + 2 * (w.table / elem) * sequences;
  const double bytes = w.layers + w.head + tokens * static_cast<double>(sh.hidden) * elem +
                       static_cast<double>(m.kv_bytes_per_token()) * context;
  return std::max(flops / d.peak_flops, bytes / d.hbm_bytes_per_s);
}

DecodeStep decode_step(const AcceleratorType& played, const RooflineFit& fit, const AcceleratorType& datasheet,
                       const Model& model, const WeightSplit& w, std::int64_t sequences, std::int64_t context) {
  const IterationDims d{sequences, sequences, context, context};
  return {roofline_iteration_seconds(played, fit, model, d),
          floor_seconds(datasheet, model, w, static_cast<double>(sequences), static_cast<double>(sequences),
                        static_cast<double>(context))};
}

// Adds one iteration's roofline time to `kinds`, per kind of work.
void add_kinds(const AcceleratorType& t, const RooflineFit& f, const Model& model, const IterationDims& d,
               std::array<double, kWorkKinds>& kinds) {
  for (std::size_t op = 0; op < model.ops().size(); ++op)
    for (const SublayerCall& c : model.kernels(op, d)) {
      Work w = sublayer_work(model.shape(), c);
      const double all = kernel_seconds(t, f, w, c.count);
      w.cache_bytes = 0;
      const double without_cache = kernel_seconds(t, f, w, c.count);
      kinds[static_cast<std::size_t>(w.kind)] += without_cache;
      kinds[static_cast<std::size_t>(WorkKind::kKvRead)] += all - without_cache;
    }
}

}  // namespace

Result<std::vector<PublishedRow>> read_published(const std::string& path) {
  if (std::error_code ec; std::filesystem::is_directory(path, ec))
    return InvalidArgument(path + ": is a folder, expected a CSV file");
  if (Status s = refuse_special_file(path, "a CSV file"); !s.ok()) return s;
  errno = 0;
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open (" + std::strerror(errno ? errno : ENOENT) + ")");
  std::string line;
  if (!std::getline(in, line)) return InvalidArgument(path + ":1: empty file (expected a CSV header)");
  if (line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);  // a UTF-8 byte-order mark, as spreadsheets write
  const auto header = split(line);
  std::vector<int> at;
  for (const char* c : kColumns) {
    const auto it = std::find(header.begin(), header.end(), c);
    if (it == header.end()) return InvalidArgument(path + ":1: " + c + ": missing column");
    if (std::find(it + 1, header.end(), c) != header.end())
      return InvalidArgument(path + ":1: " + c + ": the column appears twice (expected one)");
    at.push_back(static_cast<int>(it - header.begin()));
  }
  std::vector<PublishedRow> rows;
  int n = 1;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line == "\r") continue;
    const auto f = split(line);
    auto bad = [&](const std::string& col, const std::string& what) {
      return InvalidArgument(path + ":" + std::to_string(n) + ": " + col + ": " + what);
    };
    if (f.size() != header.size())
      return bad("line", "expected " + std::to_string(header.size()) + " fields, got " + std::to_string(f.size()));
    PublishedRow r;
    r.line = n;
    r.source = f[at[0]], r.version = f[at[1]], r.model = f[at[2]], r.precision = f[at[3]], r.gpu = f[at[4]];
    r.metric = f[at[8]];
    std::int64_t* ints[] = {&r.batch, &r.input_tokens, &r.output_tokens};
    for (int k = 0; k < 3; ++k) {
      const std::string& s = f[at[5 + k]];
      std::size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(s, &used);
      } catch (...) {
        used = 0;
      }
      if (used == 0 || used != s.size() || v < 1)
        return bad(kColumns[5 + k], "expected a positive integer, got \"" + s + "\"");
      *ints[k] = v;
    }
    if (r.metric != "ttft_ms" && r.metric != "output_tokens_per_s")
      return bad("metric", "expected \"ttft_ms\" or \"output_tokens_per_s\", got \"" + r.metric + "\"");
    {
      const std::string& s = f[at[9]];
      std::size_t used = 0;
      try {
        r.value = std::stod(s, &used);
      } catch (...) {
        used = 0;
      }
      if (used == 0 || used != s.size() || !(r.value > 0) || !std::isfinite(r.value))
        return bad("value", "expected a number > 0, got \"" + s + "\"");
    }
    rows.push_back(std::move(r));
  }
  if (rows.empty()) return InvalidArgument(path + ": no rows");
  return rows;
}

DecodeStep decode_step(const AcceleratorType& played, const RooflineFit& fit, const AcceleratorType& datasheet,
                       const Model& model, std::int64_t sequences, std::int64_t context) {
  return decode_step(played, fit, datasheet, model, split_of(model), sequences, context);
}

StaticBatch replay_static_batch(const AcceleratorType& played, const RooflineFit& fit, const AcceleratorType& datasheet,
                                const Model& model, std::int64_t batch, std::int64_t input_tokens,
                                std::int64_t output_tokens, const FixedCosts& fixed) {
  StaticBatch b;
  const IterationDims prefill{batch * input_tokens, batch, 0, 0};
  const double per_step = fixed.per_iteration_s + static_cast<double>(batch) * fixed.per_sequence_s;
  b.prefill_s = roofline_iteration_seconds(played, fit, model, prefill) + per_step +
                static_cast<double>(batch) * fixed.per_request_s;
  const WeightSplit w = split_of(model);
  b.floor_prefill_s =
      floor_seconds(datasheet, model, w, static_cast<double>(batch * input_tokens), static_cast<double>(batch), 0);
  add_kinds(played, fit, model, prefill, b.kind_s);
  b.fixed_s = per_step + static_cast<double>(batch) * fixed.per_request_s;
  // Decode step k (1 .. output - 1) runs the token step k - 1 sampled; each
  // sequence attends to its input_tokens + k - 1 cached tokens.
  for (std::int64_t k = 1; k < output_tokens; ++k) {
    const DecodeStep s = decode_step(played, fit, datasheet, model, w, batch, batch * (input_tokens + k - 1));
    b.decode_s += s.simulated_s + per_step;
    b.fixed_s += per_step;
    const std::int64_t context = batch * (input_tokens + k - 1);
    add_kinds(played, fit, model, {batch, batch, context, context}, b.kind_s);
    b.floor_decode_s += s.floor_s;
    ++b.decode_steps;
  }
  return b;
}

RowFigures row_figures(const PublishedRow& row, const StaticBatch& b) {
  RowFigures f;
  if (row.metric == "ttft_ms") {
    f.simulated = 1e3 * b.prefill_s;
    f.floor = 1e3 * b.floor_prefill_s;
    f.beats_floor = f.simulated < f.floor;
  } else if (row.metric == "output_tokens_per_s") {
    const double tokens = static_cast<double>(row.batch * row.output_tokens);
    f.simulated = tokens / b.total_s();
    f.floor = tokens / b.floor_total_s();  // the most tokens per second physically possible
    f.beats_floor = f.simulated > f.floor;
  } else {
    f.simulated = f.floor = std::numeric_limits<double>::quiet_NaN();
  }
  return f;
}

}  // namespace slicesched
