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
