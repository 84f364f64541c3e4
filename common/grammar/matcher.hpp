#pragma once

// kvlane::grammar::matcher — runs a grammar over the bytes a sequence produces.
//
// Problem it solves: a constrained sequence must know, after every token, which bytes may come
// next, whether it may stop, and must survive the scheduler's moves: prefix rollback (drop the
// last k tokens) and parking with its KV (the state leaves the process memory of the scheduler's
// structures and comes back later).
//
// How: a pushdown automaton without left recursion, run nondeterministically. A state is a set
// of stacks; a stack is a chain of nodes {grammar position, parent} in an append-only arena, so
// stacks share their tails and a step adds only the nodes it changes (usually one or two).
// Every byte appends one state to a history, so rollback_to(p) truncates three vectors, and
// save() writes the arena and history as bytes that restore() checks index by index before
// trusting them (a corrupt or foreign buffer is an error, never a crash).
//
// A counted repetition x{m,n} is one grammar position; its frame on a stack (a node at the
// repetition) holds how many items will have been matched when the current one ends, so after
// an item the matcher may start another (count < n) or leave (count >= m).
//
// Bounds: at most `max_heads` stacks per state, `max_nodes` nodes (memory ~ 12 bytes a node
// plus 16 bytes a byte of history) and `max_closure` expansion steps per byte; a byte that would
// pass a bound is rejected and exhausted() turns true (from construction on, if the start
// already passes one: such a matcher accepts nothing).
//
// Ownership and threading: a value type (copyable, movable) owned by one sequence and used by
// one thread at a time; it holds the grammar through a shared_ptr<const grammar>.

#include "common/grammar/grammar.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace kvlane::grammar {

struct matcher_limits {
  std::uint32_t max_heads = 1024;
  std::uint32_t max_nodes = 1u << 22;
  std::uint32_t max_closure = 1u << 16; ///< expansion steps for one byte
};

class matcher {
public:
  explicit matcher(std::shared_ptr<const grammar> g, matcher_limits lim = {});

  /// Consumes one byte if the grammar allows it; false (state unchanged) if it does not.
  bool feed(std::uint8_t b);
  /// Consumes all of `bytes`, or none of them (false) if any is rejected.
  bool feed(std::string_view bytes);
  /// The input so far is a complete sentence of the grammar.
  bool can_end() const noexcept { return history_.back().accept; }
  /// Some byte may still follow.
  bool can_continue() const noexcept { return history_.back().heads_end > heads_begin(history_.size() - 1); }
  /// Bytes consumed so far.
  std::size_t position() const noexcept { return history_.size() - 1; }
  /// Back to the state after `pos` bytes (pos <= position()).
  void rollback_to(std::size_t pos);
  /// A byte the last feed rejected only because of max_heads / max_nodes.
  bool exhausted() const noexcept { return exhausted_; }

  /// The whole state, history included (rollback works after restore).
  std::string save() const;
  static expected<matcher, error> restore(std::shared_ptr<const grammar> g, std::string_view bytes,
                                          matcher_limits lim = {});

  const grammar& rules() const noexcept { return *g_; }
  const std::shared_ptr<const grammar>& shared_rules() const noexcept { return g_; }

  /// The bytes the current state accepts next (for masks and diagnostics).
  byte_class next_bytes() const;

private:
  friend class mask_cache;
  friend class memo_walk;
  static constexpr std::uint32_t nil = ~0u;
  /// The parent of a mask_cache frame's bottom: popping into it means "the caller continues",
  /// which mask_cache treats as unknown (ctx_exit) instead of accepting.
  static constexpr std::uint32_t ctx = ~0u - 1;
  struct node {
    std::uint32_t pos = 0;
    std::uint32_t parent = nil;
    /// At a repetition: the items matched once the current one ends (0: a return to the
    /// repetition's start, nothing matched yet).
    std::uint32_t count = 0;
  };
  /// A position still to expand: `pos` with `count` items matched (repetitions only) over `parent`.
  struct pending {
    std::uint32_t pos = 0;
    std::uint32_t count = 0;
    std::uint32_t parent = nil;
  };
  struct entry {
    std::uint32_t heads_end = 0;
    std::uint32_t nodes_end = 0;
    bool accept = false;
    bool ctx_exit = false; ///< a stack popped into `ctx` (mask_cache frames only)
  };
  /// A matcher whose single stack is `frames` (top first) over `ctx` (or the bottom when
  /// `bottom`): mask_cache's local simulation of one stack's top.
  matcher(std::shared_ptr<const grammar> g, std::span<const std::uint32_t> frames, bool bottom);

  std::uint32_t heads_begin(std::size_t k) const noexcept { return k == 0 ? 0 : history_[k - 1].heads_end; }
  /// Expands the work list into heads (appended to heads_); returns false past a bound.
  bool close(bool& accept, bool& ctx_exit);

  std::shared_ptr<const grammar> g_;
  matcher_limits lim_;
  std::vector<node> nodes_;
  std::vector<std::uint32_t> heads_; ///< node ids, each state's range given by history_
  std::vector<entry> history_;       ///< one per byte consumed, plus the initial state
  bool exhausted_ = false;
  // Scratch of one step, kept to avoid allocating per byte.
  std::vector<pending> work_;
  struct seen_key {
    std::uint64_t pos_parent = 0;
    std::uint32_t count = 0;
    friend bool operator==(const seen_key&, const seen_key&) = default;
  };
  struct seen_hash {
    std::size_t operator()(const seen_key& k) const noexcept {
      return std::hash<std::uint64_t>{}(k.pos_parent ^ (std::uint64_t{k.count} * 0x9E3779B97F4A7C15ull));
    }
  };
  std::vector<seen_key> seen_;                          ///< small closures: a linear scan is fastest
  std::unordered_set<seen_key, seen_hash> seen_many_;   ///< past 64 entries
  bool first_visit(const pending& p);
};

} // namespace kvlane::grammar
