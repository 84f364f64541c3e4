#pragma once

// The bench profile shrunk for tests: 4 slots, short contexts, 500x faster
// than real time. Shared by the in-process and the IPC bench tests.

#include "tools/bench/bench_profile.hpp"

#include <doctest/doctest.h>

namespace kvlane::test {

inline daemon::config fast_bench_profile() {
  auto cfg = tools::bench::builtin_profile();
  REQUIRE(cfg.has_value());
  auto& sim = cfg->models.front().backend.sim;
  sim.slots = 4;
  sim.max_context = 512;
  sim.max_prefill_chunk = 64;
  sim.snapshot_bytes = 512 * 64;
  sim.time_scale = 500;
  cfg->daemon.worker_threads = 2;
  cfg->scheduler.quantum_steps = 4;
  cfg->scheduler.max_step_tokens = 256;
  return std::move(*cfg);
}

} // namespace kvlane::test
