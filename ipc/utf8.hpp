#pragma once

// kvlane::ipc::proto UTF-8 handling: validation, boundary-safe truncation and
// the streaming sanitizer that turns decoded token bytes into valid text.
//
// Every text field of the protocol is UTF-8; decoders reject invalid text,
// encoders cut text at a sequence boundary to fit. Pure functions, plus
// utf8_stream, a plain single-threaded value.

#include <cstddef>
#include <string>
#include <string_view>

namespace kvlane::ipc::proto {

bool valid_utf8(std::string_view s) noexcept;

/// The longest prefix of `s` of at most `max` bytes that does not split a
/// UTF-8 sequence.
std::size_t utf8_prefix(std::string_view s, std::size_t max) noexcept;

/// Turns a byte stream that arrives in pieces into valid UTF-8: complete
/// sequences pass, an incomplete sequence at the end of a piece is held back
/// until the next, and invalid bytes become U+FFFD. Concatenating feed()
/// results and flush() gives the same text as one feed() of the whole stream
/// followed by flush().
class utf8_stream {
public:
  std::string feed(std::string_view bytes);
  std::string flush();

private:
  std::string held_;
};

} // namespace kvlane::ipc::proto
