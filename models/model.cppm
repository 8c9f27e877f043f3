// The model contract: what a model family tells the rest of SliceScheduler.
// Tenants bind an iteration's dims through it, the ground truth and the
// roofline cost its operators through it, the live runner maps its
// operators onto runtime calls through it. Nothing outside models/ looks
// an operator up by its name.
//
// A Model is immutable once built; every member is const and safe from any
// thread. Shared as std::shared_ptr<const Model>.
module;
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

export module slicesched.models.model;
import slicesched.models.work;
import slicesched.core.graph;
import slicesched.core.ids;

export namespace slicesched {

// What an operator of a model does, for estimators, the ground truth and
// the live runner.
enum class OpRole : std::uint8_t {
  kEmbed,   // token ids -> hidden state
  kLayers,  // `layers` consecutive decoder layers from `first_layer`, retains their KV cache
  kHead,    // final norm, LM head and sampling: the operator that samples the next token
};

struct ModelOp {
  std::string name;  // the template op's name
  OpRole role = OpRole::kLayers;
  int first_layer = 0, layers = 0;  // kLayers only
  int group = 0;                    // kLayers only: the index of the layer group
};

// The dims one serving iteration binds: its new tokens (summed over its
// sequences), its sequences, the cached tokens it attends to, and the tokens
// of the KV cache it takes over (>= context when sequences just finished).
struct IterationDims {
  std::int64_t tokens = 0, sequences = 0, context = 0, kv_prev = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  // The model's name in the config (also its template's name).
  virtual const std::string& name() const = 0;
  // The family ("dense-decoder").
  virtual std::string family() const = 0;
  // The graph template, named name(). Its operators are ops(), in order.
  virtual GraphTemplate make_template() const = 0;
  // The operators of the template, in template (topological) order.
  virtual std::span<const ModelOp> ops() const = 0;
  // The index in ops() of the operator that samples (its feedback carries
  // the iteration's tokens).
  virtual std::size_t sampler() const = 0;
  // The template's dims for one iteration.
  virtual std::vector<std::pair<std::string, std::int64_t>> bind(const IterationDims& d) const = 0;
  // Back from an instance's dim values (in the template's dim order).
  virtual IterationDims dims_of(const GraphTemplate& t, std::span<const std::int64_t> values) const = 0;
  // The kernels operator `op` (index into ops()) runs for one iteration,
  // with counts (a layer group repeats each decoder kernel), and the shapes
  // they depend on: what a roofline costs.
  virtual std::vector<SublayerCall> kernels(std::size_t op, const IterationDims& d) const = 0;
  virtual DenseShape shape() const = 0;
  // All weights, each shared tensor counted once (tied embeddings); equal to
  // the sum of the template ops' weight bytes.
  virtual std::int64_t weight_bytes() const = 0;
  // K and V of every layer for one token.
  virtual std::int64_t kv_bytes_per_token() const = 0;
  // The most tokens (prompt plus output) one sequence may hold.
  virtual std::int64_t context_window() const = 0;
};

// What of a model decides what its operators cost, in words: a profile of
// one model's fits (a calibration profile) is refused for a model of the
// same name whose text differs (compose/policy.cpp, read_profile).
inline std::string shape_text(const Model& m) {
  const DenseShape s = m.shape();
  std::string layers;
  for (const ModelOp& op : m.ops())
    if (op.role == OpRole::kLayers) layers += (layers.empty() ? "" : "+") + std::to_string(op.layers);
  std::string flags;
  auto flag = [&](bool on, const char* what) {
    if (on) flags += std::string(", ") + what;
  };
  flag(s.parallel_block, "parallel block");
  flag(!s.gated_mlp, "ungated MLP");
  flag(s.layer_norm, "LayerNorm");
  flag(s.qkv_bias, "q/k/v biases");
  flag(s.linear_bias, "linear biases");
  return m.family() + ": layers " + layers + ", hidden " + std::to_string(s.hidden) + ", heads " +
         std::to_string(s.heads) + " (" + std::to_string(s.kv_heads) + " KV) of " + std::to_string(s.head_dim) +
         (s.rotary_dim > 0 && s.rotary_dim != s.head_dim ? " (RoPE on " + std::to_string(s.rotary_dim) + ")" : "") +
         ", MLP " + std::to_string(s.mlp) + ", vocabulary " + std::to_string(s.vocab) + ", " +
         std::to_string(s.elem_bytes) + "-byte elements" + flags + ", " + std::to_string(m.weight_bytes()) +
         " bytes of weights";
}

// Which model is behind each template of a registry: how the ground truth,
// the roofline and the live runner get from a GMG operator (its template
// and template op) to the model and the ModelOp.
class ModelSet {
 public:
  void add(TemplateId tmpl, std::shared_ptr<const Model> model) {
    if (models_.size() <= tmpl) models_.resize(tmpl + 1);
    models_[tmpl] = std::move(model);
  }
  // Null for a template no model registered.
  const Model* of(TemplateId tmpl) const { return tmpl < models_.size() ? models_[tmpl].get() : nullptr; }
  std::shared_ptr<const Model> shared(TemplateId tmpl) const { return tmpl < models_.size() ? models_[tmpl] : nullptr; }
  bool empty() const { return models_.empty(); }

 private:
  std::vector<std::shared_ptr<const Model>> models_;
};

}  // namespace slicesched
