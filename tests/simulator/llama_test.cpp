// The Llama template's cost features and footprints: the layer groups
// follow the tokens, the head the sequences (it computes logits for each
// sequence's last token only, as executor/torch's head() does).
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

import slicesched.simulator.bench_cluster;
import slicesched.testing;
import slicesched.core.gmg;
import slicesched.core.graph;
import slicesched.core.ids;
import slicesched.models.dense;

using namespace slicesched;
using namespace slicesched::testing;

namespace {

struct Step {
  std::vector<double> embed, layers0, head;
  std::int64_t head_out = 0, head_workspace = 0;
};

Step instantiate(std::int64_t tokens, std::int64_t sequences, std::int64_t context) {
  auto reg = std::make_shared<TemplateRegistry>();
  const TemplateId t = reg->add(testing::dense_template()).value();
  Gmg gmg(reg, cluster(1));
  auto inst = gmg.instantiate(
      {t, {{"tokens", tokens}, {"sequences", sequences}, {"context", context}, {"kv_prev", 0}}, {}, 0, 0});
  REQUIRE(inst.ok());
  REQUIRE(inst->ops.size() == 6);  // embed, layers0..3, head
  auto features = [&](OpId op) {
    auto x = gmg.features(op);
    return std::vector<double>(x.begin(), x.end());
  };
  Step s;
  s.embed = features(inst->ops[0]);
  s.layers0 = features(inst->ops[1]);
  s.head = features(inst->ops.back());
  CHECK(gmg.op_name(inst->ops.back()).ends_with("/head"));
  s.head_out = gmg.op(inst->ops.back()).out_bytes;
  s.head_workspace = gmg.op(inst->ops.back()).workspace_bytes;
  return s;
}

}  // namespace

TEST_CASE("llama: the head's features follow the sequences, the layers' the tokens", "[llama]") {
  const std::int64_t vocab = 128256, hidden = 4096;
  SECTION("a prefill of four 16-token prompts: 64 tokens over 4 sequences") {
    const Step s = instantiate(64, 4, 0);
    CHECK(s.head == std::vector<double>{4, 1});
    CHECK(s.embed == std::vector<double>{64, 1});
    CHECK(s.layers0 == std::vector<double>{64, 64 * 64, 64, 1});
    CHECK(s.head_out == 4 * 8);  // one sampled i64 token per sequence
    CHECK(s.head_workspace == 4 * 4 * (vocab + 2 * hidden));
  }
  SECTION("one prompt of 64 tokens: one sequence") {
    const Step s = instantiate(64, 1, 0);
    CHECK(s.head == std::vector<double>{1, 1});
    CHECK(s.head_out == 8);
  }
  SECTION("a decode batch of 8 sequences on 100 cached tokens each") {
    const Step s = instantiate(8, 8, 800);
    CHECK(s.head == std::vector<double>{8, 1});
    CHECK(s.layers0 == std::vector<double>{8, 8 * 808, 808, 1});
  }
}

TEST_CASE("llama: an instance must bind sequences", "[llama]") {
  auto reg = std::make_shared<TemplateRegistry>();
  const TemplateId t = reg->add(testing::dense_template()).value();
  Gmg gmg(reg, cluster(1));
  auto inst = gmg.instantiate({t, {{"tokens", 64}, {"context", 0}}, {}, 0, 0});
  REQUIRE(!inst.ok());
  CHECK(inst.status().message().find("dim 'sequences' is unbound") != std::string::npos);
}

TEST_CASE("llama: issue_pipelines binds one sequence per step", "[llama]") {
  auto reg = std::make_shared<TemplateRegistry>();
  const TemplateId t = reg->add(testing::dense_template()).value();
  Gmg gmg(reg, cluster(4));
  for (AccelId a = 0; a < 4; ++a) REQUIRE(gmg.place_weights(t, a).ok());
  // One request: a prefill of 32 tokens, then 2 decode steps chained
  // through the sampled token (head output [1] i64 = the tokens port [1]).
  auto requests = bench::issue_pipelines(gmg, t, 18, 32, 2);
  REQUIRE(requests.ok());
  CHECK(requests.value() == 1);
  int heads = 0;
  for (OpId op = 0; op < gmg.slot_count(); ++op) {
    if (!gmg.contains(op) || !gmg.op_name(op).ends_with("/head")) continue;
    ++heads;
    auto x = gmg.features(op);
    CHECK(std::vector<double>(x.begin(), x.end()) == std::vector<double>{1, 1});
  }
  CHECK(heads == 3);
}

TEST_CASE("llama: the priors' bytes follow the dtype", "[llama]") {
  for (DType dt : {DType::kBF16, DType::kF32}) {
    DenseDecoderConfig c;
    c.name = "m";
    c.dtype = dt;
    const GraphTemplate t = dense_template(c);
    const double eb = static_cast<double>(dtype_bytes(dt)), hbm = 3.35e12;
    const TemplateOp& embed = t.ops().front();
    const TemplateOp& head = t.ops().back();
    REQUIRE(head.name == "head");
    CHECK(embed.prior[0] == Approx(eb * 4096 / hbm));
    // Per sequence: the logits' 2 * vocab * hidden FLOPs; fixed: reading the LM head.
    CHECK(head.prior[0] == Approx(2.0 * 128256 * 4096 / 400e12));
    CHECK(head.prior[1] == Approx(eb * 128256 * 4096 / hbm));
    CHECK(t.ops()[1].prior[2] == Approx(eb * 2 * 8 * 8 * 128 / hbm));  // a cached token's K and V, 8 layers
  }
}
