// Read-only views a plugin may use beside the GMG's own accessors
// (`import slicesched.core.views;`, which brings slicesched.core.plugin): where
// each tenant's retained state (its KV caches) lives, and the estimator's
// price of a piece of work. Both read a const Gmg and change nothing;
// they are what docs/plugins.md promises to keep stable, so a policy does
// not depend on the GMG's internals.
//
// Threading: as the Gmg and Estimator they read (safe alongside other
// readers, never alongside a mutation).
module;
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

export module slicesched.core.views;
export import slicesched.core.plugin;  // SDK face: a plugin may import this module alone (docs/plugins.md)

export namespace slicesched {

// One retained state resident on an accelerator: the state an operator of
// one instance (one iteration of a tenant's lane: the KV cache of its
// sequences for that operator's layers) keeps after it finished, for a
// later instance to attach to.
struct RetainedState {
  std::uint32_t tenant = 0;
  InstanceId instance = 0;
  OpId op = kNoOp;
  AccelId accel = kNoAccel;
  std::int64_t bytes = 0;
  bool attached = false;  // a later instance already reads it (it moves with that one)
};

// Every retained state the GMG holds on an accelerator, by OpId. An
// operator that is issued but not done counts once it is placed (its
// retained state is reserved there). O(operator slots).
std::vector<RetainedState> retained_states(const Gmg& gmg);

// Bytes of retained state per tenant and accelerator, summed over
// retained_states(): sorted by tenant then accelerator, only non-zero rows.
struct RetainedTotal {
  std::uint32_t tenant = 0;
  AccelId accel = kNoAccel;
  std::int64_t bytes = 0;
  std::size_t states = 0;  // how many retained states make up `bytes`
};
std::vector<RetainedTotal> retained_by_tenant(const Gmg& gmg);

// The accelerator that holds most of `tenant`'s retained state (ties to
// the lower id); kNoAccel when it holds none.
AccelId retained_home(const Gmg& gmg, std::uint32_t tenant);

// ---- pricing work with a read-only estimator ----

// A dim's value, e.g. {"tokens", 512}.
struct DimValue {
  std::string_view name;
  std::int64_t value = 0;
};

// Seconds the estimator predicts for live operator `op` on `accel`.
// Fails (InvalidArgument, one line) when `op` is not live or `accel` is
// not in the cluster.
Result<double> price_op(const Estimator& est, const Gmg& gmg, OpId op, AccelId accel);

// Seconds the estimator predicts for template `tmpl`'s operator `op_name`
// (e.g. "layers0") at the dims given (e.g. tokens and context) on
// `accel`: how a policy prices queued work that is not in the GMG yet.
// Fails with one line naming the template, the operator or the dim (an
// unknown operator, a dim its features need that is not given, an
// unknown dim name, an accelerator not in the cluster).
Result<double> price_template_op(const Estimator& est, const Gmg& gmg, TemplateId tmpl, std::string_view op_name,
                                 std::span<const DimValue> dims, AccelId accel);

}  // namespace slicesched
