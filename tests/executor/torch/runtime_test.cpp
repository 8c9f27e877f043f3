// The LibTorch Llama runtime (executor/torch/runtime.h) on "cpu" devices,
// with a tiny model: deterministic weights, KV cache vs recomputation,
// batching vs running alone, ops spread over virtual devices vs the
// reference loop, dropping finished sequences, sizes and errors.
// Deliberately includes no LibTorch header: runtime.h must not need one.
#include "executor/torch/runtime.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

using namespace slicesched::rt;

namespace {

LlamaConfig tiny() {
  LlamaConfig c;
  c.name = "llama-tiny";
  c.vocab = 512;
  c.hidden = 64;
  c.layers = 4;
  c.heads = 4;
  c.kv_heads = 2;
  c.mlp = 128;
  c.groups = 2;
  c.dtype = "float32";
  c.seed = 7;
  return c;
}

void load_all(LlamaModel& m, const std::string& dev) {
  m.load("embed", dev);
  for (int g = 0; g < m.config().groups; ++g) m.load("layers" + std::to_string(g), dev);
  m.load("head", dev);
}

// One iteration on one device; kv[g] is taken over and replaced.
struct Step {
  Value hidden;  // after the last group
  std::vector<std::int64_t> next;
};
Step run(LlamaModel& m, const StepPlan& plan, std::vector<Value>& kv, const std::string& dev = "cpu") {
  Value x = m.embed(plan, dev);
  for (int g = 0; g < m.config().groups; ++g) x = m.layers(g, x, kv[std::size_t(g)], plan, dev, kv[std::size_t(g)]);
  return {x, m.head(x, plan, dev)};
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// Rows [r0, r0 + n) of a [tokens, hidden] host copy.
std::vector<float> rows(const std::vector<float>& h, std::int64_t hidden, std::int64_t r0, std::int64_t n) {
  return {h.begin() + r0 * hidden, h.begin() + (r0 + n) * hidden};
}

const std::vector<std::vector<std::int64_t>> kPrompts = {{1, 2, 3, 4, 5}, {100, 7, 300, 42, 9, 11, 500, 2, 0}};

}  // namespace

TEST_CASE("weights are deterministic from the seed", "[torch]") {
  LlamaModel a(tiny()), b(tiny());
  auto ta = a.generate_reference(kPrompts, 6, "cpu");
  auto tb = b.generate_reference(kPrompts, 6, "cpu");
  REQUIRE(ta.size() == 2);
  CHECK(ta[0].size() == 6);
  CHECK(ta == tb);
  for (const auto& seq : ta)
    for (auto t : seq) CHECK((t >= 0 && t < 512));

  LlamaConfig other = tiny();
  other.seed = 8;
  LlamaModel c(other);
  CHECK(c.generate_reference(kPrompts, 6, "cpu") != ta);

  // A layer's weights depend on (seed, layer), not on how layers are grouped.
  LlamaConfig regrouped = tiny();
  regrouped.groups = 4;
  LlamaModel d(regrouped);
  CHECK(d.generate_reference(kPrompts, 6, "cpu") == ta);
}

TEST_CASE("prefill then decode with the KV cache equals recomputing the whole sequence", "[torch]") {
  LlamaModel m(tiny());
  load_all(m, "cpu");
  const std::int64_t H = m.config().hidden;
  std::vector<std::int64_t> seq = kPrompts[1];

  std::vector<Value> kv(2);
  StepPlan plan{{SeqStep{1, 0, seq}}};
  for (int step = 0; step < 5; ++step) {
    Step cached = run(m, plan, kv);
    // From scratch: the whole sequence so far as one prefill.
    std::vector<Value> fresh_kv(2);
    Step full = run(m, StepPlan{{SeqStep{1, 0, seq}}}, fresh_kv);
    const std::int64_t t = static_cast<std::int64_t>(plan.seqs[0].tokens.size());
    const std::int64_t n = static_cast<std::int64_t>(seq.size());
    INFO("step " << step);
    CHECK(max_abs_diff(cached.hidden.to_floats(), rows(full.hidden.to_floats(), H, n - t, t)) < 1e-4f);
    CHECK(cached.next == full.next);
    // The caches hold the same K and V too.
    for (int g = 0; g < 2; ++g) {
      CHECK(kv[std::size_t(g)].cached_tokens(1) == n);
      CHECK(max_abs_diff(kv[std::size_t(g)].to_floats(), fresh_kv[std::size_t(g)].to_floats()) < 1e-4f);
    }
    seq.push_back(cached.next[0]);
    plan.seqs[0].position = n;
    plan.seqs[0].tokens = {cached.next[0]};
  }
}

TEST_CASE("a batch of a prefill and decodes at different positions equals running each alone", "[torch]") {
  LlamaModel m(tiny());
  const std::vector<std::int64_t> c_prompt = {9, 8, 7, 6, 5, 4, 3};
  const std::vector<std::int64_t> d_prompt = synthetic_prompt(m.config(), 3, 13, 25);
  auto alone = m.generate_reference({kPrompts[0], kPrompts[1], c_prompt, d_prompt}, 2, "cpu");

  // Iteration 1: A, B and D prefill together. Iteration 2: A, B and D decode
  // at positions 5, 9 and 25 (two length buckets, one ragged) while C prefills.
  std::vector<Value> kv(2);
  Step first =
      run(m, StepPlan{{SeqStep{10, 0, kPrompts[0]}, SeqStep{11, 0, kPrompts[1]}, SeqStep{13, 0, d_prompt}}}, kv);
  REQUIRE(first.next.size() == 3);
  CHECK(first.next == std::vector<std::int64_t>{alone[0][0], alone[1][0], alone[3][0]});

  StepPlan mixed{{SeqStep{10, 5, {first.next[0]}}, SeqStep{13, 25, {first.next[2]}}, SeqStep{12, 0, c_prompt},
                  SeqStep{11, 9, {first.next[1]}}}};
  Step second = run(m, mixed, kv);
  CHECK(second.next == std::vector<std::int64_t>{alone[0][1], alone[3][1], alone[2][0], alone[1][1]});
  CHECK(kv[0].sequences() == std::vector<std::uint64_t>{10, 13, 12, 11});
  CHECK(kv[1].cached_tokens(10) == 6);
  CHECK(kv[1].cached_tokens(13) == 26);
  CHECK(kv[1].cached_tokens(12) == 7);
  CHECK(kv[1].cached_tokens(11) == 10);
  CHECK(kv[1].tokens() == 6 + 26 + 7 + 10);

  // Hidden states agree with each sequence run alone, row for row.
  const std::int64_t H = m.config().hidden;
  const std::vector<float> batched = second.hidden.to_floats();
  std::vector<Value> kv_c(2);
  Step c_alone = run(m, StepPlan{{SeqStep{12, 0, c_prompt}}}, kv_c);
  CHECK(max_abs_diff(rows(batched, H, 2, 7), c_alone.hidden.to_floats()) < 1e-4f);
  std::vector<Value> kv_a(2);
  run(m, StepPlan{{SeqStep{10, 0, kPrompts[0]}}}, kv_a);
  Step a_alone = run(m, StepPlan{{SeqStep{10, 5, {first.next[0]}}}}, kv_a);
  CHECK(max_abs_diff(rows(batched, H, 0, 1), a_alone.hidden.to_floats()) < 1e-4f);
}

TEST_CASE("ops spread over virtual cpu devices with copies between them equal the reference", "[torch]") {
  // bfloat16 and float16 run on CPU with LibTorch 2 (1.13 had no float16 matmul there).
  const std::string dtype = GENERATE("float32", "bfloat16", "float16");
  INFO("dtype " << dtype);
  LlamaConfig cfg = tiny();
  cfg.dtype = dtype;
  LlamaModel m(cfg);
  const int max_new = 5;
  auto reference = m.generate_reference(kPrompts, max_new, "cpu");

  // Every op on its own virtual device, and the layer groups alternate
  // devices between iterations, so their KV caches move too.
  const std::vector<std::string> devs = {"cpu:1", "cpu:2", "cpu:3", "cpu:4"};
  for (const auto& d : devs) load_all(m, d);
  std::vector<Value> kv(2);
  std::vector<std::string> kv_dev(2);
  StepPlan plan{{SeqStep{0, 0, kPrompts[0]}, SeqStep{1, 0, kPrompts[1]}}};
  std::vector<std::vector<std::int64_t>> got(2);
  for (int it = 0; it < max_new; ++it) {
    Value x = m.embed(plan, "cpu:1");
    std::string at = "cpu:1";
    for (int g = 0; g < 2; ++g) {
      const std::string dev = devs[std::size_t((it + g + 1) % 4)];
      x = LlamaModel::copy_to(x, dev);
      CHECK(x.device() == dev);
      Value kv_here = kv_dev[std::size_t(g)] == dev ? kv[std::size_t(g)] : LlamaModel::copy_to(kv[std::size_t(g)], dev);
      if (!kv[std::size_t(g)].empty()) CHECK(kv_here.bytes() == kv[std::size_t(g)].bytes());
      x = m.layers(g, x, kv_here, plan, dev, kv[std::size_t(g)]);
      kv_dev[std::size_t(g)] = dev;
      at = dev;
    }
    const std::string head_dev = devs[std::size_t(it % 4)];
    if (at != head_dev) x = LlamaModel::copy_to(x, head_dev);
    LlamaModel::synchronize(head_dev);
    auto next = m.head(x, plan, head_dev);
    for (std::size_t i = 0; i < 2; ++i) {
      got[i].push_back(next[i]);
      plan.seqs[i].position += static_cast<std::int64_t>(plan.seqs[i].tokens.size());
      plan.seqs[i].tokens = {next[i]};
    }
  }
  CHECK(got == reference);

  // An input left on another device is refused, naming the op.
  Value x = m.embed(plan, "cpu:1");
  CHECK_THROWS_WITH(m.layers(0, x, Value(), StepPlan{{SeqStep{5, 0, {1}}}}, "cpu:2", kv[0]),
                    Catch::Contains("layers0") && Catch::Contains("cpu:1"));
  CHECK_THROWS_AS(m.head(x, plan, "cpu:9"), std::logic_error);  // nothing loaded on cpu:9
}

TEST_CASE("tied embeddings, q/k/v biases and an explicit head_dim: spread over devices equals the reference",
          "[torch]") {
  const int variant = GENERATE(0, 1, 2, 3);
  LlamaConfig cfg = tiny();
  cfg.tied_embeddings = variant == 0 || variant == 3;
  cfg.qkv_bias = variant == 1 || variant == 3;
  cfg.explicit_head_dim = variant >= 2 ? 32 : 0;  // heads * head_dim = 128 != hidden 64
  INFO("tied " << cfg.tied_embeddings << ", bias " << cfg.qkv_bias << ", head_dim " << cfg.head_dim());
  LlamaModel m(cfg);
  const auto reference = m.generate_reference(kPrompts, 5, "cpu");
  // Each feature changes what the model computes (so it is really used).
  CHECK(reference != LlamaModel(tiny()).generate_reference(kPrompts, 5, "cpu"));

  // Embed and head on one device, the groups on two others, the KV caches
  // moving with the groups every iteration.
  for (const std::string d : {"cpu:1", "cpu:2", "cpu:3"}) load_all(m, d);
  std::vector<Value> kv(2);
  StepPlan plan{{SeqStep{0, 0, kPrompts[0]}, SeqStep{1, 0, kPrompts[1]}}};
  std::vector<std::vector<std::int64_t>> got(2);
  for (int it = 0; it < 5; ++it) {
    Value x = m.embed(plan, "cpu:1");
    for (int g = 0; g < 2; ++g) {
      const std::string dev = (it + g) % 2 == 0 ? "cpu:2" : "cpu:3";
      x = m.layers(g, LlamaModel::copy_to(x, dev), LlamaModel::copy_to(kv[std::size_t(g)], dev), plan, dev,
                   kv[std::size_t(g)]);
    }
    const auto next = m.head(LlamaModel::copy_to(x, "cpu:1"), plan, "cpu:1");
    for (std::size_t i = 0; i < 2; ++i) {
      got[i].push_back(next[i]);
      plan.seqs[i].position += static_cast<std::int64_t>(plan.seqs[i].tokens.size());
      plan.seqs[i].tokens = {next[i]};
    }
  }
  CHECK(got == reference);

  // What each op holds is what weight_bytes says, the features included.
  const std::int64_t hd = cfg.head_dim(), qkv = (4 + 2 * 2) * hd;
  const std::int64_t layer = 64 * qkv + (cfg.qkv_bias ? qkv : 0) + 4 * hd * 64 + 3 * 64 * 128 + 2 * 64;
  CHECK(weight_bytes(cfg, "layers0") == 2 * layer * 4);
  CHECK(weight_bytes(cfg, "head") == (64 + (cfg.tied_embeddings ? 0 : 512 * 64)) * 4);
  CHECK(weight_bytes(cfg, "embed") == 512 * 64 * 4);
  CHECK(kv_bytes_per_token(cfg) == 2 * 2 * 2 * hd * 4);
  for (const std::string op : {"embed", "layers0", "layers1", "head"})
    CHECK(m.load(op, "cpu:1") == weight_bytes(cfg, op));
  if (cfg.tied_embeddings) {
    // The head reads the embedding on its device: no copy of its own, so
    // the embedding cannot go first, nor the head load without it.
    CHECK_THROWS_WITH(m.unload("embed", "cpu:1"), Catch::Contains("unload head first"));
    CHECK(m.unload("head", "cpu:1") == 64 * 4);
    CHECK(m.unload("embed", "cpu:1") == 512 * 64 * 4);
    CHECK_THROWS_WITH(m.load("head", "cpu:5"), Catch::Contains("load embed on cpu:5 first"));
    CHECK(!m.loaded("head", "cpu:5"));
  }
}

TEST_CASE("a sequence left out of the plan is dropped from the KV cache and kv_in is untouched", "[torch]") {
  LlamaModel m(tiny());
  load_all(m, "cpu");
  const std::int64_t per_token = kv_bytes_per_token(m.config());
  std::vector<Value> kv(2);
  Step first = run(m, StepPlan{{SeqStep{1, 0, kPrompts[0]}, SeqStep{2, 0, kPrompts[1]}}}, kv);
  CHECK(kv[0].bytes() == (5 + 9) * per_token);
  CHECK(kv[0].tokens() == 14);

  const Value kv_in = kv[0];
  const std::vector<float> before = kv_in.to_floats();
  // Sequence 1 finished: only sequence 2 decodes.
  StepPlan plan{{SeqStep{2, 9, {first.next[1]}}}};
  Value x = m.embed(plan, "cpu");
  Value kv_out;
  x = m.layers(0, x, kv_in, plan, "cpu", kv_out);
  CHECK(kv_out.sequences() == std::vector<std::uint64_t>{2});
  CHECK(kv_out.cached_tokens(1) == -1);
  CHECK(kv_out.bytes() == kv_in.bytes() - 5 * per_token + 1 * per_token);
  CHECK(kv_in.bytes() == 14 * per_token);
  CHECK(kv_in.sequences() == std::vector<std::uint64_t>{1, 2});
  CHECK(kv_in.to_floats() == before);
}

TEST_CASE("a sequence's cache held apart on the host and joined back decodes as if it never left", "[torch]") {
  LlamaModel m(tiny());
  load_all(m, "cpu");
  load_all(m, "cpu:1");
  const std::int64_t per_token = kv_bytes_per_token(m.config());
  std::vector<Value> kv(2);
  Step first = run(m, StepPlan{{SeqStep{1, 0, kPrompts[0]}, SeqStep{2, 0, kPrompts[1]}}}, kv);
  const StepPlan both{{SeqStep{1, 5, {first.next[0]}}, SeqStep{2, 9, {first.next[1]}}}};
  std::vector<Value> stayed = kv;
  const Step expect = run(m, both, stayed);

  // Sequence 1's part goes to the host (a preemption's swap-out), the
  // group's cache keeps sequence 2 alone; both join on another device.
  std::vector<Value> joined(2);
  for (std::size_t g = 0; g < 2; ++g) {
    const Value host = LlamaModel::select_kv(kv[g], 1, "cpu");
    CHECK(host.sequences() == std::vector<std::uint64_t>{1});
    CHECK(host.cached_tokens(1) == 5);
    CHECK(host.bytes() == 5 * per_token);  // its own storage, not the whole cache's
    CHECK(host.group() == static_cast<int>(g));
    const Value rest = LlamaModel::select_kv(kv[g], 2, "cpu:1");
    joined[g] = LlamaModel::join_kv({rest, LlamaModel::copy_to(host, "cpu:1")}, "cpu:1");
    CHECK(joined[g].sequences() == std::vector<std::uint64_t>{2, 1});
    CHECK(joined[g].tokens() == 14);
    CHECK(joined[g].device() == "cpu:1");
    // A single part is itself; none is empty.
    CHECK(LlamaModel::join_kv({Value(), rest}, "cpu:1").sequences() == std::vector<std::uint64_t>{2});
    CHECK(LlamaModel::join_kv({}, "cpu").empty());
  }
  const Step back = run(m, both, joined, "cpu:1");
  CHECK(back.next == expect.next);
  CHECK(max_abs_diff(back.hidden.to_floats(), expect.hidden.to_floats()) < 1e-5f);
  for (std::size_t g = 0; g < 2; ++g) CHECK(max_abs_diff(joined[g].to_floats(), stayed[g].to_floats()) < 1e-5f);

  // Refused, naming what is wrong.
  auto refuses = [](auto f, const std::string& part) {
    try {
      f();
      FAIL("not refused: " << part);
    } catch (const std::invalid_argument& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(part) != std::string::npos);
    }
  };
  refuses([&] { (void)LlamaModel::select_kv(kv[0], 99, "cpu"); }, "holds no part of sequence 99");
  refuses([&] { (void)LlamaModel::select_kv(first.hidden, 1, "cpu"); }, "not a KV cache");
  refuses([&] { (void)LlamaModel::join_kv({kv[0], LlamaModel::select_kv(kv[0], 1, "cpu")}, "cpu"); },
          "sequence 1 is in two parts");
  refuses(
      [&] {
        (void)LlamaModel::join_kv({LlamaModel::select_kv(kv[0], 1, "cpu"), LlamaModel::select_kv(kv[1], 2, "cpu")},
                                  "cpu");
      },
      "does not match");
  refuses([&] { (void)LlamaModel::join_kv({kv[0]}, "cpu:1"); }, "lives on cpu, not on cpu:1");
}

