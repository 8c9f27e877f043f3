module;
#include <cassert>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

module slicesched.simulator.profile;

namespace slicesched {

NoisyClock::NoisyClock(std::uint64_t seed, double cv) : rng_(seed) {
  assert(cv >= 0 && std::isfinite(cv));
  cv_ = cv > 0 && std::isfinite(cv) ? cv : 0.0;
  // ln X ~ N(mu, sigma^2) has E[X] = exp(mu + sigma^2/2) = 1 and
  // Var[X] = exp(sigma^2) - 1 = cv^2.
  sigma_ = std::sqrt(std::log1p(cv_ * cv_));
  mu_ = -0.5 * sigma_ * sigma_;
}

double NoisyClock::sample(double seconds) {
  assert(seconds >= 0);
  if (!(seconds > 0) || !std::isfinite(seconds)) return seconds > 0 ? seconds : 0.0;
  return seconds * std::exp(mu_ + sigma_ * standard_normal());
}

double NoisyClock::standard_normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // Box-Muller on 53-bit uniforms; u1 in (0, 1] keeps the log finite.
  const double u1 = static_cast<double>((rng_() >> 11) + 1) * 0x1p-53;
  const double u2 = static_cast<double>(rng_() >> 11) * 0x1p-53;
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * std::numbers::pi * u2;
  spare_ = radius * std::sin(angle);
  has_spare_ = true;
  return radius * std::cos(angle);
}

}  // namespace slicesched
