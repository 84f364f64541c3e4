// Constrained decoding on a real transformer and a real vocabulary (the tiny generated Llama
// GGUF: random weights, the Llama-3 vocabulary of 128k byte-level BPE tokens): every output is
// a document of its schema, including while preempted by swap, and the masks are computed while
// the device steps. The mask figures are printed (not asserted).
#include "tests/llamacpp/llama_model.hpp"
#include "tests/unit/actors/engine_fixture.hpp"

#include "common/grammar/json_schema.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <chrono>

using namespace kvlane;
using namespace std::chrono_literals;
using actors::scheduler_mode;
using backends::token_id;
using test::engine_fixture;

namespace {

const char* const order_schema = R"({"type":"object","properties":{
  "id":{"type":"integer","minimum":0,"maximum":99999},
  "customer":{"type":"string","maxLength":12},
  "express":{"type":"boolean"},
  "status":{"enum":["open","paid","shipped"]},
  "items":{"type":"array","items":{"type":"object","properties":{
     "sku":{"type":"string","maxLength":6},"qty":{"type":"integer","minimum":1,"maximum":9}},
     "required":["sku","qty"],"additionalProperties":false},"minItems":1,"maxItems":2}},
  "required":["id","customer","express","status","items"],"additionalProperties":false})";

actors::engine_config llama_config(scheduler_mode mode) {
  actors::engine_config c;
  c.scheduler.mode = mode;
  c.scheduler.quantum_steps = 2;
  c.scheduler.levels = 3;
  c.scheduler.spare_slots = 1;
  c.scheduler.max_step_tokens = 256;
  c.scheduler.aging_steps = 64;
  c.scheduler.fixed_costs = actors::cost_figures{2.0, 0.1, 0.01, 0.01}; // swaps are cheap
  c.store.max_bytes = 256ull << 20;
  c.reuse.mode = actors::reuse_mode::off;
  actors::model_config m;
  m.name = "tiny";
  m.backend.kind = "llamacpp";
  m.backend.llamacpp = test::tiny_llama_options();
  c.models.push_back(m);
  return c;
}

std::vector<actors::submit_request> workload(std::shared_ptr<const actors::output_constraint> c) {
  std::vector<actors::submit_request> out;
  for (std::size_t i = 0; i < 8; ++i) {
    actors::submit_request r;
    r.model = "tiny";
    r.client = "client-" + std::to_string(i % 3);
    r.prompt_tokens = {128000};
    for (std::size_t k = 0; k < 10 + i * 7; ++k)
      r.prompt_tokens.push_back(static_cast<token_id>(1000 + (i * 7919 + k * 104729) % 8000));
    r.sampling.max_tokens = 200;
    r.sampling.temperature = i % 2 == 0 ? 0.0f : 0.8f;
    r.sampling.seed = 77 + i;
    r.constraint = c;
    out.push_back(std::move(r));
  }
  return out;
}

} // namespace

TEST_CASE("llamacpp constrained: on the Llama-3 vocabulary every output is a document of its "
          "schema, also while preempted by swap, and the masks are ready when the logits are") {
  auto g = grammar::compile_json_schema(order_schema);
  REQUIRE(g.has_value());
  auto c = std::make_shared<actors::output_constraint>();
  c->grammar = *g;
  const auto reqs = workload(c);

  engine_fixture sut{llama_config(scheduler_mode::overlap)};
  const auto& tok = sut.engine->find_model("tiny")->backend->tokens();
  // The first constrained submit builds the model's grammar vocabulary.
  std::vector<std::shared_ptr<actors::token_stream>> streams;
  const auto t0 = std::chrono::steady_clock::now();
  auto first = sut.engine->submit(reqs[0]);
  const double first_submit_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(first.has_value());
  streams.push_back(*first);
  for (std::size_t i = 1; i < reqs.size(); ++i) {
    auto s = sut.engine->submit(reqs[i]);
    REQUIRE(s.has_value());
    streams.push_back(*s);
  }
  std::uint32_t preempted = 0;
  for (std::size_t i = 0; i < streams.size(); ++i) {
    auto got = streams[i]->collect(300s);
    REQUIRE(got.has_value());
    REQUIRE(got->end.has_value());
    const auto text = tok.decode(got->tokens);
    CAPTURE(i);
    CAPTURE(text);
    CHECK(got->end->reason == actors::end_reason::stop);
    const auto j = nlohmann::json::parse(text, nullptr, false);
    REQUIRE_FALSE(j.is_discarded());
    CHECK(j.size() == 5);
    CHECK(j["id"].is_number_integer());
    CHECK(j["express"].is_boolean());
    CHECK((j["status"] == "open" || j["status"] == "paid" || j["status"] == "shipped"));
    CHECK((j["items"].size() >= 1 && j["items"].size() <= 2));
    preempted += got->end->preemptions > 0;
  }
  const auto st = sut.stats();
  CHECK(preempted > 0);
  CHECK(st.swaps > 0);
  CHECK(st.masks.at_sampling == 0);
  CHECK(st.masks.during_step > 0);
  MESSAGE("Llama-3 vocabulary (" << tok.size() << " tokens): first constrained submit (builds the "
          "grammar vocabulary) " << first_submit_ms << " ms; " << st.masks.count() << " masks, p50 <= "
          << st.masks.quantile_us(0.5) << " us, p99 <= " << st.masks.quantile_us(0.99) << " us, max "
          << st.masks.max_ms * 1000 << " us, mean " << st.masks.total_ms * 1000 / static_cast<double>(st.masks.count())
          << " us; done before the step's result: " << st.masks.hidden << " of " << st.masks.during_step
          << "; steps " << st.steps << ", mean step " << st.step_busy_ms / static_cast<double>(st.steps)
          << " ms; preemptions " << st.preemptions << ", swaps " << st.swaps);
  sut.check_nothing_leaked("tiny");
}
