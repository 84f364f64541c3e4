#include "actors/door_forecast.hpp"

#include "actors/sequence_table.hpp"

#include <doctest/doctest.h>

#include <numeric>

using namespace kvlane::actors;
using namespace std::chrono_literals;
using time_point = std::chrono::steady_clock::time_point;

namespace {

constexpr auto interactive = priority_class::interactive;
constexpr auto batch = priority_class::batch;

sequence& add(sequence_table& t, seq_id id, priority_class cls, std::uint32_t level = 0) {
  submission s;
  s.id = id;
  s.client = "c";
  s.priority = cls;
  s.prompt.resize(20);
  std::iota(s.prompt.begin(), s.prompt.end(), 1);
  auto seq = std::make_unique<sequence>(s);
  seq->position = mlfq_position{cls, level, 0, id, 0};
  return t.add(std::move(seq), s.client);
}

door_figures figures(std::uint32_t free, std::uint32_t ahead_interactive, std::uint32_t ahead_batch,
                     double grants_per_s, double limit_interactive = 0, double limit_batch = 0) {
  door_figures f;
  f.open = {free, free};
  f.ahead = {ahead_interactive, ahead_batch};
  f.grants_per_s = grants_per_s;
  f.refuse_after_ms = {limit_interactive, limit_batch};
  f.recent_wait_ms = {1e9, 1e9}; // recent requests waited long: the forecast decides
  return f;
}

} // namespace

TEST_CASE("door_forecast: a request starts at once while more slots are open to it than wait "
          "ahead, else after the ones ahead less the open slots are granted at the measured rate") {
  CHECK(predicted_start_ms(figures(3, 2, 2, 0), interactive) == 0.0); // even with no rate
  // 5 ahead, 1 free: it takes the 5th slot handed out from now, at 2 a second.
  CHECK(predicted_start_ms(figures(1, 5, 9, 2), interactive) == doctest::Approx(2500));
  CHECK(predicted_start_ms(figures(1, 5, 9, 2), batch) == doctest::Approx(4500));
  CHECK(predicted_start_ms(figures(0, 0, 0, 4), interactive) == doctest::Approx(250));
  // Unmeasured rate: no forecast where it would have to wait.
  CHECK_FALSE(predicted_start_ms(figures(0, 1, 1, 0), interactive).has_value());
  // Each class by its own open slots: 3 for interactive (batch residents it may evict).
  auto f = figures(0, 5, 5, 2);
  f.open = {3, 1};
  CHECK(predicted_start_ms(f, interactive) == doctest::Approx(1500));
  CHECK(predicted_start_ms(f, batch) == doctest::Approx(2500));
}

TEST_CASE("door_forecast: open to an interactive request in a preemptive mode are the free "
          "slots and those batch sequences hold; to a batch one, the free slots") {
  sequence_table t{rank_order::mlfq, 4};
  for (seq_id id = 1; id <= 3; ++id) {
    auto& s = add(t, id, id == 1 ? interactive : batch);
    t.set_state(s, kv_state::resident);
    t.take_slot(s, static_cast<slot_id>(id - 1));
  }
  CHECK(door_open(t, 1, true) == std::array<std::uint32_t, 2>{3, 1});
  CHECK(door_open(t, 1, false) == std::array<std::uint32_t, 2>{1, 1});
}

TEST_CASE("door_forecast: a request is refused only where its class has a limit and its "
          "predicted start is past it, and the refusal carries the predicted start") {
  CHECK_FALSE(door_refusal(figures(0, 40, 40, 1), interactive)); // no limit: never
  CHECK_FALSE(door_refusal(figures(0, 40, 40, 0, 100, 100), interactive)); // no forecast
  CHECK_FALSE(door_refusal(figures(0, 1, 1, 10, 200, 200), interactive)); // 200 ms: not past it
  const auto refused = door_refusal(figures(0, 1, 1, 10, 199, 0), interactive);
  REQUIRE(refused);
  CHECK(*refused == doctest::Approx(200));
  CHECK_FALSE(door_refusal(figures(0, 1, 1, 10, 199, 0), batch)); // batch has no limit here
}

TEST_CASE("door_forecast: a refusal also needs the class's recent first-slot waits past the "
          "limit") {
  auto f = figures(0, 40, 40, 1, 100, 100); // predicted 41 s against 100 ms
  f.recent_wait_ms = {std::nullopt, 100.0};
  CHECK_FALSE(door_refusal(f, interactive)); // too few recent waits
  CHECK_FALSE(door_refusal(f, batch));       // recent waits within the limit
  f.recent_wait_ms = {150.0, 101.0};
  CHECK(door_refusal(f, interactive).has_value());
  CHECK(door_refusal(f, batch).has_value());
}

TEST_CASE("door_forecast: the recent waits are the median of the last 8, none below 4") {
  wait_window w;
  for (double ms : {10.0, 30.0, 20.0})
    w.observe(ms);
  CHECK_FALSE(w.median().has_value());
  w.observe(1000.0);
  CHECK(*w.median() == doctest::Approx(25)); // 10 20 | 30 1000
  for (double ms : {5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0})
    w.observe(ms); // the oldest three go: 1000 and seven 5s
  CHECK(*w.median() == doctest::Approx(5));
}

TEST_CASE("door_forecast: limits are refuse_over times each class's TTFT objective, none at 0") {
  slo_targets slo;
  slo.interactive.ttft_ms = 2000;
  slo.batch.ttft_ms = 60000;
  CHECK(door_limits(slo, 0) == std::array<double, 2>{0, 0});
  CHECK(door_limits(slo, 4) == std::array<double, 2>{8000, 240000});
}

