#include "common/grammar/mask_cache.hpp"

#include "common/grammar/memo_walk.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

namespace kvlane::grammar {

namespace {

void set_bit(std::span<std::uint64_t> bits, std::uint32_t id) { bits[id >> 6] |= std::uint64_t{1} << (id & 63); }

} // namespace

/// What one stack's top frames make of every token.
struct mask_cache::entry {
  /// Tokens accepted whatever lies below (without a repetition frame: all of them; with one: the
  /// ones that start no item beyond the current one) — a bitset when many, else their ids.
  std::vector<std::uint64_t> accepted_bits;
  std::vector<std::uint32_t> accepted_ids;
  /// With a repetition frame: (items started, token) for the tokens that stay inside it (or leave
  /// it without consuming more), ascending; accepted when the count allows that many more.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> inside;
  /// With a repetition frame: (count on leaving, token) for the tokens that leave it and go on
  /// after it within the frames; accepted when that count is within the bounds.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> left;
  std::vector<std::uint32_t> uncertain; ///< trie nodes, ascending (= lexicographic order)
  std::size_t bytes() const {
    return accepted_bits.size() * 8 + accepted_ids.size() * 4 + inside.size() * 8 + left.size() * 8 +
           uncertain.size() * 4 + sizeof(entry);
  }
};

/// The counted tokens of the stacks on one repetition frame, merged.
struct mask_cache::group_entry {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> inside; ///< as entry::inside, one per token
  /// With many of them, upto[k] holds those needing at most k as a bitset (k < upto.size()).
  std::vector<std::vector<std::uint64_t>> upto;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> left;   ///< as entry::left
  std::size_t bytes() const {
    std::size_t b = inside.size() * 8 + left.size() * 8 + sizeof(group_entry);
    for (const auto& u : upto) b += u.size() * 8;
    return b;
  }
};

/// The entries of one state's stacks combined: what a mask ORs and checks.
struct mask_cache::state_entry {
  std::vector<std::uint64_t> accepted_bits; ///< accepted whatever the counts (bitset or ids)
  std::vector<std::uint32_t> accepted_ids;
  /// Per repetition frame of the state (in the order of the key): its counted tokens, shared by
  /// every state with the same stacks on such a frame (e.g. every string's inside).
  std::vector<std::shared_ptr<const group_entry>> groups;
  /// The uncertain tokens' trie nodes in trie order, and their bytes one after the other.
  std::vector<std::uint32_t> uncertain;
  std::vector<std::uint32_t> offsets; ///< bytes of uncertain[i]: flat[offsets[i], offsets[i + 1])
  std::string flat;
  std::vector<std::uint32_t> first;   ///< the first token id of uncertain[i]
  std::vector<std::uint16_t> lcp;     ///< bytes uncertain[i] shares with uncertain[i - 1]
  std::uint32_t longest = 0;          ///< bytes of the longest uncertain token
  std::size_t bytes() const {
    return accepted_bits.size() * 8 + accepted_ids.size() * 4 + uncertain.size() * 14 + flat.size() + sizeof(state_entry);
  }
};

/// A stack's key: its top frames' positions down to the first repetition frame, which is kept
/// without its count (`repeat_node`), or `frames` of them.
struct mask_cache::key_t {
  std::string text;
  std::vector<std::uint32_t> frames; ///< positions, top first
  bool bottom = false;               ///< the stack ends below the last frame
  std::uint32_t repeat_node = matcher::nil; ///< the repetition frame in the real matcher
};

mask_cache::mask_cache(std::shared_ptr<const grammar> g, std::shared_ptr<const vocabulary> v, mask_cache_limits lim)
    : g_(std::move(g)), v_(std::move(v)), lim_(lim) {
  if (lim_.frames == 0) lim_.frames = 1;
}

mask_cache::stats mask_cache::counters() const {
  std::lock_guard lock{mu_};
  return stats_;
}

std::shared_ptr<const mask_cache::entry> mask_cache::build(const key_t& key) const {
  const vocabulary& v = *v_;
  const bool abstract = key.repeat_node != matcher::nil;
  const matcher lm{g_, key.frames, key.bottom};
  auto e = std::make_shared<entry>();
  std::vector<std::uint32_t> accepted;
  auto add_subtree = [&](std::uint32_t n) {
    for (std::uint32_t k = n; k < v.next_[n]; ++k)
      if (v.ids_begin_[k] < v.ids_begin_[k + 1]) e->uncertain.push_back(k);
  };
  // A subtree cut below a state that ran past the frames is uncertain, not rejected: the
  // caller's frames may take the rest of those tokens.
  thread_local memo_walk w;
  const bool ok = w.walk(
      lm, v,
      [&](std::uint32_t n, bool past, const memo_walk::need& nd) {
        if (v.ids_begin_[n] == v.ids_begin_[n + 1]) return;
        if (!abstract) {
          for (std::uint32_t k = v.ids_begin_[n]; k < v.ids_begin_[n + 1]; ++k) accepted.push_back(v.ids_[k]);
          return;
        }
        // With a repetition of unknown count nothing is accepted outright: the paths within the
        // frames are recorded with what they need of the count, and a token that may also run
        // past the frames (or leaves with several counts) is checked against the real state.
        for (std::uint32_t k = v.ids_begin_[n]; k < v.ids_begin_[n + 1]; ++k) {
          if (nd.inside != memo_walk::none) e->inside.push_back({nd.inside, v.ids_[k]});
          if (nd.left != memo_walk::none && !nd.ambiguous) e->left.push_back({nd.left, v.ids_[k]});
        }
        if (past || nd.ambiguous) e->uncertain.push_back(n);
      },
      [&](std::uint32_t n, bool past) {
        if (past) add_subtree(n);
      },
      abstract ? 0 : matcher::nil); // the local matcher's first node is its bottom frame
  if (!ok) return nullptr;
  std::sort(e->uncertain.begin(), e->uncertain.end());
  e->uncertain.erase(std::unique(e->uncertain.begin(), e->uncertain.end()), e->uncertain.end());
  if (abstract) {
    std::sort(e->inside.begin(), e->inside.end());
    // Tokens needing no item beyond the current one are accepted whatever the count.
    auto first_counted = std::find_if(e->inside.begin(), e->inside.end(), [](const auto& p) { return p.first > 0; });
    for (auto it = e->inside.begin(); it != first_counted; ++it) accepted.push_back(it->second);
    e->inside.erase(e->inside.begin(), first_counted);
    std::sort(e->left.begin(), e->left.end());
  }
  if (accepted.size() * 32 > v.words() * 64) {
    e->accepted_bits.assign(v.words(), 0);
    for (std::uint32_t id : accepted) set_bit(e->accepted_bits, id);
  } else {
    e->accepted_ids = std::move(accepted);
  }
  return e;
}

std::shared_ptr<const mask_cache::state_entry> mask_cache::combine(std::span<const std::shared_ptr<const entry>> parts,
                                                                   std::span<const std::string> part_keys,
                                                                   std::span<const std::uint32_t> group_of) {
  const vocabulary& v = *v_;
  auto out = std::make_shared<state_entry>();
  thread_local std::vector<std::uint64_t> acc;
  acc.assign(v.words(), 0);
  bool dense = false;
  for (const auto& e : parts) {
    if (!e->accepted_bits.empty()) {
      dense = true;
      for (std::size_t w = 0; w < v.words(); ++w) acc[w] |= e->accepted_bits[w];
    }
    for (std::uint32_t id : e->accepted_ids) set_bit(acc, id);
  }
  auto accepted = [&](std::uint32_t id) { return ((acc[id >> 6] >> (id & 63)) & 1) != 0; };
  std::uint32_t n_groups = 0;
  for (std::uint32_t g : group_of)
    if (g != matcher::nil) n_groups = std::max(n_groups, g + 1);
  for (std::uint32_t gi = 0; gi < n_groups; ++gi) {
    std::string key;
    for (std::size_t i = 0; i < parts.size(); ++i)
      if (group_of[i] == gi) {
        const auto len = static_cast<std::uint32_t>(part_keys[i].size());
        key.append(reinterpret_cast<const char*>(&len), 4);
        key += part_keys[i];
      }
    {
      std::lock_guard lock{mu_};
      if (auto it = groups_.find(key); it != groups_.end()) {
        out->groups.push_back(it->second);
        continue;
      }
    }
    auto g = std::make_shared<group_entry>();
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (group_of[i] != gi) continue;
      g->inside.insert(g->inside.end(), parts[i]->inside.begin(), parts[i]->inside.end());
      g->left.insert(g->left.end(), parts[i]->left.begin(), parts[i]->left.end());
    }
    // A token counted by two stacks of one frame needs the smaller count.
    std::sort(g->inside.begin(), g->inside.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second < b.second : a.first < b.first;
    });
    g->inside.erase(std::unique(g->inside.begin(), g->inside.end(), [](const auto& a, const auto& b) { return a.second == b.second; }),
                    g->inside.end());
    std::sort(g->inside.begin(), g->inside.end());
    std::sort(g->left.begin(), g->left.end());
    g->left.erase(std::unique(g->left.begin(), g->left.end()), g->left.end());
    // Many counted tokens (a string's inside): a bitset per small count, so a mask ORs one.
    if (g->inside.size() >= 4096) {
      const std::uint32_t most = std::min<std::uint32_t>(g->inside.back().first, 16);
      std::vector<std::uint64_t> cur(v.words(), 0);
      auto it = g->inside.begin();
      for (std::uint32_t k = 0; k <= most; ++k) {
        for (; it != g->inside.end() && it->first <= k; ++it) set_bit(cur, it->second);
        g->upto.push_back(cur);
      }
    }
    std::lock_guard lock{mu_};
    auto [it, added] = groups_.emplace(key, g);
    if (added) stats_.bytes += g->bytes();
    out->groups.push_back(it->second);
  }
  for (const auto& e : parts)
    for (std::uint32_t n : e->uncertain)
      if (!accepted(v.ids_[v.ids_begin_[n]])) out->uncertain.push_back(n);
  std::sort(out->uncertain.begin(), out->uncertain.end());
  out->uncertain.erase(std::unique(out->uncertain.begin(), out->uncertain.end()), out->uncertain.end());
  std::string_view prev;
  for (std::uint32_t n : out->uncertain) {
    const std::uint32_t id = v.ids_[v.ids_begin_[n]];
    const std::string_view t = v.bytes(id);
    std::size_t l = 0;
    while (l < prev.size() && l < t.size() && prev[l] == t[l]) ++l;
    prev = t;
    out->offsets.push_back(static_cast<std::uint32_t>(out->flat.size()));
    out->flat += t;
    out->first.push_back(id);
    out->lcp.push_back(static_cast<std::uint16_t>(std::min<std::size_t>(l, 0xFFFF))); // less sharing is still exact
    out->longest = std::max(out->longest, static_cast<std::uint32_t>(t.size()));
  }
  out->offsets.push_back(static_cast<std::uint32_t>(out->flat.size()));
  if (dense) {
    out->accepted_bits = acc;
  } else { // only id lists: merged without a pass over the vocabulary
    for (const auto& e : parts) out->accepted_ids.insert(out->accepted_ids.end(), e->accepted_ids.begin(), e->accepted_ids.end());
    std::sort(out->accepted_ids.begin(), out->accepted_ids.end());
    out->accepted_ids.erase(std::unique(out->accepted_ids.begin(), out->accepted_ids.end()), out->accepted_ids.end());
  }
  return out;
}

