#include "actors/mlfq_policy.hpp"

#include <algorithm>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace kvlane::actors {

namespace {

mlfq_knobs clamped(mlfq_knobs k) noexcept {
  k.quantum_steps = std::max(1u, k.quantum_steps);
  k.levels = std::max(1u, k.levels);
  return k;
}

} // namespace

mlfq_policy::mlfq_policy(mlfq_setup setup, mlfq_knobs knobs)
  : setup_(setup), knobs_(clamped(knobs)) {}

void mlfq_policy::set_knobs(mlfq_knobs knobs) noexcept { knobs_ = clamped(knobs); }

std::uint32_t mlfq_policy::quantum_of(std::uint32_t level) const noexcept {
  auto q = knobs_.quantum_steps << std::min(level, 20u);
  // Serialized fallback: fewer, larger switches below the top level, so new
  // requests still get their first turn as early as in sync mode.
  return level > 0 && setup_.serialized_fallback ? q * 4 : q;
}

std::uint32_t mlfq_policy::initial_level(std::uint32_t prompt_len) const noexcept {
  if (setup_.order != rank_order::mlfq)
    return 0;
  auto chunk = std::max(1u, setup_.max_prefill_chunk);
  auto prefill_steps = (prompt_len + chunk - 1) / chunk;
  std::uint32_t level = 0;
  while (level + 1 < knobs_.levels && quantum_of(level) < prefill_steps)
    ++level;
  return level;
}

mlfq_position mlfq_policy::enter(priority_class cls, std::uint32_t prompt_len) noexcept {
  mlfq_position p;
  p.cls = cls;
  p.level = initial_level(prompt_len);
  p.turn = next_turn_++;
  return p;
}

void mlfq_policy::charge_step(mlfq_position& p) noexcept {
  if (setup_.order != rank_order::mlfq)
    return;
  if (++p.quantum_used < quantum_of(p.level))
    return;
  p.quantum_used = 0;
  if (p.level + 1 < knobs_.levels)
    ++p.level;
  p.turn = next_turn_++; // to the back of its (new) level
}

void mlfq_policy::age(mlfq_position& p, bool resident) const noexcept {
  if (!ages())
    return;
  if (resident) {
    p.waited_steps = 0;
    return;
  }
  if (++p.waited_steps >= knobs_.aging_steps && (p.level > 0 || p.demoted))
    return_to_top(p);
}

bool mlfq_policy::ages() const noexcept {
  return knobs_.aging_steps != 0 && setup_.order == rank_order::mlfq;
}

void mlfq_policy::return_to_top(mlfq_position& p) noexcept {
  p.level = 0;
  p.quantum_used = 0;
  p.waited_steps = 0;
  p.demoted = false;
}

std::vector<std::size_t> mlfq_policy::rank(std::span<const rank_entry> entries) const {
  std::vector<std::size_t> all(entries.size());
  for (std::size_t i = 0; i < all.size(); ++i)
    all[i] = i;
  auto pos = [&](std::size_t i) -> const mlfq_position& { return *entries[i].position; };
  if (setup_.order == rank_order::arrival) {
    std::sort(all.begin(), all.end(),
              [&](std::size_t a, std::size_t b) { return pos(a).turn < pos(b).turn; });
    return all;
  }
  if (setup_.order == rank_order::priority) {
    std::sort(all.begin(), all.end(), [&](std::size_t a, std::size_t b) {
      return std::pair(pos(a).cls, pos(a).turn) < std::pair(pos(b).cls, pos(b).turn);
    });
    return all;
  }
  std::sort(all.begin(), all.end(),
            [&](std::size_t a, std::size_t b) { return ranks_before(pos(a), pos(b)); });
  // Within one (class, level), interleave clients round-robin so one client
  // with many requests cannot crowd out another.
  // Each entry's round is its index among its client's entries in the group;
  // within a round, clients go in the order of their first entry.
  std::vector<std::size_t> out;
  out.reserve(all.size());
  std::unordered_map<std::string_view, std::pair<std::size_t, std::size_t>> clients;
  std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> keyed; // round, client, entry
  for (std::size_t i = 0; i < all.size();) {
    const auto& head = pos(all[i]);
    std::size_t j = i;
    while (j < all.size() && pos(all[j]).cls == head.cls && pos(all[j]).demoted == head.demoted
           && rank_level(pos(all[j])) == rank_level(head))
      ++j;
    clients.clear();
    keyed.clear();
    for (std::size_t k = i; k < j; ++k) {
      // first: the client's order of appearance; second: its entries so far.
      auto [it, added] = clients.try_emplace(entries[all[k]].client, clients.size(), 0);
      keyed.emplace_back(it->second.second++, it->second.first, all[k]);
    }
    std::sort(keyed.begin(), keyed.end());
    for (auto& [round, client, entry] : keyed)
      out.push_back(entry);
    i = j;
  }
  return out;
}

} // namespace kvlane::actors
