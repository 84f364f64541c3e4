#include "common/grammar/utf8_ranges.hpp"

namespace kvlane::grammar {

namespace {

int encode(std::uint32_t cp, std::uint8_t* out) {
  if (cp < 0x80) { out[0] = static_cast<std::uint8_t>(cp); return 1; }
  if (cp < 0x800) {
    out[0] = static_cast<std::uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<std::uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<std::uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<std::uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<std::uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<std::uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<std::uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<std::uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<std::uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

} // namespace

std::vector<byte_range_seq> utf8_sequences(std::uint32_t lo, std::uint32_t hi) {
  std::vector<byte_range_seq> out;
  if (hi > max_code_point) hi = max_code_point;
  if (lo > hi) return out;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> stack{{lo, hi}};
  while (!stack.empty()) {
    auto [start, end] = stack.back();
    stack.pop_back();
    for (;;) {
      // Cut out the surrogates, which UTF-8 never encodes.
      if (start < 0xE000 && end > 0xD7FF) {
        if (start <= 0xD7FF && end >= 0xE000) {
          stack.push_back({0xE000, end});
          end = 0xD7FF;
        } else if (start >= 0xD800) {
          if (end < 0xE000) break;
          start = 0xE000;
        } else {
          end = 0xD7FF;
        }
        continue;
      }
      bool split = false;
      // Split where the encoded length changes.
      for (std::uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
        if (start <= max && max < end) {
          stack.push_back({max + 1, end});
          end = max;
          split = true;
          break;
        }
      }
      if (split) continue;
      // Split until every continuation byte position spans a full or aligned range.
      for (int i = 1; i < 4 && !split; ++i) {
        std::uint32_t m = (1u << (6 * i)) - 1;
        if ((start & ~m) != (end & ~m)) {
          if ((start & m) != 0) {
            stack.push_back({(start | m) + 1, end});
            end = start | m;
            split = true;
          } else if ((end & m) != m) {
            stack.push_back({end & ~m, end});
            end = (end & ~m) - 1;
            split = true;
          }
        }
      }
      if (split) continue;
      std::uint8_t a[4], b[4];
      int n = encode(start, a);
      encode(end, b);
      byte_range_seq seq;
      for (int k = 0; k < n; ++k) seq.push_back({a[k], b[k]});
      out.push_back(std::move(seq));
      break;
    }
  }
  return out;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  std::uint8_t buf[4];
  int n = encode(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
}

std::int32_t next_code_point(std::string_view text, std::size_t& i) {
  auto byte = [&](std::size_t k) { return static_cast<std::uint8_t>(text[k]); };
  std::uint8_t b0 = byte(i);
  int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + static_cast<std::size_t>(n) > text.size()) return -1;
  std::uint32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1Fu) : n == 3 ? (b0 & 0x0Fu) : (b0 & 0x07u);
  for (int k = 1; k < n; ++k) {
    std::uint8_t c = byte(i + static_cast<std::size_t>(k));
    if ((c >> 6) != 2) return -1;
    cp = (cp << 6) | (c & 0x3Fu);
  }
  static constexpr std::uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_for_len[n] || cp > max_code_point || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  i += static_cast<std::size_t>(n);
  return static_cast<std::int32_t>(cp);
}

} // namespace kvlane::grammar
