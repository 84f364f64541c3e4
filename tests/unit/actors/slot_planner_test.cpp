// The slot planner on plain values: admission into free and spare slots,
// eviction choice, waiting for the lane, and what happens when carrying out a
// decision turns out otherwise.
#include "actors/slot_planner.hpp"

#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace kvlane;
using actors::eviction;
using actors::kv_state;
using actors::seq_id;
using actors::slot_candidate;
using actors::slot_id;

namespace {

/// Records every decision and answers as the scheduler would: a queued
/// sequence becomes resident, a parked one loading (resident if its snapshot
/// is lost), a swap dumping (queued if the store is full), a recompute queued.
class recorded_actions final : public actors::slot_actions {
public:
  explicit recorded_actions(const std::vector<slot_candidate>& seqs) {
    for (auto& s : seqs)
      state_[s.id] = s.state;
  }

  kv_state admit(seq_id id, slot_id slot) override {
    log.push_back("admit " + std::to_string(id) + " -> slot " + std::to_string(slot));
    auto& st = state_.at(id);
    REQUIRE((st == kv_state::queued || st == kv_state::parked));
    st = st == kv_state::parked && !lost_snapshots.contains(id) ? kv_state::loading
                                                                 : kv_state::resident;
    return st;
  }

  kv_state evict(seq_id id, eviction how) override {
    log.push_back("evict " + std::to_string(id) + " by " + std::string{to_string(how)});
    auto& st = state_.at(id);
    REQUIRE(st == kv_state::resident);
    st = how == eviction::swap && !store_full ? kv_state::dumping : kv_state::queued;
    return st;
  }

  std::vector<std::string> log;
  bool store_full = false;
  std::set<seq_id> lost_snapshots;

private:
  std::map<seq_id, kv_state> state_;
};

slot_candidate queued(seq_id id) { return {id, kv_state::queued, std::nullopt, false, false}; }
slot_candidate parked(seq_id id) { return {id, kv_state::parked, std::nullopt, false, false}; }
slot_candidate resident(seq_id id, slot_id slot, bool recompute_cheaper = false) {
  return {id, kv_state::resident, slot, false, recompute_cheaper};
}

/// A model of `slots` slots; the ranked sequences tell who holds which.
struct planning_round {
  std::vector<slot_candidate> ranked;
  std::uint32_t slots = 3;
  std::uint32_t spare = 1;
  std::uint32_t dumping = 0;
  std::uint32_t pending = 0;
  bool preemptive = true;
  std::vector<std::optional<seq_id>> extra_owners; ///< slots held by unranked sequences

  std::vector<std::string> plan(recorded_actions& actions) const {
    std::vector<std::optional<seq_id>> owners(slots);
    for (auto& s : ranked)
      if (s.slot)
        owners[*s.slot] = s.id;
    for (std::size_t i = 0; i < extra_owners.size() && i < owners.size(); ++i)
      if (extra_owners[i])
        owners[i] = extra_owners[i];
    actors::slot_plan_input in;
    in.ranked = ranked;
    in.owners = owners;
    in.dumping = dumping;
    in.transfers_pending = pending;
    in.spare_slots = spare;
    in.preemptive = preemptive;
    actors::plan_slots(in, actions);
    return actions.log;
  }

  std::vector<std::string> plan() const {
    recorded_actions actions{ranked};
    return plan(actions);
  }
};

using decisions = std::vector<std::string>;

} // namespace

TEST_CASE("slot_planner: target sequences take free slots in rank order and the spare stays "
          "free") {
  planning_round r;
  r.ranked = {queued(1), queued(2), queued(3)};
  CHECK(r.plan() == decisions{"admit 1 -> slot 0", "admit 2 -> slot 1"});
}

TEST_CASE("slot_planner: a new top-ranked sequence takes the spare at once, then the "
          "lowest-ranked resident is evicted to restore it") {
  planning_round r;
  r.ranked = {queued(7), resident(1, 0), resident(2, 1)};
  CHECK(r.plan() == decisions{"admit 7 -> slot 2", "evict 2 by swap"});
}

TEST_CASE("slot_planner: the spare is restored only while the lane is idle, unless the victim "
          "is cheaper to recompute") {
  planning_round r;
  r.ranked = {queued(7), resident(1, 0), resident(2, 1)};
  r.pending = 1;
  CHECK(r.plan() == decisions{"admit 7 -> slot 2"}); // 2 keeps computing until the lane is free
  r.ranked[2].recompute_cheaper = true;
  CHECK(r.plan() == decisions{"admit 7 -> slot 2", "evict 2 by recompute"});
}

