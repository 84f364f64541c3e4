#include "tools/bench/prometheus_text.hpp"

#include <doctest/doctest.h>

using namespace kvlane::tools::bench;

namespace {

constexpr std::string_view metrics = R"(# HELP kvlane_transfers_total Snapshot transfers.
# TYPE kvlane_transfers_total counter
kvlane_transfers_total{model="a",kind="dump"} 12
kvlane_transfers_total{kind="load", model="a"} 7
kvlane_transfers_total{model="q\"uo\\te",kind="dump"} 3
kvlane_slots{model="a"} 16 1700000000000
kvlane_broken{model="a" 5
kvlane_uptime_seconds 42.5
)";

} // namespace

TEST_CASE("bench prometheus_text: finds a sample by name and labels in any order") {
  CHECK(find_sample(metrics, "kvlane_transfers_total", {{"model", "a"}, {"kind", "dump"}}) == 12);
  CHECK(find_sample(metrics, "kvlane_transfers_total", {{"model", "a"}, {"kind", "load"}}) == 7);
  CHECK(find_sample(metrics, "kvlane_slots", {{"model", "a"}}) == 16); // timestamp ignored
  CHECK(find_sample(metrics, "kvlane_uptime_seconds", {}) == 42.5);
}

TEST_CASE("bench prometheus_text: unescapes label values") {
  CHECK(find_sample(metrics, "kvlane_transfers_total", {{"model", "q\"uo\\te"}}) == 3);
}

TEST_CASE("bench prometheus_text: a missing sample, a partial name or a broken line is nothing") {
  CHECK_FALSE(find_sample(metrics, "kvlane_transfers_total", {{"model", "b"}}));
  CHECK_FALSE(find_sample(metrics, "kvlane_transfers", {}));
  CHECK_FALSE(find_sample(metrics, "kvlane_broken", {}));
  CHECK_FALSE(find_sample("", "kvlane_slots", {}));
}
