#pragma once

// kvlane random numbers: splitmix64 and xoshiro256** (Blackman & Vigna),
// written out so that a seed gives the same sequence with any standard library
// and on every platform (fixed 64-bit integer arithmetic, no std::
// distributions). Seeded outputs are part of observable behaviour: sampled
// tokens, simulated timings and benchmark workloads are reproducible from
// their seeds, and tests pin some of those values.
//
// Plain functions over caller-owned state: no globals, no locking.

#include <array>
#include <cstdint>

namespace kvlane {

/// splitmix64's output function: a bijective 64-bit mixer, also used as a hash.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// splitmix64: advances `state` by the golden-ratio increment and returns the
/// mixed new state.
constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  state += 0x9E3779B97F4A7C15ull;
  return mix64(state);
}

/// The state of a xoshiro256** generator.
using xoshiro256_state = std::array<std::uint64_t, 4>;

/// The state seeded by four successive splitmix64 outputs from `seed`.
constexpr xoshiro256_state xoshiro256_seed(std::uint64_t seed) noexcept {
  xoshiro256_state s{};
  for (auto& word : s)
    word = splitmix64(seed);
  return s;
}

/// The next xoshiro256** output; advances `s`.
constexpr std::uint64_t xoshiro256_next(xoshiro256_state& s) noexcept {
  const auto rotl = [](std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const std::uint64_t result = rotl(s[1] * 5, 7) * 9;
  const std::uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

/// The top 53 bits of `bits` as a double in [0, 1), every value equally likely.
constexpr double unit_double(std::uint64_t bits) noexcept {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

} // namespace kvlane
