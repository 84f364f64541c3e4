// The per-client round robin's unit is the request's fairness_unit when it has one (an HTTP
// identity), whatever client names its requests show under: one unit's many requests take
// one turn, so another unit's single request is not ranked behind all of them.
#include "tests/unit/actors/engine_fixture.hpp"

#include <fmt/format.h>

#include <algorithm>

using namespace kvlane;
using namespace kvlane::test;
using actors::priority_class;
using actors::scheduler_mode;
using actors::seq_phase;

namespace {

actors::submit_request request(std::string client, std::string unit, priority_class p,
                               backends::token_id first) {
  actors::submit_request r;
  r.model = "tiny";
  r.client = std::move(client);
  r.fairness_unit = std::move(unit);
  r.priority = p;
  for (backends::token_id k = 0; k < 20; ++k)
    r.prompt_tokens.push_back(97 + (first + k) % 26);
  r.sampling.max_tokens = 400;
  return r;
}

/// Queues A1, A2, A3 (clients <prefix>/1..3; with `shared_unit` their fairness unit is
/// <prefix>) and then B behind two interactive blockers, on a model whose target set is two
/// sequences; lets the blockers go and returns whether B got its first slot before A2 did.
bool b_before_a2(std::string_view a_unit_prefix, bool shared_unit) {
  engine_fixture sut{small_config(scheduler_mode::overlap, 3)}; // target 2 + 1 spare
  auto x1 = sut.engine->submit(request("x1", "", priority_class::interactive, 0));
  auto x2 = sut.engine->submit(request("x2", "", priority_class::interactive, 1));
  REQUIRE(x1);
  REQUIRE(x2);
  REQUIRE(sut.log.wait((*x1)->id(), seq_phase::resident));
  REQUIRE(sut.log.wait((*x2)->id(), seq_phase::resident));
  std::vector<std::shared_ptr<actors::token_stream>> a;
  for (int i = 1; i <= 3; ++i) {
    const auto client = fmt::format("{}/{}", a_unit_prefix, i);
    auto s = sut.engine->submit(request(client, shared_unit ? std::string{a_unit_prefix} : "",
                                        priority_class::batch, static_cast<backends::token_id>(i)));
    REQUIRE(s);
    a.push_back(std::move(*s));
  }
  auto b = sut.engine->submit(request("b", "b", priority_class::batch, 9));
  REQUIRE(b);
  for (auto& s : a)
    REQUIRE(sut.log.wait(s->id(), seq_phase::queued));
  REQUIRE(sut.log.wait((*b)->id(), seq_phase::queued));

  (*x1)->cancel();
  (*x2)->cancel();
  const auto b_id = (*b)->id();
  const auto a2_id = a[1]->id();
  // Both get a slot in time (quanta rotate); which got one first is the question.
  REQUIRE(sut.log.wait(b_id, seq_phase::resident));
  REQUIRE(sut.log.wait(a2_id, seq_phase::resident));
  const auto events = sut.log.events();
  const auto first = std::find_if(events.begin(), events.end(), [&](const auto& e) {
    return e.second == seq_phase::resident && (e.first == b_id || e.first == a2_id);
  });
  REQUIRE(first != events.end());
  const bool b_first = first->first == b_id;
  for (auto& s : a)
    s->cancel();
  (*b)->cancel();
  for (auto* s : {&*x1, &*x2, &*b})
    REQUIRE((*s)->collect(10s).has_value());
  for (auto& s : a)
    REQUIRE(s->collect(10s).has_value());
  sut.check_nothing_leaked();
  return b_first;
}

} // namespace

TEST_CASE("fairness unit: requests of one unit under several client names take one round-robin "
          "turn") {
  // A2 is A's second request in the round robin: B (round 0) goes before it.
  CHECK(b_before_a2("http:a", true));
}

TEST_CASE("fairness unit: without one each client name is its own turn, so B waits behind them") {
  // The baseline the test above differs from: a/1, a/2, a/3 are three clients, all ranked
  // before B (later turn) in round 0.
  CHECK_FALSE(b_before_a2("http:a", false));
}
