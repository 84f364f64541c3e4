// The skip-join MLFQ on plain values: rank order, quanta, skip-join, aging.
#include "actors/mlfq_policy.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace kvlane;
using actors::mlfq_knobs;
using actors::mlfq_policy;
using actors::mlfq_position;
using actors::mlfq_setup;
using actors::rank_order;
using actors::priority_class;

namespace {

constexpr std::uint32_t chunk = 32;

mlfq_policy make_policy(mlfq_knobs knobs = {2, 4, 0}, bool preemptive = true,
                        bool fallback = false) {
  return mlfq_policy{{preemptive ? rank_order::mlfq : rank_order::arrival, fallback, chunk}, knobs};
}

struct live_sequence {
  std::string name;
  std::string client;
  mlfq_position position;
};

/// The names of `seqs`, best first.
std::vector<std::string> rank_names(const mlfq_policy& sut,
                                    const std::vector<live_sequence>& seqs) {
  std::vector<actors::rank_entry> entries;
  for (auto& s : seqs)
    entries.push_back({&s.position, s.client});
  std::vector<std::string> out;
  for (auto i : sut.rank(entries))
    out.push_back(seqs[i].name);
  return out;
}

} // namespace

TEST_CASE("mlfq_policy: ranks interactive before batch, then lower level, then earlier turn") {
  auto sut = make_policy();
  std::vector<live_sequence> seqs;
  seqs.push_back({"batch-early", "c", sut.enter(priority_class::batch, 10)});
  seqs.push_back({"interactive-long", "c", sut.enter(priority_class::interactive, 500)});
  seqs.push_back({"interactive-short-1", "c", sut.enter(priority_class::interactive, 10)});
  seqs.push_back({"interactive-short-2", "c", sut.enter(priority_class::interactive, 10)});
  REQUIRE(seqs[1].position.level > 0);
  CHECK(rank_names(sut, seqs) == std::vector<std::string>{"interactive-short-1",
                                                           "interactive-short-2",
                                                           "interactive-long", "batch-early"});
}

TEST_CASE("mlfq_policy: interleaves clients round-robin inside one class and level, "
          "in the order of their earliest turn") {
  auto sut = make_policy();
  std::vector<live_sequence> seqs;
  for (auto name : {"a1", "a2", "a3"})
    seqs.push_back({name, "a", sut.enter(priority_class::interactive, 10)});
  seqs.push_back({"b1", "b", sut.enter(priority_class::interactive, 10)});
  seqs.push_back({"c1", "c", sut.enter(priority_class::interactive, 10)});
  seqs.push_back({"b2", "b", sut.enter(priority_class::interactive, 10)});
  seqs.push_back({"batch-a", "a", sut.enter(priority_class::batch, 10)});
  CHECK(rank_names(sut, seqs)
        == std::vector<std::string>{"a1", "b1", "c1", "a2", "b2", "a3", "batch-a"});
}

TEST_CASE("mlfq_policy: without preemption ranks by arrival only") {
  auto sut = make_policy({2, 4, 0}, false);
  std::vector<live_sequence> seqs;
  seqs.push_back({"batch-first", "a", sut.enter(priority_class::batch, 10)});
  seqs.push_back({"interactive-long", "a", sut.enter(priority_class::interactive, 5000)});
  seqs.push_back({"interactive-b", "b", sut.enter(priority_class::interactive, 10)});
  seqs.push_back({"interactive-a", "a", sut.enter(priority_class::interactive, 10)});
  CHECK(seqs[1].position.level == 0); // no skip-join either
  CHECK(rank_names(sut, seqs) == std::vector<std::string>{"batch-first", "interactive-long",
                                                           "interactive-b", "interactive-a"});
  for (int i = 0; i < 100; ++i)
    sut.charge_step(seqs[0].position);
  CHECK(seqs[0].position.level == 0);
  CHECK(rank_names(sut, seqs).front() == "batch-first");
}

TEST_CASE("mlfq_policy: level i grants quantum_steps times 2^i steps, then the sequence drops "
          "one level and goes to the back") {
  auto sut = make_policy({2, 3, 0});
  CHECK(sut.quantum_of(0) == 2);
  CHECK(sut.quantum_of(1) == 4);
  CHECK(sut.quantum_of(2) == 8);

  auto runner = sut.enter(priority_class::interactive, 10);
  auto later = sut.enter(priority_class::interactive, 10);
  sut.charge_step(runner);
  CHECK(runner.level == 0);
  CHECK(runner.turn < later.turn);
  sut.charge_step(runner);
  CHECK(runner.level == 1);
  CHECK(runner.quantum_used == 0);
  CHECK(runner.turn > later.turn);

  for (int i = 0; i < 4; ++i)
    sut.charge_step(runner);
  CHECK(runner.level == 2);
  // The last level keeps it; a used quantum still sends it to the back.
  auto before = runner.turn;
  for (int i = 0; i < 8; ++i)
    sut.charge_step(runner);
  CHECK(runner.level == 2);
  CHECK(runner.turn > before);
}

