#pragma once

// kvlane::grammar::mask_cache — token masks from per-position precomputed token sets (the idea
// of xgrammar's adaptive token mask cache).
//
// Problem it solves: fill_mask walks the vocabulary trie from the current state; inside a JSON
// string almost every token is allowed, so the walk visits most of the trie (about 330k nodes
// for Qwen2's 151k tokens) and takes tens of milliseconds. Yet what a token does while it stays
// within the top few frames of a stack (e.g. string content up to its closing quote) does not
// depend on the rest of the stack. For a stack's top `frames` positions, one walk (done once and
// kept) sorts every token into: accepted whatever lies below, rejected whatever lies below, or
// uncertain (it runs past those frames with bytes left). A mask is then the union of the
// accepted sets of the state's stacks plus the uncertain tokens checked against the real state,
// in trie order so shared prefixes are fed once.
//
// Entries are built with memo_walk. An entry is built the second time its key is met (the
// first time, fill_mask_memo answers), so keys met once, such as the positions of a long {m,n} expansion, cost no more
// than without the cache. Memory is bounded by `max_bytes`; past it, no entry is added.
//
// Ownership and threading: one per (grammar, vocabulary) pair, shared by every sequence using
// that grammar; fill() may be called from any number of threads (entries are immutable,
// the table is under a mutex, an entry is built outside it).

#include "common/grammar/vocabulary.hpp"

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvlane::grammar {

struct mask_cache_limits {
  std::uint32_t frames = 3;              ///< stack positions in a key
  std::size_t max_bytes = 64u << 20;     ///< all entries together
};

class mask_cache {
public:
  mask_cache(std::shared_ptr<const grammar> g, std::shared_ptr<const vocabulary> v, mask_cache_limits lim = {});

  /// Same result as fill_mask(m, vocabulary, bits); `m` must run this cache's grammar and is
  /// left as it was.
  void fill(matcher& m, std::span<std::uint64_t> bits);

  struct stats {
    std::size_t entries = 0;
    std::size_t bytes = 0;
    std::size_t hits = 0;
    std::size_t plain_walks = 0; ///< masks answered by fill_mask_memo because an entry was missing
  };
  stats counters() const;

private:
  struct entry {
    std::vector<std::uint64_t> accepted_bits; ///< a bitset when many tokens are accepted...
    std::vector<std::uint32_t> accepted_ids;  ///< ...else their ids
    std::vector<std::uint32_t> uncertain;     ///< trie nodes, ascending (= lexicographic order)
    std::size_t bytes() const {
      return accepted_bits.size() * 8 + accepted_ids.size() * 4 + uncertain.size() * 4 + sizeof(entry);
    }
  };
  std::shared_ptr<const entry> build(std::span<const std::uint32_t> frames, bool bottom) const;

  std::shared_ptr<const grammar> g_;
  std::shared_ptr<const vocabulary> v_;
  mask_cache_limits lim_;
  std::uint32_t build_after_ = 2;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const entry>> entries_;
  std::unordered_map<std::string, std::uint32_t> seen_; ///< keys met without an entry
  stats stats_;
};

} // namespace kvlane::grammar
