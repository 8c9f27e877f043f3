#include <catch2/catch.hpp>
#include <string>

import slicesched.core.status;

using namespace slicesched;

TEST_CASE("a result holds a value or an error, never an empty success", "[status]") {
  Result<int> good = 7;
  REQUIRE(good.ok());
  CHECK(*good == 7);
  CHECK(good.status().ok());

  Result<int> bad = NotFound("no accelerator 'gpu9'");
  REQUIRE(!bad.ok());
  CHECK(bad.status().code() == StatusCode::kNotFound);
  CHECK(bad.status().message() == "no accelerator 'gpu9'");

  Result<int> misuse = Status::Ok();
  REQUIRE(!misuse.ok());
  CHECK(misuse.status().message() == "internal: Result built from an ok status");
}
