#include "tools/bench/race_workloads.hpp"

#include "tools/bench/bench_runner.hpp"
#include "tools/bench/conversation_workload.hpp"
#include "tools/bench/mooncake_trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

namespace kvlane::tools::bench {

namespace {

std::uint32_t scaled(double x, double scale) {
  return static_cast<std::uint32_t>(std::max(1.0, std::round(x * scale)));
}

bench_failure trace_failure(const trace_error& e) {
  return bench_failure{e.line == 0 ? exit_code::no_input : exit_code::data_error, e.message};
}

/// `n` requests sent one after another (each waits for the previous one's
/// end), prompts of `prompt` distinct tokens (seeded by `seed_base` + i).
std::vector<trace_request> one_stream(std::uint32_t n, std::uint32_t prompt, std::uint32_t output,
                                      std::uint32_t seed_base) {
  std::vector<trace_request> out;
  for (std::uint32_t i = 0; i < n; ++i) {
    trace_request r;
    r.arrival_s = 0;
    r.prompt_tokens = prompt;
    r.output_tokens = output;
    r.interactive = true;
    r.conversation = i;
    r.previous_turn = static_cast<std::int32_t>(i) - 1;
    r.prompt = std::make_shared<std::vector<backends::token_id>>(synthetic_prompt(seed_base + i, prompt));
    out.push_back(std::move(r));
  }
  return out;
}

void scale_outputs(std::vector<trace_request>& reqs, double scale) {
  if (scale == 1.0)
    return;
  for (auto& r : reqs)
    r.output_tokens = scaled(r.output_tokens, scale);
}

/// Output scaling, the clamp to a slot and the interactive marks of a trace workload.
void finish_trace(race_workload& w, const bench_options& o, double output_scale) {
  scale_outputs(w.requests, output_scale);
  const auto ctx = o.race.settings.ctx_per_seq;
  w.clamped = clamp_to_context(w.requests, ctx > race_context_margin ? ctx - race_context_margin : ctx);
  w.interactive = mark_interactive(w.requests, o.interactive_share, o.seed);
  w.trace = true;
}

/// The most conversations open at once by trace time: a conversation is open
/// from its first request's arrival to its last one's (a scale of the
/// arrivals does not change it).
std::size_t peak_open_conversations(const std::vector<trace_request>& reqs) {
  std::map<std::uint32_t, std::pair<double, double>> span;
  for (const auto& r : reqs) {
    auto [it, fresh] = span.try_emplace(r.conversation, r.arrival_s, r.arrival_s);
    if (!fresh)
      it->second.second = std::max(it->second.second, r.arrival_s);
  }
  std::vector<std::pair<double, int>> edges; // +1 at the first arrival, -1 after the last
  for (const auto& [c, s] : span) {
    edges.emplace_back(s.first, +1);
    edges.emplace_back(s.second, -1);
  }
  std::sort(edges.begin(), edges.end(), [](const auto& a, const auto& b) {
    return a.first < b.first || (a.first == b.first && a.second > b.second);
  });
  std::size_t open = 0, peak = 0;
  for (const auto& [t, d] : edges) {
    open = d > 0 ? open + 1 : open - 1;
    peak = std::max(peak, open);
  }
  return peak;
}

std::string lengths(const std::vector<trace_request>& reqs) {
  double p = 0, out = 0;
  for (const auto& r : reqs) {
    p += r.prompt_tokens;
    out += r.output_tokens;
  }
  const auto n = static_cast<double>(std::max<std::size_t>(1, reqs.size()));
  return fmt::format("mean prompt {:.0f}, mean output {:.0f} tokens", p / n, out / n);
}

expected<race_workload, bench_failure> azure(const bench_options& o, const std::string& path,
                                              std::size_t rows, double input_scale,
                                              double output_scale) {
  auto t = load_trace(path, rows);
  if (!t)
    return unexpected(trace_failure(t.error()));
  race_workload w;
  w.requests = std::move(*t);
  for (auto& r : w.requests)
    r.prompt_tokens = scaled(r.prompt_tokens, input_scale);
  finish_trace(w, o, output_scale);
  w.description = fmt::format("{} requests of {}, prompts x{:g}, outputs x{:g}; {} clamped, {} "
                              "interactive; {}",
                              w.requests.size(), path, input_scale, output_scale, w.clamped,
                              w.interactive, lengths(w.requests));
  return w;
}

expected<race_workload, bench_failure> mooncake(const bench_options& o, const std::string& path,
                                                std::size_t rows, double sample, double input_scale,
                                                double output_scale) {
  auto t = load_mooncake(path, rows);
  if (!t)
    return unexpected(trace_failure(t.error()));
  conversation_options co;
  co.input_scale = input_scale;
  co.sample = sample;
  co.seed = o.seed;
  co.users = trace_users::one; // over HTTP every request is one client's
  auto cw = build_conversation_workload(*t, co);
  if (cw.requests.empty())
    return unexpected(bench_failure{exit_code::data_error,
                                    fmt::format("{}: a sample of {} with --seed {} kept none of "
                                                "the {} conversations of its first {} rows",
                                                path, sample, o.seed, cw.conversations, rows)});
  race_workload w;
  w.requests = std::move(cw.requests);
  w.conversations = cw.kept_conversations;
  if (!o.causal_turns)
    for (auto& r : w.requests)
      r.previous_turn = -1;
  finish_trace(w, o, output_scale);
  w.description = fmt::format(
    "{} requests of {} conversations ({:g} of those in {} of {}; up to {} open at once, for {} "
    "slots), {}-token blocks, outputs x{:g}, {} turns; {} clamped, {} interactive; {}",
    w.requests.size(), w.conversations, sample,
    rows == 0 ? std::string{"every row"} : fmt::format("the first {} rows", rows), path,
    peak_open_conversations(w.requests), o.race.settings.parallel, cw.block_tokens, output_scale,
    o.causal_turns ? "causal" : "open", w.clamped, w.interactive, lengths(w.requests));
  return w;
}

} // namespace

double auto_input_scale(bool is_mooncake, std::uint32_t ctx_per_seq) noexcept {
  return static_cast<double>(ctx_per_seq) / (is_mooncake ? 32768.0 : 4096.0);
}

expected<race_workload, bench_failure> build_race_workload(const bench_options& o,
                                                           std::string_view name) {
  const auto& r = o.race;
  const auto ctx = r.settings.ctx_per_seq;
  const auto room = ctx > race_context_margin ? ctx - race_context_margin : ctx;
  if (name == "decode") {
    race_workload w;
    w.name = "decode";
    const auto prompt = std::min(r.decode_prompt, room > r.decode_tokens ? room - r.decode_tokens : 1);
    w.requests = one_stream(r.repeats, prompt, std::min(r.decode_tokens, room - 1), 1000);
    w.description = fmt::format("{} requests one after another: {}-token prompt, {} output tokens",
                                r.repeats, prompt, w.requests.front().output_tokens);
    return w;
  }
  if (name == "prefill") {
    race_workload w;
    w.name = "prefill";
    w.requests = one_stream(r.repeats, room - 1, 1, 2000);
    w.description = fmt::format("{} requests one after another: {}-token prompt, 1 output token",
                                r.repeats, room - 1);
    return w;
  }
  if (name == "azure") {
    const double in = o.input_scale_given ? o.input_scale : auto_input_scale(false, ctx);
    auto w = azure(o, r.azure_trace, r.azure_requests, in, r.output_scale);
    if (w)
      w->name = "azure";
    return w;
  }
  if (name == "mooncake") {
    const double in = o.input_scale_given ? o.input_scale : auto_input_scale(true, ctx);
    const double sample = o.sample_given ? o.sample_conversations : r.mooncake_sample;
    auto w = mooncake(o, r.mooncake_trace, r.mooncake_rows, sample, in, r.output_scale);
    if (w)
      w->name = "mooncake";
    return w;
  }
  return unexpected(bench_failure{exit_code::usage, fmt::format("unknown workload '{}'", name)});
}

expected<race_workload, bench_failure> build_flag_workload(const bench_options& o) {
  expected<race_workload, bench_failure> w = race_workload{};
  if (o.synthetic) {
    auto so = o.synth;
    so.requests = o.requests;
    race_workload s;
    s.requests = synthetic(so, o.seed);
    for (auto& q : s.requests)
      q.prompt_tokens = scaled(q.prompt_tokens, o.input_scale);
    finish_trace(s, o, o.race.output_scale);
    s.description = fmt::format("{} synthetic requests, Poisson at {} req/s; {} clamped, {} "
                                "interactive; {}",
                                s.requests.size(), so.rate_per_s, s.clamped, s.interactive,
                                lengths(s.requests));
    w = std::move(s);
  } else if (is_mooncake_trace(o.trace_path)) {
    w = mooncake(o, o.trace_path, o.requests, o.sample_conversations, o.input_scale,
                 o.race.output_scale);
  } else {
    w = azure(o, o.trace_path, o.requests, o.input_scale, o.race.output_scale);
  }
  if (!w)
    return w;
  w->name = "workload";
  if (o.rate_scale)
    scale_race_arrivals(*w, std::nullopt, std::nullopt, o.rate_scale, 1, 1);
  return w;
}

work_model calibrated_work_model(const race_calibration& c, std::uint32_t slots,
                                 std::uint32_t batch) {
  work_model m;
  const double per_token = c.prefill_tok_s > 0 ? 1000.0 / c.prefill_tok_s : 0;
  const double step = c.decode_tok_s > 0 ? 1000.0 / c.decode_tok_s : 0;
  m.step_per_token_ms = per_token;
  m.step_base_ms = std::max(0.0, step - per_token);
  m.decode_batch = std::max<std::uint32_t>(1, slots);
  m.max_step_tokens = batch;
  return m;
}

void scale_race_arrivals(race_workload& w, const std::optional<race_calibration>& c,
                         std::optional<double> load, std::optional<double> rate_scale,
                         std::uint32_t slots, std::uint32_t batch) {
  if (!w.trace)
    return;
  double factor = 1.0;
  if (rate_scale && *rate_scale > 0) {
    factor = 1.0 / *rate_scale;
  } else if (load && c) {
    const auto wm = calibrated_work_model(*c, slots, batch);
    factor = factor_for_load(w.requests, wm, *load).value_or(1.0);
    scale_arrivals(w.requests, factor);
    w.arrival_scale = factor;
    w.offered_load = offered_load(w.requests, wm).value_or(0);
    return;
  }
  scale_arrivals(w.requests, factor);
  w.arrival_scale = factor;
}

} // namespace kvlane::tools::bench
