// The executor control channel's framing: messages round-trip over a real
// ZeroMQ pair, and a peer speaking another protocol version is refused
// with a line naming both versions.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

import slicesched.executor.remote.wire;
import slicesched.core.backend;
import slicesched.core.sampling;
import slicesched.core.status;

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

TEST_CASE("wire: the NCCL messages round-trip, and a version-1 peer is refused", "[executor][wire]") {
  zmq::context_t ctx;
  zmq::socket_t a(ctx, zmq::socket_type::pair), b(ctx, zmq::socket_type::pair);
  a.bind("inproc://wire-nccl-test");
  b.connect("inproc://wire-nccl-test");
  const std::string layout("SLV1\0\0\x07layout", 13);
  for (const wire::Message& sent : {wire::Message{wire::Type::kNcclInit, R"({"links":[]})", {}},
                                    wire::Message{wire::Type::kNcclPull, R"({"id":3,"link":1})", {}},
                                    wire::Message{wire::Type::kLayout, R"({"bytes":13})", {layout}}}) {
    REQUIRE(wire::send(a, sent).ok());
    auto got = wire::recv(b);
    REQUIRE(got.ok());
    CHECK(got->type == sent.type);
    CHECK(got->body == sent.body);
    CHECK(got->blobs == sent.blobs);
  }
  // A build from before the NCCL messages speaks version 1.
  REQUIRE(wire::send(a, {wire::Type::kPull, R"({"id":1})", {}}, {}, 1).ok());
  auto refused = wire::recv(b);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("version 1,") != std::string::npos);
  // The last type is kBye (version 3); one past it is unknown.
  CHECK(wire::parse_header(wire::header(wire::Type::kBye)).value() == wire::Type::kBye);
  CHECK_FALSE(wire::parse_header(wire::header(static_cast<wire::Type>(15))).ok());
}

TEST_CASE("wire: NCCL links join GPUs of different executors, never one GPU twice", "[executor][wire]") {
  struct Row {
    const char* what;
    std::vector<std::size_t> host;
    std::vector<std::string> gpu;
    std::vector<wire::NcclLink> links;
  };
  const std::vector<Row> rows = {
      {"CPU accelerators only", {0, 1, 2}, {"", "", ""}, {}},
      {"two GPUs in one executor (its own NcclLinks)", {0, 0}, {"G0", "G1"}, {}},
      {"two executors, one GPU each", {0, 1}, {"G0", "G1"}, {{0, 1}, {1, 0}}},
      {"two executors sharing one GPU", {0, 1}, {"G0", "G0"}, {}},
      {"a CPU accelerator beside GPUs", {0, 1, 2}, {"G0", "", "G2"}, {{0, 2}, {2, 0}}},
      {"two hosts of two GPUs",
       {0, 0, 1, 1},
       {"A0", "A1", "B0", "B1"},
       {{0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 0}, {2, 1}, {3, 0}, {3, 1}}},
      {"three executors, two on one GPU", {0, 1, 2}, {"G0", "G0", "G1"}, {{0, 2}, {1, 2}, {2, 0}, {2, 1}}},
  };
  for (const Row& r : rows) {
    INFO(r.what);
    CHECK(wire::plan_nccl_links(r.host, r.gpu) == r.links);
  }
}

TEST_CASE("wire: the handshake names the first field that differs", "[executor][wire]") {
  const wire::Fingerprint host = wire::host_fingerprint("a", {{"cpu0", "cpu:0", 268435456}}, 200, 3000);
  REQUIRE(host.size() == 5);
  CHECK(host[0] == std::pair<std::string, std::string>{"protocol", std::to_string(wire::kProtocolVersion)});
  CHECK(host[2].second == "cpu0 on cpu:0 (268435456 bytes)");
  // An executor that would give up on the scheduler's beats sooner is named.
  CHECK(wire::first_difference(host, wire::host_fingerprint("a", {{"cpu0", "cpu:0", 268435456}}, 200, 1000),
                               "executor 'a'")
            .value() == "live.executor_timeout_ms: the scheduler has 3000, executor 'a' has 1000");
  wire::Fingerprint sched = host;
  sched.push_back({"models", "1"});
  sched.push_back({"models[0].vocab", "512"});
  sched.push_back({"models[0].layers", "4"});
  CHECK_FALSE(wire::first_difference(sched, sched, "executor 'a'").has_value());
  wire::Fingerprint exec = sched;
  exec[6].second = "1024";
  exec[7].second = "8";  // (only the first difference is named)
  CHECK(wire::first_difference(sched, exec, "executor 'a'").value() ==
        "models[0].vocab: the scheduler has 512, executor 'a' has 1024");
  exec = sched;
  exec.pop_back();
  CHECK(wire::first_difference(sched, exec, "executor 'a'").value() ==
        "models[0].layers: the scheduler has 4, executor 'a' has none");
  exec = host;  // an executor from before the fingerprint, or for another host
  exec[1].second = "b";
  CHECK(wire::first_difference(sched, exec, "executor 'b'").value() == "host: the scheduler has a, executor 'b' has b");
}

