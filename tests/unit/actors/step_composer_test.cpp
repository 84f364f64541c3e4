// Step composition on plain values: decode rows first, prefill chunks in rank
// order under max_step_tokens, batch prefill held to the decode rows' TPOT allowances.
#include "actors/step_composer.hpp"

#include <doctest/doctest.h>

#include <deque>
#include <limits>
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
                  std::uint32_t kv_len, std::uint32_t length,
                  double allowance_ms = std::numeric_limits<double>::infinity()) {
    positions.push_back({cls, level, 0, turn, 0});
    list.push_back({id, &positions.back(), kv_len, length, allowance_ms});
    return *this;
  }
};

using rows = std::vector<step_row_plan>;

/// Limits without step cost figures: no pacing by the allowances.
step_limits plain(std::uint32_t max_step_tokens, std::uint32_t chunk, bool yields = false) {
  return {max_step_tokens, chunk, yields, std::nullopt};
}

} // namespace

TEST_CASE("step_composer: decode rows come first in id order, then prefill chunks in rank "
          "order") {
  candidates c;
  c.add(9, priority_class::batch, 0, 1, 40, 41)          // decode
    .add(3, priority_class::batch, 0, 2, 0, 100)         // prefill, batch
    .add(5, priority_class::interactive, 2, 3, 10, 20)   // prefill, level 2
    .add(2, priority_class::interactive, 0, 9, 50, 51)   // decode
    .add(7, priority_class::interactive, 0, 8, 0, 70);   // prefill, level 0
  auto got = actors::compose_step(c.list, plain(0, 32));
  CHECK(got == rows{{2, 1, false}, {9, 1, false}, {7, 32, true}, {5, 10, true}, {3, 32, true}});
}

TEST_CASE("step_composer: prefill chunks fill the step up to max_step_tokens, the last one cut "
          "to what is left") {
  candidates c;
  c.add(1, priority_class::interactive, 0, 1, 4, 5)
    .add(2, priority_class::interactive, 0, 2, 0, 100)
    .add(3, priority_class::interactive, 0, 3, 0, 100)
    .add(4, priority_class::interactive, 0, 4, 0, 100);
  CHECK(actors::compose_step(c.list, plain(50, 32))
        == rows{{1, 1, false}, {2, 32, true}, {3, 17, true}});
}

TEST_CASE("step_composer: decode rows always run, and a step full of decodes takes no prefill") {
  candidates c;
  for (actors::seq_id id = 1; id <= 4; ++id)
    c.add(id, priority_class::batch, 0, id, 10, 11);
  c.add(5, priority_class::interactive, 0, 0, 0, 100);
  CHECK(actors::compose_step(c.list, plain(3, 32))
        == rows{{1, 1, false}, {2, 1, false}, {3, 1, false}, {4, 1, false}});
}

TEST_CASE("step_composer: a prefill never exceeds its remaining tokens or the backend's chunk") {
  candidates c;
  c.add(1, priority_class::interactive, 0, 1, 90, 100)
    .add(2, priority_class::interactive, 0, 2, 0, 1000);
  CHECK(actors::compose_step(c.list, plain(0, 64)) == rows{{1, 10, true}, {2, 64, true}});
}

TEST_CASE("step_composer: nothing to run makes no rows") {
  CHECK(actors::compose_step({}, plain(0, 32)).empty());
}

TEST_CASE("step_composer: with batch_prefill_yields no batch prefill shares a step with an "
          "interactive one") {
  candidates c;
  c.add(1, priority_class::batch, 0, 1, 40, 41)           // decode: always runs
    .add(2, priority_class::batch, 0, 2, 0, 100)          // batch prefill
    .add(3, priority_class::interactive, 1, 3, 0, 100)    // interactive prefill
    .add(4, priority_class::interactive, 2, 4, 0, 20);    // interactive prefill
  // Without the rule the batch chunk fills the rest of the step.
  CHECK(actors::compose_step(c.list, plain(512, 64, false))
        == rows{{1, 1, false}, {3, 64, true}, {4, 20, true}, {2, 64, true}});
  // With it the step carries the interactive chunks only.
  CHECK(actors::compose_step(c.list, plain(512, 64, true))
        == rows{{1, 1, false}, {3, 64, true}, {4, 20, true}});

  // With no interactive prefill waiting, batch prefills fill the step as before.
  candidates b;
  b.add(1, priority_class::interactive, 0, 1, 40, 41)     // interactive decode
    .add(2, priority_class::batch, 0, 2, 0, 100)
    .add(3, priority_class::batch, 1, 3, 0, 100);
  CHECK(actors::compose_step(b.list, plain(100, 64, true))
        == rows{{1, 1, false}, {2, 64, true}, {3, 35, true}});
}

