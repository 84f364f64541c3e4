// A session delivers its stream and, once the stream ended, leaves nothing
// behind in the scheduler it watched (CAF 0.17 keeps a monitor whose observer
// quit, and with it the observer's memory, until the monitored actor dies).
// Runs on CAF's deterministic test coordinator: every message and every
// actor's termination is processed by sched.run() on this thread.
#include "actors/session.hpp"

#include <caf/actor_control_block.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>

#include <doctest/doctest.h>

#include <optional>
#include <vector>

using namespace kvlane;
using actors::end_reason;
using actors::token_id;

namespace {

struct recording_sink : actors::stream_sink {
  std::vector<token_id> tokens;
  std::optional<actors::stream_end> end;
  void on_tokens(std::span<const token_id> t) override { tokens.insert(tokens.end(), t.begin(), t.end()); }
  void on_end(const actors::stream_end& e) override { end = e; }
};

struct session_fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys{configure(cfg)};
  caf::scheduler::test_coordinator& sched{dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler())};
  /// Stands in for a model's scheduler: lives longer than every session.
  /// (Spawned with an unused argument: for a spawn function given no arguments CAF 0.17
  /// dereferences a null argument tuple, which UBSan reports.)
  caf::actor scheduler = sys.spawn([](int) -> caf::behavior { return {[](int) {}}; }, 0);

  ~session_fixture() {
    caf::anon_send_exit(scheduler, caf::exit_reason::user_shutdown);
    scheduler = nullptr;
    sched.run();
  }

  static caf::actor_system_config& configure(caf::actor_system_config& c) {
    c.set("scheduler.policy", caf::atom("testing"));
    return c;
  }
};

} // namespace

TEST_CASE("session: an ended session is freed: its scheduler keeps no reference to it") {
  session_fixture f;
  auto sink = std::make_shared<recording_sink>();
  auto sut = actors::spawn_session(f.sys, sink, std::chrono::steady_clock::now(),
                                   actors::session_owner{"m", f.scheduler, nullptr});
  f.sched.run();
  caf::anon_send(sut, actors::tokens_atom::value, std::vector<token_id>{7, 8, 9});
  actors::stream_end end;
  end.generated_tokens = 3;
  caf::anon_send(sut, actors::end_atom::value, end);
  f.sched.run();
  REQUIRE(sink->end.has_value());
  CHECK(sink->end->reason == end_reason::length);
  CHECK(sink->tokens == std::vector<token_id>{7, 8, 9});

  // Watch the session through a weak handle of our own, then drop the strong one.
  const caf::actor_addr watch = sut.address();
  auto* ctrl = caf::actor_cast<caf::actor_control_block*>(watch);
  sut = nullptr;
  f.sched.run();
  CHECK(ctrl->strong_refs.load() == 0);
  // Only `watch` still refers to it; a monitor left in the live scheduler would
  // be a second weak reference, keeping the session's memory as long as the model runs.
  CHECK(ctrl->weak_refs.load() == 1);
}

TEST_CASE("session: a session whose scheduler stops ends its stream with cancelled and quits") {
  session_fixture f;
  auto sink = std::make_shared<recording_sink>();
  auto sut = actors::spawn_session(f.sys, sink, std::chrono::steady_clock::now(),
                                   actors::session_owner{"m", f.scheduler, nullptr});
  f.sched.run();
  caf::anon_send_exit(f.scheduler, caf::exit_reason::user_shutdown);
  f.sched.run();
  REQUIRE(sink->end.has_value());
  CHECK(sink->end->reason == end_reason::cancelled);
  CHECK(sink->end->message == "model 'm' stopped");
  const caf::actor_addr watch = sut.address();
  auto* ctrl = caf::actor_cast<caf::actor_control_block*>(watch);
  sut = nullptr;
  f.sched.run();
  CHECK(ctrl->strong_refs.load() == 0);
  CHECK(ctrl->weak_refs.load() == 1);
}
