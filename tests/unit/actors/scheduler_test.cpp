// The scheduler through the in-process engine: oversubscription in every
// mode, cancel in every phase, injected failures, bad requests.
#include "tests/unit/actors/engine_fixture.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using namespace kvlane;
using namespace std::chrono_literals;
using actors::end_reason;
using actors::priority_class;
using actors::seq_phase;
using actors::scheduler_mode;
using test::engine_fixture;

namespace {

struct result {
  std::vector<backends::token_id> tokens;
  actors::stream_end end;
};

/// A mixed workload: prompts of 5..150 tokens (several prefill chunks), half
/// greedy, half sampled with their own seeds, two classes, three clients.
std::vector<actors::submit_request> workload(std::size_t n) {
  std::vector<actors::submit_request> out;
  for (std::size_t i = 0; i < n; ++i) {
    actors::submit_request r;
    r.model = "tiny";
    r.client = "client-" + std::to_string(i % 3);
    r.priority = i % 4 == 0 ? priority_class::interactive : priority_class::batch;
    auto len = 5 + (i * 37) % 146;
    for (std::size_t k = 0; k < len; ++k)
      r.prompt_tokens.push_back(static_cast<backends::token_id>(97 + (i * 7 + k * 3) % 26));
    r.sampling.max_tokens = static_cast<std::uint32_t>(24 + (i * 13) % 40);
    if (i % 2 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.top_k = 20;
      r.sampling.seed = 1000 + i;
    }
    out.push_back(std::move(r));
  }
  return out;
}

result run_one(actors::engine& e, actors::submit_request r) {
  auto s = e.submit(std::move(r));
  REQUIRE(s.has_value());
  auto c = (*s)->collect(30s);
  REQUIRE(c.has_value());
  return {std::move(c->tokens), *c->end};
}

/// Each request's stream when it runs alone on an idle engine.
std::vector<result> solo_results(const std::vector<actors::submit_request>& reqs) {
  engine_fixture f{test::small_config(scheduler_mode::fcfs)};
  std::vector<result> out;
  for (auto& r : reqs)
    out.push_back(run_one(*f.engine, r));
  return out;
}

std::vector<result> run_all(actors::engine& e, const std::vector<actors::submit_request>& reqs) {
  std::vector<std::shared_ptr<actors::token_stream>> streams;
  for (auto& r : reqs) {
    auto s = e.submit(r);
    REQUIRE(s.has_value());
    streams.push_back(*s);
  }
  std::vector<result> out;
  for (auto& s : streams) {
    auto c = s->collect(60s);
    REQUIRE(c.has_value());
    out.push_back({std::move(c->tokens), *c->end});
  }
  return out;
}

void check_same_streams(const std::vector<result>& got, const std::vector<result>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].end.reason == want[i].end.reason);
    CHECK(got[i].tokens == want[i].tokens);
  }
}

} // namespace

TEST_CASE("scheduler: with 4x more sequences than slots every stream equals its solo stream, "
          "in every mode") {
  auto reqs = workload(16);
  auto solo = solo_results(reqs);
  for (auto& r : solo) {
    REQUIRE(r.end.reason == end_reason::length);
    REQUIRE(!r.tokens.empty());
  }
  for (auto mode : actors::all_scheduler_modes) {
    CAPTURE(actors::to_string(mode));
    auto cfg = test::small_config(mode);
    cfg.scheduler.slo_gates_preemption = false; // time slicing as the rank order asks
    engine_fixture sut{cfg};
    auto got = run_all(*sut.engine, reqs);
    check_same_streams(got, solo);
    auto st = sut.stats();
    CHECK(st.finished == reqs.size());
    if (!actors::rules_of(mode).preempts) {
      CHECK(st.preemptions == 0);
    } else if (!actors::rules_of(mode).swaps) {
      // Whether a later interactive request finds every slot taken depends on
      // timing; whatever was preempted re-prefilled.
      CHECK(st.swaps == 0);
      CHECK(st.dumps == 0);
      CHECK(st.recomputes == st.preemptions);
    } else {
      CHECK(st.preemptions >= reqs.size());
      CHECK(st.swaps > 0);
      CHECK(st.dumps == st.swaps);
      CHECK(st.loads > 0);
    }
    sut.check_nothing_leaked();
  }
}