TEST_CASE("sizes match the formulas and bad inputs are refused with named fields", "[torch]") {
  const LlamaConfig c = tiny();
  CHECK(dtype_bytes("float32") == 4);
  CHECK(dtype_bytes("bfloat16") == 2);
  CHECK(dtype_bytes("float16") == 2);
  CHECK_THROWS_AS(dtype_bytes("int8"), std::invalid_argument);
  CHECK(kv_bytes_per_token(c) == 2 * 2 * 2 * 16 * 4);
  CHECK(hidden_bytes(c, 10) == 10 * 64 * 4);
  CHECK(weight_bytes(c, "embed") == 512 * 64 * 4);
  CHECK(weight_bytes(c, "head") == (64 + 512 * 64) * 4);
  const std::int64_t layer = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128 + 2 * 64;
  CHECK(weight_bytes(c, "layers1") == 2 * layer * 4);
  CHECK_THROWS_WITH(weight_bytes(c, "layers2"), Catch::Contains("layers2"));
  CHECK_THROWS_AS(weight_bytes(c, "layers01"), std::invalid_argument);

  LlamaModel m(c);
  for (const std::string op : {"embed", "layers0", "layers1", "head"}) {
    CHECK(!m.loaded(op, "cpu"));
    CHECK(m.load(op, "cpu") == weight_bytes(c, op));
    CHECK(m.load(op, "cpu") == weight_bytes(c, op));  // idempotent
    CHECK(m.loaded(op, "cpu"));
  }
  StepPlan plan{{SeqStep{3, 0, {1, 2, 3}}, SeqStep{4, 0, {4, 5}}}};
  std::vector<Value> kv(2);
  Value x = m.embed(plan, "cpu");
  CHECK(x.bytes() == hidden_bytes(c, 5));
  CHECK(x.kind() == Value::Kind::kHidden);
  Value h = m.layers(0, x, Value(), plan, "cpu", kv[0]);
  CHECK(h.bytes() == hidden_bytes(c, 5));
  CHECK(kv[0].bytes() == 5 * kv_bytes_per_token(c));
  CHECK(kv[0].kind() == Value::Kind::kKv);
  Value moved = LlamaModel::copy_to(kv[0], "cpu:1");
  CHECK(moved.bytes() == kv[0].bytes());
  CHECK(moved.device() == "cpu:1");
  CHECK(LlamaModel::copy_to(Value(), "cpu:1").empty());
  CHECK(m.unload("head", "cpu") == weight_bytes(c, "head"));
  CHECK(m.unload("head", "cpu") == 0);
  CHECK_THROWS_WITH(m.head(h, plan, "cpu"), Catch::Contains("head") && Catch::Contains("not loaded"));

  // A decode whose sequence is missing from kv_in, or cached at another length.
  StepPlan missing{{SeqStep{3, 3, {7}}, SeqStep{99, 4, {1}}}};
  Value xm = m.embed(missing, "cpu");
  Value out;
  CHECK_THROWS_WITH(m.layers(0, xm, kv[0], missing, "cpu", out), Catch::Contains("sequence 99"));
  StepPlan wrong{{SeqStep{3, 2, {7}}}};
  CHECK_THROWS_WITH(m.layers(0, m.embed(wrong, "cpu"), kv[0], wrong, "cpu", out),
                    Catch::Contains("sequence 3") && Catch::Contains("3 tokens"));
  CHECK(out.empty());
  CHECK_THROWS_WITH(m.layers(1, xm, kv[0], missing, "cpu", out), Catch::Contains("layers0"));  // wrong group's cache
  CHECK_THROWS_WITH(m.embed(StepPlan{{SeqStep{1, 0, {512}}}}, "cpu"), Catch::Contains("512"));
  CHECK_THROWS_AS(m.embed(plan, "gpu0"), std::invalid_argument);
  if (cuda_available())
    CHECK_THROWS_AS(m.embed(plan, "cuda:0"), std::logic_error);  // not loaded there
  else
    CHECK_THROWS_WITH(m.embed(plan, "cuda:0"), Catch::Contains("CUDA is not available"));

  auto rejects = [](auto mutate, const char* field) {
    LlamaConfig bad = tiny();
    mutate(bad);
    INFO(field);
    CHECK_THROWS_WITH(validate(bad), Catch::Contains(field));
    CHECK_THROWS_AS(LlamaModel(bad), std::invalid_argument);
  };
  rejects([](LlamaConfig& b) { b.vocab = 0; }, "vocab");
  rejects([](LlamaConfig& b) { b.hidden = -64; }, "hidden");
  rejects([](LlamaConfig& b) { b.mlp = 0; }, "mlp");
  rejects([](LlamaConfig& b) { b.hidden = 66; }, "hidden (66) must be a multiple of heads");
  rejects([](LlamaConfig& b) { b.explicit_head_dim = 15; }, "head_dim (15) must be even");
  rejects([](LlamaConfig& b) { b.explicit_head_dim = -2; }, "head_dim must be positive");
  rejects([](LlamaConfig& b) { b.kv_heads = 3; }, "kv_heads");
  rejects([](LlamaConfig& b) { b.groups = 3; }, "groups");
  rejects([](LlamaConfig& b) { b.dtype = "fp8"; }, "dtype 'fp8'");
  CHECK_NOTHROW(validate(c));

  auto p = synthetic_prompt(c, 1, 42, 100);
  CHECK(p.size() == 100);
  CHECK(p == synthetic_prompt(c, 1, 42, 100));
  CHECK(p != synthetic_prompt(c, 1, 43, 100));
  CHECK(std::all_of(p.begin(), p.end(), [](std::int64_t t) { return t >= 0 && t < 512; }));
  CHECK(cuda_available() == (cuda_device_count() > 0));
}

