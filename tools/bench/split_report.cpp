#include "tools/bench/split_report.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>
#include <set>

namespace kvlane::tools::bench {

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

double ratio_of(double a, double b) {
  return std::isfinite(a) && std::isfinite(b) && b > 0 ? a / b : nan;
}

std::string num(double x, int decimals) {
  return std::isfinite(x) ? fmt::format("{:.{}f}", x, decimals) : std::string{"-"};
}

/// The counters summarize_reuse reads, summed over the models.
actors::scheduler_stats sum_reuse_counters(const std::vector<model_run>& models) {
  actors::scheduler_stats sum;
  for (const auto& m : models) {
    sum.reused_tokens += m.stats.reused_tokens;
    sum.prefill_tokens += m.stats.prefill_tokens;
    sum.loads += m.stats.loads;
    sum.dumps += m.stats.dumps;
    sum.reuse_hits += m.stats.reuse_hits;
    sum.reuse_warm_hits += m.stats.reuse_warm_hits;
  }
  return sum;
}

/// `r` reduced to the requests of `model` (nullopt: all of them) with the
/// given counters and peaks, for summarize_reuse.
struct projection {
  run_result run;
  std::vector<trace_request> requests;
};

projection project(const run_result& r, std::span<const trace_request> requests,
                   std::optional<std::uint32_t> model) {
  projection p;
  p.run.time_scale = r.time_scale;
  p.run.wall_ms = r.wall_ms;
  p.run.timed_out = r.timed_out;
  for (std::size_t i = 0; i < r.requests.size() && i < requests.size(); ++i)
    if (!model || requests[i].model == *model) {
      p.run.requests.push_back(r.requests[i]);
      p.requests.push_back(requests[i]);
    }
  return p;
}

} // namespace

split_summary summarize_split(store_split split, const run_result& r,
                              std::span<const trace_request> requests,
                              const daemon::config& cfg, const work_model& wm) {
  split_summary s;
  s.split = split;
  for (std::uint32_t m = 0; m < r.models.size(); ++m) {
    const auto& mr = r.models[m];
    auto p = project(r, requests, m);
    p.run.stats = mr.stats;
    p.run.peak_store_bytes = mr.peak_store_bytes;
    p.run.retained_evictions = mr.retained_evictions;
    split_model out;
    out.figures = summarize_reuse(mr.name, p.run, p.requests);
    out.requests = p.requests.size();
    std::set<std::uint32_t> conversations;
    for (const auto& q : p.requests)
      conversations.insert(q.conversation);
    out.conversations = conversations.size();
    out.offered_load = offered_load(p.requests, wm).value_or(nan);
    for (const auto& c : cfg.models)
      if (c.name == mr.name) {
        out.floor_bytes = c.store_floor_bytes;
        out.cap_bytes = c.store_cap_bytes;
      }
    s.models.push_back(std::move(out));
  }
  auto all = project(r, requests, std::nullopt);
  all.run.stats = sum_reuse_counters(r.models);
  all.run.peak_store_bytes = r.peak_store_bytes;
  all.run.retained_evictions = r.retained_evictions;
  s.total = summarize_reuse("both", all.run, all.requests);
  return s;
}

split_ratios shared_vs_static(const split_summary& shared, const split_summary& fixed) {
  const auto& a = shared.total;
  const auto& b = fixed.total;
  split_ratios q;
  q.reused_tokens =
    ratio_of(static_cast<double>(a.reused_tokens), static_cast<double>(b.reused_tokens));
  q.ttft_p50_reusable = ratio_of(a.ttft_p50_reusable_ms, b.ttft_p50_reusable_ms);
  q.ttft_p50 = ratio_of(a.ttft_p50_ms, b.ttft_p50_ms);
  q.throughput = ratio_of(a.throughput_tok_s, b.throughput_tok_s);
  return q;
}

