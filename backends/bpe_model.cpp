#include "backends/bpe_model.hpp"

#include <algorithm>
#include <functional>
#include <queue>

namespace kvlane::backends {

namespace {

constexpr std::uint64_t pair_key(token_id left, token_id right) noexcept {
  return (static_cast<std::uint64_t>(left) << 32) | right;
}

} // namespace

bpe_model::bpe_model(vocab_map vocab, bool ignore_merges)
  : vocab_(std::move(vocab)), ignore_merges_(ignore_merges),
    cache_(std::make_unique<std::array<cache_shard, cache_shards>>()) {
  byte_token_.fill(-1);
  for (unsigned b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (const auto* id = find(std::string_view(&c, 1)))
      byte_token_[b] = *id;
  }
}

bpe_model::bpe_model(bpe_model&&) noexcept = default;
bpe_model& bpe_model::operator=(bpe_model&&) noexcept = default;
bpe_model::~bpe_model() = default;

expected<bpe_model, std::string>
bpe_model::create(vocab_map vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                  bool ignore_merges) {
  bpe_model m(std::move(vocab), ignore_merges);
  m.merges_.reserve(merges.size());
  std::string joined;
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto* l = m.find(left);
    const auto* r = m.find(right);
    joined.assign(left).append(right);
    const auto* result = m.find(joined);
    if (!l || !r || !result)
      return unexpected("merge " + std::to_string(rank) + " joins tokens missing from the vocabulary ("
                        + (!l ? "left" : !r ? "right" : "result") + " part)");
    // A repeated pair keeps its first (lowest) rank, as in Hugging Face.
    m.merges_.try_emplace(pair_key(*l, *r), merge{static_cast<std::uint32_t>(rank), *result});
  }
  return m;
}

const token_id* bpe_model::find(std::string_view bytes) const noexcept {
  const auto it = vocab_.find(bytes);
  return it == vocab_.end() ? nullptr : &it->second;
}

const bpe_model::merge* bpe_model::find_merge(token_id left, token_id right) const noexcept {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void bpe_model::encode_word(std::string_view word, std::vector<token_id>& out) const {
  if (word.empty())
    return;
  if (ignore_merges_)
    if (const auto* id = find(word)) {
      out.push_back(*id);
      return;
    }
  if (word.size() > cache_word_bytes) {
    merge_word(word, out);
    return;
  }
  auto& shard = (*cache_)[std::hash<std::string_view>{}(word) % cache_shards];
  {
    std::lock_guard lock(shard.mutex);
    if (const auto it = shard.words.find(word); it != shard.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = out.size();
  merge_word(word, out);
  std::vector<token_id> tokens(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  std::lock_guard lock(shard.mutex);
  if (shard.words.size() >= cache_capacity / cache_shards)
    shard.words.clear();
  shard.words.try_emplace(std::string(word), std::move(tokens));
}

// The merge loop of Hugging Face's BPE (word.rs merge_all): a min-heap of
// candidate pairs ordered by (rank, position); a popped candidate whose
// symbols changed since it was pushed is stale and skipped.
void bpe_model::merge_word(std::string_view word, std::vector<token_id>& out) const {
  struct symbol {
    token_id id;
    std::int32_t prev;
    std::int32_t next;
    bool alive;
  };
  struct candidate {
    std::uint32_t rank;
    std::int32_t pos;
    token_id left;
    token_id right;
    bool operator>(const candidate& o) const noexcept {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };

  std::vector<symbol> symbols;
  symbols.reserve(word.size());
  for (char c : word) {
    const auto id = byte_token_[static_cast<unsigned char>(c)];
    if (id < 0)
      continue; // no vocabulary entry and no unknown token: dropped
    const auto n = static_cast<std::int32_t>(symbols.size());
    symbols.push_back(symbol{static_cast<token_id>(id), n - 1, n + 1, true});
  }
  if (symbols.empty())
    return;
  symbols.back().next = -1;

  std::priority_queue<candidate, std::vector<candidate>, std::greater<>> queue;
  auto consider = [&](std::int32_t pos) {
    const auto next = symbols[static_cast<std::size_t>(pos)].next;
    if (next < 0)
      return;
    const token_id l = symbols[static_cast<std::size_t>(pos)].id;
    const token_id r = symbols[static_cast<std::size_t>(next)].id;
    if (const auto* m = find_merge(l, r))
      queue.push(candidate{m->rank, pos, l, r});
  };
  for (std::int32_t i = 0; i + 1 < static_cast<std::int32_t>(symbols.size()); ++i)
    consider(i);

  while (!queue.empty()) {
    const candidate c = queue.top();
    queue.pop();
    auto& left = symbols[static_cast<std::size_t>(c.pos)];
    if (!left.alive || left.id != c.left || left.next < 0)
      continue;
    auto& right = symbols[static_cast<std::size_t>(left.next)];
    if (right.id != c.right)
      continue;
    left.id = find_merge(c.left, c.right)->result;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0)
      symbols[static_cast<std::size_t>(right.next)].prev = c.pos;
    if (left.prev >= 0)
      consider(left.prev);
    consider(c.pos);
  }
  for (std::int32_t i = 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next)
    out.push_back(symbols[static_cast<std::size_t>(i)].id);
}

} // namespace kvlane::backends
