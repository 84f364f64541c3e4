#include "tools/bench/race_summary.hpp"

#include "tools/bench/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace kvlane::tools::bench {

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

struct target_spec {
  std::string_view workload;
  race_metric metric;
  bool at_least;
  double bound;
  std::string_view label;
};

// The race's targets (docs/benchmarks.md, "Raced against llama-server").
constexpr target_spec specs[] = {
  {"decode", race_metric::decode_tok_s, true, 0.95, "decode tok/s (one stream)"},
  {"prefill", race_metric::prefill_tok_s, true, 0.95, "prefill tok/s (one stream)"},
  {"mooncake", race_metric::output_tok_s, true, 1.0, "output tok/s"},
  {"mooncake", race_metric::ttft_p50_reusable_ms, false, 0.5, "TTFT p50, reusable prefix"},
  {"azure", race_metric::ttft_p99_interactive_ms, false, 0.5, "TTFT p99, interactive"},
  {"mooncake", race_metric::ttft_p99_interactive_ms, false, 0.5, "TTFT p99, interactive"},
};

/// The most requests in flight and conversations live at once: intervals
/// from a request's send (its arrival, or later if it was held for its
/// previous turn) to its end, in wall ms since the run started.
std::pair<std::size_t, std::size_t> concurrency_peaks(const http_run_result& run) {
  auto peak_of = [](std::vector<std::pair<double, double>> spans) {
    std::vector<std::pair<double, int>> edges;
    for (const auto& [a, b] : spans) {
      edges.emplace_back(a, +1);
      edges.emplace_back(b, -1);
    }
    std::sort(edges.begin(), edges.end(), [](const auto& x, const auto& y) {
      return x.first < y.first || (x.first == y.first && x.second < y.second); // ends first
    });
    std::size_t open = 0, peak = 0;
    for (const auto& e : edges) {
      open = e.second > 0 ? open + 1 : open - 1;
      peak = std::max(peak, open);
    }
    return peak;
  };
  std::vector<std::pair<double, double>> requests;
  std::map<std::uint32_t, std::pair<double, double>> conversations;
  for (std::size_t i = 0; i < run.requests.size(); ++i) {
    const auto& o = run.requests[i];
    if (!o.submitted || !o.ended)
      continue;
    const double sent = o.arrival_s * 1000.0 + o.held_ms;
    const double end = std::max(sent, o.end_s * 1000.0);
    requests.emplace_back(sent, end);
    if (i < run.http.size() && run.http[i].conversation) {
      auto [it, fresh] = conversations.try_emplace(*run.http[i].conversation, sent, end);
      if (!fresh)
        it->second = {std::min(it->second.first, sent), std::max(it->second.second, end)};
    }
  }
  std::vector<std::pair<double, double>> live;
  for (const auto& [c, span] : conversations)
    live.push_back(span);
  return {peak_of(std::move(requests)), peak_of(std::move(live))};
}

} // namespace

std::vector<failure_group> group_failures(const http_run_result& run) {
  std::map<std::pair<int, std::string>, std::size_t> groups;
  for (std::size_t i = 0; i < run.requests.size(); ++i) {
    const auto& o = run.requests[i];
    if (o.completed())
      continue;
    const int status = i < run.http.size() ? run.http[i].status : 0;
    std::string message = o.error.empty() ? std::string{"(no message)"} : o.error;
    ++groups[{status, std::move(message)}];
  }
  std::vector<failure_group> out;
  for (auto& [key, count] : groups)
    out.push_back(failure_group{key.first, key.second, count});
  std::stable_sort(out.begin(), out.end(),
                   [](const failure_group& a, const failure_group& b) { return a.count > b.count; });
  return out;
}

