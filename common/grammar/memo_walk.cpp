#include "common/grammar/memo_walk.hpp"

#include <algorithm>
#include <bit>

namespace kvlane::grammar {

void fill_mask_memo(matcher& m, const vocabulary& v, std::span<std::uint64_t> bits) {
  // A state that takes few first bytes has a small walk, which the stepwise walk does without
  // the memo's set-up cost.
  const byte_class first = m.next_bytes();
  int first_bytes = 0;
  for (std::uint64_t w : first.bits) first_bytes += std::popcount(w);
  if (first_bytes <= 8) {
    fill_mask(m, v, bits);
    return;
  }
  thread_local memo_walk w;
  std::fill(bits.begin(), bits.begin() + static_cast<std::ptrdiff_t>(v.words()), 0);
  const bool ok = w.walk(
      m, v,
      [&](std::uint32_t n) {
        for (std::uint32_t j = v.ids_begin_[n]; j < v.ids_begin_[n + 1]; ++j)
          bits[v.ids_[j] >> 6] |= std::uint64_t{1} << (v.ids_[j] & 63);
      },
      [](std::uint32_t, bool) {});
  if (!ok) {
    fill_mask(m, v, bits);
    return;
  }
  if (m.can_end())
    for (std::uint32_t e : v.end_tokens()) bits[e >> 6] |= std::uint64_t{1} << (e & 63);
}

} // namespace kvlane::grammar
