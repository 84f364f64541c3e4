#pragma once

// kvlane::backends::unicode_nfc — Unicode NFC for the NFC normalizer (Qwen).
//
// Problem it solves: Qwen's tokenizer normalizes text to NFC before
// pre-tokenizing ("e" + U+0301 becomes "é"). ICU's Normalizer2 does the work.
// Text arriving from clients need not be valid UTF-8: only the well-formed
// runs are normalized; ill-formed bytes pass through unchanged.
//
// Safe from any thread.

#include <string>
#include <string_view>

namespace kvlane::backends {

/// `text` in NFC. ASCII-only and already-normalized text is returned unchanged.
std::string to_nfc(std::string_view text);

} // namespace kvlane::backends
