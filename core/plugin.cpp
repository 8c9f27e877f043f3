module;
#include <cmath>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

module slicesched.core.plugin;

namespace slicesched {

Status PluginRegistries::adopt(PluginRegistries&& staged, const std::shared_ptr<const void>& library) {
  // All four checks before any move: a library that clashes anywhere
  // registers nothing, so a failed load leaves the registries as they were.
  for (Status s : {partition.check_disjoint(staged.partition), placement.check_disjoint(staged.placement),
                   estimator.check_disjoint(staged.estimator), arbiter.check_disjoint(staged.arbiter)})
    if (!s.ok()) return s;
  partition.adopt(std::move(staged.partition), library);
  placement.adopt(std::move(staged.placement), library);
  estimator.adopt(std::move(staged.estimator), library);
  arbiter.adopt(std::move(staged.arbiter), library);
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

bool bool_arg(const PluginArgs& args, std::string_view key, bool fallback) {
  auto it = args.find(key);
  if (it == args.end()) return fallback;
  if (!it->is_boolean()) bad_arg(key, "must be true or false, not " + it->dump());
  return it->get<bool>();
}

}  // namespace slicesched