std::string format_split(const std::vector<split_summary>& runs) {
  struct column {
    const split_summary* run;
    const split_model* model; ///< null: both models
    std::string title;
  };
  std::vector<column> cols;
  for (const auto& s : runs) {
    for (const auto& m : s.models)
      cols.push_back({&s, &m, fmt::format("{} {}", to_string(s.split), m.figures.policy)});
    cols.push_back({&s, nullptr, fmt::format("{} both", to_string(s.split))});
  }
  const int width = 22;
  std::string out = fmt::format("{:<34}", "store split");
  for (const auto& c : cols)
    out += fmt::format("{:>{}}", c.title, width);
  out += "\n";
  auto row = [&](std::string_view label, auto value) {
    out += fmt::format("{:<34}", label);
    for (const auto& c : cols)
      out += fmt::format("{:>{}}", value(c), width);
    out += "\n";
  };
  auto fig = [](const column& c) -> const reuse_summary& {
    return c.model ? c.model->figures : c.run->total;
  };
  auto mib = [](std::uint64_t b) { return num(static_cast<double>(b) / (1 << 20), 1); };
  row("store floor / cap MiB", [&](const column& c) {
    if (!c.model)
      return std::string{"-"};
    return c.model->floor_bytes || c.model->cap_bytes
             ? mib(c.model->floor_bytes) + " / " + mib(c.model->cap_bytes)
             : std::string{"none"};
  });
  row("requests (conversations)", [&](const column& c) {
    if (!c.model) {
      std::size_t n = 0, conv = 0;
      for (const auto& m : c.run->models) {
        n += m.requests;
        conv += m.conversations;
      }
      return fmt::format("{} ({})", n, conv);
    }
    return fmt::format("{} ({})", c.model->requests, c.model->conversations);
  });
  row("offered load (one model)", [&](const column& c) {
    return c.model ? num(c.model->offered_load, 3) : std::string{"-"};
  });
  row("output tokens/s", [&](const column& c) { return num(fig(c).throughput_tok_s, 1); });
  row("TTFT p50 / p99 ms", [&](const column& c) {
    return num(fig(c).ttft_p50_ms, 0) + " / " + num(fig(c).ttft_p99_ms, 0);
  });
  row("TTFT p50 / p99 ms, reusable", [&](const column& c) {
    return num(fig(c).ttft_p50_reusable_ms, 0) + " / " + num(fig(c).ttft_p99_reusable_ms, 0);
  });
  row("reused / achievable tokens", [&](const column& c) {
    return fmt::format("{} / {}", fig(c).reused_tokens, fig(c).achievable_reused_tokens);
  });
  row("reused / achievable", [&](const column& c) {
    return num(ratio_of(static_cast<double>(fig(c).reused_tokens),
                        static_cast<double>(fig(c).achievable_reused_tokens)),
               3);
  });
  row("prefill tokens", [&](const column& c) { return std::to_string(fig(c).prefill_tokens); });
  row("reuse hits (warm)", [&](const column& c) {
    return fmt::format("{} ({})", fig(c).reuse_hits, fig(c).reuse_warm_hits);
  });
  row("loads / dumps", [&](const column& c) {
    return fmt::format("{} / {}", fig(c).loads, fig(c).dumps);
  });
  row("retained evictions", [&](const column& c) { return std::to_string(fig(c).retained_evictions); });
  row("peak store MiB", [&](const column& c) { return mib(fig(c).peak_store_bytes); });
  row("turns held (mean ms)", [&](const column& c) {
    return fmt::format("{} ({})", fig(c).held_turns, num(fig(c).held_ms_mean, 0));
  });
  row("completed / failed", [&](const column& c) {
    return fmt::format("{} / {}{}", fig(c).completed, fig(c).failed,
                       fig(c).timed_out ? " (timeout)" : "");
  });

  const split_summary* shared = nullptr;
  const split_summary* fixed = nullptr;
  for (const auto& s : runs)
    (s.split == store_split::shared ? shared : fixed) = &s;
  if (shared && fixed) {
    const auto q = shared_vs_static(*shared, *fixed);
    out += fmt::format("\nshared / static, both models: reused tokens {}, TTFT p50 reusable {}, "
                       "TTFT p50 {}, output tokens/s {}\n",
                       num(q.reused_tokens, 3), num(q.ttft_p50_reusable, 3), num(q.ttft_p50, 3),
                       num(q.throughput, 3));
  }
  return out;
}

} // namespace kvlane::tools::bench
