#include "daemon/session_table.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace kvlane::daemon;
using tokens = std::vector<kvlane::backends::token_id>;
using namespace std::chrono_literals;

namespace {

const auto t0 = session_table::clock::time_point{} + 1h;

session_key key(std::uint32_t uid, std::string name, std::string model = "tiny") {
  return session_key{uid, std::move(model), std::move(name)};
}

/// Runs one whole turn; returns what was submitted.
tokens turn(session_table& sut, const session_key& k, const tokens& prompt, const tokens& generated,
            session_table::clock::time_point now = t0) {
  auto t = sut.begin_turn(k, prompt, 1u, 8, 1000, now);
  REQUIRE(t);
  REQUIRE(sut.end_turn(k, t->ticket, generated, now));
  return t->tokens;
}

} // namespace

TEST_CASE("session_table: each turn submits the history and the new prompt, BOS only first") {
  session_table sut;
  const auto k = key(1000, "chat");
  CHECK(turn(sut, k, {10, 11}, {20, 21, 22}) == tokens{1, 10, 11});
  CHECK(sut.history(k) == tokens{1, 10, 11, 20, 21, 22});
  auto t2 = sut.begin_turn(k, tokens{30}, 1u, 8, 1000, t0);
  REQUIRE(t2);
  CHECK(t2->tokens == tokens{1, 10, 11, 20, 21, 22, 30});
  CHECK(t2->history_tokens == 6);
  REQUIRE(sut.end_turn(k, t2->ticket, tokens{40}, t0));
  CHECK(sut.history(k) == tokens{1, 10, 11, 20, 21, 22, 30, 40});
}

TEST_CASE("session_table: a token prompt without BOS is used as is") {
  session_table sut;
  const auto k = key(1000, "raw");
  auto t = sut.begin_turn(k, tokens{5, 6}, std::nullopt, 4, 100, t0);
  REQUIRE(t);
  CHECK(t->tokens == tokens{5, 6});
}

TEST_CASE("session_table: users, models and names are separate conversations") {
  session_table sut;
  turn(sut, key(1000, "a"), {10}, {11});
  CHECK(sut.history(key(1001, "a")).empty());
  CHECK(sut.history(key(1000, "b")).empty());
  CHECK(sut.history(key(1000, "a", "other")).empty());
  auto t = sut.begin_turn(key(1001, "a"), tokens{50}, 1u, 4, 100, t0);
  REQUIRE(t);
  CHECK(t->tokens == tokens{1, 50}); // not user 1000's history
  CHECK(sut.drop(key(1001, "a")));
  CHECK_FALSE(sut.drop(key(1001, "a")));
  CHECK(sut.history(key(1000, "a")) == tokens{1, 10, 11});
}

TEST_CASE("session_table: a second turn while one runs is refused and changes nothing") {
  session_table sut;
  const auto k = key(1000, "chat");
  auto t1 = sut.begin_turn(k, tokens{10}, 1u, 4, 100, t0);
  REQUIRE(t1);
  auto t2 = sut.begin_turn(k, tokens{11}, 1u, 4, 100, t0);
  REQUIRE_FALSE(t2);
  CHECK(t2.error().code == session_errc::busy);
  CHECK(t2.error().message.find("session 'chat'") != std::string::npos);
  REQUIRE(sut.end_turn(k, t1->ticket, tokens{12}, t0));
  CHECK(sut.history(k) == tokens{1, 10, 12});
}

TEST_CASE("session_table: a turn that would outgrow the context is refused, not truncated") {
  session_table sut;
  const auto k = key(1000, "long");
  turn(sut, k, tokens(50, 7), tokens(8, 9)); // history: 1 + 50 + 8 = 59
  const auto before = sut.history(k);
  auto t = sut.begin_turn(k, tokens(30, 3), 1u, 12, 100, t0); // 59 + 30 + 12 = 101 > 100
  REQUIRE_FALSE(t);
  CHECK(t.error().code == session_errc::too_long);
  CHECK(t.error().message.find("holds 59 tokens") != std::string::npos);
  CHECK(t.error().message.find("needs 101 tokens of context, the model has 100") !=
        std::string::npos);
  CHECK(sut.history(k) == before);
  CHECK(sut.begin_turn(k, tokens(29, 3), 1u, 12, 100, t0)); // exactly 100 fits
}

