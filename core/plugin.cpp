module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

module slicesched.core.plugin;

namespace slicesched {

void OldestFirstRule::select(std::span<const TransferIntent> pending, std::span<const std::uint8_t> src_busy,
                             std::span<const std::uint8_t> dst_busy, std::vector<std::size_t>& out) {
  const std::size_t accels = std::min(src_busy.size(), dst_busy.size());
  order_.resize(pending.size());
  std::iota(order_.begin(), order_.end(), std::size_t{0});
  std::sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) {
    const TransferIntent &x = pending[a], &y = pending[b];
    return x.since != y.since ? x.since < y.since : x.id < y.id;
  });
  // A port is taken when in flight, activated this round or reserved.
  src_taken_.assign(src_busy.begin(), src_busy.begin() + static_cast<std::ptrdiff_t>(accels));
  dst_taken_.assign(dst_busy.begin(), dst_busy.begin() + static_cast<std::ptrdiff_t>(accels));
  bool oldest = true;
  for (std::size_t i : order_) {
    const TransferIntent& t = pending[i];
    // An accelerator beyond the flags is a caller bug; such an intent is
    // never started (and does not hold the oldest's reservation).
    if (t.src >= accels || t.dst >= accels) continue;
    const bool free = !src_taken_[t.src] && !dst_taken_[t.dst];
    if (free) out.push_back(i);
    if (free || (oldest && reserve_oldest_)) src_taken_[t.src] = dst_taken_[t.dst] = 1;
    oldest = false;
  }
}

Status PluginRegistries::adopt(PluginRegistries&& staged, const std::shared_ptr<const void>& library) {
  // All the checks before any move: a library that clashes anywhere
  // registers nothing, so a failed load leaves the registries as they were.
  for (Status s : {partition.check_disjoint(staged.partition), placement.check_disjoint(staged.placement),
                   estimator.check_disjoint(staged.estimator), arbiter.check_disjoint(staged.arbiter),
                   filter.check_disjoint(staged.filter), score.check_disjoint(staged.score)})
    if (!s.ok()) return s;
  partition.adopt(std::move(staged.partition), library);
  placement.adopt(std::move(staged.placement), library);
  estimator.adopt(std::move(staged.estimator), library);
  arbiter.adopt(std::move(staged.arbiter), library);
  filter.adopt(std::move(staged.filter), library);
  score.adopt(std::move(staged.score), library);
  return Status::Ok();
}

void bad_arg(std::string_view key, std::string_view problem) {
  throw std::invalid_argument("key '" + std::string(key) + "': " + std::string(problem));
}

void check_keys(const PluginArgs& args, std::initializer_list<std::string_view> accepted) {
  if (!args.is_object()) return;
  for (const auto& [key, value] : args.items()) {
    bool known = false;
    for (std::string_view a : accepted) known = known || a == key;
    if (known) continue;
    std::string list;
    for (std::string_view a : accepted) list += (list.empty() ? "" : ", ") + std::string(a);
    throw std::invalid_argument("unknown key '" + key + "' " +
                                (list.empty() ? std::string("(takes no arguments)") : "(accepted: " + list + ")"));
  }
}

double non_negative_arg(const PluginArgs& args, std::string_view key, double fallback) {
  auto it = args.find(key);
  if (it == args.end()) return fallback;
  if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0)
    bad_arg(key, "must be a number >= 0, not " + it->dump());
  return it->get<double>();
}

std::int64_t integer_value(const PluginArgs& value, std::string_view key, std::int64_t min, std::int64_t max) {
  // A JSON integer is signed or unsigned; an unsigned one is compared as
  // such, so one above INT64_MAX never wraps into the range.
  if (value.is_number_unsigned()) {
    const std::uint64_t u = value.get<std::uint64_t>();
    if (max >= 0 && u <= static_cast<std::uint64_t>(max) && static_cast<std::int64_t>(u) >= min)
      return static_cast<std::int64_t>(u);
  } else if (value.is_number_integer()) {
    const std::int64_t v = value.get<std::int64_t>();
    if (v >= min && v <= max) return v;
  }
  // dump() writes NaN and infinities as null.
  std::string got = value.dump();
  if (value.is_number_float() && !std::isfinite(value.get<double>()))
    got = std::isnan(value.get<double>()) ? "nan" : value.get<double>() > 0 ? "inf" : "-inf";
  bad_arg(key, "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + got);
}

std::int64_t integer_arg(const PluginArgs& args, std::string_view key, std::int64_t fallback, std::int64_t min,
                         std::int64_t max) {
  auto it = args.find(key);
  return it == args.end() ? fallback : integer_value(*it, key, min, max);
}

bool bool_arg(const PluginArgs& args, std::string_view key, bool fallback) {
  auto it = args.find(key);
  if (it == args.end()) return fallback;
  if (!it->is_boolean()) bad_arg(key, "must be true or false, not " + it->dump());
  return it->get<bool>();
}

}  // namespace slicesched
