// The engine's operations surface: listing, cancel by id, draining, the
// completion hook.
#include "tests/unit/actors/engine_fixture.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <caf/send.hpp>
#include <condition_variable>
#include <mutex>

using namespace kvlane;
using namespace std::chrono_literals;
using actors::end_reason;
using actors::seq_phase;
using actors::scheduler_mode;
using test::engine_fixture;

namespace {

actors::submit_request request(std::string client, std::uint32_t max_tokens) {
  actors::submit_request r;
  r.model = "tiny";
  r.client = std::move(client);
  r.prompt_tokens = {97, 98, 99, 100, 101};
  r.sampling.max_tokens = max_tokens;
  return r;
}

} // namespace

TEST_CASE("engine: list shows every live sequence with its client, phase and counts") {
  engine_fixture sut{test::small_config(scheduler_mode::overlap)};
  auto a = *sut.engine->submit(request("alice", 400));
  auto b = *sut.engine->submit(request("bob", 400));
  REQUIRE(a->next(10s).has_value());
  auto l = sut.engine->list();
  REQUIRE(l.size() == 2);
  CHECK(l[0].id == a->id());
  CHECK(l[0].client == "alice");
  CHECK(l[1].client == "bob");
  CHECK(l[0].model == "tiny");
  CHECK(l[0].tokens_in == 5);
  CHECK(l[0].tokens_out >= 1);
  CHECK(l[0].phase == seq_phase::resident);
  CHECK(l[0].age_ms > 0);
  a->cancel();
  b->cancel();
  REQUIRE(a->collect(10s).has_value());
  REQUIRE(b->collect(10s).has_value());
  CHECK(sut.engine->list().empty());
}

TEST_CASE("engine: cancel by id ends the stream, an unknown id is reported") {
  engine_fixture sut{test::small_config(scheduler_mode::overlap)};
  auto a = *sut.engine->submit(request("alice", 400));
  REQUIRE(a->next(10s).has_value());
  CHECK(sut.engine->cancel(a->id()));
  auto c = a->collect(10s);
  REQUIRE(c.has_value());
  CHECK(c->end->reason == end_reason::cancelled);
  CHECK_FALSE(sut.engine->cancel(a->id()));
  CHECK_FALSE(sut.engine->cancel(987654));
}

TEST_CASE("engine: while draining, new requests are refused and running ones finish") {
  engine_fixture sut{test::small_config(scheduler_mode::overlap)};
  auto a = *sut.engine->submit(request("alice", 30));
  sut.engine->set_admitting(false);
  auto refused = sut.engine->submit(request("bob", 30));
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == actors::submit_errc::draining);
  auto c = a->collect(10s);
  REQUIRE(c.has_value());
  CHECK(c->end->reason == end_reason::length);
  CHECK(c->tokens.size() == 30);
  sut.engine->set_admitting(true);
  CHECK(sut.engine->submit(request("bob", 3)).has_value());
}

TEST_CASE("engine: the completion hook sees every request once, with its outcome and timings") {
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::tuple<std::string, actors::seq_id, end_reason, std::uint32_t, double>> seen;
  engine_fixture sut{test::small_config(scheduler_mode::overlap),
                     [&](const actors::completion& c) {
                       {
                         std::lock_guard lock{m};
                         seen.emplace_back(std::string{c.client}, c.id, c.end->reason,
                                           c.end->generated_tokens, c.end->e2e_ms);
                       }
                       cv.notify_all();
                     }};
  auto a = *sut.engine->submit(request("alice", 12));
  auto b = *sut.engine->submit(request("bob", 400));
  REQUIRE(b->next(10s).has_value());
  b->cancel();
  REQUIRE(a->collect(10s).has_value());
  REQUIRE(b->collect(10s).has_value());
  std::unique_lock lock{m};
  REQUIRE(cv.wait_for(lock, 10s, [&] { return seen.size() >= 2; }));
  CHECK(seen.size() == 2);
  std::sort(seen.begin(), seen.end(),
            [](auto& x, auto& y) { return std::get<1>(x) < std::get<1>(y); });
  CHECK(std::get<0>(seen[0]) == "alice");
  CHECK(std::get<2>(seen[0]) == end_reason::length);
  CHECK(std::get<3>(seen[0]) == 12);
  CHECK(std::get<4>(seen[0]) > 0);
  CHECK(std::get<0>(seen[1]) == "bob");
  CHECK(std::get<2>(seen[1]) == end_reason::cancelled);
}

