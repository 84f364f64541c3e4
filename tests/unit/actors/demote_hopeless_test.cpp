// Goodput demotion carried out on the live sequences (actors/plan_candidates:
// demote_hopeless): a sequence before its first token is demoted once its
// slack is gone, checked again when it would be, and never demoted after its
// first token.
#include "actors/plan_candidates.hpp"
#include "actors/sequence_table.hpp"

#include <doctest/doctest.h>

#include <numeric>

using namespace kvlane::actors;
using kvlane::backends::token_id;

namespace {

using clock_type = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

cost_model fixed() {
  cost_model m;
  m.fix(cost_figures{50.0, 0.5, 30.0, 16.0}); // a step: 50 ms + 0.5 ms per token
  return m;
}

const slo_targets slo; // interactive TTFT 2 s, batch 60 s

sequence& add(sequence_table& table, seq_id id, priority_class cls, std::size_t prompt_len,
              clock_type::time_point arrived) {
  submission s;
  s.id = id;
  s.client = "c" + std::to_string(id);
  s.priority = cls;
  s.prompt.resize(prompt_len);
  std::iota(s.prompt.begin(), s.prompt.end(), token_id{1});
  auto seq = std::make_unique<sequence>(s);
  seq->position = mlfq_position{cls, 0, 0, id, 0};
  seq->arrived = arrived;
  auto& added = table.add(std::move(seq), s.client);
  table.watch_demotion(added, arrived);
  return added;
}

struct fixture {
  cost_model costs = fixed();
  output_lengths outputs;
  preemption_figures figures{costs, outputs, &slo, 4, 128, false};
  candidate_inputs inputs{[](std::uint32_t n) { return std::uint64_t{n} * 1024; },
                          [](const sequence&) { return false; }};
  sequence_table table{rank_order::mlfq, 4};
  clock_type::time_point t0 = clock_type::now();

  std::uint64_t at(ms after) {
    return demote_hopeless(table, figures, inputs, slo, t0 + after);
  }
  std::vector<seq_id> order() {
    std::vector<seq_id> out;
    for (auto* s : table.best_ranked(16))
      out.push_back(s->id);
    return out;
  }
};

} // namespace

TEST_CASE("demote_hopeless: a waiting request is demoted exactly when its slack runs out, and "
          "then ranks after its class's others") {
  fixture f;
  // Prefill 1,000 tokens in 8 chunks: 8 steps of 52 ms (4 slot holders) and 500 ms of tokens,
  // 916 ms, so the 2 s TTFT leaves 1,084 ms of waiting.
  add(f.table, 1, priority_class::interactive, 1000, f.t0);
  add(f.table, 2, priority_class::interactive, 10, f.t0 + ms(100));
  add(f.table, 3, priority_class::batch, 10, f.t0);
  CHECK(f.at(ms(0)) == 0);
  CHECK(f.order() == std::vector<seq_id>{1, 2, 3});
  CHECK(f.at(ms(1083)) == 0);
  CHECK(f.at(ms(1085)) == 1);
  CHECK(f.table.find(1)->position.demoted);
  CHECK(f.order() == std::vector<seq_id>{2, 1, 3}); // still above batch
  CHECK(f.at(ms(10000)) == 1);                      // request 2, from 2.1 s less its prefill
  CHECK(f.order() == std::vector<seq_id>{1, 2, 3}); // demoted ones by turn
}

TEST_CASE("demote_hopeless: a request that has its first token is never demoted") {
  fixture f;
  auto& s = add(f.table, 1, priority_class::interactive, 1000, f.t0);
  s.generated = 1;
  s.first_token = f.t0 + ms(10);
  CHECK(f.at(ms(60000)) == 0);
  CHECK_FALSE(f.table.find(1)->position.demoted);
}

TEST_CASE("demote_hopeless: without measured costs a request is demoted once its objective "
          "itself has passed") {
  fixture f;
  const cost_model unmeasured;
  const preemption_figures blind{unmeasured, f.outputs, &slo, 4, 128, false};
  add(f.table, 1, priority_class::batch, 1000, f.t0);
  CHECK(demote_hopeless(f.table, blind, f.inputs, slo, f.t0 + ms(59000)) == 0);
  CHECK(demote_hopeless(f.table, blind, f.inputs, slo, f.t0 + ms(60000)) == 1);
}

TEST_CASE("demote_hopeless: a sequence that left the rank order (cancelled) is not checked") {
  fixture f;
  auto& s = add(f.table, 1, priority_class::interactive, 10, f.t0);
  f.table.unrank(s);
  CHECK(f.at(ms(60000)) == 0);
}