side_summary summarize_side(const http_run_result& run) {
  side_summary s;
  s.requests = run.requests.size();
  s.wall_s = run.wall_s;
  std::vector<double> ttft, ttft_reusable, ttft_interactive, decode_rates, prefill_rates;
  for (std::size_t i = 0; i < run.requests.size(); ++i) {
    const auto& o = run.requests[i];
    const http_figures empty;
    const auto& h = i < run.http.size() ? run.http[i] : empty;
    s.interactive += o.interactive;
    s.reusable += h.reusable;
    if (!o.completed()) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.stopped_early += o.reason == actors::end_reason::stop;
    s.output_tokens += h.output_tokens;
    if (std::isfinite(o.ttft_ms)) {
      ttft.push_back(o.ttft_ms);
      if (h.reusable)
        ttft_reusable.push_back(o.ttft_ms);
      if (o.interactive)
        ttft_interactive.push_back(o.ttft_ms);
      const double decode_ms = o.e2e_ms - o.ttft_ms;
      if (h.output_tokens > 1 && decode_ms > 0)
        decode_rates.push_back(static_cast<double>(h.output_tokens - 1) * 1000.0 / decode_ms);
    }
    if (h.prefilled_tokens) {
      ++s.prompt_reports;
      s.prefill_tokens += *h.prefilled_tokens;
      if (std::isfinite(o.e2e_ms) && o.e2e_ms > 0)
        prefill_rates.push_back(static_cast<double>(*h.prefilled_tokens) * 1000.0 / o.e2e_ms);
    }
    s.reused_tokens += h.reused_tokens.value_or(0);
  }
  s.output_tok_s = s.wall_s > 0 && s.completed > 0 ? static_cast<double>(s.output_tokens) / s.wall_s
                                                   : nan;
  s.ttft_p50_ms = percentile(ttft, 50);
  s.ttft_p99_ms = percentile(ttft, 99);
  s.ttft_p50_reusable_ms = percentile(ttft_reusable, 50);
  s.ttft_p99_interactive_ms = percentile(ttft_interactive, 99);
  s.decode_tok_s = percentile(decode_rates, 50);
  s.prefill_tok_s = percentile(prefill_rates, 50);
  s.failures = group_failures(run);
  const auto peaks = concurrency_peaks(run);
  s.peak_in_flight = peaks.first;
  s.peak_live_conversations = peaks.second;
  return s;
}

std::string_view to_string(race_metric m) noexcept {
  switch (m) {
    case race_metric::decode_tok_s: return "decode_tok_s";
    case race_metric::prefill_tok_s: return "prefill_tok_s";
    case race_metric::output_tok_s: return "output_tok_s";
    case race_metric::ttft_p50_reusable_ms: return "ttft_p50_reusable_ms";
    case race_metric::ttft_p99_interactive_ms: return "ttft_p99_interactive_ms";
  }
  return "?";
}

double metric_of(const side_summary& s, race_metric m) noexcept {
  switch (m) {
    case race_metric::decode_tok_s: return s.decode_tok_s;
    case race_metric::prefill_tok_s: return s.prefill_tok_s;
    case race_metric::output_tok_s: return s.output_tok_s;
    case race_metric::ttft_p50_reusable_ms: return s.ttft_p50_reusable_ms;
    case race_metric::ttft_p99_interactive_ms: return s.ttft_p99_interactive_ms;
  }
  return nan;
}

std::vector<race_target> race_targets(const std::vector<race_sides>& workloads) {
  std::vector<race_target> out;
  for (const auto& spec : specs)
    for (const auto& w : workloads) {
      if (w.workload != spec.workload)
        continue;
      race_target t;
      t.workload = w.workload;
      t.metric = spec.metric;
      t.at_least = spec.at_least;
      t.bound = spec.bound;
      t.label = std::string{spec.label};
      t.kvlane = w.kvlane ? metric_of(*w.kvlane, spec.metric) : nan;
      t.llama = w.llama ? metric_of(*w.llama, spec.metric) : nan;
      t.ratio = std::isfinite(t.kvlane) && std::isfinite(t.llama) && t.llama > 0
                  ? t.kvlane / t.llama
                  : nan;
      t.met = std::isfinite(t.ratio) && (t.at_least ? t.ratio >= t.bound : t.ratio <= t.bound);
      out.push_back(std::move(t));
    }
  return out;
}

} // namespace kvlane::tools::bench
