#pragma once

// kvlane::actors::prefix_index — finds the retained KV that shares the longest
// token prefix with a new prompt.
//
// Problem it solves: chats and agents resend their whole history every turn.
// When a request ends, its KV (prompt + generated tokens) is retained; a later
// prompt that starts with those tokens needs only the rest prefilled. The
// index answers "which retained entry, in this scope, shares the longest
// prefix with these tokens, and how long is it" — values in, a decision out,
// no actors, no clocks.
//
// How: hash chains over fixed blocks of `block_tokens` tokens. Block k of an
// entry is keyed by H(scope, tokens[0 .. k*B)), computed incrementally, so a
// lookup hashes the prompt once and probes one key per block, stopping at the
// first miss. At the deepest hit every candidate is checked token by token
// (a hash collision can never produce a wrong match) and extended token by
// token past the last full block, so the match is exact to the token, not
// block-aligned: a chat's next turn matches its whole previous turn.
// A radix tree would find the same matches; hash chains need no node
// splitting, no per-token nodes, and memory proportional to tokens / block.
//
// Scope: a key is seeded with (model identity, owner). The caller decides the
// owner: the connecting user's uid (the default: no user can hit another
// user's entries), or one shared owner for a deployment that widens reuse.
//
// Threading: none; owned and used by one scheduler. Memory: the tokens of each
// entry plus one key per full block; the owner bounds the number of entries.

#include "backends/backend.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace kvlane::actors {

/// Who may reuse an entry: only lookups with an equal scope find it.
struct prefix_scope {
  std::uint64_t model_identity = 0; ///< backends::backend_info::identity
  std::uint64_t owner = 0;          ///< peer uid, or a shared owner when reuse is widened
  friend bool operator==(const prefix_scope&, const prefix_scope&) = default;
};

using prefix_entry_id = std::uint64_t;

struct prefix_match {
  prefix_entry_id entry = 0;
  std::uint32_t length = 0; ///< tokens shared with the prompt, >= block_tokens
};

class prefix_index {
public:
  /// block_tokens >= 1: the unit of the hash chains, and the shortest prefix
  /// a lookup can find.
  explicit prefix_index(std::uint32_t block_tokens);

  std::uint32_t block_tokens() const noexcept { return block_; }

  /// Adds (or replaces) entry `id` holding `tokens` in `scope`. An entry
  /// shorter than one block is kept nowhere (it could never be found).
  /// Returns whether it was indexed.
  bool insert(prefix_entry_id id, prefix_scope scope, std::span<const backends::token_id> tokens);

  /// Removes entry `id`; unknown ids are ignored. Returns whether it existed.
  bool erase(prefix_entry_id id);

  bool contains(prefix_entry_id id) const { return entries_.contains(id); }

  /// The tokens entry `id` holds, or empty if unknown.
  std::span<const backends::token_id> tokens(prefix_entry_id id) const;

  /// The entry of `scope` sharing the longest prefix with `prompt`, at most
  /// `max_length` tokens long (a caller that must still prefill the prompt's
  /// last token passes prompt.size() - 1). Ties go to the newest insertion.
  /// Nothing when no entry shares a full block.
  std::optional<prefix_match> longest_match(prefix_scope scope,
                                            std::span<const backends::token_id> prompt,
                                            std::uint32_t max_length) const;

  std::size_t size() const noexcept { return entries_.size(); }
  std::size_t keys() const noexcept { return blocks_.size(); }

private:
  struct entry {
    prefix_scope scope;
    std::vector<backends::token_id> tokens;
    std::vector<std::uint64_t> keys; ///< one per full block, in order
    std::uint64_t inserted = 0;      ///< insertion counter, for ties
  };

  std::vector<std::uint64_t> chain_keys(prefix_scope scope,
                                        std::span<const backends::token_id> tokens,
                                        std::size_t max_blocks) const;

  std::uint32_t block_;
  std::uint64_t inserts_ = 0;
  std::unordered_map<prefix_entry_id, entry> entries_;
  std::unordered_map<std::uint64_t, std::vector<prefix_entry_id>> blocks_; ///< key -> entries
};

} // namespace kvlane::actors
