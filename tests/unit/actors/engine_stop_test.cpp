// engine::stop — a consumer (the HTTP stop strings) ends a sequence as a stop token
// would: reason stop, counted as finished, the KV of the prompt and the kept tokens
// retained so that the next turn reuses exactly that much.
#include "tests/unit/actors/engine_fixture.hpp"

#include <doctest/doctest.h>

using namespace kvlane;
using namespace std::chrono_literals;
using actors::scheduler_mode;
using backends::token_id;
using test::engine_fixture;

namespace {

actors::engine_config stop_config(scheduler_mode mode) {
  auto c = test::small_config(mode);
  c.reuse.mode = actors::reuse_mode::store;
  c.reuse.min_prefix_tokens = 16;
  c.scheduler.fixed_costs = test::profile_costs();
  return c;
}

std::vector<token_id> letters(std::size_t n, std::size_t salt) {
  std::vector<token_id> t;
  for (std::size_t k = 0; k < n; ++k)
    t.push_back(static_cast<token_id>(97 + (salt * 7 + k * 3) % 26));
  return t;
}

actors::submit_request request(std::vector<token_id> prompt, std::uint32_t max_tokens) {
  actors::submit_request r;
  r.model = "tiny";
  r.owner = 1;
  r.prompt_tokens = std::move(prompt);
  r.sampling.max_tokens = max_tokens;
  return r;
}

/// Reads `s` until at least `n` tokens arrived; returns them all.
std::vector<token_id> read_at_least(actors::token_stream& s, std::size_t n) {
  std::vector<token_id> out;
  while (out.size() < n) {
    auto c = s.next(10s);
    REQUIRE(c.has_value());
    REQUIRE_FALSE(c->end.has_value());
    out.insert(out.end(), c->tokens.begin(), c->tokens.end());
  }
  return out;
}

actors::stream_end end_of(actors::token_stream& s) {
  auto c = s.collect(10s);
  REQUIRE(c.has_value());
  REQUIRE(c->end.has_value());
  return *c->end;
}

/// What a completed request reports as the prompt prefix it reused.
std::uint32_t cached_of(actors::engine& e, std::vector<token_id> prompt) {
  auto s = e.submit(request(std::move(prompt), 4));
  REQUIRE(s.has_value());
  auto end = end_of(**s);
  CHECK(end.reason == actors::end_reason::length);
  return end.cached_tokens;
}

} // namespace

TEST_CASE("engine stop: a sequence stopped by its consumer ends with reason stop, counts as "
          "finished, and its retained KV covers exactly the prompt and the kept tokens") {
  for (auto mode : {scheduler_mode::fcfs, scheduler_mode::overlap}) {
    CAPTURE(actors::to_string(mode));
    engine_fixture sut{stop_config(mode)};
    const auto prompt = letters(40, 1);
    auto s = sut.engine->submit(request(prompt, 300));
    REQUIRE(s.has_value());
    // The consumer saw 6 tokens (the scheduler has made more by now) and keeps 4.
    const auto seen = read_at_least(**s, 6);
    sut.engine->stop("tiny", (*s)->id(), 6, 4);
    const auto end = end_of(**s);
    CHECK(end.reason == actors::end_reason::stop);
    CHECK(end.generated_tokens == 6);

    auto st = sut.stats();
    CHECK(st.finished == 1);
    CHECK(st.cancelled == 0);
    auto retained = sut.engine->list_retained("tiny");
    REQUIRE(retained.has_value());
    REQUIRE(retained->size() == 1);
    CHECK(retained->front().tokens == prompt.size() + 4);

    // The next turn repeats the kept tokens and then goes elsewhere: all of them reused.
    auto turn = prompt;
    turn.insert(turn.end(), seen.begin(), seen.begin() + 4);
    const auto extra = letters(10, 9);
    turn.insert(turn.end(), extra.begin(), extra.end());
    CHECK(cached_of(*sut.engine, turn) == prompt.size() + 4);
  }
}

TEST_CASE("engine stop: the KV past the kept tokens is not reused, even when the next prompt "
          "repeats them") {
  engine_fixture sut{stop_config(scheduler_mode::overlap)};
  const auto prompt = letters(40, 2);
  auto s = sut.engine->submit(request(prompt, 300));
  REQUIRE(s.has_value());
  const auto seen = read_at_least(**s, 8);
  sut.engine->stop("tiny", (*s)->id(), 8, 3);
  CHECK(end_of(**s).reason == actors::end_reason::stop);
  auto turn = prompt;
  turn.insert(turn.end(), seen.begin(), seen.begin() + 8);
  const auto extra = letters(10, 5);
  turn.insert(turn.end(), extra.begin(), extra.end());
  CHECK(cached_of(*sut.engine, turn) == prompt.size() + 3);
}

TEST_CASE("engine stop: a stop that arrives after the sequence ended, or after a cancel, "
          "changes nothing") {
  engine_fixture sut{stop_config(scheduler_mode::overlap)};
  auto done = sut.engine->submit(request(letters(40, 3), 5));
  REQUIRE(done.has_value());
  CHECK(end_of(**done).reason == actors::end_reason::length);
  sut.engine->stop("tiny", (*done)->id(), 5, 2);

  auto cancelled = sut.engine->submit(request(letters(40, 4), 300));
  REQUIRE(cancelled.has_value());
  read_at_least(**cancelled, 1);
  (*cancelled)->cancel();
  sut.engine->stop("tiny", (*cancelled)->id(), 1, 1);
  CHECK(end_of(**cancelled).reason == actors::end_reason::cancelled);

  auto st = sut.stats();
  CHECK(st.finished == 1);
  CHECK(st.cancelled == 1);
  auto retained = sut.engine->list_retained("tiny");
  REQUIRE(retained.has_value());
  REQUIRE(retained->size() == 1); // the finished one's: prompt and all but its last token
  CHECK(retained->front().tokens == 40 + 4);
}
