// Constrained decoding through the engine on the sim: outputs follow their grammar, are the same
// token for token whether or not the scheduler preempts them (swap or recompute), the masks are
// computed while the device steps, and bad constraints are refused at submit.
#include "tests/unit/actors/engine_fixture.hpp"

#include "common/grammar/gbnf.hpp"
#include "common/grammar/json_schema.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

using namespace kvlane;
using namespace std::chrono_literals;
using actors::end_reason;
using actors::scheduler_mode;
using test::engine_fixture;

namespace {

const char* const person_schema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":10},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "pet":{"enum":["cat","dog","owl"]},
  "tags":{"type":"array","items":{"type":"string","maxLength":4},"maxItems":3}},
  "required":["name","age","pet","tags"],"additionalProperties":false})";

std::shared_ptr<const actors::output_constraint> schema_constraint() {
  static const auto c = [] {
    auto g = grammar::compile_json_schema(person_schema);
    REQUIRE_MESSAGE(g.has_value(), (g ? std::string{} : g.error().message()));
    auto out = std::make_shared<actors::output_constraint>();
    out->grammar = *g;
    return std::shared_ptr<const actors::output_constraint>{out};
  }();
  return c;
}

/// Free text until an "e", then the grammar: "e" and three digits.
std::shared_ptr<const actors::output_constraint> trigger_constraint() {
  static const auto c = [] {
    auto out = std::make_shared<actors::output_constraint>();
    out->grammar = grammar::compile_gbnf(R"(root ::= "e" [0-9] [0-9] [0-9])").value();
    out->triggers = {"e"};
    return std::shared_ptr<const actors::output_constraint>{out};
  }();
  return c;
}

/// Constrained requests: prompts of 5..95 tokens, half greedy, half sampled; every third
/// with the trigger constraint, the others with the schema.
std::vector<actors::submit_request> workload(std::size_t n, bool constrained = true) {
  std::vector<actors::submit_request> out;
  for (std::size_t i = 0; i < n; ++i) {
    actors::submit_request r;
    r.model = "tiny";
    r.client = "client-" + std::to_string(i % 3);
    r.priority = i % 4 == 0 ? actors::priority_class::interactive : actors::priority_class::batch;
    for (std::size_t k = 0; k < 5 + (i * 37) % 91; ++k)
      r.prompt_tokens.push_back(static_cast<backends::token_id>(97 + (i * 7 + k * 3) % 26));
    r.sampling.max_tokens = 300;
    if (i % 2 == 1) {
      r.sampling.temperature = 0.9f;
      r.sampling.top_k = 40;
      r.sampling.seed = 500 + i;
    }
    if (constrained)
      r.constraint = i % 3 == 2 ? trigger_constraint() : schema_constraint();
    out.push_back(std::move(r));
  }
  return out;
}

struct result {
  std::vector<backends::token_id> tokens;
  actors::stream_end end;
};

std::vector<result> run_all(actors::engine& e, const std::vector<actors::submit_request>& reqs) {
  std::vector<std::shared_ptr<actors::token_stream>> streams;
  for (const auto& r : reqs) {
    auto s = e.submit(r);
    REQUIRE_MESSAGE(s.has_value(), (s ? std::string{} : s.error().message));
    streams.push_back(*s);
  }
  std::vector<result> out;
  for (auto& s : streams) {
    auto c = s->collect(60s);
    REQUIRE(c.has_value());
    REQUIRE(c->end.has_value());
    out.push_back({std::move(c->tokens), *c->end});
  }
  return out;
}

std::string text_of(const std::vector<backends::token_id>& tokens) {
  return backends::byte_tokenizer{}.decode(tokens);
}

std::size_t characters(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    n += (c & 0xC0) != 0x80;
  return n;
}

