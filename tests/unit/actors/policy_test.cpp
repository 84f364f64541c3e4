// Where each mode runs its transfers, on either kind of backend.
#include "actors/policy.hpp"

#include <doctest/doctest.h>

using namespace kvlane;
using actors::place_transfers;
using actors::scheduler_mode;
using actors::transfer_placement;

TEST_CASE("policy: overlap on a backend that cannot overlap falls back to serialized transfers "
          "with longer quanta") {
  CHECK(place_transfers(scheduler_mode::overlap, false) == transfer_placement{true, true});
  CHECK(place_transfers(scheduler_mode::overlap, true) == transfer_placement{false, false});
}

TEST_CASE("policy: sync always runs transfers on the compute lane, without the fallback's "
          "quanta") {
  CHECK(place_transfers(scheduler_mode::sync, true) == transfer_placement{true, false});
  CHECK(place_transfers(scheduler_mode::sync, false) == transfer_placement{true, false});
}

TEST_CASE("policy: fcfs and ideal never serialize transfers") {
  for (bool overlaps : {true, false}) {
    CAPTURE(overlaps);
    CHECK(place_transfers(scheduler_mode::fcfs, overlaps) == transfer_placement{false, false});
    CHECK(place_transfers(scheduler_mode::ideal, overlaps) == transfer_placement{false, false});
  }
}
