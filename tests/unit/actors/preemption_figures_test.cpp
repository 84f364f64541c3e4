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
const slo_targets slo; // interactive 2 s / 200 ms, batch 60 s / 1 s

} // namespace

TEST_CASE("preemption_figures: a decoding resident ends after the output its peers predict, at "
          "the latest after max_tokens, each token one step with every slot holder in it") {
  const auto costs = fixed();
  output_lengths outputs;
  outputs.observe(20);
  outputs.observe(40);
  const preemption_figures f{costs, outputs, &slo, 4, 128, false};
  slot_candidate c{1, kv_state::resident, slot_id{0}, false, false};
  f.fill({100, 100, 10, 50, mib}, c);
  const double step = 50.0 + 0.5 * 4;
  CHECK(c.expected_end_ms == doctest::Approx(20 * step)); // mean of 20 and 40, less the 10 done
  CHECK(c.end_at_most_ms == doctest::Approx(40 * step));
  CHECK(c.eviction_ms == doctest::Approx(16.0)); // the load; the dump runs beside the steps
  CHECK(c.others_delay_ms == 0.0);               // and nobody else waits for either
}

TEST_CASE("preemption_figures: a swap that stalls compute costs its dump too, a recompute its "
          "prefill, and either delays every other slot holder by as much") {
  const auto costs = fixed();
  output_lengths outputs;
  slot_candidate swap{1, kv_state::resident, slot_id{0}, false, false};
  preemption_figures{costs, outputs, &slo, 4, 128, true}.fill({100, 100, 10, 50, 2 * mib}, swap);
  CHECK(swap.eviction_ms == doctest::Approx(2 * (16.0 + 30.0)));
  CHECK(swap.others_delay_ms == doctest::Approx(3 * 2 * (16.0 + 30.0))); // the 3 other holders stall
  slot_candidate recompute{1, kv_state::resident, slot_id{0}, false, true};
  preemption_figures{costs, outputs, &slo, 4, 128, false}.fill({100, 100, 10, 50, 2 * mib}, recompute);
  CHECK(recompute.eviction_ms == doctest::Approx(0.5 * 100));
  CHECK(recompute.others_delay_ms == doctest::Approx(3 * 0.5 * 100)); // its re-prefill is in their steps
}

TEST_CASE("preemption_figures: a resident still prefilling has its chunks left ahead of its "
          "output, each a step that also carries the chunk's tokens") {
  const auto costs = fixed();
  output_lengths outputs; // nothing finished: one more token expected after the prompt
  const preemption_figures f{costs, outputs, &slo, 1, 128, false};
  slot_candidate c{1, kv_state::resident, slot_id{0}, false, false};
  f.fill({0, 300, 0, 50, mib}, c);
  const double step = 50.0 + 0.5;
  const double prefill = 3 * step + 0.5 * 300; // 3 chunks of at most 128 tokens
  CHECK(c.expected_end_ms == doctest::Approx(prefill + 1 * step));
  CHECK(c.end_at_most_ms == doctest::Approx(prefill + 50 * step));
}

TEST_CASE("preemption_figures: before the cost model has measured anything the figures stay "
          "unknown") {
  const cost_model costs;
  output_lengths outputs;
  outputs.observe(5);
  slot_candidate c{1, kv_state::resident, slot_id{0}, false, false};
  preemption_figures{costs, outputs, &slo, 4, 128, false}.fill({100, 100, 1, 50, mib}, c);
  CHECK(c.eviction_ms == 0.0);
  CHECK(c.expected_end_ms == preemption_case::unknown);
  CHECK(c.end_at_most_ms == preemption_case::unknown);
}

TEST_CASE("preemption_figures: a resident's slack before its first token is its TTFT less its "
          "wait and its prefill steps left, after it its TPOT over its gaps less its run") {
  const auto costs = fixed();
  output_lengths outputs;
  outputs.observe(20);
  outputs.observe(40);
  const preemption_figures f{costs, outputs, &slo, 4, 128, false};
  const double step = 50.0 + 0.5 * 4;
  slot_candidate prefilling{1, kv_state::resident, slot_id{0}, false, false};
  resident_progress p{0, 300, 0, 50, mib, priority_class::interactive, 500};
  f.fill(p, prefilling);
  CHECK(prefilling.slack_ms == doctest::Approx(2000 - 500 - (3 * step + 0.5 * 300)));
  slot_candidate decoding{2, kv_state::resident, slot_id{1}, false, false};
  f.fill({100, 100, 10, 50, mib, priority_class::batch, 4000}, decoding);
  // 10 tokens done, 20 expected to come: 29 gaps of at most 1 s.
  CHECK(decoding.slack_ms == doctest::Approx(1000.0 * 29 - 4000 - 20 * step));
}

