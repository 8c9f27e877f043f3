#include <catch2/catch.hpp>
#include <optional>

import slicesched.models.work;

using namespace slicesched;
using Catch::Matchers::WithinRel;

TEST_CASE("sublayer names round-trip and map to their kind", "[models][work]") {
  for (int i = 0; i < kSublayers; ++i) {
    const auto l = static_cast<Sublayer>(i);
    CHECK(sublayer_from_name(sublayer_name(l)) == l);
  }
  CHECK_FALSE(sublayer_from_name("qkv").has_value());
  CHECK(sublayer_kind(Sublayer::kLmHead) == WorkKind::kGemm);
  CHECK(sublayer_kind(Sublayer::kAttn) == WorkKind::kAttention);
  CHECK(sublayer_kind(Sublayer::kRope) == WorkKind::kElementwise);
  CHECK(decoder_layer_sublayers().size() == 12);
}

TEST_CASE("a projection's FLOPs and bytes follow its weight shape", "[models][work]") {
  const DenseShape llama3_8b;  // hidden 4096, 32 heads, 8 KV heads of 128, bf16
  const Work q = sublayer_work(llama3_8b, {Sublayer::kQProj, 10});
  CHECK(q.kind == WorkKind::kGemm);
  CHECK(q.flops == 2.0 * 10 * 4096 * 4096);
  CHECK(q.bytes == 2.0 * (4096.0 * 4096 + 10 * (4096 + 4096)));
  const Work k = sublayer_work(llama3_8b, {Sublayer::kKProj, 1, 1, 0, 8});  // eight layers
  CHECK(k.flops == 8 * 2.0 * 4096 * 1024);
}

TEST_CASE("attention is causal over new tokens and reads the whole cache", "[models][work]") {
  const DenseShape s;
  // One sequence, 4 new tokens, 6 cached: 4 * (6 + 2.5) = 34 query-key pairs.
  const Work a = sublayer_work(s, {Sublayer::kAttn, 4, 1, 6});
  CHECK_THAT(a.flops, WithinRel(4.0 * 4096 * 34, 1e-12));
  // The new tokens' q, output, k and v; apart from them the cached K and V.
  CHECK_THAT(a.bytes, WithinRel(2.0 * (2 * 4 * 4096 + 2 * 1024 * 4), 1e-12));
  CHECK_THAT(a.cache_bytes, WithinRel(2.0 * 2 * 1024 * 6, 1e-12));
  CHECK(sublayer_work(s, {Sublayer::kQProj, 4, 1, 6}).cache_bytes == 0);
  CHECK(work_kind_name(WorkKind::kKvRead) == "kv_read");
  // Two such sequences in one batch cost twice as much.
  CHECK_THAT(sublayer_work(s, {Sublayer::kAttn, 8, 2, 12}).flops, WithinRel(2 * a.flops, 1e-12));
}

TEST_CASE("a parallel block with a plain MLP: one norm, no gate, biases and partial RoPE", "[models][work]") {
  DenseShape phi;  // Phi-2's shapes
  phi.hidden = 2560, phi.heads = 32, phi.kv_heads = 32, phi.head_dim = 80, phi.mlp = 10240, phi.vocab = 51200;
  phi.qkv_bias = true, phi.parallel_block = true, phi.gated_mlp = false, phi.layer_norm = true;
  phi.linear_bias = true, phi.rotary_dim = 32;
  const auto layer = decoder_layer_sublayers(phi);
  REQUIRE(layer.size() == 11);
  CHECK(layer.back() == Sublayer::kResidualAdd);
  for (const Sublayer l : layer) {
    CHECK(l != Sublayer::kPostNorm);
    CHECK(l != Sublayer::kGateProj);
  }
  const double n = 8, h = 2560, m = 10240;
  // fc1 with its bias; GELU reads one tensor and writes one.
  CHECK(sublayer_work(phi, {Sublayer::kUpProj, n}).bytes == 2 * (h * m + n * (h + m) + m));
  CHECK(sublayer_work(phi, {Sublayer::kActFn, n}).bytes == 2 * 2 * n * m);
  // The norm reads LayerNorm's bias too; attention's and the MLP's outputs
  // join the residual in two adds, each reading two and writing one.
  CHECK(sublayer_work(phi, {Sublayer::kInputNorm, n}).bytes == 2 * (3 * n * h + 2 * h));
  const Work add = sublayer_work(phi, {Sublayer::kResidualAdd, n});
  CHECK(add.kind == WorkKind::kStreaming);
  CHECK(add.bytes == 2 * 2 * 3 * n * h);
  CHECK(sublayer_work(DenseShape{}, {Sublayer::kResidualAdd, n}).bytes == 2 * 3 * n * 4096);  // one add
  // RoPE turns 32 of 80 dimensions, and reads and writes all of them.
  DenseShape whole = phi;
  whole.rotary_dim = 0;
  CHECK(sublayer_work(phi, {Sublayer::kRope, n}).flops == sublayer_work(whole, {Sublayer::kRope, n}).flops * 0.4);
  CHECK(sublayer_work(phi, {Sublayer::kRope, n}).bytes == sublayer_work(whole, {Sublayer::kRope, n}).bytes);
  // The other three forms.
  DenseShape sequential_plain = phi;
  sequential_plain.parallel_block = false;
  CHECK(decoder_layer_sublayers(sequential_plain).size() == 11);
  DenseShape parallel_gated = phi;
  parallel_gated.gated_mlp = true;
  CHECK(decoder_layer_sublayers(parallel_gated).size() == 12);
  // Llama's norms and MLP are unchanged: RMSNorm reads twice, writes once.
  const DenseShape llama;
  CHECK(sublayer_work(llama, {Sublayer::kPostNorm, n}).bytes == 2 * (3 * n * 4096 + 4096));
  CHECK(sublayer_work(llama, {Sublayer::kActFn, n}).bytes == 2 * 3 * n * 14336);
}
