#pragma once

// kvlane::grammar::fill_mask_memo — the trie walk of fill_mask with its matcher steps memoized.
//
// Problem it solves: walking the vocabulary trie costs one matcher step per trie node it enters
// (~330k for Qwen2 inside a string), yet along those paths the matcher passes through few
// distinct states: inside a string, "one more character consumed" is the same state whichever
// character it was. fill_mask_memo gives each distinct state of one walk an id (its stacks
// spelled out as grammar positions above the nodes of the starting state), splits the 256 bytes
// into the classes that state cannot tell apart, and computes a transition only the first time
// a (state, byte class) pair is met; every other trie node costs two table lookups.
//
// Counted repetitions: a stack's frame at a repetition carries its count, so "k characters of a
// string{0,40} consumed" are distinct states. mask_cache also walks from a repetition whose count
// it does not know (its `abstract` frame, shared by every count): there a stack carries how many
// items it started since the walk began (`j`), states equal up to a common offset of j are one
// state, and a transition adds its offset to the path's total — so the walk stays as small as
// for an unbounded repetition and yields, per token, the items it needs (see walk()).
//
// Same result as fill_mask. A state that takes at most 8 distinct first bytes (a small walk) and
// a walk that would intern more than `max_states` states (a grammar that keeps every path
// distinct) use fill_mask's stepwise walk instead.
// Scratch is thread-local; call from any thread, one matcher per thread at a time.

#include "common/grammar/vocabulary.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvlane::grammar {

/// The walk's scratch and its explicit-stack stepping (a friend of matcher and vocabulary).
class memo_walk {
public:
  memo_walk() = default;
  static constexpr std::uint32_t max_states = 20'000;
  static constexpr std::uint32_t max_work = 8192;
  static constexpr std::int32_t unknown = -1;
  static constexpr std::int32_t dead = -2;
  static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();

  /// What a token needs of the abstract repetition's real count c (walk() with an abstract
  /// frame): `inside` items started, i.e. c + inside <= max (none: no such path), and, for a path
  /// that left the repetition and consumed bytes after it, exactly `left` items (min <= c + left
  /// <= max; none: no such path). `ambiguous`: left paths with different counts (the token is
  /// then checked against the real state).
  struct need {
    std::uint32_t inside = none;
    std::uint32_t left = none;
    bool ambiguous = false;
  };

  struct frame {
    std::uint32_t pos = 0;
    std::uint32_t count = 0; ///< at a repetition: the items matched once the current one ends
    friend bool operator==(const frame&, const frame&) = default;
  };
  /// A stack: frames bottom..top above `old`, a node of the starting matcher state (or
  /// matcher::nil / matcher::ctx). With an abstract frame: `j` items started since the walk
  /// began, and `tag` 1 once the stack left the repetition, 2 once it consumed a byte after.
  struct xstack {
    std::vector<frame> f;
    std::uint32_t old = matcher::nil;
    std::uint32_t j = 0;
    std::uint8_t tag = 0;
  };
  struct state {
    std::vector<xstack> heads;
    bool accept = false;
    bool ctx_exit = false; ///< a stack ran past a mask_cache frame's bottom (matcher::ctx)
    need popped;           ///< the counts of the stacks that ran past (abstract walks)
    need at;               ///< what a token ending in this state needs (relative to the state)
    std::array<std::uint8_t, 256> cls{}; ///< byte -> class (255: no head takes it)
    std::vector<std::int32_t> trans;      ///< per class: next state id, unknown or dead
    std::vector<std::uint32_t> offset;    ///< per class: the j the transition adds
  };

  /// The state after `b` from state `from`: an id (and its offset), dead, or -1 (bound passed).
  std::int32_t step(std::uint32_t from, std::uint8_t b, std::uint32_t& offset);