TEST_CASE("a value's layout round-trips, and its twin filled from the data equals it", "[torch]") {
  // The NCCL path between executor processes in miniature, on CPU: the
  // source encodes the layout, the destination decodes it and allocates,
  // and the data lands in the twin's storage (here by memcpy, not NCCL).
  const std::string dtype = GENERATE("float32", "bfloat16");
  INFO("dtype " << dtype);
  LlamaConfig cfg = tiny();
  cfg.dtype = dtype;
  LlamaModel m(cfg);
  load_all(m, "cpu");
  std::vector<Value> kv(2);
  const StepPlan plan{{SeqStep{3, 0, kPrompts[0]}, SeqStep{9, 0, kPrompts[1]}}};
  const Value hidden = m.embed(plan, "cpu");
  (void)m.layers(0, hidden, Value(), plan, "cpu", kv[0]);
  for (const Value* v : std::initializer_list<const Value*>{&hidden, &kv[0]}) {
    const ValueLayout l = LlamaModel::layout(*v);
    CHECK(l.kind == v->kind());
    CHECK(l.data_bytes == v->bytes());
    const ValueLayout back = LlamaModel::decode(LlamaModel::encode(l));
    CHECK(back.kind == l.kind);
    CHECK(back.group == l.group);
    CHECK(back.dtype == l.dtype);
    CHECK(back.sizes == l.sizes);
    CHECK(back.seqs == l.seqs);
    CHECK(back.start == l.start);
    CHECK(back.len == l.len);
    CHECK(back.data_bytes == l.data_bytes);

    const Value src = LlamaModel::contiguous(*v);
    const Value twin = LlamaModel::allocate(back, "cpu:2");
    CHECK(twin.device() == "cpu:2");
    CHECK(twin.kind() == v->kind());
    CHECK(twin.bytes() == v->bytes());
    CHECK(twin.sequences() == v->sequences());
    std::memcpy(LlamaModel::data(twin), LlamaModel::data(src), static_cast<std::size_t>(back.data_bytes));
    CHECK(twin.to_floats() == v->to_floats());
  }
  CHECK(LlamaModel::layout(kv[0]).seqs == std::vector<std::uint64_t>{3, 9});
  CHECK(LlamaModel::layout(Value()).kind == Value::Kind::kEmpty);
  CHECK_THROWS_AS(LlamaModel::decode("not a layout"), std::invalid_argument);
  std::string truncated = LlamaModel::encode(LlamaModel::layout(kv[0]));
  truncated.pop_back();
  CHECK_THROWS_AS(LlamaModel::decode(truncated), std::invalid_argument);
}