/// Why `text` is not a document of person_schema, checked with a JSON parser (not the grammar).
std::string schema_violation(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded())
    return "not JSON";
  if (!j.is_object() || j.size() != 4)
    return "not an object of 4 members";
  if (!j.contains("name") || !j["name"].is_string() || characters(j["name"].get<std::string>()) > 10)
    return "bad name";
  if (!j.contains("age") || !j["age"].is_number_integer() || j["age"].get<std::int64_t>() < 0
      || j["age"].get<std::int64_t>() > 120)
    return "bad age";
  if (!j.contains("pet") || !j["pet"].is_string()
      || (j["pet"] != "cat" && j["pet"] != "dog" && j["pet"] != "owl"))
    return "bad pet";
  if (!j.contains("tags") || !j["tags"].is_array() || j["tags"].size() > 3)
    return "bad tags";
  for (const auto& t : j["tags"])
    if (!t.is_string() || characters(t.get<std::string>()) > 4)
      return "bad tag";
  return {};
}

/// Why `text` does not follow trigger_constraint, if it does not.
std::string trigger_violation(const std::string& text) {
  const auto at = text.find('e');
  if (at == std::string::npos)
    return "no trigger";
  const auto tail = text.substr(at);
  if (tail.size() != 4)
    return "constrained part is '" + tail + "'";
  for (std::size_t i = 1; i < 4; ++i)
    if (tail[i] < '0' || tail[i] > '9')
      return "not digits: '" + tail + "'";
  return {};
}

void check_valid(const std::vector<actors::submit_request>& reqs, const std::vector<result>& got) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto text = text_of(got[i].tokens);
    CAPTURE(i);
    CAPTURE(text);
    // Complete documents end the sequence by themselves (end_when_complete), before max_tokens.
    CHECK(got[i].end.reason == end_reason::stop);
    if (reqs[i].constraint == trigger_constraint())
      CHECK(trigger_violation(text) == "");
    else
      CHECK(schema_violation(text) == "");
  }
}

} // namespace

TEST_CASE("constrained engine: every output follows its grammar, and without the constraint the "
          "same requests do not") {
  const auto reqs = workload(9);
  engine_fixture sut{test::small_config(scheduler_mode::fcfs)};
  const auto got = run_all(*sut.engine, reqs);
  check_valid(reqs, got);
  const auto st = sut.stats();
  CHECK(st.masks.count() > 0);
  // The free runs show what the mask prevents: the sim writes letters, not JSON.
  const auto free = run_all(*sut.engine, workload(9, false));
  for (std::size_t i = 0; i < free.size(); ++i)
    if (reqs[i].constraint == schema_constraint())
      CHECK(schema_violation(text_of(free[i].tokens)) != "");
  sut.check_nothing_leaked();
}

TEST_CASE("constrained engine: outputs are identical token for token with and without "
          "preemption, by swap and by recompute") {
  const auto reqs = workload(12);
  std::vector<result> alone;
  {
    engine_fixture f{test::small_config(scheduler_mode::fcfs, 16)};
    alone = run_all(*f.engine, reqs);
    check_valid(reqs, alone);
    CHECK(f.stats().preemptions == 0);
  }
  // Swaps in overlap and sync; recompute on a device without snapshots, where the MLFQ's
  // preemptions can only drop KV (mode recompute preempts only for a later interactive arrival,
  // which depends on timing).
  for (auto [mode, snapshots] : {std::pair{scheduler_mode::overlap, true},
                                 std::pair{scheduler_mode::sync, true},
                                 std::pair{scheduler_mode::overlap, false}}) {
    CAPTURE(actors::to_string(mode));
    CAPTURE(snapshots);
    auto cfg = test::small_config(mode, 2);
    cfg.scheduler.quantum_steps = 2; // short turns: many preemptions mid-document
    cfg.models[0].backend.sim.snapshots = snapshots;
    engine_fixture sut{cfg};
    const auto got = run_all(*sut.engine, reqs);
    std::uint32_t preempted = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i].tokens == alone[i].tokens);
      CHECK(got[i].end.reason == alone[i].end.reason);
      preempted += got[i].end.preemptions > 0;
    }
    const auto st = sut.stats();
    CHECK(preempted > 0);
    if (snapshots) {
      CHECK(st.swaps > 0);
    } else {
      CHECK(st.swaps == 0);
      CHECK(st.recomputes > 0);
    }
    // Every mask was ready when its step's logits came back.
    CHECK(st.masks.at_sampling == 0);
    CHECK(st.masks.during_step > 0);
    MESSAGE((std::string{actors::to_string(mode)} + (snapshots ? "" : " without snapshots")) << ": " << st.masks.count() << " masks on the sim's 258 tokens, p50 "
            << st.masks.quantile_us(0.5) << " us, p99 " << st.masks.quantile_us(0.99)
            << " us (bucket bounds), max " << st.masks.max_ms * 1000 << " us, done before the "
            << "step's result: " << st.masks.hidden << "; preemptions " << st.preemptions);
    sut.check_nothing_leaked();
  }
}

