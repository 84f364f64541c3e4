#include "ipc/checksum.hpp"

#include <cstring>

namespace kvlane::ipc {

namespace {

// Odd constants: multiplying by an odd number is a bijection modulo 2^64.
constexpr std::uint64_t mul_a = 0x9E3779B97F4A7C15ull;
constexpr std::uint64_t mul_b = 0xC2B2AE3D27D4EB4Full;
constexpr std::uint64_t mul_c = 0x165667B19E3779F9ull;

constexpr std::size_t lanes = 4;
constexpr std::size_t word = sizeof(std::uint64_t);
constexpr std::size_t block = lanes * word;

inline std::uint64_t load_word(const std::byte* p) noexcept {
  std::uint64_t v; // memcpy: the data need not be 8-byte aligned
  std::memcpy(&v, p, word);
  return v;
}

// xor, multiply, xorshift: each step is a bijection of the accumulator for a
// fixed word and of the word for a fixed accumulator, which is what makes a
// single-word change always visible in the result.
inline std::uint64_t mix(std::uint64_t acc, std::uint64_t w) noexcept {
  acc ^= w;
  acc *= mul_a;
  acc ^= acc >> 29;
  return acc;
}

} // namespace

std::uint64_t checksum64(std::span<const std::byte> data, std::uint64_t seed) noexcept {
  std::uint64_t acc[lanes];
  for (std::size_t i = 0; i < lanes; ++i)
    acc[i] = seed ^ (mul_b * (i + 1));

  const std::byte* p = data.data();
  std::size_t left = data.size();
  for (; left >= block; p += block, left -= block) {
    acc[0] = mix(acc[0], load_word(p));
    acc[1] = mix(acc[1], load_word(p + word));
    acc[2] = mix(acc[2], load_word(p + 2 * word));
    acc[3] = mix(acc[3], load_word(p + 3 * word));
  }
  std::size_t lane = 0;
  for (; left >= word; p += word, left -= word, ++lane)
    acc[lane] = mix(acc[lane], load_word(p));
  if (left > 0) {
    std::uint64_t tail = 0;
    std::memcpy(&tail, p, left);
    acc[lane] = mix(acc[lane], tail);
  }

  std::uint64_t h = seed ^ (static_cast<std::uint64_t>(data.size()) * mul_b);
  for (std::size_t i = 0; i < lanes; ++i)
    h = mix(h, acc[i]);
  h ^= h >> 33;
  h *= mul_c;
  h ^= h >> 29;
  return h;
}

} // namespace kvlane::ipc
