// Goodput demotion: the rule for one check (judge_demotion) and the queue of
// instants at which sequences before their first token are checked.
#include "actors/demotion_queue.hpp"

#include <doctest/doctest.h>

#include <limits>
#include <vector>

using namespace kvlane;
using actors::demotion_queue;
using actors::judge_demotion;
using actors::seq_id;

namespace {

constexpr double unknown = std::numeric_limits<double>::infinity();
using ms = std::chrono::milliseconds;
const demotion_queue::time_point t0{};

} // namespace

TEST_CASE("judge_demotion: a negative slack demotes, a positive one is checked again when it "
          "would reach zero") {
  CHECK(judge_demotion(-0.5, 100, 2000).demote);
  const auto v = judge_demotion(750, 100, 2000);
  CHECK_FALSE(v.demote);
  CHECK(v.recheck_in_ms == doctest::Approx(750));
}

TEST_CASE("judge_demotion: a slack of zero is not yet a miss, and the next check is at least 1 ms "
          "away") {
  const auto v = judge_demotion(0, 1999, 2000);
  CHECK_FALSE(v.demote);
  CHECK(v.recheck_in_ms == doctest::Approx(1));
}

TEST_CASE("judge_demotion: without a slack estimate only a passed objective demotes") {
  CHECK_FALSE(judge_demotion(unknown, 1500, 2000).demote);
  CHECK(judge_demotion(unknown, 1500, 2000).recheck_in_ms == doctest::Approx(500));
  CHECK(judge_demotion(unknown, 2000, 2000).demote);
  CHECK(judge_demotion(unknown, 90000, 60000).demote);
}

TEST_CASE("demotion_queue: due hands out the sequences whose instant has come, earliest first, "
          "once") {
  demotion_queue q;
  q.watch(3, t0 + ms(30));
  q.watch(1, t0 + ms(10));
  q.watch(2, t0 + ms(20));
  CHECK(q.due(t0 + ms(5)).empty());
  CHECK(q.due(t0 + ms(20)) == std::vector<seq_id>{1, 2});
  CHECK(q.size() == 1);
  CHECK_FALSE(q.watched(1));
  CHECK(q.due(t0 + ms(20)).empty());
  CHECK(q.due(t0 + ms(100)) == std::vector<seq_id>{3});
  CHECK(q.size() == 0);
}

TEST_CASE("demotion_queue: watching again moves a sequence's instant; forget drops it") {
  demotion_queue q;
  q.watch(1, t0 + ms(10));
  q.watch(2, t0 + ms(15));
  q.watch(1, t0 + ms(50)); // replaces 10 ms
  CHECK(q.size() == 2);
  CHECK(q.due(t0 + ms(20)) == std::vector<seq_id>{2});
  q.forget(1);
  q.forget(7); // unknown: nothing happens
  CHECK(q.due(t0 + ms(1000)).empty());
  CHECK(q.size() == 0);
}
