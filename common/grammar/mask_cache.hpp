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
// Counted repetitions: a key stops at the first repetition frame on the stack and leaves out its
// count (and its bounds), so every x{m,n} of the same item with the same continuation shares one
// entry: e.g. the inside of every length-bounded JSON string. Such an entry records, per
// accepted token, how many items it starts (a token of 5 characters needs 5 more allowed), and,
// for a token that leaves the repetition and goes on after it (a closing quote), the exact count
// it leaves with; fill() compares both with the stack's real count and bounds.
//
// A state's mask combines the entries of its stacks; the combination (one accepted bitset, the
// counted tokens per repetition frame, the uncertain tokens with their bytes laid out in trie
// order) is kept too, keyed by the state's stack keys, so a mask costs one or two bitset ORs
// plus the check of the uncertain tokens. That check's verdicts are kept per whole matcher
// state (every stack spelled out; at most 4096 states, then forgotten): inside an unbounded
// string the state repeats from one token to the next.
//
// Entries are built with memo_walk the first time their key is met. Memory is bounded by
// `max_bytes`; past it, no entry is added and a missing one is answered by fill_mask_memo.
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
    std::size_t plain_walks = 0; ///< masks answered by fill_mask_memo (no room for an entry, or a walk bound passed)
    std::size_t verdict_hits = 0; ///< masks whose uncertain tokens' verdicts were known for the whole state
  };
  stats counters() const;

private:
  struct entry;
  struct group_entry;
  struct state_entry;
  struct key_t;
  std::shared_ptr<const entry> build(const key_t& key) const;
  std::shared_ptr<const state_entry> combine(std::span<const std::shared_ptr<const entry>> parts,
                                             std::span<const std::string> part_keys,
                                             std::span<const std::uint32_t> group_of);

  std::shared_ptr<const grammar> g_;
  std::shared_ptr<const vocabulary> v_;
  mask_cache_limits lim_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const entry>> entries_;
  std::unordered_map<std::string, std::shared_ptr<const group_entry>> groups_;
  std::unordered_map<std::string, std::shared_ptr<const state_entry>> states_;
  /// Per whole matcher state (every stack spelled out) with uncertain tokens: the indices of
  /// those it takes. At most max_verdicts, then cleared.
  static constexpr std::size_t max_verdicts = 4096;
  std::unordered_map<std::string, std::vector<std::uint32_t>> verdicts_;
  stats stats_;
};

} // namespace kvlane::grammar