namespace {

/// A step costs 30 ms plus 2 ms per token.
step_limits paced(std::uint32_t max_step_tokens, bool yields = true) {
  return {max_step_tokens, 64, yields, actors::step_cost{30.0, 2.0}};
}

} // namespace

TEST_CASE("step_composer: batch prefill fills a step only up to the tokens the tightest TPOT "
          "allowance of its decode rows pays for, a tenth under it") {
  candidates c;
  c.add(1, priority_class::interactive, 0, 1, 40, 41, 200.0) // decode, allowance 200 ms
    .add(2, priority_class::batch, 0, 2, 40, 41, 900.0)      // decode, allowance 900 ms
    .add(3, priority_class::batch, 0, 3, 0, 100)
    .add(4, priority_class::batch, 0, 4, 0, 100);
  // Two decode rows cost 34 ms; 0.9 x 200 ms leaves 146 ms, 73 tokens of prefill.
  CHECK(actors::compose_step(c.list, paced(512))
        == rows{{1, 1, false}, {2, 1, false}, {3, 64, true}, {4, 9, true}});
  // Without the cost figures the allowances limit nothing: max_step_tokens does.
  auto unpaced = paced(512);
  unpaced.cost.reset();
  CHECK(actors::compose_step(c.list, unpaced)
        == rows{{1, 1, false}, {2, 1, false}, {3, 64, true}, {4, 64, true}});
  // max_step_tokens still bounds a looser allowance.
  CHECK(actors::compose_step(c.list, paced(40))
        == rows{{1, 1, false}, {2, 1, false}, {3, 38, true}});
}

TEST_CASE("step_composer: an allowance the decode rows alone exceed is not held to, and no "
          "batch prefill runs where the tightest one leaves none") {
  candidates c;
  c.add(1, priority_class::interactive, 0, 1, 40, 41, 20.0) // behind: 34 ms of decodes > 20
    .add(2, priority_class::batch, 0, 2, 40, 41, 200.0)
    .add(3, priority_class::batch, 0, 3, 0, 500);
  // Held to the 200 ms one: 146 ms of prefill, 73 tokens, in 64-token chunks at most.
  CHECK(actors::compose_step(c.list, paced(512))
        == rows{{1, 1, false}, {2, 1, false}, {3, 64, true}});
  candidates tight;
  tight.add(1, priority_class::interactive, 0, 1, 40, 41, 40.0) // 0.9 x 40 = 36 ms, 4 past the decode row: 2 tokens
    .add(2, priority_class::batch, 0, 2, 0, 100);
  CHECK(actors::compose_step(tight.list, paced(512)) == rows{{1, 1, false}, {2, 2, true}});
  tight.list[0].step_allowance_ms = 36.0; // 0.9 x 36 = 32.4 ms: the decode row's 32 leave no token
  CHECK(actors::compose_step(tight.list, paced(512)) == rows{{1, 1, false}});
}

TEST_CASE("step_composer: interactive prefill is not held to the allowances, and batch prefill "
          "beside it counts its tokens") {
  candidates c;
  c.add(1, priority_class::interactive, 0, 1, 40, 41, 200.0) // 180 - 32 ms: 74 tokens of prefill
    .add(2, priority_class::interactive, 0, 2, 0, 100)
    .add(3, priority_class::batch, 0, 3, 0, 100);
  CHECK(actors::compose_step(c.list, paced(512, false))
        == rows{{1, 1, false}, {2, 64, true}, {3, 10, true}});
  c.list[0].step_allowance_ms = 100.0; // 29 tokens: the interactive chunk still runs whole
  CHECK(actors::compose_step(c.list, paced(512, false)) == rows{{1, 1, false}, {2, 64, true}});
}
