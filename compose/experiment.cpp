module;
#include <memory>
#include <optional>
#include <string>
#include <utility>

module slicesched.compose.experiment;

namespace slicesched {

Result<std::unique_ptr<Experiment>> open_experiment(const std::string& path, const OpenOptions& opt) {
  auto cfg = load_config(path, opt.overrides);
  if (!cfg.ok()) return cfg.status();
  auto e = std::make_unique<Experiment>();
  e->cfg = std::move(cfg).value();
  if (opt.seed) e->cfg.seed = *opt.seed;
  if (opt.one_policy) {
    auto policy = find_policy(e->cfg, opt.policy, opt.first_by_default);
    if (!policy.ok()) return policy.status();
    e->policy = policy.value();
  }
  if (opt.prior) {
    auto prior = read_prior(e->cfg);
    if (!prior.ok()) return prior.status();
    e->prior = std::move(prior).value();
  }
  if (Status s = load_plugins(e->cfg, e->plugins); !s.ok()) return s;
  return e;
}

}  // namespace slicesched
