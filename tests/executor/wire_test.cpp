// The executor control channel's framing: messages round-trip over a real
// ZeroMQ pair, and a peer speaking another protocol version is refused
// with a line naming both versions.
#include <catch2/catch.hpp>
#include <string>
#include <vector>
#include <zmq.hpp>

import slicesched.core;
import slicesched.executor.wire;

using namespace slicesched;

TEST_CASE("wire: a message round-trips, and another protocol version is refused", "[executor][wire]") {
  zmq::context_t ctx;
  zmq::socket_t a(ctx, zmq::socket_type::pair), b(ctx, zmq::socket_type::pair);
  a.bind("inproc://wire-test");
  b.connect("inproc://wire-test");

  const std::string blob("\0\1\2tensor", 9);
  REQUIRE(wire::send(a, {wire::Type::kValue, R"({"bytes":9})", {blob}}).ok());
  auto m = wire::recv(b);
  REQUIRE(m.ok());
  CHECK(m->type == wire::Type::kValue);
  CHECK(m->body == R"({"bytes":9})");
  REQUIRE(m->blobs.size() == 1);
  CHECK(m->blobs[0] == blob);

  REQUIRE(wire::send(a, {wire::Type::kHello, "{}", {}}, {}, wire::kProtocolVersion + 1).ok());
  auto refused = wire::recv(b);
  REQUIRE_FALSE(refused.ok());
  const std::string why = refused.status().message();
  CHECK(why.find("version " + std::to_string(wire::kProtocolVersion + 1)) != std::string::npos);
  CHECK(why.find("version " + std::to_string(wire::kProtocolVersion) + " ") != std::string::npos);

  CHECK_FALSE(wire::parse_header("not a header").ok());
  CHECK_FALSE(wire::parse_header(wire::header(static_cast<wire::Type>(99))).ok());
  CHECK(wire::parse_header(wire::header(wire::Type::kRun)).value() == wire::Type::kRun);
}