TEST_CASE("scheduler: a new interactive request takes the spare slot without waiting for a dump") {
  auto cfg = test::small_config(scheduler_mode::overlap, 3); // target 2 + 1 spare
  engine_fixture sut{cfg};
  auto reqs = workload(3);
  for (auto& r : reqs) {
    r.priority = priority_class::batch;
    r.sampling.max_tokens = 200;
  }
  auto a = sut.engine->submit(reqs[0]);
  auto b = sut.engine->submit(reqs[1]);
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  REQUIRE(sut.log.wait((*a)->id(), seq_phase::resident));
  REQUIRE(sut.log.wait((*b)->id(), seq_phase::resident));
  REQUIRE((*a)->next(10s).has_value()); // both are decoding

  auto urgent = reqs[2];
  urgent.priority = priority_class::interactive;
  urgent.sampling.max_tokens = 8;
  auto c = sut.engine->submit(urgent);
  REQUIRE(c.has_value());
  REQUIRE(sut.log.wait((*c)->id(), seq_phase::resident));
  // Between the request's arrival and its slot, nobody was dumped.
  auto events = sut.log.events();
  auto queued = std::find(events.begin(), events.end(), std::pair{(*c)->id(), seq_phase::queued});
  auto resident =
    std::find(events.begin(), events.end(), std::pair{(*c)->id(), seq_phase::resident});
  REQUIRE(queued < resident);
  for (auto it = queued; it != resident; ++it)
    CHECK(it->second != seq_phase::dumping);
  // Afterwards a batch sequence is evicted to restore the spare.
  auto done = (*c)->collect(10s);
  REQUIRE(done.has_value());
  CHECK(done->end->reason == end_reason::length);
  (*a)->cancel();
  (*b)->cancel();
  REQUIRE((*a)->collect(10s).has_value());
  REQUIRE((*b)->collect(10s).has_value());
  CHECK(sut.stats().preemptions >= 1);
  sut.check_nothing_leaked();
}

TEST_CASE("scheduler: where transfers stall compute (sync), no slot is held spare: every slot "
          "serves a batch request and none is dumped to free one") {
  engine_fixture sut{test::small_config(scheduler_mode::sync, 3)};
  auto reqs = workload(3);
  std::vector<std::shared_ptr<actors::token_stream>> streams;
  for (auto& r : reqs) {
    r.priority = priority_class::batch;
    r.sampling.max_tokens = 200;
    auto s = sut.engine->submit(r);
    REQUIRE(s.has_value());
    streams.push_back(*s);
  }
  for (auto& s : streams)
    REQUIRE(sut.log.wait(s->id(), seq_phase::resident));
  for (auto& s : streams)
    REQUIRE(s->next(10s).has_value()); // all three decode at once
  for (auto& s : streams)
    s->cancel();
  for (auto& s : streams)
    REQUIRE(s->collect(10s).has_value());
  for (auto& [id, phase] : sut.log.events())
    CHECK(phase != seq_phase::dumping);
  CHECK(sut.stats().preemptions == 0);
  sut.check_nothing_leaked();
}

namespace {

// Slow transfers (10 ms of wall time each) so a cancel lands inside them.
actors::engine_config slow_transfer_config() {
  auto cfg = test::small_config(scheduler_mode::overlap, 2); // target 1 + 1 spare
  auto& sim = cfg.models[0].backend.sim;
  sim.time_scale = 10;
  sim.step_base_ms = 20;
  sim.step_per_token_ms = 0.1;
  sim.dump_min_ms = sim.dump_max_ms = 100;
  sim.load_min_ms = sim.load_max_ms = 100;
  return cfg;
}

actors::submit_request long_batch(std::size_t prompt_len = 40) {
  actors::submit_request r;
  r.model = "tiny";
  r.priority = priority_class::batch;
  for (std::size_t k = 0; k < prompt_len; ++k)
    r.prompt_tokens.push_back(static_cast<backends::token_id>(97 + k % 26));
  r.sampling.max_tokens = 400;
  return r;
}

actors::submit_request short_interactive(std::uint32_t max_tokens) {
  auto r = long_batch(10);
  r.priority = priority_class::interactive;
  r.sampling.max_tokens = max_tokens;
  return r;
}

void expect_cancelled(actors::token_stream& s) {
  auto c = s.collect(20s);
  REQUIRE(c.has_value());
  CHECK(c->end->reason == end_reason::cancelled);
}

} // namespace