TEST_CASE("session_table: an aborted turn leaves the history as it was") {
  session_table sut;
  const auto fresh = key(1000, "fresh");
  auto t = sut.begin_turn(fresh, tokens{10}, 1u, 4, 100, t0);
  REQUIRE(t);
  sut.abort_turn(fresh, t->ticket);
  CHECK(sut.stats().sessions == 0); // the session it created is gone

  const auto k = key(1000, "kept");
  turn(sut, k, {10}, {11});
  auto t2 = sut.begin_turn(k, tokens{12}, 1u, 4, 100, t0);
  REQUIRE(t2);
  sut.abort_turn(k, t2->ticket);
  CHECK(sut.history(k) == tokens{1, 10, 11});
  CHECK(sut.begin_turn(k, tokens{13}, 1u, 4, 100, t0)); // and it is idle again
}

TEST_CASE("session_table: a turn that ends after its session was dropped changes nothing") {
  session_table sut;
  const auto k = key(1000, "chat");
  auto t = sut.begin_turn(k, tokens{10}, 1u, 4, 100, t0);
  REQUIRE(t);
  CHECK(sut.drop(k));
  auto again = sut.begin_turn(k, tokens{20}, 1u, 4, 100, t0); // a new conversation
  REQUIRE(again);
  CHECK_FALSE(sut.end_turn(k, t->ticket, tokens{11}, t0));
  REQUIRE(sut.end_turn(k, again->ticket, tokens{21}, t0));
  CHECK(sut.history(k) == tokens{1, 20, 21});
}

TEST_CASE("session_table: the per-user cap evicts the user's least recently used idle session") {
  session_table sut{session_limits{2, 100, 0s}};
  turn(sut, key(1000, "a"), {1}, {2}, t0);
  turn(sut, key(1000, "b"), {1}, {2}, t0 + 1s);
  turn(sut, key(2000, "x"), {1}, {2}, t0); // another user's is never a victim
  turn(sut, key(1000, "a"), {3}, {4}, t0 + 2s); // "a" is now the most recent
  turn(sut, key(1000, "c"), {1}, {2}, t0 + 3s);
  CHECK(sut.history(key(1000, "b")).empty());
  CHECK_FALSE(sut.history(key(1000, "a")).empty());
  CHECK_FALSE(sut.history(key(2000, "x")).empty());
  CHECK(sut.stats().evicted == 1);
}

TEST_CASE("session_table: running sessions are never evicted: the new one is refused") {
  session_table sut{session_limits{1, 100, 0s}};
  auto t = sut.begin_turn(key(1000, "a"), tokens{1}, 1u, 4, 100, t0);
  REQUIRE(t);
  auto other = sut.begin_turn(key(1000, "b"), tokens{1}, 1u, 4, 100, t0);
  REQUIRE_FALSE(other);
  CHECK(other.error().code == session_errc::busy);
  CHECK(other.error().message.find("max_per_user") != std::string::npos);
  CHECK(sut.stats().sessions == 1);
  CHECK(sut.stats().running == 1);
}

TEST_CASE("session_table: the daemon-wide cap evicts the least recently used idle session") {
  session_table sut{session_limits{10, 2, 0s}};
  turn(sut, key(1, "a"), {1}, {2}, t0);
  turn(sut, key(2, "b"), {1}, {2}, t0 + 1s);
  turn(sut, key(3, "c"), {1}, {2}, t0 + 2s);
  CHECK(sut.history(key(1, "a")).empty());
  CHECK(sut.stats().sessions == 2);
}

TEST_CASE("session_table: idle sessions expire after the TTL, running ones do not") {
  session_table sut{session_limits{10, 10, 60s}};
  turn(sut, key(1, "idle"), {1}, {2}, t0);
  auto running = sut.begin_turn(key(1, "running"), tokens{1}, 1u, 4, 100, t0);
  REQUIRE(running);
  turn(sut, key(1, "other"), {1}, {2}, t0 + 61s); // any call sweeps
  CHECK(sut.history(key(1, "idle")).empty());
  CHECK(sut.stats().expired == 1);
  CHECK(sut.end_turn(key(1, "running"), running->ticket, tokens{3}, t0 + 62s));
}

TEST_CASE("session_table: disabled sessions refuse every turn") {
  session_table sut{session_limits{0, 10, 0s}};
  auto t = sut.begin_turn(key(1, "a"), tokens{1}, 1u, 4, 100, t0);
  REQUIRE_FALSE(t);
  CHECK(t.error().code == session_errc::disabled);
}

TEST_CASE("session_table: lowering a cap on reload evicts idle sessions down to it") {
  session_table sut{session_limits{10, 10, 0s}};
  for (int i = 0; i < 4; ++i)
    turn(sut, key(1, "s" + std::to_string(i)), {1}, {2}, t0 + std::chrono::seconds(i));
  sut.set_limits(session_limits{2, 10, 0s}, t0 + 10s);
  CHECK(sut.stats().sessions == 2);
  CHECK(sut.history(key(1, "s0")).empty());
  CHECK_FALSE(sut.history(key(1, "s3")).empty());
}
