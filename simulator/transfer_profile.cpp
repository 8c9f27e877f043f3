module;
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

module slicesched.simulator.profile;
import slicesched.core.csv;

namespace slicesched {

namespace {

using csv::CsvReader;
using csv::CsvRow;

constexpr std::string_view kMedian = "time_stats.send_recv.median";

struct Block {
  double weight = 0, sum = 0;  // rows pooled, sum of their seconds
  std::size_t count = 0;       // distinct sizes pooled
  double mean() const { return sum / weight; }
};

// Weighted least-squares non-decreasing fit (pool adjacent violators) of
// `seconds` over ascending sizes, each weighted by its number of rows.
std::vector<double> monotone_fit(const std::vector<double>& seconds, const std::vector<double>& weight) {
  std::vector<Block> blocks;
  for (std::size_t i = 0; i < seconds.size(); ++i) {
    blocks.push_back({weight[i], weight[i] * seconds[i], 1});
    while (blocks.size() > 1 && blocks[blocks.size() - 2].mean() > blocks.back().mean()) {
      const Block b = blocks.back();
      blocks.pop_back();
      blocks.back().weight += b.weight;
      blocks.back().sum += b.sum;
      blocks.back().count += b.count;
    }
  }
  std::vector<double> fit;
  fit.reserve(seconds.size());
  for (const auto& b : blocks) fit.insert(fit.end(), b.count, b.mean());
  return fit;
}

// A row's (bytes, seconds): its median in ms (> 0, at most an hour) and its
// size (>= 1 byte).
Result<std::pair<std::int64_t, double>> point(const CsvReader& r, const CsvRow& row, std::size_t ms_col,
                                              std::size_t size_col) {
  auto ms = r.positive(row, ms_col);
  if (!ms.ok()) return ms.status();
  if (*ms > 3.6e6) return InvalidArgument(r.bad_field(row, ms_col, "at most 3.6e6 ms (one hour)"));
  auto bytes = r.integer(row, size_col, 1);
  if (!bytes.ok()) return bytes.status();
  return std::pair{*bytes, *ms * 1e-3};
}

}  // namespace

Result<TransferProfile> TransferProfile::load(const std::filesystem::path& path, bool within_node) {
  auto text = csv::read_text(path);
  if (!text.ok()) return text.status();
  return parse(*text, path.string(), within_node);
}

Result<TransferProfile> TransferProfile::parse(std::string_view csv, std::string_view source, bool within_node) {
  auto reader = CsvReader::open(csv, source);
  if (!reader.ok()) return reader.status();
  CsvReader& r = *reader;
  auto cols = r.columns({kMedian, "size", "devices_per_node"});
  if (!cols.ok()) return cols.status();
  const std::vector<std::size_t>& col = *cols;

  std::vector<std::pair<std::int64_t, double>> pts;  // (bytes, seconds) of the chosen side
  for (CsvRow row;;) {
    auto more = r.next(row);
    if (!more.ok()) return more.status();
    if (!*more) break;
    auto p = point(r, row, col[0], col[1]);
    if (!p.ok()) return p.status();
    auto devices = r.integer(row, col[2], 1);
    if (!devices.ok()) return devices.status();
    if ((*devices > 1) == within_node) pts.push_back(*p);
  }
  if (pts.empty()) {
    return NotFound(r.at(within_node ? "no rows with devices_per_node > 1 (transfers within a node)"
                                     : "no rows with devices_per_node 1 (transfers across nodes)"));
  }

  return from_points(std::move(pts));
}

Result<TransferProfile> TransferProfile::load_all_reduce(const std::filesystem::path& path, int workers) {
  auto text = csv::read_text(path);
  if (!text.ok()) return text.status();
  return parse_all_reduce(*text, path.string(), workers);
}

Result<TransferProfile> TransferProfile::parse_all_reduce(std::string_view csv, std::string_view source, int workers) {
  auto reader = CsvReader::open(csv, source);
  if (!reader.ok()) return reader.status();
  CsvReader& r = *reader;
  auto cols = r.columns({"time_stats.all_reduce.median", "size", "num_workers", "devices_per_node"});
  if (!cols.ok()) return cols.status();
  const std::vector<std::size_t>& col = *cols;
  auto collective = r.column("collective");  // optional: Vidur's files hold only all_reduce rows
  std::vector<std::pair<std::int64_t, double>> pts;
  std::vector<std::int64_t> counts;  // worker counts measured in one node
  for (CsvRow row;;) {
    auto more = r.next(row);
    if (!more.ok()) return more.status();
    if (!*more) break;
    if (collective.ok() && *collective < row.fields.size() && row.fields[*collective] != "all_reduce") continue;
    auto p = point(r, row, col[0], col[1]);
    if (!p.ok()) return p.status();
    auto n = r.integer(row, col[2], 1);
    if (!n.ok()) return n.status();
    auto per_node = r.integer(row, col[3], 1);
    if (!per_node.ok()) return per_node.status();
    if (*per_node != *n) continue;  // across nodes: not a tensor-parallel group's
    if (std::find(counts.begin(), counts.end(), *n) == counts.end()) counts.push_back(*n);
    if (*n == workers || workers <= 0) pts.push_back(*p);
  }
  if (pts.empty()) {
    std::sort(counts.begin(), counts.end());
    std::string have;
    for (auto n : counts) have += (have.empty() ? "" : ", ") + std::to_string(n);
    return NotFound(r.at("no all-reduce rows of " + std::to_string(workers) +
                         " GPUs in one node (num_workers = " + "devices_per_node = " + std::to_string(workers) +
                         "; measured: " + (have.empty() ? "none" : have) + ")"));
  }
  // One size says nothing of how time grows with bytes: beyond it the
  // profile would scale at a latency-bound message's rate.
  if (workers > 0 && std::all_of(pts.begin(), pts.end(), [&](const auto& p) { return p.first == pts.front().first; }))
    return InvalidArgument(r.at("all-reduce rows of " + std::to_string(workers) + " GPUs measure one size only (" +
                                std::to_string(pts.front().first) +
                                " bytes): expected two or more, to interpolate between"));
  return from_points(std::move(pts));
}

TransferProfile TransferProfile::from_points(std::vector<std::pair<std::int64_t, double>> pts) {
  std::sort(pts.begin(), pts.end());  // by size, then seconds: repeats sum in one order everywhere
  std::vector<double> log_size, seconds, weight;
  for (std::size_t i = 0; i < pts.size();) {  // a size measured twice (16 MiB in Vidur's): average
    std::size_t j = i;
    double sum = 0;
    for (; j < pts.size() && pts[j].first == pts[i].first; ++j) sum += pts[j].second;
    log_size.push_back(std::log(static_cast<double>(pts[i].first)));
    weight.push_back(static_cast<double>(j - i));
    seconds.push_back(sum / weight.back());
    i = j;
  }

  TransferProfile p;
  p.min_bytes_ = pts.front().first;
  p.max_bytes_ = pts.back().first;
  p.by_log_size_.x = std::move(log_size);
  p.by_log_size_.y = monotone_fit(seconds, weight);
  return p;
}

double TransferProfile::seconds(std::int64_t bytes) const {
  assert(bytes >= 0);
  const auto& c = by_log_size_;
  if (bytes <= min_bytes_) return c.y.front();  // latency-bound: a smaller message is no faster
  if (bytes >= max_bytes_) return c.y.back() * (static_cast<double>(bytes) / static_cast<double>(max_bytes_));
  return c.at(std::log(static_cast<double>(bytes)));
}

double TransferProfile::peak_bytes_per_s() const { return static_cast<double>(max_bytes_) / by_log_size_.y.back(); }

}  // namespace slicesched
