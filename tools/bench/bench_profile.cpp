#include "tools/bench/bench_profile.hpp"

#include "backends/factory.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kvlane::tools::bench {

namespace {

// The built-in profile: the default ARIES timing of the sim (31 ms/step +
// 1.7 ms/token, dump 30-60 ms, load 16-18 ms, 16 slots, 4096 context, 128
// chunk) with small real snapshots, so that host memory copies (which do not
// shrink with time_scale) stay negligible next to the modeled transfer times.
constexpr std::string_view profile_text = R"(# kvlane-bench built-in profile (see docs/benchmarks.md)
version = 1

[daemon]
worker_threads = 0          # one per core
log_level = "warn"

[[model]]
name = "llama-3.2-1b"
backend = "sim"

[model.sim]
slots = 16
max_context = 4096
max_prefill_chunk = 128
# 64 bytes per token (256 KiB per slot) instead of 16 KiB (64 MiB): the sim
# really copies these bytes on every dump and load, and that copy does not
# shrink with time_scale. The modeled transfer times below stay those of the
# 64 MiB snapshots of the real device.
snapshot_bytes = "256KiB"
snapshot = "full"
step_base_ms = 31.0
step_per_token_ms = 1.7
dump_min_ms = 30.0
dump_max_ms = 60.0
load_min_ms = 16.0
load_max_ms = 18.0
time_scale = 25.0           # 25 simulated ms per wall ms
overlap = "full"
seed = 1
eos_rate = 0.0

[scheduler]
mode = "overlap"            # replaced per run
quantum_tokens = 64
levels = 4
spare_slots = 0
max_step_tokens = 512
batch_prefill_yields = true
aging_steps = 2048
ewma_alpha = 0.2

[store]
# 8 GiB scaled like the snapshots (x 1/256): room for the same 128 snapshots.
max_bytes = "32MiB"

[reuse]
# The mode comparisons measure scheduling alone: the CSV traces' requests are
# unrelated, so retained KV would only add dumps. --reuse sets it per policy.
mode = "off"
)";

// [store] max_bytes as the configuration accepts it (docs/config.md).
constexpr std::uint64_t min_store_bytes = 1ull << 20, max_store_bytes = 16ull << 40;

} // namespace

std::string_view builtin_profile_toml() noexcept {
  return profile_text;
}

expected<daemon::config, std::string> builtin_profile() {
  auto c = daemon::parse(profile_text, "<built-in bench profile>");
  if (!c)
    return unexpected(c.error().message);
  return std::move(*c);
}

expected<bench_setup, bench_failure> load_setup(const bench_options& o) {
  auto fail = [](int code, std::string msg) { return unexpected(bench_failure{code, std::move(msg)}); };
  bench_setup s;
  if (o.config_path.empty()) {
    auto c = builtin_profile();
    if (!c)
      return fail(exit_code::other, "built-in profile: " + c.error());
    s.cfg = std::move(*c);
    s.profile_source = "built-in bench profile";
    s.profile_toml = std::string{profile_text};
  } else {
    auto c = daemon::load(o.config_path);
    if (!c)
      return fail(exit_code::config, "invalid configuration: " + c.error().message);
    s.cfg = std::move(*c);
    s.profile_source = o.config_path;
  }
  auto m = o.model.empty() ? s.cfg.models.begin()
                           : std::find_if(s.cfg.models.begin(), s.cfg.models.end(),
                                          [&](const auto& x) { return x.name == o.model; });
  if (m == s.cfg.models.end())
    return fail(exit_code::usage,
                fmt::format("no model named '{}' in {}", o.model, s.profile_source));
  // Only the driven model runs: the others would share the store and the CPU.
  s.cfg.models = {*m};
  auto& model = s.cfg.models.front();
  s.sim = model.backend.kind == "sim";
  if ((o.time_scale || o.sim_overlap || o.snapshot_bytes || !o.devices.empty()) && !s.sim)
    return fail(exit_code::usage, fmt::format("--time-scale, --sim-overlap, --snapshot-bytes and "
                                              "--devices apply to the sim; model '{}' uses "
                                              "backend '{}'",
                                              model.name, model.backend.kind));
  if (o.time_scale)
    model.backend.sim.time_scale = *o.time_scale;
  if (o.sim_overlap)
    model.backend.sim.overlap = *o.sim_overlap;
  if (o.snapshot_bytes) // the backend checks it below (a multiple of max_context, ...)
    model.backend.sim.snapshot_bytes = *o.snapshot_bytes;
  if (o.store_bytes) {
    if (*o.store_bytes < min_store_bytes || *o.store_bytes > max_store_bytes)
      return fail(exit_code::usage, "--store-bytes must be between 1MiB and 16TiB");
    s.cfg.store.max_bytes = *o.store_bytes;
  }
  if (o.warm_pool_bytes)
    s.cfg.store.warm_pool_bytes = *o.warm_pool_bytes;
  if (o.prefault_warm_pool)
    s.cfg.store.prefault_warm_pool = true;
  if (o.warm_pool_bytes && *o.warm_pool_bytes > s.cfg.store.max_bytes)
    return fail(exit_code::usage,
                fmt::format("--warm-pool-bytes ({} bytes) is larger than the store ({} bytes)",
                            *o.warm_pool_bytes, s.cfg.store.max_bytes));
  std::uint64_t floors = 0;
  for (const auto& x : s.cfg.models)
    floors += x.store_floor_bytes;
  if (floors > s.cfg.store.max_bytes)
    return fail(exit_code::usage,
                fmt::format("model '{}': store_floor_bytes ({} bytes) exceeds the store ({} bytes)",
                            model.name, floors, s.cfg.store.max_bytes));
  if (!s.sim && std::find(o.modes.begin(), o.modes.end(), actors::scheduler_mode::free_transfer)
                  != o.modes.end())
    return fail(exit_code::usage, fmt::format("mode 'free-transfer' models free transfers and needs "
                                              "the sim; model '{}' uses backend '{}': pass --modes "
                                              "fcfs,prio-fcfs,recompute,sync,overlap",
                                              model.name, model.backend.kind));
  s.time_scale = s.sim ? model.backend.sim.time_scale : 1.0;
  // The engine serves for the objectives goodput is counted against: the bench's (simulated
  // ms) in the engine's clock (wall ms), whatever [scheduler.slo] the profile has.
  const auto wall = [&](const slo_bound& b) {
    return actors::slo_bound{b.ttft_ms / s.time_scale, b.tpot_ms / s.time_scale};
  };
  s.cfg.scheduler.slo = {wall(o.slo.interactive), wall(o.slo.batch)};
  auto b = backends::make_backend(model.name, model.backend);
  if (!b)
    return fail(exit_code::config, fmt::format("model '{}': backend failed to load: {}",
                                               model.name, b.error().message));
  s.info = (*b)->info();
  return s;
}

} // namespace kvlane::tools::bench
