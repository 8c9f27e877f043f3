// Estimator "online-linear": the core's EstimatorSet (per op kind x
// accelerator type linear models, per accelerator pair t = a*bytes + c),
// learning online from every measurement.
//
//   args: {"default_transfer_sec_per_byte": 4e-11,   // optional, >= 0
//          "default_transfer_fixed_s": 1e-5}         // optional, >= 0
//
// The defaults cover pairs without a link-class prior; the host seeds the
// rest through seed_linear() (seed_priors).
module;
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

export module slicesched.plugins.online_linear;
import slicesched.core.plugin;

export namespace slicesched::plugins {

inline constexpr std::string_view kOnlineLinear = "online-linear";

// Thread-safety is EstimatorSet's: concurrent predict_* with no writer.
class OnlineLinear final : public Estimator {
 public:
  OnlineLinear() = default;
  // Throws bad_arg naming the key.
  explicit OnlineLinear(const PluginArgs& args) {
    check_keys(args, {"default_transfer_sec_per_byte", "default_transfer_fixed_s"});
    const double a = non_negative_arg(args, "default_transfer_sec_per_byte", EstimatorSet::kDefaultTransferSecPerByte);
    const double c = non_negative_arg(args, "default_transfer_fixed_s", EstimatorSet::kDefaultTransferFixedSec);
    // Both values were checked above, so the set cannot refuse them.
    (void)set_.set_default_transfer_prior(a, c);
  }

  double predict_op(OpKindId kind, AccelTypeId type, std::span<const double> features) const override {
    return set_.predict_op(kind, type, features);
  }
  double predict_transfer(AccelId src, AccelId dst, std::uint64_t bytes) const override {
    return set_.predict_transfer(src, dst, bytes);
  }
  Status observe_op(OpKindId kind, AccelTypeId type, std::span<const double> features, double seconds) override {
    return set_.observe_op(kind, type, features, seconds);
  }
  Status observe_transfer(AccelId src, AccelId dst, std::uint64_t bytes, double seconds) override {
    return set_.observe_transfer(src, dst, bytes, seconds);
  }
  const EstimatorSet* linear() const override { return &set_; }
  Status seed_linear(const std::function<Status(EstimatorSet&)>& write) override { return write(set_); }

 private:
  EstimatorSet set_;
};

// Registers "online-linear".
Status register_online_linear(PluginRegistries& r) {
  return r.estimator.add(std::string(kOnlineLinear),
                         [](const PluginArgs& args) { return std::make_unique<OnlineLinear>(args); });
}

}  // namespace slicesched::plugins
