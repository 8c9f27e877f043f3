// The shape grid (calibration.cppm's header says what it covers) and the
// template features of a shape.
module;
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

module slicesched.executor.calibration;
import slicesched.core.shape;

namespace slicesched {

namespace {

// {first, first*step, first*step^2, ...} below `max`, then `max` itself.
std::vector<std::int64_t> ladder(std::int64_t first, std::int64_t max, std::int64_t step = 4) {
  std::vector<std::int64_t> v;
  for (std::int64_t x = first; x < max; x *= step) v.push_back(x);
  if (max >= 1) v.push_back(max);
  return v;
}

}  // namespace

ShapeGrid shape_grid(const GridBounds& b) {
  ShapeGrid g;
  g.bounds = b;
  const std::int64_t P = b.max_prompt, C = std::max<std::int64_t>(1, b.max_prompt + b.max_output - 1);
  const std::vector<std::int64_t> seqs = ladder(1, b.max_seqs, 2), ps = ladder(1, P);
  // Prefills come a few at a time (arrivals between two iterations).
  for (std::int64_t s : seqs)
    if (s <= 4)
      for (std::int64_t t : ps)
        if (s * t <= b.max_tokens) g.shapes.push_back({s, t, 0, 0});
  for (std::int64_t s : seqs)
    for (std::int64_t c : ladder(1, C))
      if (s * (c + 1) <= b.max_kv) g.shapes.push_back({s, 1, c, 0});
  // Continuous batching: the running decodes plus a newly admitted prompt.
  for (std::int64_t s : seqs)
    for (std::int64_t t : ps)
      if (s + t <= b.max_tokens && s * (P + 1) + t <= b.max_kv) g.shapes.push_back({s, 1, P, t});
  // The head's fit needs two sequence counts.
  const bool one_count =
      std::all_of(g.shapes.begin(), g.shapes.end(), [](const GridShape& s) { return s.total_sequences() == 1; });
  if (one_count && b.max_tokens >= 2) g.shapes.push_back({2, 1, 0, 0});
  g.hidden_tokens = ladder(1, b.max_tokens);
  g.kv_tokens = ladder(16, std::max<std::int64_t>(16, b.max_kv));
  return g;
}

std::string describe(const ShapeGrid& g) {
  std::size_t prefill = 0, decode = 0, mixed = 0;
  std::set<std::int64_t> counts;
  for (const GridShape& s : g.shapes) {
    (s.prefill ? mixed : s.context ? decode : prefill) += 1;
    counts.insert(s.total_sequences());
  }
  const GridBounds& b = g.bounds;
  char buf[640];
  std::snprintf(
      buf, sizeof buf,
      "shape grid: prompts <= %lld, outputs <= %lld, <= %lld sequences, <= %lld tokens and <= %lld cached "
      "tokens per iteration\n  %zu shapes (%zu prefill, %zu decode, %zu mixed) of %zu sequence counts "
      "(%lld to %lld); copies of %zu hidden and %zu KV sizes per accelerator pair\n",
      static_cast<long long>(b.max_prompt), static_cast<long long>(b.max_output), static_cast<long long>(b.max_seqs),
      static_cast<long long>(b.max_tokens), static_cast<long long>(b.max_kv), g.shapes.size(), prefill, decode, mixed,
      counts.size(), static_cast<long long>(counts.empty() ? 0 : *counts.begin()),
      static_cast<long long>(counts.empty() ? 0 : *counts.rbegin()), g.hidden_tokens.size(), g.kv_tokens.size());
  return buf;
}

std::vector<double> op_features(const GraphTemplate& t, const TemplateOp& op, std::int64_t tokens,
                                std::int64_t sequences, std::int64_t context) {
  Binding b(t.dims().size());
  const std::pair<const char*, std::int64_t> dims[] = {
      {"tokens", tokens}, {"sequences", sequences}, {"context", context}, {"kv_prev", context}};
  for (const auto& [name, v] : dims)
    if (int id = t.dims().find(name); id >= 0) b.set(static_cast<DimId>(id), v);
  std::vector<double> x;
  for (const Expr& e : op.features) {
    auto v = e.eval(b, t.dims());
    if (!v.ok()) throw std::runtime_error("calibrate: features of " + op.name + ": " + v.status().message());
    x.push_back(static_cast<double>(v.value()));
  }
  return x;
}

}  // namespace slicesched
