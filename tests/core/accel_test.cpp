#include <catch2/catch.hpp>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

import slicesched.core.accel;
import slicesched.core.estimator;
import slicesched.core.graph;
import slicesched.core.priors;
import slicesched.core.ids;
import slicesched.core.status;

using namespace slicesched;

namespace {

// Resident memory of this process, from /proc/self/statm (pages).
std::int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * 4096;
}

}  // namespace

TEST_CASE("AcceleratorSet stores only the pairs given a link class", "[accel]") {
  AcceleratorSet set;
  REQUIRE(set.add_link_class("nvlink", 300e9, 5e-6).ok());
  const LinkClassId pcie = set.add_link_class("pcie", 25e9, 10e-6).value();
  for (int i = 0; i < 4; ++i) REQUIRE(set.add("gpu" + std::to_string(i), "H100", 80ll << 30).ok());
  CHECK(set.find("gpu3") == 3);
  CHECK(set.find("gpu4") == -1);
  CHECK(set.add("gpu2", "H100", 1).status().code() == StatusCode::kAlreadyExists);

  CHECK(set.link_class(0, 3) == 0);  // the default class
  REQUIRE(set.link(3, 1, pcie).ok());
  CHECK(set.link_class(1, 3) == pcie);  // unordered: both ways
  CHECK(set.link_class(3, 1) == pcie);
  CHECK(set.link_class(0, 1) == 0);
  CHECK(set.linked_pairs() == std::vector<std::pair<AccelId, AccelId>>{{1, 3}});
  // Setting a pair back to the default forgets it.
  REQUIRE(set.link(1, 3, 0).ok());
  CHECK(set.link_class(3, 1) == 0);
  CHECK(set.linked_pairs().empty());
  CHECK(set.link(1, 9, pcie).code() == StatusCode::kNotFound);
}

// A dense n x n table took 18.6 GB at n = 100,000; 30,000 would have taken
// 3.6 GB here. Sparse, the set costs about its names.
TEST_CASE("A cluster of 30,000 accelerators costs memory linear in its size", "[accel]") {
  constexpr int n = 30000;
  const std::int64_t before = resident_bytes();
  AcceleratorSet set;
  REQUIRE(set.add_link_class("nvlink", 300e9, 5e-6).ok());
  const LinkClassId slow = set.add_link_class("ethernet", 12.5e9, 20e-6).value();
  for (int i = 0; i < n; ++i) REQUIRE(set.add("gpu" + std::to_string(i), "H100", 80ll << 30).ok());
  REQUIRE(set.link(0, n - 1, slow).ok());
  const std::int64_t grown = resident_bytes() - before;
  CHECK(grown < (64ll << 20));
  CHECK(set.find("gpu" + std::to_string(n - 1)) == n - 1);
  CHECK(set.link_class(n - 1, 0) == slow);
  CHECK(set.link_class(n - 2, 0) == 0);

  // Priors come from the explicit pairs only, both directions; every other
  // pair predicts from the default class.
  EstimatorSet est;
  REQUIRE(seed_priors(est, TemplateRegistry{}, set).ok());
  CHECK(est.predict_transfer(0, n - 1, 0) == Approx(20e-6));
  CHECK(est.predict_transfer(n - 1, 0, 125'000'000) == Approx(0.01 + 20e-6));
  CHECK(est.predict_transfer(1, n - 1, 0) == Approx(5e-6));
}
