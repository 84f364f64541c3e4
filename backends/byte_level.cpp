#include "backends/byte_level.hpp"

#include <array>
#include <cstdint>

namespace kvlane::backends {

namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the
// other 68 bytes to U+0100 upwards in byte order.
struct alphabet {
  std::array<char32_t, 256> char_of_byte{};
  std::array<std::int16_t, 0x200> byte_of_char{}; // every alphabet character is < U+0144

  alphabet() {
    byte_of_char.fill(-1);
    char32_t next = 0x100;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t c = printable ? static_cast<char32_t>(b) : next++;
      char_of_byte[b] = c;
      byte_of_char[c] = static_cast<std::int16_t>(b);
    }
  }
};

const alphabet& table() {
  static const alphabet a;
  return a;
}

} // namespace

std::optional<std::string> byte_level_decode(std::string_view token) {
  const auto& t = table();
  std::string out;
  out.reserve(token.size());
  std::size_t i = 0;
  while (i < token.size()) {
    const auto b0 = static_cast<unsigned char>(token[i]);
    char32_t c = 0;
    if (b0 < 0x80) {
      c = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < token.size()
               && (static_cast<unsigned char>(token[i + 1]) & 0xC0) == 0x80) {
      c = static_cast<char32_t>(((b0 & 0x1F) << 6) | (token[i + 1] & 0x3F));
      if (c < 0x80)
        return std::nullopt; // overlong
      i += 2;
    } else {
      return std::nullopt; // every alphabet character takes one or two UTF-8 bytes
    }
    if (c >= t.byte_of_char.size() || t.byte_of_char[c] < 0)
      return std::nullopt;
    out.push_back(static_cast<char>(t.byte_of_char[c]));
  }
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  const auto& t = table();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) {
    const char32_t c = t.char_of_byte[static_cast<unsigned char>(ch)];
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

} // namespace kvlane::backends