void mask_cache::fill(matcher& m, std::span<std::uint64_t> bits) {
  const vocabulary& v = *v_;
  const auto elements = g_->elements();
  thread_local std::vector<key_t> keys;
  keys.clear();
  const std::size_t k = m.history_.size() - 1;
  for (std::uint32_t h = m.heads_begin(k); h < m.history_.back().heads_end; ++h) {
    key_t key;
    std::uint32_t n = m.heads_[h];
    while (key.frames.size() < lim_.frames && n != matcher::nil) {
      const matcher::node& node = m.nodes_[n];
      key.frames.push_back(node.pos);
      if (elements[node.pos].k == element::kind::repeat) {
        key.repeat_node = n;
        break;
      }
      n = node.parent;
    }
    key.bottom = key.repeat_node == matcher::nil && n == matcher::nil;
    key.text.resize(key.frames.size() * 4);
    std::memcpy(key.text.data(), key.frames.data(), key.frames.size() * 4);
    if (key.repeat_node != matcher::nil) {
      // Neither the repetition's position nor its bounds: its item and what follows it.
      const std::uint32_t at = key.frames.back();
      key.text.resize(key.text.size() - 4);
      key.text += 'r';
      const std::uint32_t item = g_->rep(elements[at].arg).item;
      key.text.append(reinterpret_cast<const char*>(&item), 4);
      for (std::uint32_t p = at + 1; elements[p].k != element::kind::end; ++p) {
        key.text += static_cast<char>(elements[p].k);
        key.text.append(reinterpret_cast<const char*>(&elements[p].arg), 4);
      }
    } else {
      key.text += key.bottom ? 'b' : 'c';
    }
    keys.push_back(std::move(key));
  }
  // The state's key: its stacks' keys in order, each repetition frame numbered by first use.
  std::sort(keys.begin(), keys.end(), [](const key_t& a, const key_t& b) {
    return a.text != b.text ? a.text < b.text : a.repeat_node < b.repeat_node;
  });
  keys.erase(std::unique(keys.begin(), keys.end(), [](const key_t& a, const key_t& b) {
               return a.text == b.text && a.repeat_node == b.repeat_node;
             }), keys.end());
  thread_local std::vector<std::uint32_t> group_of, group_node;
  group_of.assign(keys.size(), matcher::nil);
  group_node.clear();
  thread_local std::string state_key;
  state_key.clear();
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].repeat_node != matcher::nil) {
      auto it = std::find(group_node.begin(), group_node.end(), keys[i].repeat_node);
      group_of[i] = static_cast<std::uint32_t>(it - group_node.begin());
      if (it == group_node.end()) group_node.push_back(keys[i].repeat_node);
    }
    const auto len = static_cast<std::uint32_t>(keys[i].text.size());
    state_key.append(reinterpret_cast<const char*>(&len), 4);
    state_key += keys[i].text;
    state_key.append(reinterpret_cast<const char*>(&group_of[i]), 4);
  }

  std::shared_ptr<const state_entry> se;
  thread_local std::vector<std::shared_ptr<const entry>> found;
  found.assign(keys.size(), nullptr);
  std::vector<std::size_t> to_build;
  bool fallback = false;
  {
    std::lock_guard lock{mu_};
    if (auto it = states_.find(state_key); it != states_.end()) {
      se = it->second;
      ++stats_.hits;
    } else {
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (auto e = entries_.find(keys[i].text); e != entries_.end()) { found[i] = e->second; continue; }
        if (stats_.bytes < lim_.max_bytes) to_build.push_back(i);
        else fallback = true;
      }
      if (fallback) ++stats_.plain_walks;
    }
  }
  if (fallback) {
    fill_mask_memo(m, v, bits);
    return;
  }
  if (se == nullptr) {
    for (std::size_t i : to_build) {
      found[i] = build(keys[i]);
      if (found[i] == nullptr) { // past the walk's bounds: this key is answered by plain walks
        { std::lock_guard lock{mu_}; ++stats_.plain_walks; }
        fill_mask_memo(m, v, bits);
        return;
      }
      std::lock_guard lock{mu_};
      if (entries_.emplace(keys[i].text, found[i]).second) {
        stats_.bytes += found[i]->bytes();
        ++stats_.entries;
      }
    }
    thread_local std::vector<std::string> texts;
    texts.clear();
    for (const key_t& key : keys) texts.push_back(key.text);
    se = combine(found, texts, group_of);
    std::lock_guard lock{mu_};
    if (stats_.bytes < lim_.max_bytes && states_.emplace(state_key, se).second) stats_.bytes += se->bytes();
  }

  std::fill(bits.begin(), bits.begin() + static_cast<std::ptrdiff_t>(v.words()), 0);
  const state_entry& e = *se;
  if (!e.accepted_bits.empty())
    for (std::size_t w = 0; w < v.words(); ++w) bits[w] |= e.accepted_bits[w];
  for (std::uint32_t id : e.accepted_ids) set_bit(bits, id);
  for (std::size_t gi = 0; gi < e.groups.size(); ++gi) {
    // The real count: `room` more items may start, leaving needs at least `least` more.
    const group_entry& g = *e.groups[gi];
    const matcher::node& rn = m.nodes_[group_node[gi]];
    const repetition& r = g_->rep(elements[rn.pos].arg);
    const std::uint32_t room = r.max - rn.count;
    const std::uint32_t least = r.min > rn.count ? r.min - rn.count : 0;
    auto it = g.inside.begin();
    if (!g.upto.empty()) {
      const std::size_t top = g.upto.size() - 1;
      const auto& u = g.upto[std::min<std::size_t>(room, top)];
      for (std::size_t w = 0; w < v.words(); ++w) bits[w] |= u[w];
      it = room > top ? std::upper_bound(g.inside.begin(), g.inside.end(), std::pair{static_cast<std::uint32_t>(top), ~0u})
                      : g.inside.end();
    }
    for (; it != g.inside.end() && it->first <= room; ++it) set_bit(bits, it->second);
    auto l = std::lower_bound(g.left.begin(), g.left.end(), std::pair{least, 0u});
    for (; l != g.left.end() && l->first <= room; ++l) set_bit(bits, l->second);
  }
  // The uncertain tokens against the real state, in trie order. The memoized walk first; the
  // matcher itself if that passes its bounds.
  auto bytes_of = [&](std::size_t i) {
    return std::string_view{e.flat}.substr(e.offsets[i], e.offsets[i + 1] - e.offsets[i]);
  };
  auto lcp_of = [&](std::size_t i) { return e.lcp[i]; };
  auto is_set = [&](std::size_t i) { return ((bits[e.first[i] >> 6] >> (e.first[i] & 63)) & 1) != 0; };
  auto set_node = [&](std::size_t i) {
    for (std::uint32_t j = v.ids_begin_[e.uncertain[i]]; j < v.ids_begin_[e.uncertain[i] + 1]; ++j) set_bit(bits, v.ids_[j]);
  };
  // Their verdicts depend on the whole state (every stack to its bottom), which inside an
  // unbounded string stays the same from one token to the next: kept per state spelled out.
  // A repetition's count is spelled as the room it leaves and the items it still needs, each
  // clipped past the longest uncertain token: a token of b bytes starts at most b items, so
  // counts that differ only beyond that give the same verdicts (long bounded strings share them).
  thread_local std::string whole;
  whole.clear();
  if (!e.uncertain.empty()) { // (the whole state determines the entry, and so the list)
    const std::uint32_t clip = e.longest + 1;
    for (std::uint32_t h = m.heads_begin(k); h < m.history_.back().heads_end; ++h) {
      for (std::uint32_t n = m.heads_[h]; n != matcher::nil; n = m.nodes_[n].parent) {
        const matcher::node& node = m.nodes_[n];
        std::uint32_t room = 0, least = 0;
        if (elements[node.pos].k == element::kind::repeat) {
          const repetition& r = g_->rep(elements[node.pos].arg);
          room = std::min(r.max - node.count, clip);
          least = std::min(r.min > node.count ? r.min - node.count : 0, clip);
        }
        whole.append(reinterpret_cast<const char*>(&node.pos), 4);
        whole.append(reinterpret_cast<const char*>(&room), 4);
        whole.append(reinterpret_cast<const char*>(&least), 4);
      }
      whole.append(4, '\xff');
    }
    std::lock_guard lock{mu_};
    if (auto it = verdicts_.find(whole); it != verdicts_.end()) {
      for (std::uint32_t i : it->second) set_node(i);
      ++stats_.verdict_hits;
      if (m.can_end())
        for (std::uint32_t id : v.end_tokens()) set_bit(bits, id);
      return;
    }
  }
  thread_local std::vector<std::uint32_t> taken;
  taken.clear();
  auto take = [&](std::size_t i) {
    set_node(i);
    taken.push_back(static_cast<std::uint32_t>(i));
  };
  thread_local memo_walk w;
  if (w.check(m, e.uncertain.size(), bytes_of, lcp_of, is_set, take)) {
    if (!whole.empty()) {
      std::lock_guard lock{mu_};
      if (verdicts_.size() >= max_verdicts) verdicts_.clear(); // a bound, not an LRU: refilled in a few tokens
      verdicts_.emplace(whole, taken);
    }
  } else {
    const std::size_t base = m.position();
    std::string_view prev;
    std::size_t ok_len = 0;
    for (std::size_t i = 0; i < e.uncertain.size(); ++i) {
      if (is_set(i)) continue;
      const std::string_view t = bytes_of(i);
      std::size_t l = 0;
      while (l < prev.size() && l < t.size() && prev[l] == t[l]) ++l;
      prev = t;
      if (l > ok_len) continue;
      m.rollback_to(base + l);
      std::size_t fed = l;
      while (fed < t.size() && m.feed(static_cast<std::uint8_t>(t[fed]))) ++fed;
      ok_len = fed;
      if (fed == t.size()) set_node(i);
    }
    m.rollback_to(base);
  }
  if (m.can_end())
    for (std::uint32_t id : v.end_tokens()) set_bit(bits, id);
}

} // namespace kvlane::grammar