TEST_CASE("engine: a policy update applies to running schedulers") {
  auto cfg = test::small_config(scheduler_mode::overlap);
  engine_fixture sut{cfg};
  auto run = [&] {
    std::vector<std::shared_ptr<actors::token_stream>> streams;
    for (int i = 0; i < 10; ++i)
      streams.push_back(*sut.engine->submit(request("c" + std::to_string(i % 3), 40)));
    for (auto& s : streams)
      REQUIRE(s->collect(30s).has_value());
    return sut.stats().preemptions;
  };
  auto before = run();
  CHECK(before > 0); // quantum 4: sequences take turns
  auto p = cfg.scheduler;
  p.quantum_steps = 100000; // nobody's turn ends: no preemption among equals
  REQUIRE(sut.engine->update_policy(p));
  CHECK(run() == before);
}

TEST_CASE("engine: a backend call running past the limit is reported as stuck") {
  auto cfg = test::small_config(scheduler_mode::overlap);
  cfg.models[0].backend.sim.time_scale = 1;
  cfg.models[0].backend.sim.step_base_ms = 1500; // one step lasts 1.5 s of wall time
  engine_fixture sut{cfg};
  CHECK(sut.engine->stuck_call(0ns).empty()); // idle lanes are never stuck
  auto s = *sut.engine->submit(request("alice", 1));
  std::string stuck;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (stuck.empty() && std::chrono::steady_clock::now() < deadline) {
    stuck = sut.engine->stuck_call(1ns);
    std::this_thread::yield();
  }
  CHECK(stuck.find("compute lane") != std::string::npos);
  CHECK(stuck.find("'tiny'") != std::string::npos);
  CHECK(sut.engine->stuck_call(1h).empty());
  s->cancel();
  REQUIRE(s->collect(10s).has_value());
}

TEST_CASE("engine: a scheduler that throws ends its model's streams with an error, its model refuses submits, other models serve on") {
  auto cfg = test::small_config(scheduler_mode::overlap);
  auto other = cfg.models.front();
  other.name = "other";
  cfg.models.push_back(other);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<std::string, std::string>> failures;
  engine_fixture sut{cfg, {}, [&](std::string_view model, std::string_view why) {
                       {
                         std::lock_guard lock{mu};
                         failures.emplace_back(model, why);
                       }
                       cv.notify_all();
                     }};
  auto a = *sut.engine->submit(request("alice", 400));
  auto b = *sut.engine->submit(request("bob", 400));
  auto other_request = request("carol", 40);
  other_request.model = "other";
  auto c = *sut.engine->submit(other_request);
  REQUIRE(a->next(10s).has_value());
  REQUIRE(b->next(10s).has_value());

  caf::anon_send(sut.engine->find_model("tiny")->scheduler, actors::crash_atom::value,
                 std::string{"injected scheduler fault"});

  for (auto* s : {&a, &b}) {
    auto all = (*s)->collect(10s);
    REQUIRE(all.has_value());
    REQUIRE(all->end.has_value());
    CHECK(all->end->reason == end_reason::error);
    CAPTURE(all->end->message);
    CHECK(all->end->message.find("model 'tiny' failed") != std::string::npos);
    CHECK(all->end->message.find("injected scheduler fault") != std::string::npos);
  }
  // An app that has read the error end and submits again at once is refused
  // (the failure hook below may not have run yet).
  auto early = sut.engine->submit(request("erin", 10));
  REQUIRE_FALSE(early.has_value());
  CHECK(early.error().code == actors::submit_errc::model_failed);
  {
    std::unique_lock lock{mu};
    REQUIRE(cv.wait_for(lock, 10s, [&] { return !failures.empty(); }));
    CHECK(failures.size() == 1);
    CHECK(failures[0].first == "tiny");
    CHECK(failures[0].second.find("injected scheduler fault") != std::string::npos);
  }
  auto refused = sut.engine->submit(request("dave", 10));
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == actors::submit_errc::model_failed);
  CAPTURE(refused.error().message);
  CHECK(refused.error().message.find("model 'tiny' failed and accepts no requests") != std::string::npos);
  CHECK(refused.error().message.find("injected scheduler fault") != std::string::npos);

  const auto listed = sut.engine->failures();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].model == "tiny");
  auto st = sut.engine->stats("tiny");
  REQUIRE(st.has_value());
  CHECK(st->failed_model);
  CHECK(st->failure.find("injected scheduler fault") != std::string::npos);
  CHECK_FALSE(sut.stats("other").failed_model);

  auto done = c->collect(20s);
  REQUIRE(done.has_value());
  REQUIRE(done->end.has_value());
  CHECK(done->end->reason == end_reason::length);
  CHECK(done->tokens.size() == 40);
}
