// Ground truth per accelerator type: a measured profile for the type it
// measured, the roofline (hardware/roofline.cppm) for every other type;
// transfers from a measured send/recv profile, or from the pair's link
// class (latency + bytes / bandwidth). See docs/ground-truth.md.
module;
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

export module slicesched.simulator.roofline_truth;
import slicesched.simulator.emulated_cluster;
import slicesched.hardware.roofline;
import slicesched.core.accel;
import slicesched.core.gmg;
import slicesched.core.ids;
import slicesched.core.status;
import slicesched.models.model;
import slicesched.models.work;
import slicesched.simulator.profile;

export namespace slicesched {

struct TypedTruthOptions {
  std::optional<LayerProfile> layers;  // measured layer-group times
  std::string layers_type;             // the type they were measured on ("": every type)
  // Models (by name) whose shape is not the profile's: they play the
  // roofline on every type, the profile's included.
  std::vector<std::string> off_profile_models;
  std::optional<TransferProfile> transfers;
  RooflineFit fit;  // the general fit, for types without their own
  // Types that play their own fit (fitted on their own kernels) instead of
  // `fit`: by type name or alias, as `types` resolves them.
  std::vector<std::pair<std::string, RooflineFit>> type_fits;
  std::vector<AcceleratorType> types;  // datasheets, by name or alias
  // Tensor-parallel groups' all-reduces: a ring over the group's own link
  // class where it names one (`tp_links`, per AccelId: a LinkClassId, or -1
  // for none), else the measured profile of its size (tp, profile).
  std::vector<std::pair<int, TransferProfile>> all_reduce;
  // Layer times measured on one rank of a group of N (N, profile), of the
  // model and type `layers` measured: a group of N of a type that plays
  // `layers` plays these plus its all-reduces; a group of a size without
  // them plays the roofline at one rank's shapes.
  std::vector<std::pair<int, LayerProfile>> layers_tp;
  std::vector<int> tp_links;
};

// Seconds of a ring all-reduce of `bytes` over `tp` GPUs joined by `link`:
// 2 (tp - 1) steps, each moving bytes / tp (NCCL's ring).
double ring_all_reduce_seconds(const LinkClass& link, int tp, double bytes);
// Seconds of the collectives a tensor-parallel group of `tp` adds to
// `calls` (shapes `full`, the model's own): an all-reduce of each call's
// output rows after the attention output projection, the MLP down
// projection and the vocab-parallel embedding, and a gather of the logits
// after the LM head, costed as an all-reduce of the same bytes (a ring
// all-gather moves half as much; at these sizes latency rules).
// `all_reduce(bytes)` prices one.
double tp_collectives_seconds(const DenseShape& full, std::span<const SublayerCall> calls,
                              const std::function<double(double)>& all_reduce);

// Whether accelerators of type `type` play the measured layers profile: there
// is one, and it names no type or names `type` by its name or an alias
// (same_type over opt.types: "H100" plays a profile measured on "H100-SXM").
// Every other type plays the roofline.
bool plays_profile(const TypedTruthOptions& opt, std::string_view type);
// The layers profile accelerators of base type `type` in groups of `tp`
// play: `layers` for one GPU, the `layers_tp` entry of size tp for a
// group, nullptr where none (they play the roofline).
const LayerProfile* played_profile(const TypedTruthOptions& opt, std::string_view type, int tp);
// The efficiencies a type that plays the roofline plays: its own fit
// (opt.type_fits, matched by name or alias) where it has one, else opt.fit.
const RooflineFit& fit_for(const TypedTruthOptions& opt, std::string_view type);

// Seconds of one operator's kernels (`op` indexes model.ops()) for one
// iteration on type `t` with fit `f`: what the roofline ground truth plays,
// before noise.
double roofline_op_seconds(const AcceleratorType& t, const RooflineFit& f, const Model& model, std::size_t op,
                           const IterationDims& d);
// The same summed over every operator of the model (one iteration of the
// whole model on one accelerator).
double roofline_iteration_seconds(const AcceleratorType& t, const RooflineFit& f, const Model& model,
                                  const IterationDims& d);

// Not thread-safe (noise): one per emulated cluster. `accels` must outlive it.
class TypedGroundTruth final : public GroundTruth {
 public:
  TypedGroundTruth(TypedTruthOptions opt, const AcceleratorSet& accels, std::uint64_t seed, double op_cv = 0.006,
                   double transfer_cv = 0.0163);
  // Every accelerator type either has the profile or a datasheet.
  Status check() const;
  // The models behind the templates: on a datasheet type an operator is
  // costed from its model's kernels and shapes (any dense decoder; an
  // operator of a template without a model is an error there), on the
  // profile's type as ProfileGroundTruth costs it.
  void set_models(ModelSet models) { models_ = std::move(models); }
  Result<double> op_seconds(const Gmg& gmg, OpId op) override;
  double transfer_seconds(AccelId from, AccelId to, std::int64_t bytes) override;

 private:
  TypedTruthOptions opt_;
  ModelSet models_;
  const AcceleratorSet& accels_;
  std::vector<const AcceleratorType*> by_type_;     // per AccelTypeId: the datasheet, or nullptr (the profile)
  std::vector<const AcceleratorType*> sheets_;      // per AccelTypeId: the datasheet where a table knows the type
  std::vector<const RooflineFit*> fits_;            // per AccelTypeId: the efficiencies it plays
  std::vector<const TransferProfile*> all_reduce_;  // per AccelTypeId: a group's measured all-reduce, or nullptr
  std::vector<const LayerProfile*> measured_;       // per AccelTypeId: the layers profile it plays, or nullptr
  double all_reduce_seconds(AccelId a, double bytes) const;
  NoisyClock op_noise_, transfer_noise_;
};

}  // namespace slicesched
