// Shared by the two implementation files of runtime.h; not installed, not
// for consumers. No LibTorch include.
#pragma once

#include <cstdint>
#include <string>

#include "runtime.h"

namespace slicesched::rt::detail {

// splitmix64: a small, well-mixed, portable hash (seeds and synthetic prompts).
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline constexpr int kEmbed = -1;
inline constexpr int kHead = -2;
// "embed" -> kEmbed, "head" -> kHead, "layers<g>" (g in [0, groups), no
// leading zeros) -> g; anything else: invalid_argument naming the op.
int parse_op(const LlamaConfig& cfg, const std::string& op);

}  // namespace slicesched::rt::detail
