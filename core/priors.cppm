// Seeds an EstimatorSet with the priors declared by templates (per operator
// kind) and by link classes (per accelerator pair), so a cluster predicts
// sensibly before its first measurement.
module;
#include <cstdint>
#include <span>
#include <vector>

export module slicesched.core.priors;
import slicesched.core.graph;
import slicesched.core.accel;
import slicesched.core.estimator;
import slicesched.core.ids;
import slicesched.core.status;

export namespace slicesched {

// Adds the priors of every registered template op that declares one and of
// every accelerator pair's link class. Fails on the first prior the set
// refuses (naming it).
inline Status seed_priors(EstimatorSet& est, const TemplateRegistry& templates, const AcceleratorSet& accels) {
  for (TemplateId t = 0; t < templates.size(); ++t)
    for (const auto& op : templates.get(t).ops())
      if (!op.prior.empty())
        if (Status s = est.set_op_prior(op.kind, op.prior); !s.ok()) return s;
  if (accels.link_class_count() == 0) return Status::Ok();
  const LinkClass& def = accels.link(0);
  if (Status s = est.set_default_transfer_prior(1.0 / def.bandwidth_bytes_per_s, def.latency_s); !s.ok()) return s;
  // Only pairs with an explicit link differ from the default: visiting every
  // pair would cost n^2 in a big cluster.
  for (const auto& [a, b] : accels.linked_pairs()) {
    if (a == b) continue;
    const LinkClass& l = accels.link(accels.link_class(a, b));
    if (Status s = est.set_transfer_prior(a, b, 1.0 / l.bandwidth_bytes_per_s, l.latency_s); !s.ok()) return s;
    if (Status s = est.set_transfer_prior(b, a, 1.0 / l.bandwidth_bytes_per_s, l.latency_s); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace slicesched
