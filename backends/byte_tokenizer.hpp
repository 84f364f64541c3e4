#pragma once

// kvlane::backends::byte_tokenizer — the simulator's tokenizer.
//
// Problem it solves: the sim needs a tokenizer that round-trips any text
// without a vocabulary file, and speaks the ChatML format so chat requests
// work against it. Tokens 0..255 are the bytes themselves; 256 is
// `<|im_start|>`, which is also the BOS the engine puts before a raw text
// prompt; 257 is `<|im_end|>`, the only stop token. The vocabulary (258) is
// the sim's logits width. encode() never adds BOS: the caller decides.
// decode() skips the special tokens (and anything outside the vocabulary).
//
// Stateless and immutable: every method is safe from any thread.

#include "backends/backend.hpp"

namespace kvlane::backends {

class byte_tokenizer final : public tokenizer {
public:
  static constexpr token_id im_start_token = 256;
  static constexpr token_id im_end_token = 257;
  static constexpr token_id bos_token = im_start_token;
  static constexpr token_id eos_token = im_end_token;
  static constexpr std::uint32_t vocab_size = 258;
  static constexpr std::string_view im_start_text = "<|im_start|>";
  static constexpr std::string_view im_end_text = "<|im_end|>";

  std::vector<token_id> encode(std::string_view text, bool parse_special = false) const override;
  std::string decode(std::span<const token_id> tokens) const override;
  std::optional<token_id> bos() const noexcept override { return bos_token; }
  std::span<const token_id> stop_tokens() const noexcept override { return {&stop_, 1}; }
  std::optional<token_id> special_token(std::string_view text) const noexcept override;
  std::uint32_t size() const noexcept override { return vocab_size; }

private:
  static constexpr token_id stop_ = eos_token;
};

} // namespace kvlane::backends
