// Step faults through the in-process engine: a faulty row ends only its own
// sequence, a transient fault is retried, a failing device stops admission and
// recovers (docs/scheduling.md, "Failures").
#include "tests/unit/actors/engine_fixture.hpp"

#include <doctest/doctest.h>

#include <thread>

using namespace kvlane;
using namespace std::chrono_literals;
using actors::device_health;
using actors::end_reason;
using actors::scheduler_mode;
using actors::seq_phase;
using test::engine_fixture;

namespace {

/// Never in a prompt below and never generated greedily by the sim (which
/// writes lowercase words, spaces, commas and full stops).
constexpr backends::token_id poison = '#';

struct result {
  actors::seq_id id = 0;
  std::vector<backends::token_id> tokens;
  actors::stream_end end;
};

/// Greedy requests with prompts of 20..80 letters (one to three prefill chunks).
std::vector<actors::submit_request> greedy(std::size_t n, std::size_t first = 0) {
  std::vector<actors::submit_request> out;
  for (std::size_t i = first; i < first + n; ++i) {
    actors::submit_request r;
    r.model = "tiny";
    r.client = "client-" + std::to_string(i % 2);
    const auto len = 20 + (i * 23) % 61;
    for (std::size_t k = 0; k < len; ++k)
      r.prompt_tokens.push_back(static_cast<backends::token_id>('a' + (i * 5 + k * 7) % 26));
    r.sampling.max_tokens = static_cast<std::uint32_t>(30 + (i * 11) % 30);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<std::shared_ptr<actors::token_stream>>
submit_all(actors::engine& e, const std::vector<actors::submit_request>& reqs) {
  std::vector<std::shared_ptr<actors::token_stream>> out;
  for (auto& r : reqs) {
    auto s = e.submit(r);
    REQUIRE(s.has_value());
    out.push_back(*s);
  }
  return out;
}

std::vector<result> collect_all(const std::vector<std::shared_ptr<actors::token_stream>>& streams) {
  std::vector<result> out;
  for (auto& s : streams) {
    auto c = s->collect(60s);
    REQUIRE(c.has_value());
    out.push_back({s->id(), std::move(c->tokens), *c->end});
  }
  return out;
}

/// Each request's stream when it runs alone on a healthy engine.
std::vector<result> solo_results(const std::vector<actors::submit_request>& reqs) {
  engine_fixture f{test::small_config(scheduler_mode::fcfs)};
  std::vector<result> out;
  for (auto& r : reqs) {
    auto got = collect_all(submit_all(*f.engine, {r}));
    out.push_back(std::move(got.front()));
  }
  return out;
}

/// Fast fault knobs: one retry, one recompute, backoff 1..4 ms.
actors::engine_config fault_config(std::uint32_t slots, std::uint32_t give_up_steps,
                                   scheduler_mode mode = scheduler_mode::overlap) {
  auto cfg = test::small_config(mode, slots);
  cfg.scheduler.faults.step_retries = 1;
  cfg.scheduler.faults.row_recomputes = 1;
  cfg.scheduler.faults.backoff_initial_ms = 1;
  cfg.scheduler.faults.backoff_max_ms = 4;
  cfg.scheduler.faults.give_up_steps = give_up_steps;
  return cfg;
}

/// Waits until the scheduler's figures satisfy `pred`. The scheduler has no
/// event for its device state, so this asks it again after each short pause;
/// nothing about timing is asserted.
template <class Pred>
bool wait_for_stats(engine_fixture& f, Pred pred, std::chrono::seconds timeout = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred(f.stats())) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

} // namespace

TEST_CASE("step faults: a row that always fails among 4 resident streams ends only its own "
          "sequence, after one recompute, and the other 3 equal their solo streams, in every "
          "mode") {
  auto reqs = greedy(4);
  reqs[2].prompt_tokens.insert(reqs[2].prompt_tokens.begin() + 5, poison);
  auto solo = solo_results({reqs[0], reqs[1], reqs[3]});

  for (auto mode : actors::all_scheduler_modes) {
    CAPTURE(actors::to_string(mode));
    engine_fixture sut{fault_config(5, 0, mode)}; // 4 slots for sequences + 1 spare
    sut.sim().inject(backends::sim_op::step, {.fail_token = poison});
    auto got = collect_all(submit_all(*sut.engine, reqs));

    for (std::size_t i : {0u, 1u, 3u}) {
      CAPTURE(i);
      const auto& want = solo[i == 3 ? 2 : i];
      CHECK(got[i].end.reason == want.end.reason);
      CHECK(got[i].tokens == want.tokens);
    }
    CHECK(got[2].end.reason == end_reason::error);
    CHECK(got[2].tokens.empty());
    CHECK(got[2].end.message.find("failed this request's step row 2 times when it ran alone")
          != std::string::npos);
    CHECK(got[2].end.message.find("carrying token 35") != std::string::npos);
    // Resident, dropped to recompute, resident again, ended.
    const auto phases = sut.log.phases(got[2].id);
    CHECK(std::count(phases.begin(), phases.end(), seq_phase::resident) == 2);
    for (std::size_t i : {0u, 1u, 3u}) {
      const auto p = sut.log.phases(got[i].id);
      CHECK(std::count(p.begin(), p.end(), seq_phase::queued) == 1); // at submit only
    }

    auto st = sut.stats();
    CHECK(st.failed == 1);
    CHECK(st.finished == 3);
    CHECK(st.faults.row_faults == 2);
    CHECK(st.faults.isolated_rows >= 4);
    CHECK(st.faults.backoffs == 0);
    CHECK(st.device == device_health::healthy);
    sut.check_nothing_leaked();
  }
}

TEST_CASE("step faults: a transient single failure is retried without ending or recomputing "
          "anything") {
  auto reqs = greedy(4);
  auto solo = solo_results(reqs);
  engine_fixture sut{fault_config(5, 0)};
  sut.sim().inject(backends::sim_op::step, {.fail_nth = 3});
  auto got = collect_all(submit_all(*sut.engine, reqs));
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].end.reason == solo[i].end.reason);
    CHECK(got[i].tokens == solo[i].tokens);
  }
  auto st = sut.stats();
  CHECK(st.step_failures == 1);
  CHECK(st.faults.step_retries == 1);
  CHECK(st.faults.isolated_rows == 0);
  CHECK(st.faults.backoffs == 0);
  CHECK(st.recomputes == 0);
  CHECK(st.failed == 0);
  CHECK(st.device == device_health::healthy);
  sut.check_nothing_leaked();
}

