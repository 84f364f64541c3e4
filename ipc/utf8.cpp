#include "ipc/utf8.hpp"

namespace kvlane::ipc::proto {

namespace {

/// Length of the valid sequence at s[i], 0 if invalid, or -1 if it is a valid
/// prefix cut short by the end of `s`.
int utf8_sequence(std::string_view s, std::size_t i) noexcept {
  const auto c0 = static_cast<unsigned char>(s[i]);
  if (c0 < 0x80)
    return 1;
  int n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    n = 2;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    n = 3;
    if (c0 == 0xE0)
      lo = 0xA0;
    if (c0 == 0xED)
      hi = 0x9F; // no surrogates
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    n = 4;
    if (c0 == 0xF0)
      lo = 0x90;
    if (c0 == 0xF4)
      hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k < n; ++k) {
    if (i + static_cast<std::size_t>(k) >= s.size())
      return -1;
    const auto c = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h)
      return 0;
  }
  return n;
}

} // namespace

bool valid_utf8(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    const int n = utf8_sequence(s, i);
    if (n <= 0)
      return false;
    i += static_cast<std::size_t>(n);
  }
  return true;
}

std::size_t utf8_prefix(std::string_view s, std::size_t max) noexcept {
  if (s.size() <= max)
    return s.size();
  std::size_t cut = max;
  // Back off over continuation bytes so the cut lands on a sequence start.
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80 && max - cut < 3)
    --cut;
  if ((static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80)
    return max; // not UTF-8 anyway: cut where asked
  return cut;
}

std::string utf8_stream::feed(std::string_view bytes) {
  held_.append(bytes);
  std::string out;
  out.reserve(held_.size());
  std::size_t i = 0;
  while (i < held_.size()) {
    const int n = utf8_sequence(held_, i);
    if (n == -1)
      break; // incomplete at the end: keep for the next piece
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(held_, i, static_cast<std::size_t>(n));
    i += static_cast<std::size_t>(n);
  }
  held_.erase(0, i);
  return out;
}

std::string utf8_stream::flush() {
  std::string out;
  if (!held_.empty())
    out = "\xEF\xBF\xBD"; // a truncated sequence at the very end
  held_.clear();
  return out;
}

} // namespace kvlane::ipc::proto
