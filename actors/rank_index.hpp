#pragma once

// kvlane::actors::rank_index — a model's live sequences in rank order, kept
// up to date change by change instead of sorted after every event.
//
// It gives exactly the order `mlfq_policy::rank` computes from the same
// positions and clients (docs/scheduling.md, "Rank"): by turn (arrival), by
// (class, turn) (priority), or by (class, demoted, level, turn) with the
// clients of each such group interleaved round-robin in the order of their earliest
// turn there (mlfq). A sequence is inserted once, erased once, and re-keyed
// only when its class, demotion, level or turn changes; each costs O(log n).
//
// Layout: one group per (class, demoted, level) (a demoted sequence ranks at
// level 0 of its group: by turn alone), ordered; in a group one queue per
// client, its members ordered by turn in a tree that also answers "how many
// members before this one" (the member's round), and the clients ordered by
// their first member. Walking from the best end costs O(log n) to start plus
// O(1) per sequence visited, so the best k cost O(k) whatever the queue's
// length. The other orders use the same layout with one client per group.
//
// Pure: no clock, no actor. Threading: a plain value owned by one scheduler.

#include "actors/mlfq_policy.hpp"

#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>

#include <compare>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvlane::actors {

class rank_index {
public:
  explicit rank_index(rank_order order = rank_order::mlfq) : order_(order) {}

  rank_order order() const noexcept { return order_; }
  std::size_t size() const noexcept { return members_.size(); }
  bool empty() const noexcept { return members_.empty(); }
  bool contains(seq_id id) const { return members_.contains(id); }

  /// Adds a sequence. False (and nothing changes) if `id` is already in.
  bool insert(seq_id id, const mlfq_position& position, std::string_view client);

  /// Removes a sequence. False if `id` is not in.
  bool erase(seq_id id);

  /// Moves a sequence to where `position` ranks it; a no-op unless its
  /// class, demotion, level or turn changed. False if `id` is not in.
  bool update(seq_id id, const mlfq_position& position);

  /// Calls `visit(seq_id)` for each sequence, best first, until it returns
  /// false.
  template <class Visit>
  void walk(Visit&& visit) const;

  /// The best `n` sequences (all of them if fewer), best first.
  std::vector<seq_id> best(std::size_t n) const;

  /// Sorts `ids`, all of them in the index, best first: O(m log n) for m ids.
  void sort(std::span<seq_id> ids) const;

private:
  struct group_key {
    priority_class cls = priority_class::interactive;
    bool demoted = false;
    std::uint32_t level = 0;
    auto operator<=>(const group_key&) const = default;
  };

  /// A member's place inside its client's queue: (turn, id); the id only
  /// breaks ties between equal turns, which the policy never hands out.
  using member_key = std::pair<std::uint64_t, seq_id>;

  /// Ordered members that also answer order_of_key (a member's round).
  using member_tree =
    __gnu_pbds::tree<member_key, __gnu_pbds::null_type, std::less<member_key>,
                     __gnu_pbds::rb_tree_tag, __gnu_pbds::tree_order_statistics_node_update>;

  /// Looks clients up by string_view without building a string.
  struct client_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };

  struct group {
    std::unordered_map<std::string, member_tree, client_hash, std::equal_to<>> clients;
    /// The clients by their first member: the order of every round.
    std::set<std::pair<member_key, const member_tree*>> by_first;
  };

  struct member {
    group_key key;
    std::uint64_t turn = 0;
    std::pair<const std::string, member_tree>* client = nullptr; ///< stable: a node of `clients`
    seq_id id = 0;
  };

  /// The full sort key of a member: (group, round, its client's first member).
  struct rank_key {
    group_key group;
    std::size_t round = 0;
    member_key client_first;
    auto operator<=>(const rank_key&) const = default;
  };

  group_key key_of(const mlfq_position& p) const noexcept;
  std::string_view bucket_of(std::string_view client) const noexcept;
  /// Files `m` (its id set) under `key`, `turn` and `client`.
  void place(member& m, group_key key, std::uint64_t turn, std::string_view client);
  /// Takes `m` out of its group; `m` itself stays in members_.
  void remove(const member& m);
  rank_key rank_key_of(seq_id id) const;

  rank_order order_;
  std::map<group_key, group> groups_;
  std::unordered_map<seq_id, member> members_;
};

template <class Visit>
void rank_index::walk(Visit&& visit) const {
  // Per group: round 0 visits each client's first member in the order of
  // by_first; round r visits the r-th member of every client that has one,
  // in the same order. `active` holds the clients with members left.
  std::vector<std::pair<member_tree::const_iterator, member_tree::const_iterator>> active;
  for (const auto& [key, g] : groups_) {
    active.clear();
    for (const auto& [first, members] : g.by_first) {
      auto it = members->begin();
      if (!visit(it->second))
        return;
      if (++it != members->end())
        active.emplace_back(it, members->end());
    }
    while (!active.empty()) {
      std::size_t kept = 0;
      for (std::size_t i = 0; i < active.size(); ++i) {
        auto [it, end] = active[i];
        if (!visit(it->second))
          return;
        if (++it != end)
          active[kept++] = {it, end};
      }
      active.resize(kept);
    }
  }
}

} // namespace kvlane::actors
