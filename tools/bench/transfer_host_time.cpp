#include "tools/bench/transfer_host_time.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace kvlane::tools::bench {

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

double per(double total, std::uint64_t count) {
  return count > 0 ? total / static_cast<double>(count) : nan;
}

double ms(std::uint64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

std::string num(double x, int decimals) {
  return std::isfinite(x) ? fmt::format("{:.{}f}", x, decimals) : std::string{"-"};
}

std::string mib(std::uint64_t bytes) {
  return fmt::format("{:.1f}", static_cast<double>(bytes) / (1 << 20));
}

} // namespace

transfer_host_time measure_transfer_host_time(const actors::scheduler_stats& st,
                                              const backends::sim_options& sim,
                                              const ipc::store_stats& store,
                                              std::uint64_t peak_committed_bytes) {
  transfer_host_time t;
  t.snapshot_bytes = sim.snapshot_bytes;
  t.dumps = st.dumps;
  t.loads = st.loads;
  t.dump_ms = per(st.dump_ms_total, st.dumps);
  t.load_ms = per(st.load_ms_total, st.loads);
  const bool modeled = sim.extent == backends::snapshot_extent::full_slot && sim.time_scale > 0;
  t.dump_modeled_ms = modeled ? (sim.dump_min_ms + sim.dump_max_ms) / 2 / sim.time_scale : nan;
  t.load_modeled_ms = modeled ? (sim.load_min_ms + sim.load_max_ms) / 2 / sim.time_scale : nan;
  const auto transfers = st.dumps + st.loads;
  t.transfer_ms = per(st.dump_ms_total + st.load_ms_total, transfers);
  t.transfer_modeled_ms =
    per(t.dump_modeled_ms * static_cast<double>(st.dumps)
          + t.load_modeled_ms * static_cast<double>(st.loads),
        transfers);
  t.beyond_model_ms = t.transfer_ms - t.transfer_modeled_ms;
  const auto& h = store.host;
  t.commit_ms = per(ms(h.commit.ns), st.dumps);
  t.seal_ms = per(ms(h.seal.ns), st.dumps);
  t.verify_ms = per(ms(h.verify.ns), st.loads);
  t.punch_ms = per(ms(h.punch.ns), transfers);
  t.committed_on_demand_bytes = h.committed_on_demand_bytes;
  t.punched_bytes = h.punched_bytes;
  t.pool_target_bytes = store.pool_target_bytes;
  t.peak_used_bytes = store.peak_used_bytes;
  t.peak_committed_bytes = peak_committed_bytes;
  return t;
}

std::string format_transfer_host_time(
  std::span<const std::pair<std::string, transfer_host_time>> runs) {
  std::string out = fmt::format("{:<34}", "host time per transfer, wall ms");
  for (auto& [name, t] : runs)
    out += fmt::format("{:>15}", name);
  out += "\n";
  auto row = [&](std::string_view label, auto value) {
    out += fmt::format("{:<34}", label);
    for (auto& [name, t] : runs)
      out += fmt::format("{:>15}", value(t));
    out += "\n";
  };
  row("snapshot MiB", [](auto& t) { return mib(t.snapshot_bytes); });
  row("dumps / loads", [](auto& t) { return fmt::format("{}/{}", t.dumps, t.loads); });
  row("measured per dump / load", [](auto& t) {
    return num(t.dump_ms, 2) + "/" + num(t.load_ms, 2);
  });
  row("modeled per dump / load", [](auto& t) {
    return num(t.dump_modeled_ms, 2) + "/" + num(t.load_modeled_ms, 2);
  });
  row("measured per transfer", [](auto& t) { return num(t.transfer_ms, 2); });
  row("modeled per transfer", [](auto& t) { return num(t.transfer_modeled_ms, 2); });
  row("beyond the model (host work)", [](auto& t) { return num(t.beyond_model_ms, 2); });
  row("store: commit per dump", [](auto& t) { return num(t.commit_ms, 2); });
  row("store: seal per dump", [](auto& t) { return num(t.seal_ms, 2); });
  row("store: verify per load", [](auto& t) { return num(t.verify_ms, 2); });
  row("store: punch per transfer", [](auto& t) { return num(t.punch_ms, 2); });
  row("cold MiB faulted in by commit", [](auto& t) { return mib(t.committed_on_demand_bytes); });
  row("MiB punched", [](auto& t) { return mib(t.punched_bytes); });
  row("warm pool target MiB", [](auto& t) { return mib(t.pool_target_bytes); });
  row("peak store used MiB", [](auto& t) { return mib(t.peak_used_bytes); });
  row("peak store committed MiB", [](auto& t) { return mib(t.peak_committed_bytes); });
  return out;
}

} // namespace kvlane::tools::bench
