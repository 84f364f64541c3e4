#pragma once

// kvlane::backends::split_regex — the regex of a Hugging Face Split pre-tokenizer.
//
// Problem it solves: Llama 3 and Qwen cut text into words with a regex using
// Unicode classes (\p{L}, \p{N}), case-insensitive groups and lookahead.
// PCRE2 (UTF + UCP, JIT-compiled) runs it. With behaviour "Isolated", every
// match is a piece and so is every gap between matches, so the pieces always
// cover the text exactly. Invalid UTF-8 is accepted (PCRE2_MATCH_INVALID_UTF):
// such bytes never match and end up in gap pieces.
//
// Immutable after create(); split() is safe from any thread (match data is
// and the JIT stack are per thread).

#include "common/expected.hpp"

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace kvlane::backends {

class split_regex {
public:
  /// Compiles `pattern`; the error carries PCRE2's message and offset.
  static expected<split_regex, std::string> create(std::string_view pattern);

  split_regex(split_regex&&) noexcept;
  split_regex& operator=(split_regex&&) noexcept;
  ~split_regex();

  /// Calls `piece` with each match and each non-empty gap, in order. Should
  /// the matcher fail (a resource limit), the rest of the text is one piece.
  void split(std::string_view text, const std::function<void(std::string_view)>& piece) const;

  /// The regex Hugging Face's ByteLevel pre-tokenizer uses when use_regex is set (GPT-2's).
  static constexpr std::string_view gpt2_pattern =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

private:
  struct code;
  explicit split_regex(std::unique_ptr<code> c);
  std::unique_ptr<code> code_;
};

} // namespace kvlane::backends
