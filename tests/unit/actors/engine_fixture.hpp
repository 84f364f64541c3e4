#pragma once

// Shared set-up for engine and scheduler tests: a small, fast sim model, an
// actor system, an engine, and an observer that records every phase change so
// tests wait on events instead of sleeping.

#include "actors/engine.hpp"
#include "backends/sim_backend.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <doctest/doctest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace kvlane::test {

using namespace std::chrono_literals;

/// A sim model whose step lasts ~0.2 ms of wall time (time_scale 200), with
/// 1 KiB of KV per token so snapshots are cheap to copy.
inline actors::engine_config small_config(actors::scheduler_mode mode, std::uint32_t slots = 4) {
  actors::engine_config c;
  c.scheduler.mode = mode;
  c.scheduler.quantum_steps = 4;
  c.scheduler.levels = 3;
  c.scheduler.spare_slots = 1;
  c.scheduler.max_step_tokens = 256;
  c.scheduler.aging_steps = 64;
  c.store.max_bytes = 64ull << 20;
  c.reuse.mode = actors::reuse_mode::off; // the reuse tests turn it on
  actors::model_config m;
  m.name = "tiny";
  m.backend.kind = "sim";
  m.backend.sim.slots = slots;
  m.backend.sim.max_context = 512;
  m.backend.sim.max_prefill_chunk = 32;
  m.backend.sim.snapshot_bytes = 512 * 1024;
  m.backend.sim.time_scale = 200;
  c.models.push_back(m);
  return c;
}

/// The sim profile's costs at small_config's time_scale (200), given to the
/// cost model instead of measured: swap-or-recompute decisions then do not
/// depend on how loaded the test machine is.
inline actors::cost_figures profile_costs() {
  return {31.0 / 200, 1.7 / 200, 45.0 / 64 / 200, 17.0 / 64 / 200};
}

/// Records (sequence, phase) events from the scheduler's observer.
class phase_log {
public:
  actors::scheduler_observer observer() {
    return [this](std::string_view, actors::seq_id id, actors::seq_phase p) {
      {
        std::lock_guard lock{mutex_};
        events_.emplace_back(id, p);
      }
      cv_.notify_all();
    };
  }

  /// Waits until `id` has entered `phase` (now or before).
  bool wait(actors::seq_id id, actors::seq_phase phase, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock{mutex_};
    return cv_.wait_for(lock, timeout, [&] {
      for (auto& [i, p] : events_)
        if (i == id && p == phase)
          return true;
      return false;
    });
  }

  /// Phases of `id` in order.
  std::vector<actors::seq_phase> phases(actors::seq_id id) const {
    std::lock_guard lock{mutex_};
    std::vector<actors::seq_phase> out;
    for (auto& [i, p] : events_)
      if (i == id)
        out.push_back(p);
    return out;
  }

  /// All events, in order.
  std::vector<std::pair<actors::seq_id, actors::seq_phase>> events() const {
    std::lock_guard lock{mutex_};
    return events_;
  }

private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::pair<actors::seq_id, actors::seq_phase>> events_;
};

/// An actor system plus an engine on `cfg`.
class engine_fixture {
public:
  /// Two CAF worker threads, as on the smallest box the daemon targets.
  static constexpr std::uint32_t worker_threads = 2;

  explicit engine_fixture(const actors::engine_config& cfg, actors::completion_hook on_complete = {},
                          actors::failure_hook on_failure = {})
    : system_(configure(caf_cfg_, worker_threads)) {
    auto e = actors::engine::create(system_, cfg, log.observer(), std::move(on_complete),
                                    std::move(on_failure));
    REQUIRE_MESSAGE(e.has_value(), (e ? std::string{} : e.error()));
    engine = std::move(*e);
  }
  ~engine_fixture() { engine.reset(); }

  backends::sim_backend& sim(std::string_view model = "tiny") {
    auto m = engine->find_model(model);
    REQUIRE(m != nullptr);
    auto* s = dynamic_cast<backends::sim_backend*>(m->backend.get());
    REQUIRE(s != nullptr);
    return *s;
  }

  actors::scheduler_stats stats(std::string_view model = "tiny") {
    auto s = engine->stats(model);
    REQUIRE(s.has_value());
    return *s;
  }

  /// Asserts that nothing is held: no slot, no snapshot, no store bytes
  /// beyond the warm pool (freed bytes the store keeps committed for reuse).
  void check_nothing_leaked(std::string_view model = "tiny") {
    auto st = stats(model);
    CHECK(st.slots_busy == 0);
    CHECK(st.resident + st.parked + st.loading + st.dumping + st.queued == 0);
    // A retained entry dropped while its dump runs frees its snapshot when the dump ends
    // (docs/scheduling.md); nothing signals that end to a caller, so it is polled for, and
    // a snapshot that is still held after 5 s fails below.
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (engine->store_stats().snapshots != 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(5ms);
    auto ss = engine->store_stats();
    CHECK(ss.snapshots == 0);
    CHECK(ss.used_bytes == 0);
    CHECK(ss.pool_bytes <= ss.pool_target_bytes);
    CHECK(ss.committed_bytes < ss.pool_bytes + (1u << 20));
  }

  phase_log log;
  std::unique_ptr<actors::engine> engine;

private:
  static caf::actor_system_config& configure(caf::actor_system_config& c, std::uint32_t threads) {
    c.set("scheduler.max-threads", static_cast<size_t>(threads));
    return c;
  }

  caf::actor_system_config caf_cfg_; // outlives system_, which refers to it
  caf::actor_system system_;
};

} // namespace kvlane::test
