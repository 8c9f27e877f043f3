// Graph templates: registered once, instantiated many times.
//
// A template is a DAG of operators with symbolic shapes. Each operator has
// inputs (operators of the same template, or named ports that an instance
// binds to operators or retained state of earlier instances), one output
// tensor, a workspace, optional retained state (e.g. a KV cache that outlives
// the operator), resident weights, and cost features for its estimator.
module;
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

export module slicesched.core.graph;
import slicesched.core.shape;
import slicesched.core.ids;
import slicesched.core.status;

export namespace slicesched {

enum class DType : std::uint8_t { kF32, kF16, kBF16, kI64, kI32, kI8 };
std::int64_t dtype_bytes(DType t);
std::string_view dtype_name(DType t);

struct TensorSpec {
  Shape shape;
  DType dtype = DType::kBF16;
};

// An external input of a template, bound per instance.
struct PortSpec {
  std::string name;
  TensorSpec tensor;
  bool optional = false;  // an unbound optional port means "comes from the host"
};

struct InputSpec {
  std::string from;                  // an operator or a port of the same template
  std::optional<TensorSpec> expect;  // checked against the producer when given
  // Resolved by TemplateBuilder::build().
  bool is_port = false;
  std::uint32_t index = 0;
};

struct RetainedSpec {
  std::string name;
  TensorSpec tensor;
};

// What a prior coefficient's seconds are made of, so a prior written for
// one accelerator carries to another with other peaks: compute (seconds at
// kPriorPeakFlops), memory traffic (seconds at kPriorBytesPerS), or a fixed
// cost. Priors are written for an H100 SXM's datasheet (dense bf16 and its
// HBM3); an accelerator with a datasheet scales each term by the ratio of
// its peak to these (compose/policy.cpp), one without keeps them.
enum class PriorTerm : std::uint8_t { kFixed, kCompute, kMemory };
inline constexpr double kPriorPeakFlops = 989e12;
inline constexpr double kPriorBytesPerS = 3.35e12;

struct TemplateOp {
  std::string name;
  std::vector<InputSpec> inputs;
  TensorSpec output;
  Expr workspace_bytes;
  std::optional<RetainedSpec> retained;
  std::vector<Expr> features;          // estimator features, at most kMaxFeatures
  std::vector<double> prior;           // estimator prior coefficients (seconds), same size as features, or empty
  std::vector<PriorTerm> prior_terms;  // what each coefficient is (same size as prior), or empty: not scaled
  std::int64_t weight_bytes = 0;
  OpKindId kind = 0;  // assigned at registration
};

// An immutable, validated template. Operators are stored in a topological
// order, so an instance can be inferred in one pass.
class GraphTemplate {
 public:
  const std::string& name() const { return name_; }
  inline const DimTable& dims() const { return dims_; }
  const std::vector<PortSpec>& ports() const { return ports_; }
  const std::vector<TemplateOp>& ops() const { return ops_; }
  TemplateId id() const { return id_; }
  // Index of an operator by name, or -1.
  int find_op(std::string_view name) const;
  int find_port(std::string_view name) const;

 private:
  friend class TemplateBuilder;
  friend class TemplateRegistry;
  std::string name_;
  DimTable dims_;
  std::vector<PortSpec> ports_;
  std::vector<TemplateOp> ops_;
  TemplateId id_ = 0;
};

// Builds and validates a template. Not thread-safe; one builder per template.
class TemplateBuilder {
 public:
  explicit TemplateBuilder(std::string name);

  // A dim of this template, for building expressions in code.
  Expr dim(std::string_view name);
  // Parses an expression; its dims become dims of this template.
  Result<Expr> expr(std::string_view text);

  TemplateBuilder& port(std::string name, TensorSpec tensor, bool optional = false);

  // Chained setters for one operator; the reference stays valid until the
  // next op() call.
  class OpBuilder {
   public:
    OpBuilder& input(std::string from);
    OpBuilder& input(std::string from, TensorSpec expect);
    OpBuilder& output(TensorSpec t);
    OpBuilder& workspace(Expr bytes);
    OpBuilder& retain(std::string name, TensorSpec t);
    OpBuilder& features(std::vector<Expr> f);
    // `terms` (optional): what each coefficient is, for other accelerators.
    OpBuilder& prior(std::vector<double> p, std::vector<PriorTerm> terms = {});
    OpBuilder& weights(std::int64_t bytes);

   private:
    friend class TemplateBuilder;
    explicit OpBuilder(TemplateOp* op) : op_(op) {}
    TemplateOp* op_;
  };
  OpBuilder op(std::string name);

  // Validates and returns the template. Fails naming the template and the
  // operator on: duplicate names, an input naming nothing, a cycle, a rank or
  // dtype mismatch between an input and its producer, more than kMaxFeatures
  // features, a prior (or its terms) of the wrong size, negative weights.
  Result<GraphTemplate> build() &&;

 private:
  GraphTemplate t_;
  std::vector<std::unique_ptr<TemplateOp>> ops_;
};

// All registered templates. Registration assigns template ids and global
// operator kinds (the estimator key). Refuses duplicate template names.
// Writers must be serialized; readers may run concurrently with no writer.
class TemplateRegistry {
 public:
  Result<TemplateId> add(GraphTemplate t);
  const GraphTemplate& get(TemplateId id) const { return *templates_[id]; }
  std::optional<TemplateId> find(std::string_view name) const;
  std::size_t size() const { return templates_.size(); }
  OpKindId op_kind_count() const { return next_kind_; }
  // "template/op" for an operator kind, for reports.
  std::string kind_name(OpKindId kind) const;

 private:
  std::vector<std::shared_ptr<const GraphTemplate>> templates_;
  std::vector<std::pair<TemplateId, std::uint32_t>> kinds_;
  OpKindId next_kind_ = 0;
};

}  // namespace slicesched
