#pragma once

// kvlane::grammar utf8 helpers — Unicode code point ranges as UTF-8 byte-range sequences.
//
// Problem it solves: grammars are written over characters ([^"\\], [α-ω], .) but the matcher
// runs over bytes, so that a token's bytes are checked without decoding. A code point range
// becomes a few sequences of byte ranges (the construction of Rust's utf8-ranges), each matching
// exactly the valid UTF-8 encodings of a sub-range; surrogates are never matched.
//
// Pure functions; safe from any thread.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvlane::grammar {

struct byte_range {
  std::uint8_t lo = 0;
  std::uint8_t hi = 0;
};
using byte_range_seq = std::vector<byte_range>;

inline constexpr std::uint32_t max_code_point = 0x10FFFF;

/// Sequences whose union is exactly the UTF-8 encodings of [lo, hi] minus surrogates.
std::vector<byte_range_seq> utf8_sequences(std::uint32_t lo, std::uint32_t hi);

/// Appends the UTF-8 encoding of `cp` (<= max_code_point, not a surrogate).
void append_utf8(std::string& out, std::uint32_t cp);

/// Decodes one code point at `text[i]`, advancing `i`; -1 on invalid UTF-8.
std::int32_t next_code_point(std::string_view text, std::size_t& i);

} // namespace kvlane::grammar