TEST_CASE("scheduler: cancel frees slot and store pages in every phase") {
  SUBCASE("queued") {
    engine_fixture sut{slow_transfer_config()};
    auto a = *sut.engine->submit(long_batch());
    auto b = *sut.engine->submit(short_interactive(40));
    REQUIRE(sut.log.wait(b->id(), seq_phase::resident));
    auto c = *sut.engine->submit(long_batch());
    REQUIRE(sut.log.wait(c->id(), seq_phase::queued));
    c->cancel();
    expect_cancelled(*c);
    CHECK(sut.log.phases(c->id()) == std::vector{seq_phase::queued, seq_phase::ended});
    a->cancel();
    b->cancel();
    expect_cancelled(*a);
    REQUIRE(b->collect(20s).has_value());
    sut.check_nothing_leaked();
  }
  SUBCASE("prefilling") {
    engine_fixture sut{slow_transfer_config()};
    auto req = long_batch(480); // 15 chunks of 32
    req.sampling.max_tokens = 20;
    auto s = *sut.engine->submit(req);
    s->cancel();
    REQUIRE(sut.log.wait(s->id(), seq_phase::resident));
    auto c = s->collect(20s);
    REQUIRE(c.has_value());
    CHECK(c->end->reason == end_reason::cancelled);
    CHECK(c->tokens.empty());
    sut.check_nothing_leaked();
  }
  SUBCASE("decoding") {
    engine_fixture sut{slow_transfer_config()};
    auto s = *sut.engine->submit(long_batch());
    REQUIRE(s->next(20s).has_value());
    s->cancel();
    expect_cancelled(*s);
    sut.check_nothing_leaked();
  }
  SUBCASE("being dumped, parked, being loaded") {
    for (auto phase : {seq_phase::dumping, seq_phase::parked, seq_phase::loading}) {
      CAPTURE(actors::to_string(phase));
      engine_fixture sut{slow_transfer_config()};
      auto a = *sut.engine->submit(long_batch());
      REQUIRE(a->next(20s).has_value());
      // An interactive request takes the spare; `a` is dumped to restore it,
      // and loaded again when the interactive one ends.
      auto b = *sut.engine->submit(short_interactive(phase == seq_phase::loading ? 4 : 60));
      REQUIRE(sut.log.wait(a->id(), phase));
      a->cancel();
      expect_cancelled(*a);
      auto rest = b->collect(20s);
      REQUIRE(rest.has_value());
      CHECK(rest->end->reason == end_reason::length);
      auto phases = sut.log.phases(a->id());
      CHECK(std::find(phases.begin(), phases.end(), phase) != phases.end());
      CHECK(phases.back() == seq_phase::ended);
      sut.check_nothing_leaked();
    }
  }
}

TEST_CASE("scheduler: failed dumps, loads and steps recompute or retry, streams stay exact") {
  auto reqs = workload(12);
  auto solo = solo_results(reqs);
  engine_fixture sut{test::small_config(scheduler_mode::overlap)};
  sut.sim().inject(backends::sim_op::dump, {.fail_nth = 2});
  sut.sim().inject(backends::sim_op::load, {.fail_nth = 2});
  sut.sim().inject(backends::sim_op::step, {.fail_nth = 5});
  auto got = run_all(*sut.engine, reqs);
  check_same_streams(got, solo);
  auto st = sut.stats();
  CHECK(st.dump_failures == 1);
  CHECK(st.load_failures == 1);
  CHECK(st.step_failures == 1);
  CHECK(st.recomputes >= 2);
  sut.check_nothing_leaked();
}

