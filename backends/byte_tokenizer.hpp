#pragma once

// kvlane::backends::byte_tokenizer — the simulator's tokenizer.
//
// Problem it solves: the sim needs a tokenizer that round-trips any text
// without a vocabulary file. Tokens 0..255 are the bytes themselves, 256 is
// BOS and 257 is EOS (vocab 258). encode() never adds BOS: the caller decides.
// decode() skips the special tokens (and anything outside the vocabulary).
//
// Stateless and immutable: every method is safe from any thread.

#include "backends/backend.hpp"

namespace kvlane::backends {

class byte_tokenizer final : public tokenizer {
public:
  static constexpr token_id bos_token = 256;
  static constexpr token_id eos_token = 257;
  static constexpr std::uint32_t vocab_size = 258;

  std::vector<token_id> encode(std::string_view text) const override;
  std::string decode(std::span<const token_id> tokens) const override;
  token_id bos() const noexcept override { return bos_token; }
  token_id eos() const noexcept override { return eos_token; }
};

} // namespace kvlane::backends
