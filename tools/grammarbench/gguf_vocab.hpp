#pragma once

// kvlane::tools::gguf_vocab — a GGUF model's vocabulary as token byte strings, through the
// project's own GGUF tokenizer (backends/llamacpp), for the grammar tests and kvlane-grammarbench.
//
// Each token is tokenizer::decode({id}): raw bytes for byte-level BPE, nothing for special
// tokens, which is exactly the input grammar::vocabulary expects; the end tokens are the
// tokenizer's stop tokens. Loads with vocab_only (no weights).

#include "common/expected.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace kvlane::tools {

struct gguf_vocab {
  std::vector<std::string> tokens;
  std::vector<std::uint32_t> end_tokens;
};

/// The vocabulary of the GGUF at `path`, or why it cannot be read.
expected<gguf_vocab, std::string> load_gguf_vocab(const std::string& path);

} // namespace kvlane::tools
