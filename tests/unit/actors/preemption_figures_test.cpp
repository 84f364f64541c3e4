// The figures the preemption rule is fed: a resident's eviction cost the way the cost model
// would evict it, and its expected and latest end in steps costed with every slot holder in
// them; nothing while the cost model has measured nothing.
#include "actors/preemption_figures.hpp"

#include <doctest/doctest.h>

using namespace kvlane::actors;

namespace {

cost_model fixed() {
  cost_model m;
  m.fix(cost_figures{50.0, 0.5, 30.0, 16.0}); // step 50 + 0.5/token; dump 30, load 16 ms per MiB
  return m;
}

constexpr std::uint64_t mib = 1u << 20;

} // namespace

TEST_CASE("preemption_figures: a decoding resident ends after the output its peers predict, at "
          "the latest after max_tokens, each token one step with every slot holder in it") {
  const auto costs = fixed();
  output_lengths outputs;
  outputs.observe(20);
  outputs.observe(40);
  const preemption_figures f{costs, outputs, 4, 128, false};
  slot_candidate c{1, kv_state::resident, slot_id{0}, false, false};
  f.fill({100, 100, 10, 50, mib}, c);
  const double step = 50.0 + 0.5 * 4;
  CHECK(c.expected_end_ms == doctest::Approx(20 * step)); // mean of 20 and 40, less the 10 done
  CHECK(c.end_at_most_ms == doctest::Approx(40 * step));
  CHECK(c.eviction_ms == doctest::Approx(16.0)); // the load; the dump runs beside the steps
}

TEST_CASE("preemption_figures: a swap that stalls compute costs its dump too, a recompute its "
          "prefill") {
  const auto costs = fixed();
  output_lengths outputs;
  slot_candidate swap{1, kv_state::resident, slot_id{0}, false, false};
  preemption_figures{costs, outputs, 4, 128, true}.fill({100, 100, 10, 50, 2 * mib}, swap);
  CHECK(swap.eviction_ms == doctest::Approx(2 * (16.0 + 30.0)));
  slot_candidate recompute{1, kv_state::resident, slot_id{0}, false, true};
  preemption_figures{costs, outputs, 4, 128, true}.fill({100, 100, 10, 50, 2 * mib}, recompute);
  CHECK(recompute.eviction_ms == doctest::Approx(0.5 * 100));
}

TEST_CASE("preemption_figures: a resident still prefilling has its chunks left ahead of its "
          "output") {
  const auto costs = fixed();
  output_lengths outputs; // nothing finished: one more token expected after the prompt
  const preemption_figures f{costs, outputs, 1, 128, false};
  slot_candidate c{1, kv_state::resident, slot_id{0}, false, false};
  f.fill({0, 300, 0, 50, mib}, c);
  const double step = 50.0 + 0.5;
  CHECK(c.expected_end_ms == doctest::Approx((3 + 1) * step));
  CHECK(c.end_at_most_ms == doctest::Approx((3 + 50) * step));
}

TEST_CASE("preemption_figures: before the cost model has measured anything the figures stay "
          "unknown") {
  const cost_model costs;
  output_lengths outputs;
  outputs.observe(5);
  slot_candidate c{1, kv_state::resident, slot_id{0}, false, false};
  preemption_figures{costs, outputs, 4, 128, false}.fill({100, 100, 1, 50, mib}, c);
  CHECK(c.eviction_ms == 0.0);
  CHECK(c.expected_end_ms == preemption_case::unknown);
  CHECK(c.end_at_most_ms == preemption_case::unknown);
}