TEST_CASE("slot_planner: with no slot free a target sequence evicts the lowest-ranked resident "
          "outside the target") {
  planning_round r;
  r.slots = 2; // target 1 + 1 spare
  r.ranked = {queued(7), resident(1, 0), resident(2, 1)};
  SUBCASE("a swap frees the slot later: nothing else moves while its dump occupies the lane") {
    CHECK(r.plan() == decisions{"evict 2 by swap"});
  }
  SUBCASE("a recompute frees the slot at once, and the spare is restored behind it") {
    r.ranked[2].recompute_cheaper = true;
    CHECK(r.plan() == decisions{"evict 2 by recompute", "admit 7 -> slot 1", "evict 1 by swap"});
  }
}

TEST_CASE("slot_planner: a resident in the running step is never evicted") {
  planning_round r;
  r.slots = 2;
  r.ranked = {queued(7), resident(1, 0), resident(2, 1)};
  r.ranked[2].in_step = true;
  CHECK(r.plan() == decisions{"evict 1 by swap"});
  r.ranked[1].in_step = true;
  CHECK(r.plan().empty());
}

TEST_CASE("slot_planner: a slot being dumped is promised to the first target sequence that "
          "finds none free") {
  planning_round r;
  r.slots = 3;
  r.spare = 0;
  r.ranked = {resident(1, 0), queued(7), queued(8), resident(2, 1, true)};
  r.extra_owners = {std::nullopt, std::nullopt, seq_id{99}}; // slot 2 being dumped
  r.dumping = 1;
  r.pending = 1;
  // 7 waits for the dump's slot; 8 takes the slot of a victim cheap to recompute.
  CHECK(r.plan() == decisions{"evict 2 by recompute", "admit 8 -> slot 1"});
}

TEST_CASE("slot_planner: a swap the store cannot hold becomes a recompute and its slot is used "
          "at once") {
  planning_round r;
  r.slots = 2;
  r.ranked = {queued(7), resident(1, 0), resident(2, 1)};
  recorded_actions actions{r.ranked};
  actions.store_full = true;
  CHECK(r.plan(actions)
        == decisions{"evict 2 by swap", "admit 7 -> slot 1", "evict 1 by swap"});
}

TEST_CASE("slot_planner: a load occupies the lane, so no swap victim follows it in the same "
          "round, but a lost snapshot does not") {
  planning_round r;
  r.ranked = {parked(7), resident(1, 0), resident(2, 1)};
  CHECK(r.plan() == decisions{"admit 7 -> slot 2"});
  recorded_actions actions{r.ranked};
  actions.lost_snapshots = {7};
  CHECK(r.plan(actions) == decisions{"admit 7 -> slot 2", "evict 2 by swap"});
}

TEST_CASE("slot_planner: without preemption every slot is target, sequences wait for a free one "
          "and nothing is evicted") {
  planning_round r;
  r.preemptive = false;
  r.ranked = {queued(7), resident(1, 0), queued(8), resident(2, 1), queued(9)};
  // Ranked by arrival: 7 and 8 are in the target of 3 but only slot 2 is free.
  CHECK(r.plan() == decisions{"admit 7 -> slot 2"});
}

TEST_CASE("slot_planner: one slot has no spare") {
  planning_round r;
  r.slots = 1;
  r.ranked = {queued(7), resident(1, 0)};
  CHECK(r.plan() == decisions{"evict 1 by swap"});
  r.ranked = {queued(7)};
  CHECK(r.plan() == decisions{"admit 7 -> slot 0"});
}

TEST_CASE("slot_planner: recompute mode's input (no spare, recompute victims) gives a waiting "
          "higher-ranked sequence the lowest-ranked resident's slot at once") {
  planning_round r;
  r.spare = 0;
  r.pending = 2; // a busy lane does not hold a recompute back
  r.ranked = {resident(1, 0, true), queued(7), resident(2, 1, true), resident(3, 2, true)};
  CHECK(r.plan() == decisions{"evict 3 by recompute", "admit 7 -> slot 2"});
  // Nobody waits: every slot computes, nothing is evicted to keep a spare.
  r.ranked = {resident(1, 0, true), resident(2, 1, true), resident(3, 2, true)};
  CHECK(r.plan() == decisions{});
}

