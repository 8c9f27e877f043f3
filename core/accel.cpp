module;
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

module slicesched.core.accel;

namespace slicesched {

namespace {
constexpr LinkClassId kDefaultLink = 0;
}

AccelTypeId AcceleratorSet::add_type(std::string_view name) {
  for (std::size_t i = 0; i < types_.size(); ++i)
    if (types_[i] == name) return static_cast<AccelTypeId>(i);
  types_.emplace_back(name);
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

Result<AccelId> AcceleratorSet::add(std::string name, std::string_view type, std::int64_t hbm_bytes) {
  if (hbm_bytes <= 0) return InvalidArgument("accelerator '" + name + "': hbm must be > 0 bytes");
  if (find(name) >= 0) return AlreadyExists("accelerator '" + name + "' already exists");
  AccelTypeId t = add_type(type);
  accels_.push_back({std::move(name), t, hbm_bytes});
  for (auto& row : pair_) row.push_back(kDefaultLink);
  pair_.emplace_back(accels_.size(), kDefaultLink);
  return static_cast<AccelId>(accels_.size() - 1);
}

Status AcceleratorSet::link(AccelId a, AccelId b, LinkClassId cls) {
  if (!contains(a) || !contains(b))
    return NotFound("link " + std::to_string(a) + "-" + std::to_string(b) + ": no such accelerator (cluster has " +
                    std::to_string(size()) + ")");
  if (cls >= links_.size()) return NotFound("link class " + std::to_string(cls) + " does not exist");
  pair_[a][b] = cls;
  pair_[b][a] = cls;
  return Status::Ok();
}

int AcceleratorSet::find(std::string_view name) const {
  for (std::size_t i = 0; i < accels_.size(); ++i)
    if (accels_[i].name == name) return static_cast<int>(i);
  return -1;
}

LinkClassId AcceleratorSet::link_class(AccelId a, AccelId b) const { return pair_[a][b]; }

}  // namespace slicesched
