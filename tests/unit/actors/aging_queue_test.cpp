// Aging found from the front of an ordered queue against the rule applied to
// every sequence after every step (mlfq_policy::age).
#include "actors/aging_queue.hpp"
#include "actors/mlfq_policy.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

using namespace kvlane;
using actors::aging_queue;
using actors::mlfq_policy;
using actors::mlfq_position;
using actors::priority_class;
using actors::rank_order;
using actors::seq_id;

namespace {

constexpr std::uint32_t chunk = 32;

/// Random arrivals, ends, steps run and resident sets; the queue must return
/// to level 0 exactly the sequences the per-sequence rule returns, at the
/// same step, and report the same waits.
void check_random_history(std::uint32_t aging_steps, std::uint64_t seed) {
  CAPTURE(seed);
  CAPTURE(aging_steps);
  std::mt19937_64 rng{seed};
  auto pick = [&](std::size_t n) {
    return std::uniform_int_distribution<std::size_t>{0, n - 1}(rng);
  };
  // Two policies fed the same calls hand out the same turns.
  mlfq_policy policy{{rank_order::mlfq, false, chunk}, {1, 4, aging_steps}};
  mlfq_policy tracked_policy = policy;
  aging_queue sut;
  std::map<seq_id, mlfq_position> reference; // aged by mlfq_policy::age
  std::map<seq_id, mlfq_position> tracked;   // aged through the queue
  seq_id next_id = 1;
  for (int op = 0; op < 400; ++op) {
    const auto what = pick(4);
    if (reference.empty() || what == 0) {
      const auto id = next_id++;
      const auto len = static_cast<std::uint32_t>(1 + pick(300));
      reference[id] = policy.enter(priority_class::batch, len);
      tracked[id] = tracked_policy.enter(priority_class::batch, len);
      const auto& p = tracked[id];
      REQUIRE(sut.enter(id, p.level > 0));
      continue;
    }
    if (what == 1) {
      auto it = std::next(reference.begin(), static_cast<std::ptrdiff_t>(pick(reference.size())));
      const auto id = it->first;
      reference.erase(it);
      tracked.erase(id);
      sut.leave(id);
      continue;
    }
    // A step: some sequences held a slot, some of them ran and were charged.
    std::vector<seq_id> residents;
    for (auto& [id, p] : reference)
      if (pick(5) == 0)
        residents.push_back(id);
    for (auto id : residents) {
      if (pick(2) == 0)
        continue;
      policy.charge_step(reference[id]);
      tracked_policy.charge_step(tracked[id]);
      sut.set_above_top(id, tracked[id].level > 0);
    }
    for (auto& [id, p] : reference)
      policy.age(p, std::find(residents.begin(), residents.end(), id) != residents.end());
    for (auto id : sut.step(residents, aging_steps)) {
      REQUIRE(tracked[id].level > 0);
      mlfq_policy::return_to_top(tracked[id]);
    }
    for (auto& [id, p] : reference) {
      CAPTURE(id);
      REQUIRE(tracked[id].level == p.level);
      REQUIRE(tracked[id].quantum_used == p.quantum_used);
      REQUIRE(tracked[id].turn == p.turn);
      REQUIRE(sut.waited(id) == p.waited_steps);
    }
  }
}

} // namespace

TEST_CASE("aging_queue: returns to level 0 the same sequences at the same step as "
          "mlfq_policy age") {
  for (std::uint32_t aging : {1u, 2u, 5u, 17u})
    for (std::uint64_t seed = 1; seed <= 4; ++seed)
      check_random_history(aging, seed);
}

TEST_CASE("aging_queue: a resident starts waiting anew and only sequences above level 0 age") {
  aging_queue sut;
  REQUIRE(sut.enter(1, true));
  REQUIRE(sut.enter(2, false));
  REQUIRE(sut.enter(3, true));
  CHECK_FALSE(sut.enter(3, false));
  const std::vector<seq_id> resident{3};
  CHECK(sut.step(resident, 2).empty());
  CHECK(sut.waited(1) == 1);
  CHECK(sut.waited(3) == 0);
  CHECK(sut.step(resident, 2) == std::vector<seq_id>{1});
  CHECK(sut.waited(1) == 0); // back at level 0: waits anew
  CHECK(sut.waited(2) == 2); // at level 0 all along: nothing to do
  CHECK(sut.step({}, 2).empty()); // 3 left its slot one step ago
  CHECK(sut.step({}, 2) == std::vector<seq_id>{3});
}

TEST_CASE("aging_queue: a sequence that leaves is never returned") {
  aging_queue sut;
  REQUIRE(sut.enter(1, true));
  sut.leave(1);
  sut.leave(1);
  CHECK(sut.size() == 0);
  CHECK(sut.step({}, 1).empty());
  CHECK(sut.waited(1) == 0);
}
