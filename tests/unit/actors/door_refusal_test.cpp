// Refusal at the door ([scheduler.slo] refuse_over) through a real engine and scheduler:
// what the scheduler publishes after its planning round is what submit() decides on.
#include "tests/unit/actors/engine_fixture.hpp"

#include "actors/door_forecast.hpp"

#include <doctest/doctest.h>

using namespace kvlane;
using namespace std::chrono_literals;
using actors::priority_class;
using actors::scheduler_mode;
using actors::submit_errc;
using test::engine_fixture;

namespace {

actors::submit_request request(priority_class cls, std::uint32_t max_tokens) {
  actors::submit_request r;
  r.model = "tiny";
  r.client = "door";
  r.priority = cls;
  r.prompt_tokens = {97, 98, 99, 100, 101};
  r.sampling.max_tokens = max_tokens;
  return r;
}

std::uint64_t live(const actors::scheduler_stats& s) {
  return s.queued + s.resident + s.dumping + s.parked + s.loading;
}

/// The tiny model on 2 slots whose steps are slow enough that long requests outlast the
/// checks; batch requests may wait `batch_ttft_ms`, interactive ones 10 minutes.
actors::engine_config door_config(double refuse_over, double batch_ttft_ms = 1) {
  auto cfg = test::small_config(scheduler_mode::overlap, 2);
  cfg.models[0].backend.sim.time_scale = 20;
  cfg.scheduler.spare_slots = 0;
  cfg.scheduler.slo.batch.ttft_ms = batch_ttft_ms;
  cfg.scheduler.slo.interactive.ttft_ms = 600'000;
  cfg.scheduler.refuse_over = refuse_over;
  return cfg;
}

void run_all(std::vector<expected<std::shared_ptr<actors::token_stream>, actors::submit_error>> in) {
  for (auto& s : in) {
    REQUIRE(s);
    REQUIRE((*s)->collect(20s).has_value());
  }
}

/// Recent batch requests that waited for their slot: two interactive requests of 100 tokens
/// hold both slots while four short batch ones wait behind them (six grants measure the rate).
void batch_waited(engine_fixture& sut) {
  std::vector<expected<std::shared_ptr<actors::token_stream>, actors::submit_error>> in;
  for (int i = 0; i < 2; ++i)
    in.push_back(sut.engine->submit(request(priority_class::interactive, 100)));
  for (int i = 0; i < 4; ++i)
    in.push_back(sut.engine->submit(request(priority_class::batch, 1)));
  run_all(std::move(in));
}

/// Recent batch requests that did not wait: four short ones one after another.
void batch_did_not_wait(engine_fixture& sut) {
  for (int i = 0; i < 4; ++i)
    run_all({sut.engine->submit(request(priority_class::batch, 1))});
}

/// Two long interactive requests that hold the slots and 30 that wait, ahead of any batch
/// request.
std::vector<std::shared_ptr<actors::token_stream>> fill(engine_fixture& sut) {
  std::vector<std::shared_ptr<actors::token_stream>> running;
  for (int i = 0; i < 32; ++i) {
    auto s = sut.engine->submit(request(priority_class::interactive, 480));
    REQUIRE(s);
    running.push_back(*s);
  }
  return running;
}

void cancel_all(const std::vector<std::shared_ptr<actors::token_stream>>& running) {
  for (const auto& s : running)
    s->cancel();
  for (const auto& s : running)
    REQUIRE(s->collect(20s).has_value());
}

} // namespace

TEST_CASE("door refusal: a request predicted to start past refuse_over times its class's TTFT "
          "objective is refused busy with its predicted start and changes nothing; a class "
          "whose limit is far is admitted") {
  engine_fixture sut{door_config(1)};
  batch_waited(sut);
  auto running = fill(sut);
  const auto before = sut.stats(); // a round trip: the scheduler has planned them all
  REQUIRE(live(before) == 32);

  auto refused = sut.engine->submit(request(priority_class::batch, 4));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == submit_errc::busy);
  CHECK(refused.error().retry_after_ms >= 1); // 31 grants ahead, past the 1 ms it may wait
  CAPTURE(refused.error().message);
  CHECK(refused.error().message.find("model 'tiny' is predicted to start this batch request in")
        == 0);
  CHECK(refused.error().message.find("refuse_over") != std::string::npos);
  const auto after = sut.stats();
  CHECK(live(after) == 32);
  CHECK(after.submitted == before.submitted);
  CHECK(before.refused == 0);
  CHECK(after.refused == 1);

  // Interactive: 31 grants ahead against a limit of 10 minutes.
  auto admitted = sut.engine->submit(request(priority_class::interactive, 4));
  REQUIRE(admitted);
  running.push_back(*admitted);
  cancel_all(running);
}

TEST_CASE("door refusal: where the door refuses, an invalid request gets its own error, not "
          "busy, and is not counted as refused") {
  engine_fixture sut{door_config(1)};
  batch_waited(sut);
  auto running = fill(sut);
  const auto before = sut.stats();
  REQUIRE(live(before) == 32);

  auto empty = request(priority_class::batch, 4);
  empty.prompt_tokens.clear();
  auto invalid = sut.engine->submit(empty);
  REQUIRE_FALSE(invalid);
  CHECK(invalid.error().code == submit_errc::invalid_request);
  CHECK(invalid.error().message == "the prompt is empty");
  auto too_long = request(priority_class::batch, 1'000'000);
  auto long_one = sut.engine->submit(too_long);
  REQUIRE_FALSE(long_one);
  CHECK(long_one.error().code != submit_errc::busy);
  CHECK(sut.stats().refused == 0);

  // The same class with a valid request: refused at the door.
  auto refused = sut.engine->submit(request(priority_class::batch, 4));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == submit_errc::busy);
  CHECK(sut.stats().refused == 1);
  cancel_all(running);
}

TEST_CASE("door refusal: without refuse_over nothing is refused however long the wait") {
  engine_fixture sut{door_config(0)};
  batch_waited(sut);
  auto running = fill(sut);
  REQUIRE(live(sut.stats()) == 32);
  auto admitted = sut.engine->submit(request(priority_class::batch, 4));
  REQUIRE(admitted);
  running.push_back(*admitted);
  cancel_all(running);
}

TEST_CASE("door refusal: a forecast past the limit refuses nothing while the class's recent "
          "requests got their slots within it") {
  // Batch may wait 20 ms; the four batch requests before took an idle slot at once. The
  // forecast for a batch request behind 30 waiting ones is at least 31 grants at the rate
  // of six grants spread over the warm-up and the fill: past 20 ms.
  engine_fixture sut{door_config(1, 20)};
  batch_did_not_wait(sut);
  auto running = fill(sut);
  REQUIRE(live(sut.stats()) == 32);
  const auto figures = sut.engine->find_model("tiny")->door->read();
  REQUIRE(actors::predicted_start_ms(figures, priority_class::batch).value_or(0) > 20);
  REQUIRE(figures.recent_wait_ms[1].value_or(1e9) <= 20);
  auto admitted = sut.engine->submit(request(priority_class::batch, 4));
  REQUIRE(admitted);
  running.push_back(*admitted);
  CHECK(sut.stats().refused == 0);
  cancel_all(running);
}
