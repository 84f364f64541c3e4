#include "actors/prefix_index.hpp"

#include "common/random.hpp"

#include <algorithm>

namespace kvlane::actors {

prefix_index::prefix_index(std::uint32_t block_tokens) : block_(std::max<std::uint32_t>(block_tokens, 1)) {}

std::vector<std::uint64_t> prefix_index::chain_keys(prefix_scope scope,
                                                    std::span<const backends::token_id> tokens,
                                                    std::size_t max_blocks) const {
  const std::size_t blocks = std::min(tokens.size() / block_, max_blocks);
  std::vector<std::uint64_t> keys;
  keys.reserve(blocks);
  std::uint64_t h = mix64(mix64(scope.model_identity ^ 0x9E3779B97F4A7C15ull) ^ scope.owner);
  for (std::size_t b = 0; b < blocks; ++b) {
    for (std::size_t i = b * block_; i < (b + 1) * block_; ++i)
      h = mix64(h ^ (tokens[i] + 0x100000001B3ull));
    keys.push_back(h);
  }
  return keys;
}

bool prefix_index::insert(prefix_entry_id id, prefix_scope scope,
                          std::span<const backends::token_id> tokens) {
  erase(id);
  if (tokens.size() < block_)
    return false;
  entry e;
  e.scope = scope;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.keys = chain_keys(scope, tokens, tokens.size());
  e.inserted = ++inserts_;
  for (const std::uint64_t key : e.keys)
    blocks_[key].push_back(id);
  entries_.emplace(id, std::move(e));
  return true;
}

bool prefix_index::erase(prefix_entry_id id) {
  const auto it = entries_.find(id);
  if (it == entries_.end())
    return false;
  for (const std::uint64_t key : it->second.keys) {
    const auto bucket = blocks_.find(key);
    if (bucket == blocks_.end())
      continue;
    std::erase(bucket->second, id);
    if (bucket->second.empty())
      blocks_.erase(bucket);
  }
  entries_.erase(it);
  return true;
}

std::span<const backends::token_id> prefix_index::tokens(prefix_entry_id id) const {
  const auto it = entries_.find(id);
  if (it == entries_.end())
    return {};
  return it->second.tokens;
}

std::optional<prefix_match> prefix_index::longest_match(prefix_scope scope,
                                                        std::span<const backends::token_id> prompt,
                                                        std::uint32_t max_length) const {
  const std::size_t limit = std::min<std::size_t>(prompt.size(), max_length);
  if (limit < block_)
    return std::nullopt;
  const auto keys = chain_keys(scope, prompt, limit / block_);
  // Probe block by block; a chain that misses at block k misses deeper too.
  std::size_t depth = 0;
  while (depth < keys.size() && blocks_.contains(keys[depth]))
    ++depth;
  // From the deepest hit down: a collision at one depth (tokens differ)
  // leaves the shallower depths to try.
  for (std::size_t d = depth; d > 0; --d) {
    const auto bucket = blocks_.find(keys[d - 1]);
    std::optional<prefix_match> best;
    std::uint64_t best_inserted = 0;
    const std::size_t aligned = d * block_;
    for (const prefix_entry_id id : bucket->second) {
      const entry& e = entries_.at(id);
      if (!(e.scope == scope) || !std::equal(prompt.begin(), prompt.begin() + aligned, e.tokens.begin()))
        continue;
      const std::size_t end = std::min(limit, e.tokens.size());
      std::size_t length = aligned;
      while (length < end && prompt[length] == e.tokens[length])
        ++length;
      if (!best || length > best->length || (length == best->length && e.inserted > best_inserted)) {
        best = prefix_match{id, static_cast<std::uint32_t>(length)};
        best_inserted = e.inserted;
      }
    }
    if (best)
      return best;
  }
  return std::nullopt;
}

} // namespace kvlane::actors