TEST_CASE("slot_planner: the best plan_target_size ranked sequences plus the other residents "
          "plan the same as every live sequence") {
  std::mt19937_64 rng{20261201};
  auto pick = [&](std::size_t n) {
    return std::uniform_int_distribution<std::size_t>{0, n - 1}(rng);
  };
  for (int round = 0; round < 2000; ++round) {
    CAPTURE(round);
    planning_round all;
    all.slots = static_cast<std::uint32_t>(1 + pick(8));
    all.spare = static_cast<std::uint32_t>(pick(3));
    all.preemptive = pick(3) != 0;
    all.pending = static_cast<std::uint32_t>(pick(3));
    std::vector<slot_id> free_slots;
    for (slot_id s = 0; s < all.slots; ++s)
      if (pick(4) != 0)
        free_slots.push_back(s);
    const auto live = pick(30);
    for (seq_id id = 1; id <= live; ++id) {
      slot_candidate c{id, kv_state::queued, std::nullopt, false, pick(3) == 0};
      const auto kind = pick(5);
      if (kind >= 2 && !free_slots.empty()) {
        c.slot = free_slots.back();
        free_slots.pop_back();
        c.state = kind == 2   ? kv_state::dumping
                  : kind == 3 ? kv_state::loading
                              : kv_state::resident;
        c.in_step = c.state == kv_state::resident && pick(3) == 0;
        all.dumping += c.state == kv_state::dumping;
      } else if (kind == 1) {
        c.state = kv_state::parked;
      }
      all.ranked.push_back(c);
    }
    const auto target = actors::plan_target_size(all.slots, all.spare, all.preemptive);
    planning_round reduced = all;
    reduced.ranked.clear();
    std::vector<std::optional<seq_id>> holders(all.slots);
    for (std::size_t i = 0; i < all.ranked.size(); ++i) {
      const auto& c = all.ranked[i];
      if (c.slot)
        holders[*c.slot] = c.id;
      if (i < target || c.state == kv_state::resident)
        reduced.ranked.push_back(c);
    }
    // The slots of the sequences left out are still held.
    reduced.extra_owners = holders;
    recorded_actions full_actions{all.ranked};
    recorded_actions reduced_actions{all.ranked};
    CHECK(reduced.plan(reduced_actions) == all.plan(full_actions));
  }
}

namespace {

/// A resident whose eviction costs `eviction_ms` and that ends in `expected_ms`
/// (at most `at_most_ms`) if left alone.
slot_candidate costed(seq_id id, slot_id slot, double eviction_ms, double expected_ms,
                      double at_most_ms = actors::preemption_case::unknown) {
  auto c = resident(id, slot);
  c.eviction_ms = eviction_ms;
  c.expected_end_ms = expected_ms;
  c.end_at_most_ms = at_most_ms;
  return c;
}

} // namespace

TEST_CASE("slot_planner: a resident expected to end before its eviction is done is not evicted, "
          "a cheaper one above it is") {
  planning_round r;
  r.slots = 3; // target 2 + 1 spare
  r.ranked = {queued(7), costed(1, 0, 40, 5000), costed(2, 1, 10, 900), costed(3, 2, 40, 30)};
  // 3 (lowest) ends in 30 ms, sooner than its 40 ms swap; 2's 10 ms eviction beats waiting
  // those 30 ms. 2's dump holds its slot until it ends.
  CHECK(r.plan() == decisions{"evict 2 by swap"});
}

TEST_CASE("slot_planner: a target sequence does not evict when a resident's own end frees a slot "
          "sooner than the eviction costs, nor is the spare restored for it") {
  planning_round r;
  r.slots = 2; // target 1 + 1 spare
  r.ranked = {queued(7), costed(1, 0, 40, 30), costed(2, 1, 40, 5000)};
  // 1 ends in 30 ms; evicting 2 (or 1) costs 40 ms: 7 waits for 1's slot.
  CHECK(r.plan().empty());
  // When the wait is longer than the eviction, the eviction goes ahead.
  r.ranked[1].expected_end_ms = 600;
  CHECK(r.plan() == decisions{"evict 2 by swap"});
}

TEST_CASE("slot_planner: a resident that ends before its eviction is done is not evicted to "
          "restore the spare either") {
  planning_round r;
  r.ranked = {queued(7), costed(1, 0, 40, 5000), costed(2, 1, 40, 5000)};
  CHECK(r.plan() == decisions{"admit 7 -> slot 2", "evict 2 by swap"});
  r.ranked[2].expected_end_ms = 30;
  CHECK(r.plan() == decisions{"admit 7 -> slot 2"});
  r.ranked[2].expected_end_ms = 5000;
  r.ranked[2].end_at_most_ms = 35; // its max_tokens
  CHECK(r.plan() == decisions{"admit 7 -> slot 2"});
}

TEST_CASE("slot_planner: unknown costs leave every eviction to the rank order") {
  planning_round r;
  r.slots = 2;
  r.ranked = {queued(7), costed(1, 0, 0, 1), costed(2, 1, 0, 1)};
  CHECK(r.plan() == decisions{"evict 2 by swap"});
}

