#pragma once

// kvlane::backends::bpe_model — byte-pair encoding of one pre-tokenized word.
//
// Problem it solves: the core of a Hugging Face "BPE" model over raw bytes.
// A word starts as one symbol per byte; the adjacent pair with the lowest
// merge rank is merged (the leftmost one on ties) until no ranked pair is
// left. With ignore_merges, a word that is itself in the vocabulary is one
// token without merging (Llama 3). Bytes without a vocabulary entry are
// dropped, as Hugging Face does when the model has no unknown token.
//
// Built once by bpe_model::builder, then immutable apart from a bounded
// per-word cache guarded by sharded mutexes: encode_word() is safe from any
// thread.

#include "backends/backend.hpp"
#include "common/expected.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvlane::backends {

class bpe_model {
public:
  struct string_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  using vocab_map = std::unordered_map<std::string, token_id, string_hash, std::equal_to<>>;

  /// vocab: raw bytes -> id. merges: pairs of raw-byte tokens in rank order
  /// (rank = index). Errors name the merge whose parts or result are missing.
  static expected<bpe_model, std::string>
  create(vocab_map vocab, const std::vector<std::pair<std::string, std::string>>& merges,
         bool ignore_merges);

  bpe_model(bpe_model&&) noexcept;
  bpe_model& operator=(bpe_model&&) noexcept;
  ~bpe_model();

  /// Appends the tokens of `word` (raw bytes, non-empty) to `out`.
  void encode_word(std::string_view word, std::vector<token_id>& out) const;

  /// The id of a vocabulary entry given its raw bytes.
  const token_id* find(std::string_view bytes) const noexcept;

  const vocab_map& vocab() const noexcept { return vocab_; }

  /// Words up to this many bytes are cached; the cache holds at most
  /// cache_capacity words (a full shard is cleared).
  static constexpr std::size_t cache_word_bytes = 64;
  static constexpr std::size_t cache_capacity = 1 << 16;

private:
  struct merge {
    std::uint32_t rank;
    token_id result;
  };
  struct cache_shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<token_id>, string_hash, std::equal_to<>> words;
  };
  static constexpr std::size_t cache_shards = 16;

  bpe_model(vocab_map vocab, bool ignore_merges);
  void merge_word(std::string_view word, std::vector<token_id>& out) const;
  const merge* find_merge(token_id left, token_id right) const noexcept;

  vocab_map vocab_;
  std::unordered_map<std::uint64_t, merge> merges_;
  std::array<std::int64_t, 256> byte_token_{}; // -1: the byte has no vocabulary entry
  bool ignore_merges_ = false;
  std::unique_ptr<std::array<cache_shard, cache_shards>> cache_;
};

} // namespace kvlane::backends
