module;
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

module slicesched.plugins.partition_sets;

namespace slicesched::plugins {

namespace {

std::string at(std::string_view key, std::size_t i) { return std::string(key) + "[" + std::to_string(i) + "]"; }

}  // namespace

ExplicitGroups::ExplicitGroups(const PluginArgs& args) {
  check_keys(args, {"groups", "tenants"});
  auto groups = args.find("groups");
  if (groups == args.end()) bad_arg("groups", "required: a list of accelerator groups, e.g. [[0, 1], [2, 3]]");
  if (!groups->is_array() || groups->empty()) bad_arg("groups", "must be a non-empty list of accelerator groups");
  for (std::size_t g = 0; g < groups->size(); ++g) {
    const PluginArgs& group = (*groups)[g];
    const std::string gkey = at("groups", g);
    if (!group.is_array() || group.empty()) bad_arg(gkey, "must be a non-empty list of accelerator ids or names");
    std::vector<Member> members;
    for (std::size_t m = 0; m < group.size(); ++m) {
      const PluginArgs& v = group[m];
      if (v.is_number())
        members.push_back({static_cast<AccelId>(integer_value(v, at(gkey, m), 0, kNoAccel - 1)), {}});
      else if (v.is_string() && !v.get<std::string>().empty())
        members.push_back({kNoAccel, v.get<std::string>()});
      else
        bad_arg(at(gkey, m), "must be an accelerator id (>= 0) or name, not " + v.dump());
    }
    spec_.push_back(std::move(members));
  }

  auto tenants = args.find("tenants");
  if (tenants == args.end()) return;
  if (!tenants->is_object()) bad_arg("tenants", "must be a table of tenant id -> list of group indices");
  for (const auto& [tenant, list] : tenants->items()) {
    const std::string tkey = "tenants." + tenant;
    std::uint32_t id = 0;
    const auto [end, ec] = std::from_chars(tenant.data(), tenant.data() + tenant.size(), id);
    if (ec != std::errc() || end != tenant.data() + tenant.size())
      bad_arg(tkey, "tenant ids are unsigned integers, not '" + tenant + "'");
    if (!list.is_array() || list.empty()) bad_arg(tkey, "must be a non-empty list of group indices");
    std::vector<std::size_t> picks;
    const auto last_group = static_cast<std::int64_t>(spec_.size()) - 1;
    for (std::size_t i = 0; i < list.size(); ++i)
      picks.push_back(static_cast<std::size_t>(integer_value(list[i], at(tkey, i), 0, last_group)));
    tenants_[id] = std::move(picks);
  }
}

Status ExplicitGroups::bind(const AcceleratorSet& accels) {
  bound_to_ = &accels;
  bound_size_ = accels.size();
  bound_ok_ = false;
  groups_.clear();
  for (std::size_t g = 0; g < spec_.size(); ++g) {
    AccelGroup group;
    for (std::size_t m = 0; m < spec_[g].size(); ++m) {
      const Member& member = spec_[g][m];
      const std::string who = "partition set 'explicit': key '" + at(at("groups", g), m) + "': ";
      AccelId id = member.id;
      if (id == kNoAccel) {
        const int found = accels.find(member.name);
        if (found < 0) return InvalidArgument(who + "no accelerator named '" + member.name + "'");
        id = static_cast<AccelId>(found);
      } else if (!accels.contains(id)) {
        return InvalidArgument(who + "accelerator id " + std::to_string(id) + " out of range (" +
                               std::to_string(accels.size()) + " accelerators)");
      }
      for (AccelId seen : group.members)
        if (seen == id) return InvalidArgument(who + "accelerator '" + accels[id].name + "' is already in this group");
      group.members.push_back(id);
    }
    group.label = names_label(accels, group.members);
    groups_.push_back(std::move(group));
  }
  bound_ok_ = true;
  return Status::Ok();
}

std::vector<Candidate> ExplicitGroups::candidates(const Gmg& gmg, const Batch& batch) {
  // The scheduler's own bind() call is where a misfit is reported; here it
  // only means "nothing to offer".
  if (&gmg.accels() != bound_to_ || gmg.accels().size() != bound_size_) (void)bind(gmg.accels());
  std::vector<Candidate> out;
  if (!bound_ok_) return out;
  if (auto pinned = tenants_.find(batch.tenant); pinned != tenants_.end()) {
    out.reserve(pinned->second.size());
    for (std::size_t g : pinned->second) out.push_back(contiguous_candidate(groups_[g], gmg, batch));
  } else {
    out.reserve(groups_.size());
    for (const AccelGroup& g : groups_) out.push_back(contiguous_candidate(g, gmg, batch));
  }
  return out;
}

}  // namespace slicesched::plugins