TEST_CASE("scheduler: bad requests get a precise error at submit and disturb nothing") {
  auto reqs = workload(1);
  auto solo = solo_results(reqs);
  engine_fixture sut{test::small_config(scheduler_mode::overlap)};
  auto running = sut.engine->submit(reqs[0]);
  REQUIRE(running.has_value());

  auto bad = reqs[0];
  bad.model = "nope";
  auto r = sut.engine->submit(bad);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == actors::submit_errc::unknown_model);
  CHECK(r.error().message.find("'nope'") != std::string::npos);

  bad = reqs[0];
  bad.sampling.max_tokens = 600;
  r = sut.engine->submit(bad);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code != actors::submit_errc::unknown_model);
  CHECK(r.error().message.find("max_tokens") != std::string::npos);

  bad = reqs[0];
  bad.prompt_tokens.assign(500, 97);
  bad.sampling.max_tokens = 20;
  r = sut.engine->submit(bad);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == actors::submit_errc::too_long);
  CHECK(r.error().message.find("512") != std::string::npos);

  bad = reqs[0];
  bad.sampling.top_p = 1.5f;
  r = sut.engine->submit(bad);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == actors::submit_errc::invalid_request);
  CHECK(r.error().message.find("top_p") != std::string::npos);

  bad = reqs[0];
  bad.prompt_tokens = {97, 9999};
  r = sut.engine->submit(bad);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("vocabulary") != std::string::npos);

  bad = reqs[0];
  bad.prompt_tokens.clear();
  r = sut.engine->submit(bad);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("empty") != std::string::npos);

  auto c = (*running)->collect(30s);
  REQUIRE(c.has_value());
  CHECK(c->tokens == solo[0].tokens);
  CHECK(sut.stats().submitted == 1);
}

TEST_CASE("scheduler: text prompts round-trip through the model's tokenizer") {
  engine_fixture sut{test::small_config(scheduler_mode::overlap)};
  actors::submit_request r;
  r.model = "tiny";
  r.prompt_text = "Hello, edge box.";
  r.sampling.max_tokens = 40;
  auto s = sut.engine->submit(r);
  REQUIRE(s.has_value());
  auto c = (*s)->collect(30s);
  REQUIRE(c.has_value());
  CHECK(c->tokens.size() == 40);
  CHECK(c->end->prompt_tokens == 1 + r.prompt_text.size()); // BOS + bytes
  auto text = sut.engine->loaded_models()[0]->backend->tokens().decode(c->tokens);
  CHECK(std::count(text.begin(), text.end(), ' ') >= 1);
  CHECK(c->end->ttft_ms > 0);
  CHECK(c->end->e2e_ms >= c->end->ttft_ms);
}

TEST_CASE("scheduler: shutdown ends every stream with reason cancelled and frees everything") {
  engine_fixture sut{test::small_config(scheduler_mode::overlap)};
  std::vector<std::shared_ptr<actors::token_stream>> streams;
  for (auto& r : workload(10)) {
    r.sampling.max_tokens = 400 - static_cast<std::uint32_t>(r.prompt_tokens.size());
    streams.push_back(*sut.engine->submit(r));
  }
  REQUIRE(streams[0]->next(10s).has_value());
  sut.engine->shutdown("test shutdown");
  for (auto& s : streams) {
    auto c = s->collect(10s);
    REQUIRE(c.has_value());
    CHECK(c->end->reason == end_reason::cancelled);
    CHECK(c->end->message == "test shutdown");
  }
  auto r = sut.engine->submit(workload(1)[0]);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == actors::submit_errc::shutting_down);
}

TEST_CASE("scheduler: a store of two snapshots evicts and refuses parks, every stream stays exact "
          "and an evicted sequence is no longer parked at once") {
  auto reqs = workload(16);
  auto solo = solo_results(reqs);
  auto cfg = test::small_config(scheduler_mode::overlap);
  cfg.store.max_bytes = 2 * 512 * 1024; // two full-slot snapshots
  cfg.scheduler.fixed_costs = test::profile_costs(); // every preemption a swap, however loaded
  cfg.scheduler.slo_gates_preemption = false; // every preemption that pays its cost, however timed
  engine_fixture sut{cfg};
  auto got = run_all(*sut.engine, reqs);
  check_same_streams(got, solo);
  const auto st = sut.stats();
  const auto store = sut.engine->store_stats();
  CHECK(store.peak_snapshots <= 2);
  CHECK(st.swaps > 0);
  CHECK(store.parked_evictions > 0);
  // Every parked snapshot the store evicted was marked lost when it went,
  // not when its sequence next tried to load it.
  CHECK(st.snapshots_lost == store.parked_evictions);
  CHECK(st.recomputes >= st.snapshots_lost);
  sut.check_nothing_leaked();
}