TEST_CASE("preemption_figures: a waiting sequence runs its prefill in chunks (or its load when "
          "parked) and its expected output; its slack is what is left of its objective after its "
          "start") {
  const auto costs = fixed();
  output_lengths outputs;
  outputs.observe(10);
  const preemption_figures f{costs, outputs, &slo, 2, 128, false};
  const double step = 50.0 + 0.5 * 2;
  slot_candidate queued{1, kv_state::queued, std::nullopt, false, false};
  f.fill_waiting({0, 400, 0, 50, 0, priority_class::interactive, 300}, false, queued);
  const double prefill = 4 * step + 0.5 * 400; // 4 chunks of at most 128 tokens
  CHECK(queued.service_ms == doctest::Approx(prefill + 10 * step));
  CHECK(queued.slack_ms == doctest::Approx(2000 - 300 - prefill));
  slot_candidate parked{2, kv_state::parked, std::nullopt, false, false};
  f.fill_waiting({200, 200, 0, 50, 4 * mib, priority_class::batch, 70000}, true, parked);
  CHECK(parked.service_ms == doctest::Approx(4 * 16.0 + 10 * step));
  CHECK(parked.slack_ms < 0); // waited past its minute: it misses its TTFT whatever happens
}

TEST_CASE("preemption_figures: no slack or run is known before the cost model has measured a "
          "step") {
  const cost_model costs;
  output_lengths outputs;
  slot_candidate c{1, kv_state::queued, std::nullopt, false, false};
  preemption_figures{costs, outputs, &slo, 4, 128, false}.fill_waiting(
    {0, 100, 0, 50, 0, priority_class::interactive, 0}, false, c);
  CHECK(c.slack_ms == preemption_case::unknown);
  CHECK(c.service_ms == preemption_case::unknown);
}

TEST_CASE("preemption_figures: without objectives every slack stays unknown") {
  const auto costs = fixed();
  output_lengths outputs;
  const preemption_figures f{costs, outputs, nullptr, 4, 128, false};
  slot_candidate resident{1, kv_state::resident, slot_id{0}, false, false};
  f.fill({100, 100, 10, 50, mib, priority_class::batch, 4000}, resident);
  CHECK(resident.slack_ms == preemption_case::unknown);
  CHECK(resident.expected_end_ms != preemption_case::unknown);
  slot_candidate queued{2, kv_state::queued, std::nullopt, false, false};
  f.fill_waiting({0, 400, 0, 50, 0, priority_class::interactive, 300}, false, queued);
  CHECK(queued.slack_ms == preemption_case::unknown);
  CHECK(queued.service_ms != preemption_case::unknown);
}

TEST_CASE("preemption_figures: a decoding sequence's step allowance is its TPOT times its "
          "expected gaps, less the time since its first token, shared over its tokens to come") {
  const auto costs = fixed();
  output_lengths outputs;
  outputs.observe(20);
  outputs.observe(40); // 10 generated: 20 more expected
  const preemption_figures f{costs, outputs, &slo, 4, 128, false};
  resident_progress s{100, 110, 10, 50, mib, priority_class::interactive, 1'000.0};
  // 9 gaps behind it and 20 to come at 200 ms: 5.8 s, of which 1 s is spent.
  CHECK(*f.step_allowance_ms(s) == doctest::Approx((200.0 * 29 - 1'000.0) / 20));
  s.elapsed_ms = 5'000.0; // behind: each token to come must now be faster than 200 ms
  CHECK(*f.step_allowance_ms(s) == doctest::Approx((200.0 * 29 - 5'000.0) / 20));
  s.cls = priority_class::batch; // 1 s per token
  CHECK(*f.step_allowance_ms(s) == doctest::Approx((1'000.0 * 29 - 5'000.0) / 20));
}

TEST_CASE("preemption_figures: no step allowance for a sequence whose first token came after "
          "its TTFT objective: its objective is lost whatever the steps take") {
  const auto costs = fixed();
  output_lengths outputs;
  const preemption_figures f{costs, outputs, &slo, 4, 128, false};
  resident_progress s{100, 101, 1, 50, mib, priority_class::interactive, 10.0, 2'000.0};
  CHECK(f.step_allowance_ms(s)); // on time: 2 s is the objective itself
  s.ttft_ms = 2'001.0;
  CHECK_FALSE(f.step_allowance_ms(s));
  s.cls = priority_class::batch; // 60 s to first token
  CHECK(f.step_allowance_ms(s));
}

TEST_CASE("preemption_figures: no step allowance before the first token, without objectives, "
          "or before the cost model has measured a step") {
  const auto costs = fixed();
  output_lengths outputs;
  const resident_progress prefilling{0, 100, 0, 50, mib, priority_class::interactive, 10.0};
  const resident_progress decoding{100, 101, 1, 50, mib, priority_class::interactive, 10.0};
  CHECK_FALSE(preemption_figures{costs, outputs, &slo, 4, 128, false}.step_allowance_ms(prefilling));
  CHECK(preemption_figures{costs, outputs, &slo, 4, 128, false}.step_allowance_ms(decoding));
  CHECK_FALSE(preemption_figures{costs, outputs, nullptr, 4, 128, false}.step_allowance_ms(decoding));
  const cost_model unmeasured;
  CHECK_FALSE(preemption_figures{unmeasured, outputs, &slo, 4, 128, false}.step_allowance_ms(decoding));
}