namespace {

slot_candidate waiting(seq_id id, actors::priority_class cls, double slack_ms, double service_ms) {
  auto c = queued(id);
  c.cls = cls;
  c.slack_ms = slack_ms;
  c.service_ms = service_ms;
  return c;
}

slot_candidate with_slack(slot_candidate c, actors::priority_class cls, double slack_ms) {
  c.cls = cls;
  c.slack_ms = slack_ms;
  return c;
}

constexpr auto interactive = actors::priority_class::interactive;
constexpr auto batch = actors::priority_class::batch;

/// Three slots (target 2 + 1 spare): batch waiter 7 (`waiter_slack` ms, a 2 s run) and batch
/// residents 1 (ends in 600 ms), 2 and 3 (5 s), each evicted for 40 ms; 3 has `slack3` ms.
planning_round three_batch_residents(double waiter_slack, double slack3) {
  planning_round r;
  r.slots = 3;
  r.ranked = {waiting(7, batch, waiter_slack, 2000), with_slack(costed(1, 0, 40, 600), batch, 1e9),
              with_slack(costed(2, 1, 40, 5000), batch, 1e9),
              with_slack(costed(3, 2, 40, 5000), batch, slack3)};
  return r;
}

} // namespace

TEST_CASE("slot_planner: a target sequence that meets its objective by waiting evicts only a "
          "victim that keeps its own; one that would miss it evicts; one too late either way "
          "does not") {
  planning_round r;
  r.slots = 2; // target 1 + 1 spare
  // Resident 1 ends in 600 ms; evicting either costs 40 ms and stalls it 40 + 600 ms.
  r.ranked = {waiting(7, batch, 5000, 2000), with_slack(costed(1, 0, 40, 600), batch, 600),
              with_slack(costed(2, 1, 40, 5000), batch, 600)};
  CHECK(r.plan().empty()); // 600 ms of waiting is within its 5 s; each would lose its objective
  r.ranked[2].slack_ms = 1e9;
  CHECK(r.plan() == decisions{"evict 2 by swap"}); // 2 keeps it: 7 starts 560 ms sooner
  r.ranked[0].slack_ms = 300;
  CHECK(r.plan() == decisions{"evict 2 by swap"}); // saves 7's objective
  // Too late even with the eviction: demoted, it takes the next slot that frees.
  r.ranked[0].slack_ms = 20;
  CHECK(r.plan().empty());
}

TEST_CASE("slot_planner: latency alone evicts no resident that was evicted before; an objective "
          "the eviction saves still does") {
  // 7 meets its objective anyway and would wait 600 ms (1's end); 3 (lowest) and 2 keep theirs.
  auto r = three_batch_residents(5000, 1e9);
  CHECK(r.plan() == decisions{"evict 3 by swap"});
  r.ranked[3].preempted_before = true;
  CHECK(r.plan() == decisions{"evict 2 by swap"}); // 3 was sliced once: the next one goes
  r.ranked[2].preempted_before = true;
  CHECK(r.plan().empty()); // both were: 7 waits the 600 ms for 1's end
  r.ranked[0].slack_ms = 300; // waiting would cost 7 its objective: the eviction saves it
  CHECK(r.plan() == decisions{"evict 3 by swap"});
}

TEST_CASE("slot_planner: a victim whose objective the eviction would break is passed over for "
          "one whose would hold, unless the waiter is interactive and the victim batch") {
  // 7 would wait 600 ms (1's end) and has 300 ms; the victim stalls 40 ms + min(7's 2 s run,
  // 600 ms) = 640 ms. 3 (lowest) has 500 ms of slack, 2 has plenty.
  auto r = three_batch_residents(300, 500);
  CHECK(r.plan() == decisions{"evict 2 by swap"});
  r.ranked[0].cls = interactive;
  CHECK(r.plan() == decisions{"evict 3 by swap"});
}

TEST_CASE("slot_planner: the second target sequence without a slot waits for the second "
          "soonest end") {
  planning_round r;
  r.slots = 3; // target 2 + 1 spare, both target sequences new
  // Ends at 100 ms (1), 800 ms (2) and 5 s (3); each waiter has 500 ms of slack. The first
  // waits 100 ms and meets it; the second would wait 800 ms, so it evicts the lowest resident.
  r.ranked = {waiting(7, batch, 500, 2000), waiting(8, batch, 500, 2000),
              with_slack(costed(1, 0, 40, 100), batch, 1e9),
              with_slack(costed(2, 1, 40, 800), batch, 1e9),
              with_slack(costed(3, 2, 40, 5000), batch, 1e9)};
  CHECK(r.plan() == decisions{"evict 3 by swap"});
}
