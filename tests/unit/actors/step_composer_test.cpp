// Step composition on plain values: decode rows first, prefill chunks in rank
// order under max_step_tokens.
#include "actors/step_composer.hpp"

#include <doctest/doctest.h>

#include <deque>
#include <vector>

using namespace kvlane;
using actors::mlfq_position;
using actors::priority_class;
using actors::step_candidate;
using actors::step_limits;
using actors::step_row_plan;

namespace {

struct candidates {
  std::deque<mlfq_position> positions; ///< stable addresses
  std::vector<step_candidate> list;

  /// A sequence that has `kv_len` of its `length` tokens in its slot.
  candidates& add(actors::seq_id id, priority_class cls, std::uint32_t level, std::uint64_t turn,
                  std::uint32_t kv_len, std::uint32_t length) {
    positions.push_back({cls, level, 0, turn, 0});
    list.push_back({id, &positions.back(), kv_len, length});
    return *this;
  }
};

using rows = std::vector<step_row_plan>;

} // namespace

TEST_CASE("step_composer: decode rows come first in id order, then prefill chunks in rank "
          "order") {
  candidates c;
  c.add(9, priority_class::batch, 0, 1, 40, 41)          // decode
    .add(3, priority_class::batch, 0, 2, 0, 100)         // prefill, batch
    .add(5, priority_class::interactive, 2, 3, 10, 20)   // prefill, level 2
    .add(2, priority_class::interactive, 0, 9, 50, 51)   // decode
    .add(7, priority_class::interactive, 0, 8, 0, 70);   // prefill, level 0
  auto got = actors::compose_step(c.list, {0, 32});
  CHECK(got == rows{{2, 1, false}, {9, 1, false}, {7, 32, true}, {5, 10, true}, {3, 32, true}});
}

TEST_CASE("step_composer: prefill chunks fill the step up to max_step_tokens, the last one cut "
          "to what is left") {
  candidates c;
  c.add(1, priority_class::interactive, 0, 1, 4, 5)
    .add(2, priority_class::interactive, 0, 2, 0, 100)
    .add(3, priority_class::interactive, 0, 3, 0, 100)
    .add(4, priority_class::interactive, 0, 4, 0, 100);
  CHECK(actors::compose_step(c.list, {50, 32})
        == rows{{1, 1, false}, {2, 32, true}, {3, 17, true}});
}

TEST_CASE("step_composer: decode rows always run, and a step full of decodes takes no prefill") {
  candidates c;
  for (actors::seq_id id = 1; id <= 4; ++id)
    c.add(id, priority_class::batch, 0, id, 10, 11);
  c.add(5, priority_class::interactive, 0, 0, 0, 100);
  CHECK(actors::compose_step(c.list, {3, 32})
        == rows{{1, 1, false}, {2, 1, false}, {3, 1, false}, {4, 1, false}});
}

TEST_CASE("step_composer: a prefill never exceeds its remaining tokens or the backend's chunk") {
  candidates c;
  c.add(1, priority_class::interactive, 0, 1, 90, 100)
    .add(2, priority_class::interactive, 0, 2, 0, 1000);
  CHECK(actors::compose_step(c.list, {0, 64}) == rows{{1, 10, true}, {2, 64, true}});
}

TEST_CASE("step_composer: nothing to run makes no rows") {
  CHECK(actors::compose_step({}, {0, 32}).empty());
}

TEST_CASE("step_composer: with batch_prefill_yields no batch prefill shares a step with an "
          "interactive one") {
  candidates c;
  c.add(1, priority_class::batch, 0, 1, 40, 41)           // decode: always runs
    .add(2, priority_class::batch, 0, 2, 0, 100)          // batch prefill
    .add(3, priority_class::interactive, 1, 3, 0, 100)    // interactive prefill
    .add(4, priority_class::interactive, 2, 4, 0, 20);    // interactive prefill
  // Without the rule the batch chunk fills the rest of the step.
  CHECK(actors::compose_step(c.list, {512, 64, false})
        == rows{{1, 1, false}, {3, 64, true}, {4, 20, true}, {2, 64, true}});
  // With it the step carries the interactive chunks only.
  CHECK(actors::compose_step(c.list, {512, 64, true})
        == rows{{1, 1, false}, {3, 64, true}, {4, 20, true}});

  // With no interactive prefill waiting, batch prefills fill the step as before.
  candidates b;
  b.add(1, priority_class::interactive, 0, 1, 40, 41)     // interactive decode
    .add(2, priority_class::batch, 0, 2, 0, 100)
    .add(3, priority_class::batch, 1, 3, 0, 100);
  CHECK(actors::compose_step(b.list, {100, 64, true})
        == rows{{1, 1, false}, {2, 64, true}, {3, 35, true}});
}