TEST_CASE("wire: an iteration plan carries each sequence's sampling, and a head its log-probabilities",
          "[executor][wire]") {
  IterationPlan::Seq greedy, sampled;
  greedy.seq = 3, greedy.tokens = {1, 2, 3};
  sampled.seq = 4, sampled.position = 9, sampled.tokens = {7};
  auto p = std::make_shared<SamplingParams>();
  p->temperature = 0.8, p->top_p = 0.9, p->top_k = 40, p->min_p = 0.05, p->seed = 0xFFFFFFFFFFFFFFF1ull;
  p->presence_penalty = 0.5, p->frequency_penalty = -0.25, p->repetition_penalty = 1.1, p->logprobs = 3;
  sampled.sampling = p;
  sampled.history = {5, 6, 7};
  sampled.prompt_tokens = 2;
  auto back = wire::decode_plan(wire::encode_plan({greedy, sampled}));
  REQUIRE(back.ok());
  REQUIRE(back->size() == 2);
  CHECK((*back)[0].tokens == greedy.tokens);
  CHECK((*back)[0].sampling == nullptr);
  const IterationPlan::Seq& s = (*back)[1];
  CHECK(s.seq == 4);
  CHECK(s.position == 9);
  REQUIRE(s.sampling != nullptr);
  CHECK(s.sampling->temperature == 0.8);
  CHECK(s.sampling->top_p == 0.9);
  CHECK(s.sampling->top_k == 40);
  CHECK(s.sampling->min_p == 0.05);
  CHECK(s.sampling->seed == 0xFFFFFFFFFFFFFFF1ull);  // (all 64 bits)
  CHECK(s.sampling->presence_penalty == 0.5);
  CHECK(s.sampling->frequency_penalty == -0.25);
  CHECK(s.sampling->repetition_penalty == 1.1);
  CHECK(s.sampling->logprobs == 3);
  CHECK(s.history == std::vector<std::int64_t>{5, 6, 7});
  CHECK(s.prompt_tokens == 2);
  CHECK_FALSE(wire::decode_plan("[[1, 2]]").ok());
  CHECK_FALSE(wire::decode_plan("{}").ok());

  const std::vector<TokenLogprob> lp{{-0.5, {{7, -0.5}, {9, -1.25}}}, {-2.0, {}}};
  auto l = wire::decode_logprobs(wire::encode_logprobs(lp));
  REQUIRE(l.ok());
  REQUIRE(l->size() == 2);
  CHECK((*l)[0].logprob == -0.5);
  CHECK((*l)[0].top == lp[0].top);
  CHECK((*l)[1].top.empty());
  CHECK_FALSE(wire::decode_logprobs("[1]").ok());
}

TEST_CASE("wire: a send with no peer to queue for times out instead of blocking", "[executor][wire]") {
  // A socket whose peer failed ZeroMQ's handshake (another socket type,
  // garbage after the greeting) has no pipe, like one never connected:
  // with a send timeout the send gives up, so the I/O thread stays free
  // to time the peer out (it used to block serve for good).
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndtimeo, 10);
  const Status st = wire::send(s, {wire::Type::kHeartbeat, "{}", {}});
  REQUIRE_FALSE(st.ok());
  CHECK(st.message() == "sending: no peer took the message");
}
