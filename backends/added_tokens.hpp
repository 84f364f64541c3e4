#pragma once

// kvlane::backends::added_tokens — finds a vocabulary's added tokens in text.
//
// Problem it solves: Hugging Face splits text on added tokens ("<|im_end|>",
// "<|eot_id|>", "<think>") before normalizing and pre-tokenizing it, so a
// special token written in a trusted prompt becomes its single id. The match
// is leftmost, then longest, over a byte trie.
//
// Immutable after construction; safe from any thread.

#include "backends/backend.hpp"

#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::backends {

class added_tokens {
public:
  struct match {
    std::size_t begin = 0;
    std::size_t length = 0;
    token_id id = 0;
  };

  /// Adds `content` (non-empty) as token `id`; a repeated content keeps its last id.
  void add(std::string_view content, token_id id);

  bool empty() const noexcept { return nodes_.size() <= 1; }

  /// The leftmost-longest added token in `text` at or after `from`, if any.
  std::optional<match> find(std::string_view text, std::size_t from) const noexcept;

private:
  struct node {
    std::vector<std::pair<unsigned char, std::uint32_t>> children; // sorted by byte
    std::int64_t id = -1;
  };
  std::uint32_t child(std::uint32_t n, unsigned char b) const noexcept;

  std::vector<node> nodes_{1};
  std::bitset<256> first_bytes_;
};

} // namespace kvlane::backends