TEST_CASE("mlfq_policy: skip-join enters a long prompt at the first level whose quantum covers "
          "its prefill") {
  auto sut = make_policy({2, 4, 0}); // quanta 2, 4, 8, 16 steps of 32 tokens
  CHECK(sut.initial_level(1) == 0);
  CHECK(sut.initial_level(2 * chunk) == 0);
  CHECK(sut.initial_level(2 * chunk + 1) == 1);
  CHECK(sut.initial_level(4 * chunk) == 1);
  CHECK(sut.initial_level(8 * chunk) == 2);
  CHECK(sut.initial_level(16 * chunk) == 3);
  CHECK(sut.initial_level(1000 * chunk) == 3); // the last level at most
  CHECK(sut.enter(priority_class::batch, 8 * chunk).level == 2);
}

TEST_CASE("mlfq_policy: a sequence that waited aging_steps steps without a slot returns to "
          "level 0 and keeps its turn") {
  auto sut = make_policy({2, 4, 3});
  auto p = sut.enter(priority_class::batch, 8 * chunk);
  REQUIRE(p.level == 2);
  const auto turn = p.turn;
  sut.age(p, false);
  sut.age(p, false);
  CHECK(p.level == 2);
  sut.age(p, true); // held a slot: waiting starts anew
  sut.age(p, false);
  sut.age(p, false);
  CHECK(p.level == 2);
  sut.age(p, false);
  CHECK(p.level == 0);
  CHECK(p.quantum_used == 0);
  CHECK(p.waited_steps == 0);
  CHECK(p.turn == turn);
}

TEST_CASE("mlfq_policy: no aging when aging_steps is 0 or without preemption") {
  for (bool preemptive : {true, false}) {
    CAPTURE(preemptive);
    auto sut = make_policy({2, 4, preemptive ? 0u : 1u}, preemptive);
    mlfq_position p;
    p.level = 3;
    for (int i = 0; i < 1000; ++i)
      sut.age(p, false);
    CHECK(p.level == 3);
  }
}

TEST_CASE("mlfq_policy: the serialized-device fallback gives 4x longer quanta below level 0") {
  auto sut = make_policy({2, 4, 0}, true, true);
  CHECK(sut.quantum_of(0) == 2);
  CHECK(sut.quantum_of(1) == 4 * 4);
  CHECK(sut.quantum_of(2) == 8 * 4);
  // Longer quanta cover longer prefills at the same level.
  CHECK(sut.initial_level(16 * chunk) == 1);
  CHECK(make_policy({2, 4, 0}).initial_level(16 * chunk) == 3);
}

TEST_CASE("mlfq_policy: knobs change live and zero quanta or levels are raised to 1") {
  auto sut = make_policy({2, 4, 0});
  sut.set_knobs({0, 0, 5});
  CHECK(sut.knobs().quantum_steps == 1);
  CHECK(sut.knobs().levels == 1);
  CHECK(sut.knobs().aging_steps == 5);
  auto p = sut.enter(priority_class::interactive, 100 * chunk);
  CHECK(p.level == 0); // one level only
  sut.charge_step(p);
  CHECK(p.level == 0);
}

TEST_CASE("mlfq_policy: priority order ranks by class then arrival, without levels or quanta") {
  mlfq_policy sut{{rank_order::priority, false, chunk}, {2, 4, 1}};
  auto batch_first = sut.enter(priority_class::batch, 10 * chunk);
  auto interactive = sut.enter(priority_class::interactive, 10 * chunk);
  auto batch_second = sut.enter(priority_class::batch, 1);
  CHECK(batch_first.level == 0);
  for (int i = 0; i < 100; ++i) {
    sut.charge_step(batch_first);
    sut.age(batch_second, false);
  }
  CHECK(batch_first.level == 0);
  CHECK(batch_first.quantum_used == 0);
  CHECK(batch_second.waited_steps == 0);
  // Same client: no round-robin reordering either way.
  std::vector<actors::rank_entry> entries{{&batch_second, "a"}, {&batch_first, "a"}, {&interactive, "a"}};
  CHECK(sut.rank(entries) == std::vector<std::size_t>{2, 1, 0});
  std::vector<actors::rank_entry> clients{{&batch_second, "b"}, {&batch_first, "a"}, {&interactive, "c"}};
  CHECK(sut.rank(clients) == std::vector<std::size_t>{2, 1, 0});
}
