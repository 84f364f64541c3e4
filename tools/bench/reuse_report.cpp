#include "tools/bench/reuse_report.hpp"

#include "tools/bench/stats.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvlane::tools::bench {

namespace {

double div_or_nan(double a, double b) {
  return b > 0 ? a / b : std::numeric_limits<double>::quiet_NaN();
}

std::string num(double x, int decimals) {
  return std::isfinite(x) ? fmt::format("{:.{}f}", x, decimals) : std::string{"-"};
}

} // namespace

reuse_summary summarize_reuse(std::string policy, const run_result& r,
                              std::span<const trace_request> requests) {
  reuse_summary s;
  s.policy = std::move(policy);
  std::vector<double> ttft, ttft_reusable;
  std::uint64_t output = 0;
  for (std::size_t i = 0; i < r.requests.size(); ++i) {
    const auto& o = r.requests[i];
    const bool reusable = i < requests.size() && requests[i].seen_prefix_tokens > 0;
    if (i < requests.size()) {
      s.prompt_tokens += o.prompt_tokens;
      s.achievable_reused_tokens += requests[i].seen_prefix_tokens;
    }
    s.reusable_requests += reusable;
    output += o.generated;
    if (!o.completed()) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    if (std::isfinite(o.ttft_ms)) {
      ttft.push_back(o.ttft_ms);
      if (reusable)
        ttft_reusable.push_back(o.ttft_ms);
    }
  }
  const auto held = held_turns_of(r.requests);
  s.held_turns = held.count;
  s.held_ms_mean = held.mean_ms;
  s.throughput_tok_s = div_or_nan(static_cast<double>(output), r.sim_ms() / 1000.0);
  s.ttft_p50_ms = percentile(ttft, 50);
  s.ttft_p99_ms = percentile(ttft, 99);
  s.ttft_p50_reusable_ms = percentile(ttft_reusable, 50);
  s.ttft_p99_reusable_ms = percentile(ttft_reusable, 99);
  const auto& st = r.stats;
  s.reused_tokens = st.reused_tokens;
  s.prefill_tokens = st.prefill_tokens;
  s.loads = st.loads;
  s.dumps = st.dumps;
  s.reuse_hits = st.reuse_hits;
  s.reuse_warm_hits = st.reuse_warm_hits;
  s.peak_store_bytes = r.peak_store_bytes;
  s.retained_evictions = r.retained_evictions;
  s.timed_out = r.timed_out;
  return s;
}

std::string format_reuse(const std::vector<reuse_summary>& runs) {
  std::string out = fmt::format("{:<30}", "reuse policy");
  for (auto& s : runs)
    out += fmt::format("{:>15}", s.policy);
  out += "\n";
  auto row = [&](std::string_view name, auto value) {
    out += fmt::format("{:<30}", name);
    for (auto& s : runs)
      out += fmt::format("{:>15}", value(s));
    out += "\n";
  };
  row("output tokens/s", [](auto& s) { return num(s.throughput_tok_s, 1); });
  row("TTFT p50 ms", [](auto& s) { return num(s.ttft_p50_ms, 0); });
  row("TTFT p99 ms", [](auto& s) { return num(s.ttft_p99_ms, 0); });
  row("TTFT p50 ms, reusable", [](auto& s) { return num(s.ttft_p50_reusable_ms, 0); });
  row("TTFT p99 ms, reusable", [](auto& s) { return num(s.ttft_p99_reusable_ms, 0); });
  row("prompt tokens", [](auto& s) { return std::to_string(s.prompt_tokens); });
  row("reused tokens", [](auto& s) { return std::to_string(s.reused_tokens); });
  row("achievable reused tokens", [](auto& s) { return std::to_string(s.achievable_reused_tokens); });
  row("reused / achievable", [](auto& s) {
    return num(div_or_nan(static_cast<double>(s.reused_tokens),
                          static_cast<double>(s.achievable_reused_tokens)),
               3);
  });
  row("prefill tokens", [](auto& s) { return std::to_string(s.prefill_tokens); });
  row("reuse hits (warm)", [](auto& s) {
    return fmt::format("{} ({})", s.reuse_hits, s.reuse_warm_hits);
  });
  row("loads", [](auto& s) { return std::to_string(s.loads); });
  row("dumps", [](auto& s) { return std::to_string(s.dumps); });
  row("peak store MiB", [](auto& s) {
    return num(static_cast<double>(s.peak_store_bytes) / (1 << 20), 1);
  });
  row("retained evictions", [](auto& s) { return std::to_string(s.retained_evictions); });
  row("turns held (mean ms)", [](auto& s) {
    return fmt::format("{} ({})", s.held_turns, num(s.held_ms_mean, 0));
  });
  row("completed", [](auto& s) { return std::to_string(s.completed); });
  row("failed", [](auto& s) {
    return std::to_string(s.failed) + (s.timed_out ? " (timeout)" : "");
  });
  return out;
}

} // namespace kvlane::tools::bench
