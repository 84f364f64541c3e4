#include "tools/bench/block_prompt.hpp"

#include <algorithm>

namespace kvlane::tools::bench {

namespace {

// SplitMix64's finalizer: every input bit reaches every output bit.
std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

} // namespace

void append_block_tokens(std::uint64_t id, std::uint32_t count,
                         std::vector<backends::token_id>& out) {
  const std::uint64_t seed = mix(id);
  for (std::uint32_t k = 0; k < count; ++k) {
    const std::uint64_t h = mix(seed ^ (std::uint64_t{k} * 0xD1B54A32D192ED03ull));
    // About one space in seven, letters otherwise: 27 symbols, so two
    // different blocks share their first n tokens with probability ~27^-n.
    out.push_back(h % 7 == 0 ? backends::token_id{' '}
                             : static_cast<backends::token_id>('a' + (h >> 8) % 26));
  }
}

std::vector<backends::token_id> block_prompt(std::span<const std::uint64_t> hash_ids,
                                             std::uint32_t block_tokens, std::uint32_t length) {
  std::vector<backends::token_id> out;
  if (block_tokens == 0)
    return out;
  const std::uint64_t room = std::uint64_t{block_tokens} * hash_ids.size();
  const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(length, room));
  out.reserve(n);
  for (std::size_t i = 0; i < hash_ids.size() && out.size() < n; ++i)
    append_block_tokens(hash_ids[i], std::min<std::uint32_t>(block_tokens,
                                                             n - static_cast<std::uint32_t>(out.size())),
                        out);
  return out;
}

} // namespace kvlane::tools::bench
