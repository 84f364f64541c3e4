#include "backends/unicode_nfc.hpp"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

namespace kvlane::backends {

namespace {

// Length of the well-formed UTF-8 sequence at the start of `s`, 0 if ill-formed
// (overlong forms, surrogates and code points above U+10FFFF are ill-formed).
std::size_t utf8_sequence(std::string_view s) noexcept {
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80)
    return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0)
      lo = 0xA0;
    if (b0 == 0xED)
      hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0)
      lo = 0x90;
    if (b0 == 0xF4)
      hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < n)
    return 0;
  const auto b1 = static_cast<unsigned char>(s[1]);
  if (b1 < lo || b1 > hi)
    return 0;
  for (std::size_t i = 2; i < n; ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80)
      return 0;
  return n;
}

void normalize_run(const icu::Normalizer2& nfc, std::string_view run, std::string& out) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::StringPiece piece(run.data(), static_cast<std::int32_t>(run.size()));
  if (nfc.isNormalizedUTF8(piece, status) && U_SUCCESS(status)) {
    out.append(run);
    return;
  }
  status = U_ZERO_ERROR;
  std::string normalized;
  icu::StringByteSink<std::string> sink(&normalized);
  nfc.normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status))
    out.append(run); // cannot happen for well-formed input; keep the text rather than lose it
  else
    out.append(normalized);
}

} // namespace

std::string to_nfc(std::string_view text) {
  bool ascii = true;
  for (char c : text)
    ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii)
    return std::string(text);

  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status) || !nfc)
    return std::string(text);

  std::string out;
  out.reserve(text.size());
  std::size_t run_begin = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t n = utf8_sequence(text.substr(i));
    if (n > 0) {
      i += n;
      continue;
    }
    normalize_run(*nfc, text.substr(run_begin, i - run_begin), out);
    out.push_back(text[i]); // an ill-formed byte passes through
    ++i;
    run_begin = i;
  }
  normalize_run(*nfc, text.substr(run_begin), out);
  return out;
}

} // namespace kvlane::backends
