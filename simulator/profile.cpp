module;
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

module slicesched.simulator.profile;
import slicesched.core.csv;

namespace slicesched {

namespace profile_detail {

double Curve::at(double v) const {
  if (v <= x.front()) return y.front();
  if (v >= x.back()) return y.back() + slope_beyond * (v - x.back());
  const auto i = static_cast<std::size_t>(std::upper_bound(x.begin(), x.end(), v) - x.begin());
  const double f = (v - x[i - 1]) / (x[i] - x[i - 1]);
  return y[i - 1] + f * (y[i] - y[i - 1]);
}

}  // namespace profile_detail

namespace {

using csv::CsvReader;
using csv::CsvRow;
using profile_detail::Curve;

constexpr std::string_view kLayerOps[] = {
    "input_layernorm", "q_proj",         "k_proj",    "v_proj",  "rope",   "attn",
    "o_proj",          "post_layernorm", "gate_proj", "up_proj", "act_fn", "down_proj"};
constexpr std::string_view kEmbedOps[] = {"embedding"};
constexpr std::string_view kHeadOps[] = {"final_layernorm", "lm_head"};

// (tokens, seconds) rows of one op, in file order.
using Points = std::vector<std::pair<std::int64_t, double>>;

Curve op_curve(Points pts) {
  std::sort(pts.begin(), pts.end());  // by tokens, then seconds: repeats sum in one order everywhere
  Curve c;
  for (std::size_t i = 0; i < pts.size();) {  // a repeated token count is measured twice: average
    std::size_t j = i;
    double sum = 0;
    for (; j < pts.size() && pts[j].first == pts[i].first; ++j) sum += pts[j].second;
    c.x.push_back(static_cast<double>(pts[i].first));
    c.y.push_back(sum / static_cast<double>(j - i));
    i = j;
  }
  if (c.x.size() >= 2) {
    const double last = c.x.back();
    auto a = std::upper_bound(c.x.begin(), c.x.end(), last / 2);
    const std::size_t anchor = a == c.x.begin() ? 0 : static_cast<std::size_t>(a - c.x.begin()) - 1;
    c.slope_beyond = std::max(0.0, (c.y.back() - c.y[anchor]) / (last - c.x[anchor]));
  }
  return c;
}

// The sum of the ops' curves, as one curve: every op is linear between the
// union of their knots, clamped below the first and linear past the last, so
// the sum is exactly the curve through the summed knots.
Curve sum_curves(const std::vector<Curve>& ops) {
  Curve s;
  for (const auto& c : ops) s.x.insert(s.x.end(), c.x.begin(), c.x.end());
  std::sort(s.x.begin(), s.x.end());
  s.x.erase(std::unique(s.x.begin(), s.x.end()), s.x.end());
  s.y.assign(s.x.size(), 0.0);
  for (const auto& c : ops) {
    for (std::size_t i = 0; i < s.x.size(); ++i) s.y[i] += c.at(s.x[i]);
    s.slope_beyond += c.slope_beyond;
  }
  return s;
}

std::string join(std::span<const std::string_view> names) {
  std::string out;
  for (auto n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

std::string options_error(const LayerProfileOptions& o) {
  if (!(o.hbm_bytes_per_s > 0) || !std::isfinite(o.hbm_bytes_per_s)) return "hbm_bytes_per_s must be > 0";
  if (o.kv_heads < 1 || o.head_dim < 1 || o.kv_bytes_per_element < 1) {
    return "kv_heads, head_dim and kv_bytes_per_element must be >= 1";
  }
  if (o.layers_per_group < 1 || o.groups < 1) return "layers_per_group and groups must be >= 1";
  return {};
}

}  // namespace

std::span<const std::string_view> LayerProfile::layer_ops() { return kLayerOps; }
std::span<const std::string_view> LayerProfile::embed_ops() { return kEmbedOps; }
std::span<const std::string_view> LayerProfile::head_ops() { return kHeadOps; }

Result<LayerProfile> LayerProfile::load(const std::filesystem::path& path, int tp_size,
                                        const LayerProfileOptions& options) {
  auto text = csv::read_text(path);
  if (!text.ok()) return text.status();
  return parse(*text, path.string(), tp_size, options);
}

Result<LayerProfile> LayerProfile::parse(std::string_view csv, std::string_view source, int tp_size,
                                         const LayerProfileOptions& options) {
  auto reader = CsvReader::open(csv, source);
  if (!reader.ok()) return reader.status();
  CsvReader& r = *reader;
  if (tp_size < 0) return InvalidArgument(r.at("tp_size must be >= 0, got " + std::to_string(tp_size)));
  const bool its_own = tp_size == 0;  // the file's one tp_size (a profile of one rank of a group)
  if (auto e = options_error(options); !e.empty()) return InvalidArgument(r.at("invalid options: " + e));

  auto cols = r.columns({"layer_name", "input", "kv_cache", "tp_size", "latency(ns)"});
  if (!cols.ok()) return cols.status();
  const std::vector<std::size_t>& col = *cols;

  std::map<std::string, Points, std::less<>> rows;  // only the ops we use
  for (auto ops : {layer_ops(), embed_ops(), head_ops()}) {
    for (auto op : ops) rows.emplace(op, Points{});
  }
  std::set<std::int64_t> tp_seen;
  for (CsvRow row;;) {
    auto more = r.next(row);
    if (!more.ok()) return more.status();
    if (!*more) break;
    auto tokens = r.integer(row, col[1], 1);
    if (!tokens.ok()) return tokens.status();
    auto kv = r.integer(row, col[2], 0);
    if (!kv.ok()) return kv.status();
    auto tp = r.integer(row, col[3], 1);
    if (!tp.ok()) return tp.status();
    auto ns = r.non_negative(row, col[4]);
    if (!ns.ok()) return ns.status();
    // (an operator measured at over an hour is not a measurement; far
    // larger values would overflow the simulated clock)
    if (*ns > 3.6e12) return InvalidArgument(r.bad_field(row, col[4], "at most 3.6e12 ns (one hour)"));
    // (no kernel takes no time: a 0 is a failed measurement, and played it
    // makes a layer free)
    if (*ns <= 0) return InvalidArgument(r.bad_field(row, col[4], "> 0 ns (a measured time)"));
    tp_seen.insert(*tp);
    // (rows of ops no template op uses, as add, are skipped)
    auto it = rows.find(row.fields[col[0]]);
    if ((!its_own && *tp != tp_size) || *kv != 0 || it == rows.end()) continue;
    it->second.emplace_back(*tokens, *ns * 1e-9);
  }
  std::string seen;
  for (auto t : tp_seen) seen += (seen.empty() ? "" : ", ") + std::to_string(t);
  if (its_own) {
    if (tp_seen.size() != 1)
      return InvalidArgument(r.at("expected the rows of one tensor-parallel size (tp_size), found " +
                                  (seen.empty() ? std::string("no data rows") : "tp_size " + seen)));
    tp_size = static_cast<int>(*tp_seen.begin());
  }
  if (!tp_seen.contains(tp_size)) {
    return NotFound(r.at("no rows with tp_size " + std::to_string(tp_size) + " (the file has tp_size " +
                         (seen.empty() ? "none: no data rows" : seen) + ")"));
  }

  LayerProfile p;
  p.tp_size_ = tp_size;
  p.options_ = options;
  const auto heads = (options.kv_heads + tp_size - 1) / tp_size;  // a rank holds at least one KV head
  p.kv_seconds_per_token_ =
      2.0 * static_cast<double>(heads * options.head_dim * options.kv_bytes_per_element) / options.hbm_bytes_per_s;
  Curve* targets[3] = {&p.layer_, &p.embed_, &p.head_};
  const std::span<const std::string_view> groups[3] = {layer_ops(), embed_ops(), head_ops()};
  for (int g = 0; g < 3; ++g) {
    std::vector<Curve> curves;
    for (auto op : groups[g]) {
      auto& pts = rows.find(op)->second;
      if (pts.empty()) {
        return NotFound(r.at("op '" + std::string(op) + "' has no rows with tp_size " + std::to_string(tp_size) +
                             " and kv_cache 0 (expected ops: " + join(layer_ops()) + ", " + join(embed_ops()) + ", " +
                             join(head_ops()) + ")"));
      }
      curves.push_back(op_curve(std::move(pts)));
      // One count says nothing of how the op grows with tokens: every
      // prompt would have cost the same, short or long.
      if (curves.back().x.size() < 2)
        return InvalidArgument(r.at("op '" + std::string(op) + "' is measured at one token count only (" +
                                    std::to_string(static_cast<std::int64_t>(curves.back().x.front())) + ", tp_size " +
                                    std::to_string(tp_size) +
                                    "): expected rows at two or more counts, to tell how its time grows with tokens"));
    }
    *targets[g] = sum_curves(curves);
  }
  return p;
}

double LayerProfile::kv_read_seconds(std::int64_t context) const {
  assert(context >= 0);
  return kv_seconds_per_token_ * static_cast<double>(std::max<std::int64_t>(context, 0));
}

double LayerProfile::layer_seconds(std::int64_t tokens, std::int64_t context) const {
  assert(tokens >= 1);
  return layer_.at(static_cast<double>(tokens)) + kv_read_seconds(context);
}

double LayerProfile::group_seconds(std::int64_t tokens, std::int64_t context, int layers) const {
  assert(layers >= 0);
  return std::max(layers, 0) * layer_seconds(tokens, context);
}

double LayerProfile::embed_seconds(std::int64_t tokens) const {
  assert(tokens >= 1);
  return embed_.at(static_cast<double>(tokens));
}

double LayerProfile::head_seconds(std::int64_t tokens) const {
  assert(tokens >= 1);
  return head_.at(static_cast<double>(tokens));
}

Result<double> LayerProfile::op_seconds(std::string_view op, std::int64_t tokens, std::int64_t context) const {
  if (op == "embed") return embed_seconds(tokens);
  if (op == "head") return head_seconds(tokens);
  if (op.starts_with("layers") && op.size() > 6 && op.size() <= 9) {
    int g = 0;
    bool digits = true;
    for (char ch : op.substr(6)) {
      digits = digits && ch >= '0' && ch <= '9';
      g = g * 10 + (ch - '0');
    }
    if (digits && (op.size() == 7 || op[6] != '0') && g < options_.groups) {
      return group_seconds(tokens, context, options_.layers_per_group);
    }
  }
  return NotFound("unknown template op '" + std::string(op) + "', expected embed, layers0 .. layers" +
                  std::to_string(options_.groups - 1) + " or head");
}

std::vector<OpLatency> LayerProfile::op_latencies(std::int64_t tokens, std::int64_t context) const {
  std::vector<OpLatency> out;
  out.reserve(static_cast<std::size_t>(options_.groups) + 2);
  out.push_back({"embed", embed_seconds(tokens)});
  const double group = group_seconds(tokens, context, options_.layers_per_group);
  for (int g = 0; g < options_.groups; ++g) out.push_back({"layers" + std::to_string(g), group});
  out.push_back({"head", head_seconds(tokens)});
  return out;
}

}  // namespace slicesched