TEST_CASE("door_forecast: the grant rate needs min_grants grants, covers the last window of "
          "granting rounds and decays while nothing is granted") {
  grant_meter m;
  const time_point t0{};
  m.observe(t0, 0);
  m.observe(t0 + 100ms, 2);
  m.observe(t0 + 200ms, 3);
  CHECK(m.per_second(t0 + 200ms) == 0); // 3 grants: not yet
  m.observe(t0 + 250ms, 3);             // nothing new: no sample
  m.observe(t0 + 300ms, 4);
  CHECK(m.per_second(t0 + 300ms) == doctest::Approx(4 / 0.3));
  CHECK(m.per_second(t0 + 800ms) == doctest::Approx(4 / 0.8)); // nothing since: it decays

  // A slow start is forgotten once a window of faster rounds follows it.
  grant_meter w;
  w.observe(t0, 0);
  w.observe(t0 + 10s, 1);
  auto t = t0 + 10s;
  for (std::uint64_t n = 2; n < 2 + grant_meter::window; ++n) {
    t += 100ms;
    w.observe(t, n);
  }
  // The oldest sample kept is 31 rounds back: 31 grants in 3.1 s.
  CHECK(w.per_second(t) == doctest::Approx(10.0));
}

TEST_CASE("door_forecast: ahead of a new request wait the waiting sequences of its class at "
          "the top level that are not demoted, and every waiting interactive one ahead of batch") {
  sequence_table t{rank_order::mlfq, 2};
  auto& running = add(t, 1, interactive);
  t.set_state(running, kv_state::resident);
  t.take_slot(running, 0);
  add(t, 2, interactive);
  auto& late = add(t, 3, interactive);
  auto& parked = add(t, 4, interactive);
  t.set_state(parked, kv_state::parked);
  add(t, 5, batch);
  auto& late_batch = add(t, 6, batch);
  add(t, 7, interactive, 1); // used up its top-level quantum: ranks after a new request
  CHECK(t.top_waiting() == std::array<std::uint32_t, 2>{3, 2});
  CHECK(door_ahead(t, true) == std::array<std::uint32_t, 2>{3, 6});

  t.demote(late);
  t.demote(late_batch);
  CHECK(t.top_waiting() == std::array<std::uint32_t, 2>{2, 1});
  // The demoted and lower interactive ones still rank ahead of any batch request.
  CHECK(door_ahead(t, true) == std::array<std::uint32_t, 2>{2, 5});
  // In arrival order everything waiting is ahead, demoted or not.
  CHECK(door_ahead(t, false) == std::array<std::uint32_t, 2>{6, 6});

  // A waiting sequence that takes a slot no longer waits.
  t.set_state(parked, kv_state::loading);
  t.take_slot(parked, 1);
  CHECK(t.top_waiting() == std::array<std::uint32_t, 2>{1, 1});
  // Nor one that is cancelled (unranked) or erased.
  t.unrank(*t.find(5));
  CHECK(t.top_waiting() == std::array<std::uint32_t, 2>{1, 0});
  t.erase(5);
  CHECK(t.top_waiting() == std::array<std::uint32_t, 2>{1, 0});
  CHECK(t.grants() == 2);
}

TEST_CASE("door_forecast: a waiting sequence that drops a level, or that aging returns to the "
          "top, leaves or rejoins those ahead of a new request") {
  sequence_table t{rank_order::mlfq, 1};
  auto& waiting = add(t, 1, interactive);
  CHECK(door_ahead(t, true)[0] == 1);
  const auto before = waiting.position;
  waiting.position.level = 1;
  t.moved(waiting, before);
  CHECK(door_ahead(t, true)[0] == 0);
  t.age(1); // one step waited reaches aging_steps = 1
  CHECK(waiting.position.level == 0);
  CHECK(door_ahead(t, true)[0] == 1);
  t.demote(waiting);
  CHECK(door_ahead(t, true)[0] == 0);
  t.age(1);
  CHECK_FALSE(waiting.position.demoted);
  CHECK(door_ahead(t, true)[0] == 1);
}

TEST_CASE("door_forecast: the published figures are the table's, the meter's rate and the "
          "limits, and a board hands them to any reader") {
  sequence_table t{rank_order::mlfq, 2};
  for (seq_id id = 1; id <= 6; ++id) {
    auto& s = add(t, id, id <= 4 ? interactive : batch);
    if (id <= 4) { // four grants, one every 100 ms
      t.set_state(s, kv_state::resident);
      t.take_slot(s, static_cast<slot_id>(id % 2));
    }
  }
  grant_meter m;
  const time_point t0{};
  m.observe(t0, 0);
  m.observe(t0 + 400ms, t.grants());
  const auto f = door_figures_of(t, m, t0 + 400ms, {true, true, 0, {100, 0}});
  CHECK(f.open == std::array<std::uint32_t, 2>{0, 0}); // no batch resident, no free slot
  CHECK(f.ahead == std::array<std::uint32_t, 2>{0, 2});
  CHECK(f.grants_per_s == doctest::Approx(10.0));
  CHECK(f.refuse_after_ms == std::array<double, 2>{100, 0});
  CHECK_FALSE(f.recent_wait_ms[0].has_value()); // no first slot noted
  for (int i = 0; i < 4; ++i)
    t.note_first_slot(*t.find(5), t.find(5)->arrived + std::chrono::milliseconds(40 + i));
  CHECK(door_figures_of(t, m, t0 + 400ms, {true, true, 0, {100, 0}}).recent_wait_ms[1]
        == std::optional<double>{41.5});
  door_board board;
  board.publish(f);
  CHECK(board.read() == f);
  CHECK(predicted_start_ms(board.read(), batch) == doctest::Approx(300));
}
