// Conversation reuse through the in-process engine: every turn served from
// retained KV (a warm slot, a stored snapshot, a partial prefix) yields
// exactly the tokens a cold prefill of the same prompt yields.
#include "tests/unit/actors/engine_fixture.hpp"

#include <doctest/doctest.h>

#include <thread>

using namespace kvlane;
using namespace std::chrono_literals;
using actors::scheduler_mode;
using backends::token_id;
using test::engine_fixture;

namespace {

actors::engine_config reuse_config(scheduler_mode mode) {
  auto c = test::small_config(mode);
  c.reuse.mode = actors::reuse_mode::store;
  c.reuse.min_prefix_tokens = 16;
  // Load vs recompute is decided on measured costs, and the host side of a
  // load (copy, checksum) is real time that load on the machine or a
  // sanitizer build multiplies: fixed costs keep every stored turn a load.
  c.scheduler.fixed_costs = test::profile_costs();
  return c;
}

std::vector<token_id> letters(std::size_t n, std::size_t salt) {
  std::vector<token_id> t;
  for (std::size_t k = 0; k < n; ++k)
    t.push_back(static_cast<token_id>(97 + (salt * 11 + k * 5) % 26));
  return t;
}

std::vector<token_id> concat(std::vector<token_id> a, const std::vector<token_id>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

actors::submit_request request(std::vector<token_id> prompt, bool seeded, std::uint64_t owner = 1) {
  actors::submit_request r;
  r.model = "tiny";
  r.owner = owner;
  r.prompt_tokens = std::move(prompt);
  r.sampling.max_tokens = 20;
  if (seeded) {
    r.sampling.temperature = 0.8f;
    r.sampling.top_k = 20;
    r.sampling.seed = 77;
  }
  return r;
}

std::vector<token_id> run_one(actors::engine& e, actors::submit_request r) {
  auto s = e.submit(std::move(r));
  REQUIRE(s.has_value());
  auto c = (*s)->collect(30s);
  REQUIRE(c.has_value());
  REQUIRE(c->end.has_value());
  CHECK(c->end->reason == actors::end_reason::length);
  return std::move(c->tokens);
}

/// What a cold prefill of `r` yields: an engine that keeps nothing.
std::vector<token_id> cold(const actors::submit_request& r) {
  engine_fixture f{test::small_config(scheduler_mode::fcfs)};
  return run_one(*f.engine, r);
}

/// Runs `others` at once: enough to need every slot.
void crowd(actors::engine& e, std::size_t n, std::size_t salt) {
  std::vector<std::shared_ptr<actors::token_stream>> streams;
  for (std::size_t i = 0; i < n; ++i) {
    auto s = e.submit(request(letters(40, salt + i), false, 99));
    REQUIRE(s.has_value());
    streams.push_back(*s);
  }
  for (auto& s : streams)
    REQUIRE((*s).collect(30s).has_value());
}

} // namespace

TEST_CASE("reuse: turns served from a warm slot, a stored snapshot and a partial prefix equal "
          "cold prefills, greedy and seeded, in every mode") {
  for (auto mode : {scheduler_mode::fcfs, scheduler_mode::prio_fcfs, scheduler_mode::recompute,
                    scheduler_mode::sync, scheduler_mode::overlap, scheduler_mode::free_transfer}) {
    for (bool seeded : {false, true}) {
      CAPTURE(actors::to_string(mode));
      CAPTURE(seeded);
      engine_fixture sut{reuse_config(mode)};
      auto history = letters(60, 1);
      const auto out1 = run_one(*sut.engine, request(history, seeded));
      history = concat(concat(history, out1), letters(10, 2));

      // Turn 2: its prefix sits warm in the slot turn 1 used.
      const auto turn2 = request(history, seeded);
      CHECK(run_one(*sut.engine, turn2) == cold(turn2));
      auto st = sut.stats();
      CHECK(st.reuse_warm_hits == 1);
      // Turn 1's KV: its prompt and every generated token but the last.
      CHECK(st.reused_tokens == 60 + out1.size() - 1);
      CHECK(st.retained == 1); // turn 2 superseded turn 1

      // Others need every slot: the warm entry is dumped (preemptive modes)
      // or dropped (fcfs, which keeps no spare and dumps nothing).
      crowd(*sut.engine, 4, 10);
      const auto hits_before = sut.stats().reuse_hits;
      const auto loads_before = sut.stats().loads;
      const auto out2 = cold(turn2);
      history = concat(concat(history, out2), letters(8, 3));
      const auto turn3 = request(history, seeded);
      CHECK(run_one(*sut.engine, turn3) == cold(turn3));
      st = sut.stats();
      CAPTURE(st.retained_dumps);
      CAPTURE(st.retained_dropped);
      CAPTURE(st.reuse_recomputed);
      CAPTURE(st.retained_lost);
      if (mode != scheduler_mode::fcfs) {
        CHECK(st.retained_dumps >= 1);
        CHECK(st.reuse_hits == hits_before + 1);
        CHECK(st.loads > loads_before);
      }

      // A branch: shares only part of the retained tokens; rolled back.
      auto branch_prompt = letters(60, 1);
      branch_prompt.insert(branch_prompt.end(), out1.begin(), out1.begin() + 5);
      const auto tail = letters(12, 4);
      branch_prompt.insert(branch_prompt.end(), tail.begin(), tail.end());
      const auto branch = request(branch_prompt, seeded);
      CHECK(run_one(*sut.engine, branch) == cold(branch));
      CHECK(sut.stats().reuse_hits > hits_before + (mode != scheduler_mode::fcfs));
    }
  }
}

TEST_CASE("reuse: another user never reuses a prefix unless the scope is widened") {
  for (auto scope : {actors::reuse_scope::user, actors::reuse_scope::all}) {
    CAPTURE(actors::to_string(scope));
    auto cfg = reuse_config(scheduler_mode::overlap);
    cfg.reuse.scope = scope;
    engine_fixture sut{cfg};
    const auto system_prompt = letters(64, 5);
    run_one(*sut.engine, request(concat(system_prompt, letters(4, 6)), false, 1000));
    const auto other = request(concat(system_prompt, letters(6, 7)), false, 1001);
    CHECK(run_one(*sut.engine, other) == cold(other));
    CHECK(sut.stats().reuse_hits == (scope == actors::reuse_scope::all ? 1u : 0u));
  }
}

TEST_CASE("reuse: a tiny store and injected dump and load faults never change a turn's tokens") {
  auto cfg = reuse_config(scheduler_mode::overlap);
  cfg.store.max_bytes = 3 * 512 * 1024; // three snapshots
  engine_fixture sut{cfg};
  sut.sim().inject(backends::sim_op::dump, {.fail_rate = 0.2});
  sut.sim().inject(backends::sim_op::load, {.fail_rate = 0.2});
  // Six conversations of three turns, interleaved so each turn finds its
  // history warm, stored, evicted or failed.
  std::vector<std::vector<token_id>> histories;
  for (std::size_t c = 0; c < 6; ++c)
    histories.push_back(letters(40 + c, 20 + c));
  for (int turn = 0; turn < 3; ++turn) {
    std::vector<std::shared_ptr<actors::token_stream>> streams;
    std::vector<actors::submit_request> reqs;
    for (std::size_t c = 0; c < histories.size(); ++c) {
      reqs.push_back(request(histories[c], c % 2 == 1, 1));
      auto s = sut.engine->submit(reqs.back());
      REQUIRE(s.has_value());
      streams.push_back(*s);
    }
    for (std::size_t c = 0; c < histories.size(); ++c) {
      CAPTURE(turn);
      CAPTURE(c);
      auto got = streams[c]->collect(30s);
      REQUIRE(got.has_value());
      const auto want = cold(reqs[c]);
      CHECK(got->tokens == want);
      histories[c] = concat(concat(histories[c], want), letters(6, 50 + c + turn));
    }
  }
  // Which turns found their history depends on timing (a loaded machine may
  // see every entry reclaimed and evicted). A turn alone finds its own
  // history warm: two more turns of conversation 0, one after the other.
  const auto hits_before = sut.stats().reuse_hits;
  for (int turn = 3; turn < 5; ++turn) {
    CAPTURE(turn);
    const auto r = request(histories[0], false, 1);
    const auto want = cold(r);
    CHECK(run_one(*sut.engine, r) == want);
    histories[0] = concat(concat(histories[0], want), letters(6, 60 + turn));
  }
  const auto st = sut.stats();
  CHECK(st.reuse_hits > hits_before);
  CHECK(st.failed == 0);
  const auto store = sut.engine->store_stats();
  CHECK(store.used_bytes <= cfg.store.max_bytes);
}

TEST_CASE("reuse: mode off drops every retained entry and frees its slots and store bytes") {
  auto cfg = reuse_config(scheduler_mode::overlap);
  engine_fixture sut{cfg};
  for (std::size_t c = 0; c < 6; ++c)
    run_one(*sut.engine, request(letters(40, 30 + c), false));
  CHECK(sut.stats().retained > 0);
  auto off = cfg.reuse;
  off.mode = actors::reuse_mode::off;
  REQUIRE(sut.engine->update_reuse(off));
  CHECK(sut.stats().retained == 0);
  sut.check_nothing_leaked();
}

namespace {

/// One slot: a request of another user forces the warm entry into the store,
/// and whatever waits for the slot has it only once that dump has ended.
actors::engine_config one_slot_config() {
  auto c = reuse_config(scheduler_mode::overlap);
  c.models[0].backend.sim.slots = 1;
  return c;
}

actors::stream_end run_end(actors::engine& e, actors::submit_request r) {
  auto s = e.submit(std::move(r));
  REQUIRE(s.has_value());
  auto c = (*s)->collect(30s);
  REQUIRE(c.has_value());
  REQUIRE(c->end.has_value());
  return *c->end;
}

} // namespace

TEST_CASE("reuse: a stream's end reports the prefix it reused as cached tokens, warm or loaded") {
  engine_fixture sut{one_slot_config()};
  const auto history = letters(60, 1);
  auto first = request(history, false);
  const auto out1 = run_one(*sut.engine, first);
  // A cold prompt reuses nothing.
  CHECK(run_end(*sut.engine, request(letters(30, 8), false, 2)).cached_tokens == 0);
  // The other user's request needed the only slot: turn 1's KV went to the store.
  REQUIRE(sut.stats().retained_stored == 1);

  const auto turn2 = concat(concat(history, out1), letters(10, 2));
  auto before = sut.stats();
  const auto end2 = run_end(*sut.engine, request(turn2, false));
  auto after = sut.stats();
  CHECK(after.reuse_hits - after.reuse_warm_hits == before.reuse_hits - before.reuse_warm_hits + 1);
  CHECK(end2.cached_tokens == after.reused_tokens - before.reused_tokens);
  CHECK(end2.cached_tokens == 60 + out1.size() - 1); // turn 1's KV: all but its last token
  CHECK(end2.prompt_tokens == turn2.size());

  // The same prompt again while turn 2's KV sits warm: every token but the
  // last (whose logits give the next token) comes from the slot.
  before = after;
  const auto end3 = run_end(*sut.engine, request(turn2, false));
  after = sut.stats();
  CHECK(after.reuse_warm_hits == before.reuse_warm_hits + 1);
  CHECK(end3.cached_tokens == turn2.size() - 1);
  CHECK(end3.cached_tokens == after.reused_tokens - before.reused_tokens);
}

TEST_CASE("reuse: the admin lists retained entries and a drop frees their slots and store bytes") {
  engine_fixture sut{one_slot_config()};
  run_one(*sut.engine, request(letters(40, 1), false, 1000));
  auto ls = sut.engine->list_retained();
  REQUIRE(ls.has_value());
  REQUIRE(ls->size() == 1);
  const auto warm = ls->front();
  CHECK(warm.model == "tiny");
  CHECK(warm.owner == 1000);
  CHECK(warm.tokens == 40 + 20 - 1);
  CHECK(warm.slot == 0);
  CHECK_FALSE(warm.stored);
  CHECK(warm.hits == 0);
  CHECK(warm.bytes > 0);

  // Another user's request takes the slot: the entry moves to the store.
  run_one(*sut.engine, request(letters(40, 2), false, 1001));
  ls = sut.engine->list_retained("tiny");
  REQUIRE(ls.has_value());
  REQUIRE(ls->size() == 2);
  const auto stored = ls->front();
  CHECK(stored.id == warm.id);
  CHECK(stored.stored);
  CHECK(stored.slot == -1);
  CHECK(ls->back().owner == 1001);
  CHECK(ls->back().slot == 0);
  auto st = sut.stats();
  CHECK(st.retained == 2);
  CHECK(st.retained_stored == 1);
  CHECK(st.retained_store_bytes == stored.bytes);
  CHECK(st.retained_warm_bytes == ls->back().bytes);
  CHECK(sut.engine->store_stats().retained_bytes == stored.bytes);

  auto by_id = sut.engine->drop_retained("tiny", {.id = stored.id, .session = {}});
  REQUIRE(by_id.has_value());
  CHECK(by_id->entries == 1);
  CHECK(by_id->snapshots == 1);
  CHECK(by_id->slots == 0);
  CHECK(by_id->tokens == stored.tokens);
  CHECK(by_id->store_bytes == stored.bytes);
  CHECK(sut.engine->store_stats().retained_bytes == 0);
  CHECK(sut.engine->drop_retained("tiny", {.id = stored.id, .session = {}})->entries == 0);

  auto all = sut.engine->drop_retained("tiny", {});
  REQUIRE(all.has_value());
  CHECK(all->entries == 1);
  CHECK(all->slots == 1);
  CHECK(all->snapshots == 0);
  st = sut.stats();
  CHECK(st.retained == 0);
  CHECK(st.retained_admin_dropped == 2);
  CHECK(sut.engine->list_retained()->empty());
  sut.check_nothing_leaked();

  // The freed slot serves the next request.
  run_one(*sut.engine, request(letters(40, 3), false, 1000));
  CHECK_FALSE(sut.engine->list_retained("nope").has_value());
  CHECK_FALSE(sut.engine->drop_retained("nope", {}).has_value());
}

TEST_CASE("reuse: retained KV expires after the idle TTL on a model with nothing else to do") {
  auto cfg = reuse_config(scheduler_mode::overlap);
  cfg.reuse.idle_ttl_s = 1;
  engine_fixture sut{cfg};
  run_one(*sut.engine, request(letters(40, 1), false));
  REQUIRE(sut.stats().retained == 1);
  // No request follows: only the expiry timer can drop the entry. Reading
  // the figures is not a scheduling event (it plans nothing).
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (sut.stats().retained != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  const auto st = sut.stats();
  CHECK(st.retained == 0);
  CHECK(st.retained_expired == 1);
  sut.check_nothing_leaked();
}

TEST_CASE("reuse: a session drop removes only the KV that user's turns of that session left") {
  auto cfg = reuse_config(scheduler_mode::overlap);
  engine_fixture sut{cfg};
  auto turn = [&](std::size_t salt, std::uint64_t user, std::string session) {
    auto r = request(letters(40, salt), false, user);
    r.session_name = std::move(session);
    run_one(*sut.engine, std::move(r));
  };
  turn(1, 1000, "chat");
  turn(2, 1000, "other");
  turn(3, 1001, "chat");
  turn(4, 1000, "");
  auto ls = sut.engine->list_retained();
  REQUIRE(ls.has_value());
  REQUIRE(ls->size() == 4);
  CHECK(ls->at(0).session == "chat");
  CHECK(ls->at(3).session.empty());

  actors::retained_drop_request req;
  req.session = actors::retained_drop_request::session_selector{1000, "chat"};
  auto r = sut.engine->drop_retained("tiny", req);
  REQUIRE(r.has_value());
  CHECK(r->entries == 1);
  CHECK(r->tokens == 40 + 20 - 1);
  ls = sut.engine->list_retained();
  REQUIRE(ls->size() == 3);
  for (const auto& e : *ls)
    CHECK_FALSE((e.owner == 1000 && e.session == "chat"));

  // The app's drop does not wait; a request made after it sees its effect.
  sut.engine->forget_session("tiny", 1001, "chat");
  ls = sut.engine->list_retained();
  REQUIRE(ls->size() == 2);
  CHECK(ls->at(0).session == "other");
  CHECK(ls->at(1).owner == 1000);
  CHECK(sut.stats().retained_admin_dropped == 2);
  REQUIRE(sut.engine->drop_retained("tiny", {})->entries == 2);
  sut.check_nothing_leaked();
}

TEST_CASE("reuse: a warm prefix shared by more queued requests than the scheduler tries one by "
          "one is still taken, and every stream equals its cold prefill") {
  // 80 identical prompts in one burst: when the first ends, its KV is warm
  // and far more than 64 queued sequences share its first block, so the
  // scheduler looks for the hit down the rank order instead.
  engine_fixture sut{reuse_config(scheduler_mode::overlap)};
  auto r = request(letters(40, 5), false);
  r.sampling.max_tokens = 4;
  const auto expected = cold(r);
  std::vector<std::shared_ptr<actors::token_stream>> streams;
  for (int i = 0; i < 80; ++i) {
    auto s = sut.engine->submit(r);
    REQUIRE(s.has_value());
    streams.push_back(*s);
  }
  for (auto& s : streams) {
    auto c = s->collect(60s);
    REQUIRE(c.has_value());
    REQUIRE(c->end.has_value());
    CHECK(c->end->reason == actors::end_reason::length);
    CHECK(c->tokens == expected);
  }
  CHECK(sut.stats().reuse_warm_hits > 0);
}

TEST_CASE("reuse: a mode that keeps no spare slot leaves warm KV in its slot while a free slot "
          "serves the waiting request, and the next turn takes it warm") {
  for (auto mode : {scheduler_mode::fcfs, scheduler_mode::prio_fcfs, scheduler_mode::recompute,
                    scheduler_mode::sync}) {
    CAPTURE(actors::to_string(mode));
    auto cfg = reuse_config(mode);
    cfg.models[0].backend.sim.slots = 2;
    engine_fixture sut{cfg};
    auto history = letters(60, 1);
    const auto out1 = run_one(*sut.engine, request(history, false));
    history = concat(concat(history, out1), letters(10, 2));

    // Another client's long request: the slot turn 1 did not use is free for it.
    auto other = request(letters(40, 30), false, 99);
    other.sampling.max_tokens = 400;
    auto s = sut.engine->submit(std::move(other));
    REQUIRE(s.has_value());
    REQUIRE(sut.log.wait((*s)->id(), actors::seq_phase::resident));
    REQUIRE((*s)->next(10s).has_value());
    auto st = sut.stats();
    CHECK(st.retained_dumps == 0);
    CHECK(st.retained_dropped == 0);

    CHECK(run_one(*sut.engine, request(history, false)).size() == 20);
    CHECK(sut.stats().reuse_warm_hits == 1);
    (*s)->cancel();
    REQUIRE((*s)->collect(10s).has_value());
    sut.check_nothing_leaked();
  }
}