TEST_CASE("constrained engine: a constraint without a grammar, with an empty trigger or a "
          "trigger outside the grammar is refused at submit") {
  engine_fixture sut{test::small_config(scheduler_mode::overlap)};
  auto req = workload(1, false)[0];
  auto refused = [&](actors::output_constraint c) {
    req.constraint = std::make_shared<const actors::output_constraint>(std::move(c));
    auto r = sut.engine->submit(req);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == actors::submit_errc::invalid_request);
    return r.error().message;
  };
  CHECK(refused({}) == "the output constraint has no grammar");
  const auto g = trigger_constraint()->grammar;
  CHECK(refused({g, {""}, true}) == "output constraint trigger 0 is empty");
  CHECK(refused({g, {"e", "x"}, true}).starts_with("output constraint trigger 1 ('x') does not begin"));
  CHECK(sut.stats().submitted == 0);
}

TEST_CASE("constrained engine: a constrained sequence stopped by its consumer mid-document ends "
          "with reason stop after the tokens it was told") {
  auto cfg = test::small_config(scheduler_mode::overlap);
  cfg.models[0].backend.sim.time_scale = 5; // ~7 ms a step: the consumer keeps up
  engine_fixture sut{cfg};
  auto req = workload(1)[0];
  auto s = sut.engine->submit(req);
  REQUIRE(s.has_value());
  std::vector<backends::token_id> seen;
  while (seen.size() < 4) {
    auto c = (*s)->next(10s);
    REQUIRE(c.has_value());
    REQUIRE_FALSE(c->end.has_value()); // the document is longer than 4 tokens
    seen.insert(seen.end(), c->tokens.begin(), c->tokens.end());
  }
  // The engine trims the sequence (and rolls its grammar state back) to the kept tokens.
  sut.engine->stop("tiny", (*s)->id(), 3, 2);
  const auto rest = (*s)->collect(10s);
  REQUIRE(rest.has_value());
  REQUIRE(rest->end.has_value());
  CHECK(rest->end->reason == end_reason::stop);
  CHECK(rest->end->generated_tokens == 3);
  CHECK(text_of(seen).starts_with("{\""));
  sut.check_nothing_leaked();
}

TEST_CASE("constrained engine: without end_when_complete a complete grammar allows only the end "
          "token, which the sequence takes although the model scores it -30") {
  engine_fixture sut{test::small_config(scheduler_mode::overlap)};
  auto c = std::make_shared<actors::output_constraint>();
  c->grammar = grammar::compile_gbnf(R"(root ::= "ok" [0-9])").value();
  c->end_when_complete = false;
  for (float temperature : {0.0f, 1.0f}) {
    CAPTURE(temperature);
    auto req = workload(1, false)[0];
    req.sampling.temperature = temperature;
    req.constraint = c;
    const auto got = run_all(*sut.engine, {req});
    const auto text = text_of(got[0].tokens);
    CHECK(text.size() == 3);
    CHECK(text.starts_with("ok"));
    CHECK(got[0].end.reason == end_reason::stop);
    CHECK(got[0].end.generated_tokens == 3); // the end token is not delivered
  }
}
