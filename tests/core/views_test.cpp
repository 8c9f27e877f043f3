// The read-only views a plugin may use (slicesched.core.views): where each
// tenant's retained state lives, and the estimator's price of work.
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

import slicesched.core.views;
import slicesched.testing;
import slicesched.core.status;
import slicesched.core.ids;
import slicesched.core.shape;
import slicesched.core.graph;
import slicesched.core.gmg;
import slicesched.core.estimator;

using namespace slicesched;
using namespace slicesched::testing;

namespace {

// "a" -> "b"; b retains a KV cache of (context + tokens) * 16 bytes and
// costs tokens * 1 ms + 2 ms (features tokens and 1, prior {1e-3, 2e-3}).
GraphTemplate pipeline() {
  TemplateBuilder b("pipe");
  Expr tokens = b.dim("tokens"), context = b.dim("context");
  b.port("kv", {{context * Expr::constant(16)}, DType::kI8}, /*optional=*/true);
  b.op("a").output({{tokens * Expr::constant(1024)}, DType::kI8});
  b.op("b")
      .input("a")
      .input("kv")
      .output({{tokens * Expr::constant(1024)}, DType::kI8})
      .retain("kv", {{(context + tokens) * Expr::constant(16)}, DType::kI8})
      .features({tokens, Expr::constant(1)})
      .prior({1e-3, 2e-3});
  return std::move(b).build().value();
}

// The core's linear model behind the plugin interface, read-only.
class LinearEstimator final : public Estimator {
 public:
  explicit LinearEstimator(EstimatorSet set) : set_(std::move(set)) {}
  double predict_op(OpKindId kind, AccelTypeId type, std::span<const double> x) const override {
    return set_.predict_op(kind, type, x);
  }
  double predict_transfer(AccelId src, AccelId dst, std::uint64_t bytes) const override {
    return set_.predict_transfer(src, dst, bytes);
  }
  Status observe_op(OpKindId, AccelTypeId, std::span<const double>, double) override { return Status::Ok(); }
  Status observe_transfer(AccelId, AccelId, std::uint64_t, double) override { return Status::Ok(); }

 private:
  EstimatorSet set_;
};

struct Fixture {
  std::shared_ptr<TemplateRegistry> reg = std::make_shared<TemplateRegistry>();
  TemplateId pipe = reg->add(pipeline()).value();
  Gmg gmg{reg, cluster(3, 1 << 30)};
  LinearEstimator est{estimators(*reg)};
  InstanceInfo add(std::uint32_t tenant, std::int64_t tokens, std::int64_t context, OpId kv = kNoOp) {
    InstanceSpec spec{pipe, {{"tokens", tokens}, {"context", context}}, {}, 1, tenant};
    if (kv != kNoOp) spec.ports.push_back({"kv", kv, true});
    auto r = gmg.instantiate(spec);
    REQUIRE(r.ok());
    return r.value();
  }
};

}  // namespace

TEST_CASE("retained_states says where each tenant's KV cache lives and how big it is", "[views]") {
  Fixture f;
  CHECK(retained_states(f.gmg).empty());
  auto t0 = f.add(0, 4, 0);               // tenant 0 on a2
  auto t1 = f.add(1, 8, 0);               // tenant 1 on a1
  CHECK(retained_states(f.gmg).empty());  // unscheduled: nowhere yet
  for (OpId op : t0.ops) REQUIRE(f.gmg.issue(op, 2, 0).ok());
  for (OpId op : t1.ops) REQUIRE(f.gmg.issue(op, 1, 0).ok());
  // Issued: reserved where it runs.
  auto states = retained_states(f.gmg);
  REQUIRE(states.size() == 2);
  CHECK(states[0].tenant == 0);
  CHECK(states[0].op == t0.ops[1]);
  CHECK(states[0].accel == 2);
  CHECK(states[0].bytes == 4 * 16);
  CHECK(states[1].tenant == 1);
  CHECK(states[1].accel == 1);
  CHECK(states[1].bytes == 8 * 16);
  for (OpId op : t0.ops) REQUIRE(f.gmg.complete(op, 5, 5).ok());
  // Done: held until a later instance takes it over.
  auto next = f.add(0, 1, 4, t0.ops[1]);
  states = retained_states(f.gmg);
  REQUIRE(states.size() == 2);
  CHECK(states[0].attached);
  CHECK(retained_home(f.gmg, 0) == 2);
  CHECK(retained_home(f.gmg, 1) == 1);
  CHECK(retained_home(f.gmg, 7) == kNoAccel);
  for (OpId op : next.ops) REQUIRE(f.gmg.issue(op, 2, 6).ok());
  auto totals = retained_by_tenant(f.gmg);
  REQUIRE(totals.size() == 2);
  CHECK(totals[0].tenant == 0);
  CHECK(totals[0].accel == 2);
  CHECK(totals[0].bytes == 4 * 16 + 5 * 16);  // the old cache and the next step's, until it is handed over
  CHECK(totals[0].states == 2);
  for (OpId op : next.ops) REQUIRE(f.gmg.complete(op, 9, 3).ok());
  totals = retained_by_tenant(f.gmg);
  REQUIRE(totals.size() == 2);
  CHECK(totals[0].bytes == 5 * 16);  // handed over: only the new one is held
  CHECK(totals[0].states == 1);
  REQUIRE(f.gmg.release_retained(next.ops[1]).ok());
  totals = retained_by_tenant(f.gmg);
  REQUIRE(totals.size() == 1);
  CHECK(totals[0].tenant == 1);
}

TEST_CASE("price_op and price_template_op give the estimator's seconds for work", "[views]") {
  Fixture f;
  auto inst = f.add(0, 4, 0);
  // b: 4 tokens * 1 ms + 2 ms.
  auto live = price_op(f.est, f.gmg, inst.ops[1], 0);
  REQUIRE(live.ok());
  CHECK(live.value() == Approx(6e-3));
  // Queued work not in the GMG: b at 100 tokens.
  const DimValue dims[] = {{"tokens", 100}, {"context", 0}};
  auto queued = price_template_op(f.est, f.gmg, f.pipe, "b", dims, 1);
  REQUIRE(queued.ok());
  CHECK(queued.value() == Approx(0.102));

  CHECK(price_op(f.est, f.gmg, inst.ops[1], 9).status().message() ==
        "price_op: accelerator 9 is not in the cluster (it has 3)");
  CHECK(price_op(f.est, f.gmg, 999, 0).status().message() == "price_op: operator 999 is not live");
  CHECK(price_template_op(f.est, f.gmg, f.pipe, "c", dims, 0).status().message() ==
        "price_template_op: template 'pipe' has no operator 'c'");
  const DimValue typo[] = {{"tokenz", 1}};
  CHECK(price_template_op(f.est, f.gmg, f.pipe, "b", typo, 0).status().message() ==
        "price_template_op: template 'pipe' has no dim 'tokenz'");
  const DimValue none[] = {{"context", 1}};
  auto unbound = price_template_op(f.est, f.gmg, f.pipe, "b", none, 0);
  REQUIRE_FALSE(unbound.ok());
  CHECK(unbound.status().message().find("price_template_op: template 'pipe', operator 'b': ") == 0);
  CHECK(unbound.status().message().find("tokens") != std::string::npos);
}
