// Small builders shared by the tests: clusters, templates and estimators
// with exact, hand-checkable numbers.
module;
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "executor/torch/runtime.h"

export module slicesched.testing;
import slicesched.models.dense;
import slicesched.core.accel;
import slicesched.core.estimator;
import slicesched.core.graph;
import slicesched.core.ids;
import slicesched.core.shape;

export namespace slicesched::testing {

inline constexpr std::int64_t kGiB = 1ll << 30;

// The graph template of the dense decoder `c` (by default Llama-3-8B's
// shapes: 4 layer groups, bfloat16, named "llama3-8b").
inline GraphTemplate dense_template(DenseDecoderConfig c = {}) {
  return DenseDecoder::make(std::move(c)).value()->make_template();
}

// The live tests' model: models/dense.cpp's llama-tiny in float32 with
// weights_seed 7, as the LibTorch runtime takes it (no LibTorch needed to
// build it), and the scheduler's template of such a runtime model.
inline rt::LlamaConfig llama_tiny_rt() {
  rt::LlamaConfig c;
  c.name = "llama-tiny";
  c.vocab = 512, c.hidden = 64, c.layers = 4, c.heads = 4, c.kv_heads = 2, c.mlp = 128, c.groups = 2;
  c.dtype = "float32";
  c.seed = 7;
  return c;
}
inline GraphTemplate template_of(const rt::LlamaConfig& c) {
  DenseDecoderConfig d;
  d.name = "llama-tiny";
  d.hidden = c.hidden, d.kv_heads = c.kv_heads, d.head_dim = c.head_dim(), d.heads = c.hidden / c.head_dim();
  d.mlp = c.mlp, d.vocab = c.vocab, d.layers = c.layers, d.groups = c.groups, d.dtype = DType::kF32;
  return dense_template(d);
}

// `n` accelerators "a0".."a{n-1}" of type "gpu" with `hbm` bytes each, all
// linked by one class.
inline std::shared_ptr<AcceleratorSet> cluster(int n, std::int64_t hbm = 80 * kGiB) {
  auto set = std::make_shared<AcceleratorSet>();
  (void)set->add_link_class("nvlink", 1e9, 0.0);
  for (int i = 0; i < n; ++i) (void)set->add("a" + std::to_string(i), "gpu", hbm);
  return set;
}

// A one-op template "name": output [bytes] i8, one feature (1) whose prior
// coefficient is `seconds`, so its predicted time is exactly `seconds`.
// `inputs` are port names (each [in_bytes] i8) the op reads.
inline GraphTemplate unit_op(const std::string& name, double seconds, std::int64_t out_bytes,
                             std::vector<std::string> ports = {}, std::int64_t in_bytes = 0) {
  TemplateBuilder b(name);
  for (const auto& p : ports) b.port(p, {{Expr::constant(in_bytes)}, DType::kI8});
  auto op = b.op("op");
  for (const auto& p : ports) op.input(p);
  op.output({{Expr::constant(out_bytes)}, DType::kI8}).features({Expr::constant(1)}).prior({seconds});
  return std::move(b).build().value();
}

// Estimators whose predictions are the template priors and, for transfers,
// exactly `sec_per_byte` * bytes.
inline EstimatorSet estimators(const TemplateRegistry& reg, double sec_per_byte = 1e-9) {
  EstimatorSet est;
  for (TemplateId t = 0; t < reg.size(); ++t)
    for (const auto& op : reg.get(t).ops())
      if (!op.prior.empty()) (void)est.set_op_prior(op.kind, op.prior);
  (void)est.set_default_transfer_prior(sec_per_byte, 0.0);
  return est;
}

}  // namespace slicesched::testing