TEST_CASE("step faults: while the device fails every step admission stops and nothing is lost, "
          "then it recovers and every stream equals its solo stream") {
  auto first = greedy(2);
  auto later = greedy(3, 2);
  std::vector<actors::submit_request> all = first;
  all.insert(all.end(), later.begin(), later.end());
  auto solo = solo_results(all);

  engine_fixture sut{fault_config(5, 0)}; // give-up off: the streams wait it out
  // The first requests take slots while the device is healthy; their first
  // step fails, is retried, fails row by row: the device is failing.
  sut.sim().inject(backends::sim_op::step, {.fail_rate = 1.0});
  auto running = submit_all(*sut.engine, first);
  REQUIRE(wait_for_stats(sut, [](const auto& st) { return st.device == device_health::failing; }));
  auto queued = submit_all(*sut.engine, later);
  // Several more probes fail while the new requests wait.
  const auto backoffs = sut.stats().faults.backoffs;
  REQUIRE(wait_for_stats(sut, [&](const auto& st) { return st.faults.backoffs >= backoffs + 3; }));
  auto st = sut.stats();
  CHECK(st.device == device_health::failing);
  CHECK(st.device_backoff_ms > 0);
  // Whether the second of the first requests took a slot before the first
  // step failed depends on timing; none of the later ones did.
  CHECK(st.resident >= 1);
  CHECK(st.resident + st.queued == all.size());
  CHECK(st.failed == 0);
  for (auto& s : queued)
    CHECK(sut.log.phases(s->id()) == std::vector<seq_phase>{seq_phase::queued});

  sut.sim().inject(backends::sim_op::step, {});
  auto streams = running;
  streams.insert(streams.end(), queued.begin(), queued.end());
  auto got = collect_all(streams);
  for (std::size_t i = 0; i < all.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].end.reason == solo[i].end.reason);
    CHECK(got[i].tokens == solo[i].tokens);
  }
  st = sut.stats();
  CHECK(st.device == device_health::healthy);
  CHECK(st.device_backoff_ms == 0);
  CHECK(st.failed == 0);
  CHECK(st.finished == all.size());
  sut.check_nothing_leaked();
}

TEST_CASE("step faults: a device that keeps failing ends the streams it ran after give_up_steps "
          "failed steps, and serves again when it recovers") {
  auto reqs = greedy(2);
  auto solo = solo_results(reqs);
  engine_fixture sut{fault_config(5, 3)};
  sut.sim().inject(backends::sim_op::step, {.fail_rate = 1.0});
  auto failed = collect_all(submit_all(*sut.engine, reqs));
  for (auto& r : failed) {
    CHECK(r.end.reason == end_reason::error);
    CHECK(r.end.message.find("the NPU failed 3 steps in a row that carried this request")
          != std::string::npos);
  }
  sut.sim().inject(backends::sim_op::step, {});
  auto got = collect_all(submit_all(*sut.engine, reqs));
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    CHECK(got[i].tokens == solo[i].tokens);
    CHECK(got[i].end.reason == solo[i].end.reason);
  }
  auto st = sut.stats();
  CHECK(st.failed == 2);
  CHECK(st.device == device_health::healthy);
  sut.check_nothing_leaked();
}
