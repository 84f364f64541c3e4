// Where each mode runs its transfers, on either kind of backend.
#include "actors/policy.hpp"

#include <doctest/doctest.h>

using namespace kvlane;
using actors::mode_rules;
using actors::parse_scheduler_mode;
using actors::place_transfers;
using actors::rank_order;
using actors::rules_of;
using actors::scheduler_mode;
using actors::transfer_placement;

TEST_CASE("policy: overlap on a backend that cannot overlap falls back to serialized transfers "
          "with longer quanta") {
  CHECK(place_transfers(scheduler_mode::overlap, false) == transfer_placement{true, true, true});
  CHECK(place_transfers(scheduler_mode::overlap, true) == transfer_placement{false, false, false});
}

TEST_CASE("policy: sync always runs transfers on the compute lane with the fallback's quanta") {
  CHECK(place_transfers(scheduler_mode::sync, true) == transfer_placement{true, false, true});
  CHECK(place_transfers(scheduler_mode::sync, false) == transfer_placement{true, false, true});
}

TEST_CASE("policy: the non-MLFQ modes and free-transfer never serialize transfers") {
  for (bool overlaps : {true, false}) {
    CAPTURE(overlaps);
    for (auto m : {scheduler_mode::fcfs, scheduler_mode::prio_fcfs, scheduler_mode::recompute,
                   scheduler_mode::free_transfer}) {
      CAPTURE(actors::to_string(m));
      CHECK(place_transfers(m, overlaps) == transfer_placement{false, false, false});
    }
  }
}

TEST_CASE("policy: each mode's rules") {
  // order, preempts, swaps, keeps_spare, free_transfers
  CHECK(rules_of(scheduler_mode::fcfs) == mode_rules{rank_order::arrival, false, false, false, false});
  CHECK(rules_of(scheduler_mode::prio_fcfs)
        == mode_rules{rank_order::priority, false, false, false, false});
  CHECK(rules_of(scheduler_mode::recompute)
        == mode_rules{rank_order::priority, true, false, false, false});
  CHECK(rules_of(scheduler_mode::sync) == mode_rules{rank_order::mlfq, true, true, true, false});
  CHECK(rules_of(scheduler_mode::overlap) == mode_rules{rank_order::mlfq, true, true, true, false});
  CHECK(rules_of(scheduler_mode::free_transfer)
        == mode_rules{rank_order::mlfq, true, true, true, true});
}

TEST_CASE("policy: every mode parses back from its name and ideal names free-transfer") {
  for (auto m : actors::all_scheduler_modes) {
    CAPTURE(actors::to_string(m));
    CHECK(parse_scheduler_mode(actors::to_string(m)) == m);
  }
  CHECK(parse_scheduler_mode("ideal") == scheduler_mode::free_transfer);
  CHECK(parse_scheduler_mode("prio_fcfs") == std::nullopt);
  CHECK(parse_scheduler_mode("") == std::nullopt);
}
