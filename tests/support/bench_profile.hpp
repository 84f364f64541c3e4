#pragma once

// The bench profile shrunk for tests: 4 slots, short contexts, 500x faster
// than real time, and a small synthetic workload that fits it. Shared by the
// in-process and the IPC bench tests.

#include "tools/bench/bench_profile.hpp"
#include "tools/bench/trace.hpp"
#include "tools/bench/workload.hpp"

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

/// `n` synthetic requests at 20/s, ~100 prompt and ~20 output tokens, fitted
/// to fast_bench_profile()'s context.
inline std::vector<tools::bench::trace_request> small_synthetic(std::uint32_t n, std::uint64_t seed) {
  tools::bench::synthetic_options so;
  so.requests = n;
  so.rate_per_s = 20;
  so.prompt_mean = 100;
  so.output_mean = 20;
  auto reqs = tools::bench::synthetic(so, seed);
  tools::bench::clamp_to_context(reqs, 512);
  return reqs;
}

} // namespace kvlane::test
