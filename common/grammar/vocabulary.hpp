#pragma once

// kvlane::grammar::vocabulary and fill_mask — which tokens a matcher state allows next.
//
// Problem it solves: the sampler needs, per step, the set of token ids whose bytes the grammar
// accepts from the sequence's current state (a bitmask over the model's vocabulary, 151k bits
// for Qwen). Checking every token from scratch repeats the same work for every shared prefix;
// the vocabulary is therefore built once into a byte trie (in preorder, each node knowing where
// its subtree ends), and fill_mask walks it depth-first with the matcher itself, skipping a
// whole subtree as soon as its first byte is rejected. Walking deeper is matcher::feed, going
// back up is matcher::rollback_to, so the walk needs no state of its own.
//
// Tokens are their raw bytes: byte-level BPE tokens decoded back to bytes, SentencePiece byte
// tokens as the byte. Special tokens have no bytes (the tokenizer decodes them to nothing) and
// are never allowed by a grammar; the end tokens (e.g. <|im_end|>, <|eot_id|>) are allowed
// exactly when the matcher can end.
//
// Ownership and threading: a vocabulary is immutable after construction and shared
// (shared_ptr<const vocabulary>) by every sequence of a model; read from any thread.
// fill_mask uses the matcher it is given as scratch and leaves it as it was.

#include "common/grammar/matcher.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvlane::grammar {

class vocabulary {
public:
  /// `tokens[id]`: the token's bytes; empty for special tokens (never allowed).
  /// `end_tokens`: ids allowed when the matcher can end.
  vocabulary(std::span<const std::string> tokens, std::span<const std::uint32_t> end_tokens);

  std::uint32_t size() const noexcept { return size_; }
  /// 64-bit words of a mask over this vocabulary.
  std::size_t words() const noexcept { return (size_ + 63) / 64; }
  std::span<const std::uint32_t> end_tokens() const noexcept { return end_; }
  std::string_view bytes(std::uint32_t id) const noexcept { return bytes_[id]; }
  std::size_t trie_nodes() const noexcept { return byte_.size(); }

private:
  friend void fill_mask(matcher&, const vocabulary&, std::span<std::uint64_t>);
  friend class mask_cache;
  friend void fill_mask_memo(matcher&, const vocabulary&, std::span<std::uint64_t>);
  friend class memo_walk;
  std::uint32_t size_ = 0;
  std::vector<std::string> bytes_;
  std::vector<std::uint32_t> end_;
  // The trie in preorder; node 0 is the root (no byte).
  std::vector<std::uint8_t> byte_;
  std::vector<std::uint16_t> depth_;
  std::vector<std::uint32_t> next_;       ///< first node after this node's subtree
  std::vector<std::uint32_t> ids_begin_;  ///< this node's tokens: ids_[ids_begin_[n] .. ids_begin_[n+1])
  std::vector<std::uint32_t> ids_;
};

/// Sets bit t of `bits` (size >= v.words(), zeroed here) iff token t is allowed next.
void fill_mask(matcher& m, const vocabulary& v, std::span<std::uint64_t> bits);

/// The same mask computed token by token from scratch (the baseline the trie walk is measured
/// against, and its check in tests).
void fill_mask_naive(matcher& m, const vocabulary& v, std::span<std::uint64_t> bits);

} // namespace kvlane::grammar
