#pragma once

// kvlane::backends::byte_level — the GPT-2 byte <-> character alphabet.
//
// Problem it solves: byte-level BPE vocabularies (GPT-2, Llama 3, Qwen) write
// every byte as one printable Unicode character ("Ġ" for a space, "Ċ" for a
// newline) so tokens are valid strings in tokenizer.json. kvlane tokenizes
// raw bytes, so at load time it turns each vocabulary entry back into the
// bytes it stands for.
//
// Pure functions over a constant table; safe from any thread.

#include <optional>
#include <string>
#include <string_view>

namespace kvlane::backends {

/// The bytes a byte-level token string stands for, or nullopt if `token` is
/// not valid UTF-8 or holds a character outside the 256-character alphabet.
std::optional<std::string> byte_level_decode(std::string_view token);

/// The byte-level spelling of raw bytes (each byte becomes one character).
std::string byte_level_encode(std::string_view bytes);

} // namespace kvlane::backends
