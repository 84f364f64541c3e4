// Refusal at the door ([scheduler.slo] refuse_over) through a real engine and scheduler:
// what the scheduler publishes after its planning round is what submit() decides on.
#include "tests/unit/actors/engine_fixture.hpp"

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
/// checks; batch requests may wait 1 ms, interactive ones 10 minutes.
actors::engine_config door_config(double refuse_over) {
  auto cfg = test::small_config(scheduler_mode::overlap, 2);
  cfg.models[0].backend.sim.time_scale = 20;
  cfg.scheduler.spare_slots = 0;
  cfg.scheduler.slo.batch.ttft_ms = 1;
  cfg.scheduler.slo.interactive.ttft_ms = 600'000;
  cfg.scheduler.refuse_over = refuse_over;
  return cfg;
}

/// Four short requests one after another (four grants measure the rate), then two long
/// interactive requests that hold the slots and 30 that wait, ahead of any batch request.
std::vector<std::shared_ptr<actors::token_stream>> fill(engine_fixture& sut) {
  for (int i = 0; i < 4; ++i) {
    auto s = sut.engine->submit(request(priority_class::batch, 1));
    REQUIRE(s);
    REQUIRE((*s)->collect(20s).has_value());
  }
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

TEST_CASE("door refusal: without refuse_over nothing is refused however long the wait") {
  engine_fixture sut{door_config(0)};
  auto running = fill(sut);
  REQUIRE(live(sut.stats()) == 32);
  auto admitted = sut.engine->submit(request(priority_class::batch, 4));
  REQUIRE(admitted);
  running.push_back(*admitted);
  cancel_all(running);
}
