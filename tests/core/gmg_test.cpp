#include <algorithm>
#include <catch2/catch.hpp>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

import slicesched.testing;
import slicesched.core.gmg;
import slicesched.core.graph;
import slicesched.core.ids;
import slicesched.core.shape;
import slicesched.core.status;

using namespace slicesched;
using namespace slicesched::testing;

namespace {

// A two-op pipeline: "a" -> "b", each writing tokens*1024 bytes, "a" has
// 1 MiB of weights. An optional port "kv" attaches a KV cache that "b"
// retains as (context + tokens) * 16 bytes.
GraphTemplate pipeline() {
  TemplateBuilder b("pipe");
  Expr tokens = b.dim("tokens"), context = b.dim("context");
  b.port("kv", {{context * Expr::constant(16)}, DType::kI8}, /*optional=*/true);
  b.op("a").output({{tokens * Expr::constant(1024)}, DType::kI8}).weights(1 << 20).workspace(Expr::constant(100));
  b.op("b")
      .input("a")
      .input("kv")
      .output({{tokens * Expr::constant(1024)}, DType::kI8})
      .retain("kv", {{(context + tokens) * Expr::constant(16)}, DType::kI8})
      .features({tokens, Expr::constant(1)});
  return std::move(b).build().value();
}

struct Fixture {
  std::shared_ptr<TemplateRegistry> reg = std::make_shared<TemplateRegistry>();
  TemplateId pipe = reg->add(pipeline()).value();
  Gmg gmg{reg, cluster(2, 1 << 30)};
  Fixture() {
    REQUIRE(gmg.place_weights(pipe, 0).ok());
    REQUIRE(gmg.place_weights(pipe, 1).ok());
  }
  InstanceInfo add(std::int64_t tokens, std::int64_t context, OpId kv = kNoOp) {
    InstanceSpec spec{pipe, {{"tokens", tokens}, {"context", context}}, {}, 1, 0};
    if (kv != kNoOp) spec.ports.push_back({"kv", kv, true});
    auto r = gmg.instantiate(spec);
    REQUIRE(r.ok());
    return r.value();
  }
};

std::vector<OpId> sorted(std::span<const OpId> s) {
  std::vector<OpId> v(s.begin(), s.end());
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("an instance moves through unscheduled, issued and done", "[gmg]") {
  Fixture f;
  auto inst = f.add(4, 0);
  OpId a = inst.ops[0], b = inst.ops[1];
  CHECK(f.gmg.op(a).state == OpState::kUnscheduled);
  CHECK(f.gmg.features(b)[0] == 4.0);
  CHECK(f.gmg.op(b).retained_bytes == 4 * 16);
  CHECK(sorted(f.gmg.unscheduled_frontier()) == std::vector<OpId>{a});
  CHECK(f.gmg.scheduled_frontier().empty());

  REQUIRE(f.gmg.issue(a, 0, 10).ok());
  CHECK(f.gmg.issued_count() == 1);
  CHECK(sorted(f.gmg.unscheduled_frontier()) == std::vector<OpId>{b});
  CHECK(sorted(f.gmg.scheduled_frontier()) == std::vector<OpId>{a});
  CHECK(f.gmg.hbm(0).total() == (1 << 20) + 4096 + 100);  // weights of a, output + workspace

  REQUIRE(f.gmg.issue(b, 1, 11).ok());
  CHECK(f.gmg.unscheduled_frontier().empty());
  CHECK(f.gmg.scheduled_frontier().empty());
  // b reserves its output, its retained KV and a receive buffer for a's output.
  CHECK(f.gmg.hbm(1).transient == 4096 + 4096);
  CHECK(f.gmg.hbm(1).retained == 64);

  REQUIRE(f.gmg.complete(a, 30, 15).ok());
  CHECK(f.gmg.op(a).done_t == 30);
  CHECK(f.gmg.hbm(0).transient == 4096);  // workspace freed, output still read by b
  REQUIRE(f.gmg.complete(b, 50, 10).ok());
  CHECK(f.gmg.issued_count() == 0);
  CHECK(f.gmg.hbm(0).transient == 0);
  CHECK(f.gmg.hbm(1).transient == 0);
  CHECK(f.gmg.hbm(1).retained == 64);  // the KV cache stays
  CHECK(f.gmg.last_done(1) == 50);
  CHECK(f.gmg.now() == 50);

  CHECK(f.gmg.retire() == 1);  // a; b still holds its KV cache
  CHECK(!f.gmg.contains(a));
  REQUIRE(f.gmg.release_retained(b).ok());
  CHECK(f.gmg.hbm(1).retained == 0);
  CHECK(f.gmg.retire() == 1);
  CHECK(f.gmg.live_count() == 0);
  CHECK(f.gmg.hbm(0).total() == f.gmg.hbm(0).weights);
}

TEST_CASE("a later instance attaches to retained state and takes it over", "[gmg]") {
  Fixture f;
  auto first = f.add(4, 0);
  for (OpId op : first.ops) REQUIRE(f.gmg.issue(op, 0, 0).ok());
  // The decode step sees context 4, exactly what the first step retained.
  auto second = f.add(1, 4, first.ops[1]);
  CHECK(f.gmg.op(second.ops[1]).retained_bytes == 5 * 16);
  // b of the first instance now has an unscheduled successor.
  CHECK(sorted(f.gmg.scheduled_frontier()) == std::vector<OpId>{first.ops[1]});
  REQUIRE(f.gmg.complete(first.ops[0], 5, 5).ok());
  REQUIRE(f.gmg.complete(first.ops[1], 9, 4).ok());
  CHECK(f.gmg.hbm(0).retained == 64);
  REQUIRE(f.gmg.issue(second.ops[0], 0, 10).ok());
  REQUIRE(f.gmg.issue(second.ops[1], 0, 10).ok());
  CHECK(f.gmg.hbm(0).retained == 64 + 80);
  REQUIRE(f.gmg.complete(second.ops[0], 12, 2).ok());
  REQUIRE(f.gmg.complete(second.ops[1], 14, 2).ok());
  CHECK(f.gmg.hbm(0).retained == 80);  // the old cache was handed over
  auto again = f.gmg.instantiate({f.pipe, {{"tokens", 1}, {"context", 4}}, {{"kv", first.ops[1], true}}, 0, 0});
  REQUIRE(!again.ok());
  CHECK(again.status().message().find("is already attached by another instance") != std::string::npos);
}

TEST_CASE("misuse returns errors, never undefined behaviour", "[gmg][bad-input]") {
  Fixture f;
  auto inst = f.add(2, 0);
  OpId a = inst.ops[0], b = inst.ops[1];
  struct Case {
    const char* name;
    Status status;
    const char* expect;
  };
  auto issue_b_first = f.gmg.issue(b, 0, 0);
  CHECK(issue_b_first.message() == "issue: pipe#1/b has 1 unscheduled predecessor(s)");
  auto unknown_accel = f.gmg.issue(a, 7, 0);
  CHECK(unknown_accel.message() == "issue: pipe#1/a onto accelerator 7, which does not exist (cluster has 2)");
  auto not_issued = f.gmg.complete(a, 5, 1);
  CHECK(not_issued.message() == "complete: pipe#1/a is not issued");
  REQUIRE(f.gmg.issue(a, 0, 3).ok());
  CHECK(f.gmg.issue(a, 1, 4).message() == "issue: pipe#1/a is already issued");
  CHECK(f.gmg.complete(a, 2, 1).message() == "complete: pipe#1/a done at 2 ns, before its issue at 3 ns");
  CHECK(f.gmg.complete(a, 5, 9).message() == "complete: pipe#1/a measured 9 ns, expected 0..2 ns (issue to done)");
  REQUIRE(f.gmg.complete(a, 5, 2).ok());
  CHECK(f.gmg.complete(a, 6, 1).message() == "complete: pipe#1/a is already done");
  CHECK(f.gmg.issue(999, 0, 0).message() == "issue: op #999 (not live)");
  CHECK(f.gmg.release_retained(a).message() == "release_retained: pipe#1/a retains nothing");
  CHECK(f.gmg.complete_transfer(a, b, 9).message() == "complete_transfer: pipe#1/b is not issued");
}

TEST_CASE("weights must be resident where an op is issued", "[gmg][bad-input]") {
  auto reg = std::make_shared<TemplateRegistry>();
  TemplateId pipe = reg->add(pipeline()).value();
  Gmg gmg(reg, cluster(2));
  REQUIRE(gmg.place_weights(pipe, "a", 1).ok());
  auto inst = gmg.instantiate({pipe, {{"tokens", 1}, {"context", 0}}, {}, 0, 0}).value();
  CHECK(gmg.issue(inst.ops[0], 0, 0).message() == "issue: the weights of pipe#1/a are not resident on accelerator a0");
  CHECK(gmg.issue(inst.ops[0], 1, 0).ok());
  CHECK(gmg.place_weights(pipe, "zzz", 1).message() == "template 'pipe' has no op 'zzz'");
  CHECK(gmg.place_weights(pipe, 5).message() == "template 'pipe': no accelerator 5 (cluster has 2)");
}

TEST_CASE("instantiate refuses bad dims and ports and leaves the GMG unchanged", "[gmg][bad-input]") {
  Fixture f;
  auto first = f.add(4, 0);
  auto check = [&](InstanceSpec spec, const std::string& expect) {
    std::size_t live = f.gmg.live_count();
    auto r = f.gmg.instantiate(spec);
    REQUIRE(!r.ok());
    CHECK(r.status().message() == expect);
    CHECK(f.gmg.live_count() == live);
  };
  check({f.pipe, {{"tokens", 1}, {"ctx", 0}}, {}, 0, 0},
        "template 'pipe' has no dim 'ctx' (its dims: tokens, context)");
  check({f.pipe, {{"tokens", 1}}, {}, 0, 0}, "template 'pipe' op 'b' retained 'kv': dim 'context' is unbound");
  check({f.pipe, {{"tokens", -1}, {"context", 0}}, {}, 0, 0},
        "template 'pipe' op 'a' output: dim 'tokens' is negative (-1)");
  check({f.pipe, {{"tokens", 1}, {"context", 3}}, {{"kv", first.ops[1], true}}, 0, 0},
        "template 'pipe': port 'kv' expects [48] i8 but pipe#1/b retains [64] i8");
  check({f.pipe, {{"tokens", 1}, {"context", 4}}, {{"nope", first.ops[1], true}}, 0, 0},
        "template 'pipe' has no port 'nope'");
  check({f.pipe, {{"tokens", 1}, {"context", 4}}, {{"kv", first.ops[0], true}}, 0, 0},
        "template 'pipe': port 'kv' attaches to the retained state of pipe#1/a, which retains nothing");
  check({f.pipe, {{"tokens", 1}, {"context", 4}}, {{"kv", 12345, true}}, 0, 0},
        "template 'pipe': port 'kv' is bound to op #12345 (not live)");
}

TEST_CASE("a clone is independent of its original", "[gmg]") {
  Fixture f;
  auto inst = f.add(4, 0);
  Gmg copy = f.gmg.clone();
  REQUIRE(copy.issue(inst.ops[0], 1, 5).ok());
  CHECK(copy.op(inst.ops[0]).state == OpState::kIssued);
  CHECK(f.gmg.op(inst.ops[0]).state == OpState::kUnscheduled);
  CHECK(f.gmg.issued_count() == 0);
  CHECK(copy.issued_count() == 1);
  CHECK(f.gmg.hbm(1).transient == 0);
}

TEST_CASE("retired slots are reused and frontiers stay consistent", "[gmg]") {
  Fixture f;
  for (int round = 0; round < 50; ++round) {
    auto inst = f.add(1 + round % 3, 0);
    for (OpId op : inst.ops) REQUIRE(f.gmg.issue(op, round % 2, round * 10).ok());
    for (OpId op : inst.ops) REQUIRE(f.gmg.complete(op, round * 10 + 5, 1).ok());
    REQUIRE(f.gmg.release_retained(inst.ops[1]).ok());
    CHECK(f.gmg.retire() == 2);
  }
  CHECK(f.gmg.slot_count() == 2);
  CHECK(f.gmg.live_count() == 0);
  CHECK(f.gmg.unscheduled_frontier().empty());
  CHECK(f.gmg.scheduled_frontier().empty());
}

TEST_CASE("the GMG lists every value it lets go of, in order, until cleared", "[gmg]") {
  Fixture f;
  using V = Release::Value;
  auto first = f.add(4, 0);
  for (OpId op : first.ops) REQUIRE(f.gmg.issue(op, 0, 0).ok());
  auto second = f.add(1, 4, first.ops[1]);  // attaches to first's KV cache
  auto releases = [&] { return std::vector<Release>(f.gmg.releases().begin(), f.gmg.releases().end()); };
  auto seq = [&](OpId op) { return f.gmg.op(op).issue_seq; };

  REQUIRE(f.gmg.complete(first.ops[0], 5, 5).ok());
  CHECK(releases().empty());  // a's output is still read by b
  REQUIRE(f.gmg.complete(first.ops[1], 9, 4).ok());
  // a's output, read by its only reader. b's output and KV cache stay: the
  // second instance's b, attached to the cache, is still to run.
  CHECK(releases() == std::vector<Release>{{first.ops[0], seq(first.ops[0]), V::kOutput, true}});
  f.gmg.clear_releases();
  CHECK(f.gmg.releases().empty());

  for (OpId op : second.ops) REQUIRE(f.gmg.issue(op, 0, 10).ok());
  REQUIRE(f.gmg.complete(second.ops[0], 12, 2).ok());
  CHECK(f.gmg.releases().empty());
  REQUIRE(f.gmg.complete(second.ops[1], 14, 2).ok());
  // The second b took the old cache over, then first b's output went with
  // its last reader (first b holds nothing more), then the second a's; the
  // second b keeps its own cache.
  CHECK(releases() == std::vector<Release>{{first.ops[1], seq(first.ops[1]), V::kRetained, false},
                                           {first.ops[1], seq(first.ops[1]), V::kOutput, true},
                                           {second.ops[0], seq(second.ops[0]), V::kOutput, true},
                                           {second.ops[1], seq(second.ops[1]), V::kOutput, false}});
  f.gmg.clear_releases();

  // A request that ends lets its cache go.
  REQUIRE(f.gmg.release_retained(second.ops[1]).ok());
  CHECK(releases() == std::vector<Release>{{second.ops[1], seq(second.ops[1]), V::kRetained, true}});
  // Failed calls and retiring let nothing go.
  f.gmg.clear_releases();
  CHECK_FALSE(f.gmg.release_retained(second.ops[1]).ok());
  CHECK(f.gmg.retire() == 4);
  CHECK(f.gmg.releases().empty());
}

namespace {

// The row view() should hold for slot `id`, derived from its record.
OpRow expected_row(const Gmg& gmg, OpId id) {
  if (!gmg.contains(id)) return OpRow{};
  const OpRecord& r = gmg.op(id);
  return row_of(r, static_cast<std::uint8_t>(gmg.templates().get(r.tmpl).ops()[r.tmpl_op].features.size()));
}

void check_view(const Gmg& gmg) {
  const GmgView v = gmg.view();
  REQUIRE(v.ops.size() == gmg.slot_count());
  REQUIRE(v.features.size() == gmg.slot_count());
  for (OpId id = 0; id < gmg.slot_count(); ++id) {
    INFO("slot " << id);
    CHECK(v.ops[id] == expected_row(gmg, id));
    if (gmg.contains(id)) CHECK(std::equal(gmg.features(id).begin(), gmg.features(id).end(), v.features[id].begin()));
    for (std::uint32_t e = v.ops[id].first_in; e != kNoEdge; e = v.edges[e].next_in) CHECK(&v.edges[e] == &gmg.edge(e));
  }
  CHECK(std::vector<OpId>(v.issued.begin(), v.issued.end()) ==
        std::vector<OpId>(gmg.issued_ops().begin(), gmg.issued_ops().end()));
  REQUIRE(v.hbm.size() == gmg.accels().size());
  for (AccelId a = 0; a < gmg.accels().size(); ++a) {
    CHECK(v.hbm[a].total() == gmg.hbm(a).total());
    CHECK(v.done_resident[a] == gmg.done_resident(a));
    CHECK(v.last_done[a] == gmg.last_done(a));
  }
  CHECK(v.now == gmg.now());
  CHECK(v.last_issue_seq == gmg.last_issue_seq());
}

}  // namespace

TEST_CASE("the simulator's view matches the GMG after every kind of mutation", "[gmg]") {
  // Random instances of the pipeline, half of them attached to an earlier
  // one's KV cache, issued, completed, released and retired in a random
  // but valid order, with the view checked after every step.
  Fixture f;
  std::mt19937_64 rng(11);
  auto pick = [&](const std::vector<OpId>& v) { return v[rng() % v.size()]; };
  Nanos t = 0;
  for (int step = 0; step < 600; ++step) {
    t += 1 + static_cast<Nanos>(rng() % 5);
    std::vector<OpId> issued(f.gmg.issued_ops().begin(), f.gmg.issued_ops().end()), caches;
    for (OpId id = 0; id < f.gmg.slot_count(); ++id) {
      const OpRecord& r = f.gmg.op(id);
      if (f.gmg.contains(id) && r.retained_bytes > 0 && !r.retained_attached &&
          (r.state != OpState::kDone || r.retained_held))
        caches.push_back(id);
    }
    switch (rng() % 5) {
      case 0: {  // a new instance, maybe a decode step of an earlier one
        const bool attach = !caches.empty() && rng() % 2 == 0;
        const OpId kv = attach ? pick(caches) : kNoOp;
        const std::int64_t context = attach ? f.gmg.op(kv).retained_bytes / 16 : 0;
        InstanceSpec spec{
            f.pipe, {{"tokens", 1 + static_cast<std::int64_t>(rng() % 4)}, {"context", context}}, {}, 0, 0};
        spec.priority = static_cast<std::int32_t>(rng() % 3);
        if (attach) spec.ports.push_back({"kv", kv, true});
        REQUIRE(f.gmg.instantiate(spec).ok());
        break;
      }
      case 1:  // issue
        if (!f.gmg.unscheduled_frontier().empty()) {
          const OpId op = f.gmg.unscheduled_frontier()[rng() % f.gmg.unscheduled_frontier().size()];
          REQUIRE(f.gmg.issue(op, static_cast<AccelId>(rng() % 2), t).ok());
        }
        break;
      case 2: {  // complete an issued op whose inputs are done
        std::vector<OpId> ready;
        for (OpId op : issued) {
          bool inputs_done = true;
          for (std::uint32_t e = f.gmg.op(op).first_in; e != kNoEdge; e = f.gmg.edge(e).next_in)
            inputs_done = inputs_done && f.gmg.op(f.gmg.edge(e).src).state == OpState::kDone;
          if (inputs_done) ready.push_back(op);
        }
        if (!ready.empty()) REQUIRE(f.gmg.complete(pick(ready), t, 1).ok());
        break;
      }
      case 3: {  // a request ends: its cache goes
        std::vector<OpId> done;
        for (OpId id : caches)
          if (f.gmg.op(id).state == OpState::kDone) done.push_back(id);
        if (!done.empty()) REQUIRE(f.gmg.release_retained(pick(done)).ok());
        break;
      }
      case 4:
        f.gmg.retire();
        break;
    }
    check_view(f.gmg);
  }
  CHECK(f.gmg.slot_count() > f.gmg.live_count());  // slots were reused
  // A clone's view is its own, and matches it.
  Gmg copy = f.gmg.clone();
  CHECK(copy.view().ops.data() != f.gmg.view().ops.data());
  check_view(copy);
}

TEST_CASE("check_memory refuses a batch the HBM account cannot hold, naming where", "[gmg][memory]") {
  Fixture f;  // 1 GiB per accelerator, 1 MiB of weights on each
  auto small = f.add(4, 0);
  const std::vector<AccelId> both0{0, 0}, split{0, 1};
  CHECK(f.gmg.check_memory(small.ops, both0).ok());
  CHECK(f.gmg.check_memory(small.ops, split).ok());
  // 384 MiB outputs: a and b together on gpu 0 need 768 MiB, split each
  // side holds 384 (b: its output and a receive buffer of 384): all fit.
  auto big = f.add(384 * 1024, 0);
  CHECK(f.gmg.check_memory(big.ops, both0).ok());
  CHECK(f.gmg.check_memory(big.ops, split).ok());
  // Issued, a reserves 384 MiB on gpu 0: another such batch no longer fits there.
  REQUIRE(f.gmg.issue(big.ops[0], 0, 0).ok());
  REQUIRE(f.gmg.issue(big.ops[1], 0, 0).ok());
  auto more = f.add(384 * 1024, 0);
  AccelId over = kNoAccel;
  const Status s = f.gmg.check_memory(more.ops, both0, &over);
  REQUIRE(s.code() == StatusCode::kResourceExhausted);
  CHECK(over == 0);
  CHECK(s.message().find("pipe#") != std::string::npos);
  CHECK(s.message().find(" are free") != std::string::npos);
  // On gpu 1, b needs its output and a copy of a's: 768 MiB, which fits.
  CHECK(f.gmg.check_memory(more.ops, std::vector<AccelId>{1, 1}).ok());
  // Checking changed nothing.
  CHECK(f.gmg.hbm(1).total() == 1 << 20);
}

TEST_CASE("issued_workspaces gives each accelerator's room besides its issued workspaces, in one entry",
          "[gmg][memory]") {
  // The HBM check reads one entry per accelerator: capacity - (what the
  // account holds - its issued operators' workspaces), and the largest of
  // those workspaces. Written over a stale table, the same.
  Fixture f;
  IssuedWorkspaces stale = f.gmg.issued_workspaces();  // before anything is issued
  auto x = f.add(8, 0), y = f.add(16, 0), z = f.add(4, 0);
  REQUIRE(f.gmg.issue(x.ops[0], 0, 0).ok());
  REQUIRE(f.gmg.issue(y.ops[0], 0, 0).ok());
  REQUIRE(f.gmg.issue(z.ops[0], 1, 0).ok());
  REQUIRE(f.gmg.issue(z.ops[1], 1, 0).ok());
  const IssuedWorkspaces fresh = f.gmg.issued_workspaces();
  f.gmg.issued_workspaces_into(stale);
  for (const IssuedWorkspaces* w : {&fresh, static_cast<const IssuedWorkspaces*>(&stale)}) {
    REQUIRE(w->room.size() == 2);
    for (AccelId a : {0u, 1u}) {
      std::int64_t sum = 0, largest = 0;
      for (OpId id : f.gmg.issued_ops())
        if (f.gmg.op(id).accel == a) {
          sum += f.gmg.op(id).workspace_bytes;
          largest = std::max(largest, f.gmg.op(id).workspace_bytes);
        }
      CHECK(sum >= 100);  // (so a table that left them out would differ)
      CHECK(w->room[a].free == f.gmg.accels().hbm_bytes(a) - f.gmg.hbm(a).total() + sum);
      CHECK(w->room[a].largest == largest);
    }
  }
}

TEST_CASE("check_memory from a batch's reservations read once agrees with the check that reads the GMG",
          "[gmg][memory]") {
  // A round checks one batch on thousands of placements through
  // batch_memory(); every verdict, message and `over` must be the plain
  // check's. Batches of random sizes (with KV caches from done and issued
  // instances) on every placement over two accelerators, as work piles up.
  Fixture f;  // 1 GiB per accelerator
  std::mt19937_64 rng(26);
  std::size_t fits = 0, refused = 0;
  OpId kv = kNoOp;
  std::int64_t kv_context = 0;
  for (int round = 0; round < 60; ++round) {
    const std::int64_t tokens = std::uniform_int_distribution<std::int64_t>(1, 160 * 1024)(rng);
    const std::int64_t context = kv == kNoOp ? 0 : kv_context;  // the cache's shape
    auto inst = f.add(tokens, context, kv);
    const IssuedWorkspaces issued = f.gmg.issued_workspaces();
    const BatchMemory mem = f.gmg.batch_memory(inst.ops);
    for (AccelId a : {0u, 1u})
      for (AccelId b : {0u, 1u}) {
        const std::vector<AccelId> where{a, b};
        for (const IssuedWorkspaces* ws : {&issued, static_cast<const IssuedWorkspaces*>(nullptr)}) {
          AccelId want_over = kNoAccel, got_over = kNoAccel;
          const Status want = f.gmg.check_memory(inst.ops, where, &want_over, false, ws);
          const Status got = f.gmg.check_memory(mem, where, &got_over, ws);
          REQUIRE(got.code() == want.code());
          REQUIRE(got.message() == want.message());
          REQUIRE(got_over == want_over);
          (want.ok() ? fits : refused) += 1;
        }
      }
    // Issue it where it fits (or cancel it), and finish some work.
    const std::vector<AccelId> where{static_cast<AccelId>(round % 2), static_cast<AccelId>((round / 2) % 2)};
    if (f.gmg.check_memory(inst.ops, where).ok()) {
      for (std::size_t k = 0; k < inst.ops.size(); ++k) REQUIRE(f.gmg.issue(inst.ops[k], where[k], round).ok());
      kv = inst.ops[1];
      kv_context = context + tokens;
    } else {
      REQUIRE(f.gmg.cancel(inst.ops).ok());
    }
    for (OpId id : std::vector<OpId>(f.gmg.issued_ops().begin(), f.gmg.issued_ops().end()))
      if (std::uniform_int_distribution<int>(0, 2)(rng) == 0 && f.gmg.op(id).unscheduled_preds == 0) {
        bool preds_done = true;
        for (std::uint32_t e = f.gmg.op(id).first_in; e != kNoEdge; e = f.gmg.edge(e).next_in)
          preds_done &= f.gmg.op(f.gmg.edge(e).src).state == OpState::kDone;
        if (preds_done) REQUIRE(f.gmg.complete(id, round + 1, 1).ok());
      }
  }
  CHECK(fits > 50);
  CHECK(refused > 50);
}

TEST_CASE("cancel takes an unstarted instance back and frees the cache it attached", "[gmg][memory]") {
  Fixture f;
  auto first = f.add(4, 0);
  for (OpId op : first.ops) REQUIRE(f.gmg.issue(op, 0, 0).ok());
  REQUIRE(f.gmg.complete(first.ops[0], 5, 5).ok());
  REQUIRE(f.gmg.complete(first.ops[1], 9, 4).ok());
  const std::size_t live = f.gmg.live_count();
  auto second = f.add(1, 4, first.ops[1]);
  CHECK(f.gmg.op(first.ops[1]).retained_attached);
  // A set that leaves out a reader of its ops is refused, changing nothing.
  const std::vector<OpId> half{second.ops[0]};
  CHECK(f.gmg.cancel(half).code() == StatusCode::kFailedPrecondition);
  CHECK(f.gmg.live_count() == live + 2);
  REQUIRE(f.gmg.cancel(second.ops).ok());
  CHECK(f.gmg.live_count() == live);
  CHECK_FALSE(f.gmg.contains(second.ops[0]));
  CHECK(f.gmg.unscheduled_frontier().empty());
  CHECK(f.gmg.scheduled_frontier().empty());
  CHECK_FALSE(f.gmg.op(first.ops[1]).retained_attached);
  // The cache is free to release, and the GMG's account drops it.
  REQUIRE(f.gmg.release_retained(first.ops[1]).ok());
  CHECK(f.gmg.hbm(0).retained == 0);
  // The slots come back for a new instance that attaches nothing.
  auto third = f.add(2, 0);
  CHECK(sorted(f.gmg.unscheduled_frontier()) == std::vector<OpId>{third.ops[0]});
  // Issued work cannot be cancelled.
  REQUIRE(f.gmg.issue(third.ops[0], 0, 10).ok());
  CHECK(f.gmg.cancel(third.ops).code() == StatusCode::kFailedPrecondition);
}