  /// Walks the trie of `v` from `m`'s current state. on_accept(node, past, need) for every trie
  /// node whose path the grammar takes (`need` relevant with an abstract frame only);
  /// on_reject(node, past) for every subtree cut at `node`. `past`: a state on the way ran past a
  /// frame's bottom, so what lies below may take what the frames do not. `abstract`: the node
  /// of `m` that is a repetition of unknown count (matcher::nil: none). False if a bound was
  /// passed.
  template <class OnAccept, class OnReject>
  bool walk(const matcher& m, const vocabulary& v, OnAccept&& on_accept, OnReject&& on_reject,
            std::uint32_t abstract = matcher::nil) {
    reset(m, abstract);
    const std::int32_t root = start(m);
    if (root < 0) return false;
    at_depth_.assign(2, root);
    past_.assign(2, 0);
    total_.assign(2, 0);
    const auto n_nodes = static_cast<std::uint32_t>(v.byte_.size());
    std::uint32_t n = 1;
    while (n < n_nodes) {
      const std::size_t d = v.depth_[n];
      const auto from = static_cast<std::uint32_t>(at_depth_[d - 1]);
      std::uint32_t off = 0;
      const std::int32_t to = next(from, v.byte_[n], off);
      if (to == -1) return false;
      if (to == dead) {
        on_reject(n, past_[d - 1] != 0);
        n = v.next_[n];
        continue;
      }
      const state& s = states_[static_cast<std::uint32_t>(to)];
      const std::uint32_t total = total_[d - 1] + off;
      need nd = s.at;
      if (nd.inside != none) nd.inside += total;
      if (nd.left != none) nd.left += total;
      on_accept(n, past_[d - 1] != 0, nd);
      if (v.next_[n] != n + 1) {
        if (at_depth_.size() <= d) { at_depth_.resize(d + 1); past_.resize(d + 1); total_.resize(d + 1); }
        at_depth_[d] = to;
        past_[d] = past_[d - 1] || s.ctx_exit;
        total_[d] = total;
      }
      ++n;
    }
    return true;
  }

  /// For `count` tokens, bytes_of(i) their bytes (ascending, i.e. in the trie's order) and
  /// lcp_of(i) the bytes token i shares with token i-1, from `m`'s current state: on_accept(i)
  /// for each the grammar takes; skip(i) true leaves one out. A token reuses the states of the
  /// bytes it shares with the previous one, and one that extends a rejected prefix is rejected
  /// unfed. False if a bound was passed (nothing is then known).
  template <class BytesOf, class LcpOf, class Skip, class OnAccept>
  bool check(const matcher& m, std::size_t count, BytesOf&& bytes_of, LcpOf&& lcp_of, Skip&& skip,
             OnAccept&& on_accept) {
    reset(m, matcher::nil);
    const std::int32_t root = start(m);
    if (root < 0) return false;
    at_depth_.assign(1, root);
    // `shared`: the prefix the token has in common with the last one looked at (the smallest
    // lcp since, the tokens being sorted).
    std::size_t shared = 0, ok_len = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (i > 0) shared = std::min<std::size_t>(shared, lcp_of(i));
      if (skip(i)) continue;
      const std::size_t l = shared;
      shared = std::numeric_limits<std::size_t>::max();
      if (l > ok_len) continue; // extends a rejected prefix
      const std::string_view t = bytes_of(i);
      std::size_t d = l;
      if (at_depth_.size() < t.size() + 1) at_depth_.resize(t.size() + 1);
      for (; d < t.size(); ++d) {
        std::uint32_t off = 0;
        const std::int32_t to = next(static_cast<std::uint32_t>(at_depth_[d]), static_cast<std::uint8_t>(t[d]), off);
        if (to == -1) return false;
        if (to == dead) break;
        at_depth_[d + 1] = to;
      }
      ok_len = d;
      if (d == t.size()) on_accept(i);
    }
    return true;
  }

private:
  const matcher* m_ = nullptr;
  const grammar* g_ = nullptr;
  std::uint32_t abstract_ = matcher::nil;
  std::vector<state> states_;
  std::unordered_map<std::string, std::uint32_t> ids_;
  std::vector<xstack> work_;
  std::vector<std::string> seen_;
  std::string key_;
  std::vector<std::int32_t> at_depth_;
  std::vector<std::uint8_t> past_;
  std::vector<std::uint32_t> total_;

  void reset(const matcher& m, std::uint32_t abstract);
  /// Interns the state of `m` (−1 past the bound).
  std::int32_t start(const matcher& m);
  /// The memoized transition from `from` on `b` (its offset in `offset`).
  std::int32_t next(std::uint32_t from, std::uint8_t b, std::uint32_t& offset) {
    const std::uint8_t c = states_[from].cls[b];
    if (c == 255) return dead;
    if (c == 254) return step(from, b, offset); // a shared overflow class: never memoized
    std::int32_t to = states_[from].trans[c];
    if (to != unknown) {
      offset = states_[from].offset[c];
      return to;
    }
    to = step(from, b, offset);
    if (to != -1) {
      states_[from].trans[c] = to;
      states_[from].offset[c] = offset;
    }
    return to;
  }
  /// Interns `heads` with the flags (its stacks' j made relative to the smallest, returned in
  /// `offset`); the id, or -1 past the bound.
  std::int32_t intern(std::vector<xstack>&& heads, bool accept, bool ctx_exit, need popped, std::uint32_t& offset);
  /// Splits the bytes by which heads' classes hold them.
  void classify(state& s) const;
  static void encode(std::string& out, const xstack& s);
};

void fill_mask_memo(matcher& m, const vocabulary& v, std::span<std::uint64_t> bits);

} // namespace kvlane::grammar
