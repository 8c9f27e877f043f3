#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

import slicesched.core.plugin;
import slicesched.plugins.builtin;
import slicesched.core.status;
import slicesched.core.ids;
import slicesched.core.estimator;

using namespace slicesched;
using nlohmann::json;

namespace {

Result<PluginPtr<Estimator>> make(const json& args) {
  PluginRegistries regs;
  REQUIRE(plugins::register_builtins(regs).ok());
  return regs.estimator.create("online-linear", args);
}

}  // namespace

TEST_CASE("online-linear is the core EstimatorSet behind the interface", "[plugins][estimator]") {
  auto made = make(json::object());
  REQUIRE(made.ok());
  Estimator& est = **made;
  const EstimatorSet* set = est.linear();
  REQUIRE(set != nullptr);

  // Defaults until told otherwise.
  CHECK(est.predict_transfer(0, 1, 25'000'000'000ull) == Approx(1.0 + EstimatorSet::kDefaultTransferFixedSec));
  CHECK(est.predict_op(3, 0, std::vector<double>{1.0}) == EstimatorSet::kDefaultOpSeconds);

  // Priors seeded into the linear form show through the interface, and
  // measurements through the interface move the fast path.
  const std::vector<double> x = {1000.0, 1.0};
  int writes = 0;
  REQUIRE(est.seed_linear([&](EstimatorSet& s) {
               ++writes;
               CHECK(&s == set);
               return s.set_op_prior(3, std::vector<double>{1e-6, 1e-4});
             })
              .ok());
  CHECK(writes == 1);
  CHECK(est.predict_op(3, 0, x) == Approx(1.1e-3));
  REQUIRE(est.observe_op(3, 0, x, 2.2e-3).ok());
  CHECK(est.predict_op(3, 0, x) == Approx(2.2e-3).epsilon(1e-3));
  CHECK(set->predict_op(3, 0, x) == est.predict_op(3, 0, x));
  REQUIRE(est.observe_transfer(0, 1, 1000, 1e-3).ok());
  CHECK(set->predict_transfer(0, 1, 1000) == est.predict_transfer(0, 1, 1000));

  // The core's one-line errors come back as they are, from observe_* and
  // from what seeding writes.
  Status wrong = est.observe_op(3, 0, std::vector<double>{1.0}, 1e-3);
  CHECK(wrong.code() == StatusCode::kInvalidArgument);
  Status refused = est.seed_linear([](EstimatorSet& s) { return s.set_default_transfer_prior(-1, 0); });
  CHECK(refused.code() == StatusCode::kInvalidArgument);
}

TEST_CASE("an estimator without a linear form refuses to be seeded", "[plugins][estimator]") {
  struct Flat final : Estimator {
    double predict_op(OpKindId, AccelTypeId, std::span<const double>) const override { return 1e-3; }
    double predict_transfer(AccelId, AccelId, std::uint64_t) const override { return 1e-3; }
    Status observe_op(OpKindId, AccelTypeId, std::span<const double>, double) override { return Status::Ok(); }
    Status observe_transfer(AccelId, AccelId, std::uint64_t, double) override { return Status::Ok(); }
  } flat;
  CHECK(flat.linear() == nullptr);
  bool called = false;
  Status s = flat.seed_linear([&](EstimatorSet&) {
    called = true;
    return Status::Ok();
  });
  CHECK(s.code() == StatusCode::kFailedPrecondition);
  CHECK_FALSE(called);
}

TEST_CASE("online-linear takes the default transfer prior from its arguments", "[plugins][estimator]") {
  auto made = make({{"default_transfer_sec_per_byte", 1e-9}, {"default_transfer_fixed_s", 0}});
  REQUIRE(made.ok());
  CHECK((*made)->predict_transfer(2, 5, 1000) == Approx(1e-6));

  struct Row {
    json args;
    std::string message;
  };
  const std::string e = "estimator 'online-linear': ";
  const std::vector<Row> rows = {
      {{{"default_transfer_fixed_s", -1}}, e + "key 'default_transfer_fixed_s': must be a number >= 0, not -1"},
      {{{"default_transfer_sec_per_byte", "fast"}},
       e + "key 'default_transfer_sec_per_byte': must be a number >= 0, not \"fast\""},
      {{{"bandwidth", 1}},
       e + "unknown key 'bandwidth' (accepted: default_transfer_sec_per_byte, default_transfer_fixed_s)"},
  };
  for (const Row& row : rows) {
    INFO(row.args.dump());
    auto r = make(row.args);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == row.message);
  }
}
