module;
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

module slicesched.core.accel;

namespace slicesched {

namespace {
constexpr LinkClassId kDefaultLink = 0;

// The unordered pair {a, b} as one key.
std::uint64_t pair_key(AccelId a, AccelId b) {
  if (a > b) std::swap(a, b);
  return (static_cast<std::uint64_t>(a) << 32) | b;
}
}  // namespace

AccelTypeId AcceleratorSet::add_type(std::string_view name, int tp) {
  std::string key(name);
  if (tp > 1) key += "/tp" + std::to_string(tp);
  for (std::size_t i = 0; i < types_.size(); ++i)
    if (types_[i].name == key) return static_cast<AccelTypeId>(i);
  types_.push_back({std::move(key), std::string(name), tp});
  return static_cast<AccelTypeId>(types_.size() - 1);
}

Result<LinkClassId> AcceleratorSet::add_link_class(std::string name, double bandwidth, double latency) {
  if (!(bandwidth > 0)) return InvalidArgument("link class '" + name + "': bandwidth must be > 0 bytes/s");
  if (!(latency >= 0)) return InvalidArgument("link class '" + name + "': latency must be >= 0 s");
  for (const auto& l : links_)
    if (l.name == name) return AlreadyExists("link class '" + name + "' already exists");
  links_.push_back({std::move(name), bandwidth, latency});
  return static_cast<LinkClassId>(links_.size() - 1);
}

Result<AccelId> AcceleratorSet::add(std::string name, std::string_view type, std::int64_t hbm_bytes, int tp) {
  if (hbm_bytes <= 0) return InvalidArgument("accelerator '" + name + "': hbm must be > 0 bytes");
  if (tp < 1) return InvalidArgument("accelerator '" + name + "': tp must be >= 1 GPUs");
  if (find(name) >= 0) return AlreadyExists("accelerator '" + name + "' already exists");
  AccelTypeId t = add_type(type, tp);
  const auto id = static_cast<AccelId>(accels_.size());
  by_name_.emplace(name, id);
  accels_.push_back({std::move(name), t, hbm_bytes});
  return id;
}

Status AcceleratorSet::link(AccelId a, AccelId b, LinkClassId cls) {
  if (!contains(a) || !contains(b))
    return NotFound("link " + std::to_string(a) + "-" + std::to_string(b) + ": no such accelerator (cluster has " +
                    std::to_string(size()) + ")");
  if (cls >= links_.size()) return NotFound("link class " + std::to_string(cls) + " does not exist");
  // Storing the default would only cost memory: a pair not stored has it.
  if (cls == kDefaultLink)
    pair_.erase(pair_key(a, b));
  else
    pair_[pair_key(a, b)] = cls;
  return Status::Ok();
}

int AcceleratorSet::find(std::string_view name) const {
  const auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? -1 : static_cast<int>(it->second);
}

LinkClassId AcceleratorSet::link_class(AccelId a, AccelId b) const {
  if (pair_.empty()) return kDefaultLink;
  const auto it = pair_.find(pair_key(a, b));
  return it == pair_.end() ? kDefaultLink : it->second;
}

std::vector<std::pair<AccelId, AccelId>> AcceleratorSet::linked_pairs() const {
  std::vector<std::pair<AccelId, AccelId>> out;
  out.reserve(pair_.size());
  for (const auto& [key, cls] : pair_) out.emplace_back(static_cast<AccelId>(key >> 32), static_cast<AccelId>(key));
  // Hash order is not an order anyone should see.
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace slicesched
