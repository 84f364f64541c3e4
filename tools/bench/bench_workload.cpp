#include "tools/bench/bench_workload.hpp"

#include "tools/bench/conversation_workload.hpp"
#include "tools/bench/mooncake_trace.hpp"
#include "tools/bench/trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvlane::tools::bench {

std::vector<trace_request> bench_workload::at_load(std::optional<double> load,
                                                   double& factor) const {
  auto reqs = base;
  factor = 1.0;
  if (load)
    factor = factor_for_load(reqs, wm, *load).value_or(1.0);
  else if (rate_scale)
    factor = 1.0 / *rate_scale;
  scale_arrivals(reqs, factor);
  return reqs;
}

expected<bench_workload, bench_failure> prepare_workload(const bench_options& o,
                                                         const bench_setup& setup,
                                                         report_context& ctx) {
  bench_workload w;
  ctx.seed = o.seed;
  ctx.interactive_share = o.interactive_share;
  if (o.synthetic) {
    auto so = o.synth;
    so.requests = o.requests;
    w.base = synthetic(so, o.seed);
    ctx.workload_source = "synthetic";
    ctx.synthetic_desc = fmt::format(
      "Poisson arrivals at {} req/s; {} lengths, prompt mean {}, output mean {}{}", so.rate_per_s,
      to_string(so.dist), so.prompt_mean, so.output_mean,
      so.dist == length_dist::lognormal ? fmt::format(", sigma {}", so.sigma) : std::string{});
  } else if (is_mooncake_trace(o.trace_path)) {
    auto t = load_mooncake(o.trace_path, o.requests);
    if (!t)
      return unexpected(bench_failure{t.error().line == 0 ? exit_code::no_input
                                                          : exit_code::data_error,
                                      t.error().message});
    conversation_options co;
    co.input_scale = o.input_scale;
    co.sample = o.sample_conversations;
    co.seed = o.seed;
    co.users = o.users;
    auto cw = build_conversation_workload(*t, co);
    if (cw.requests.empty())
      return unexpected(bench_failure{
        exit_code::data_error,
        fmt::format("{}: --sample-conversations {} with --seed {} kept none of its {} "
                    "conversations",
                    o.trace_path, o.sample_conversations, o.seed, cw.conversations)});
    w.base = std::move(cw.requests);
    if (o.keep_requests > 0 && w.base.size() > o.keep_requests)
      w.base.resize(o.keep_requests); // a previous turn is always earlier: still in the list
    if (!o.causal_turns)
      for (auto& r : w.base)
        r.previous_turn = -1;
    ctx.workload_source = "trace";
    ctx.trace_path = o.trace_path;
    ctx.trace_format = "mooncake";
    ctx.conversations = conversation_context{cw.conversations, cw.kept_conversations, cw.block_tokens,
                         std::string{to_string(o.users)}, o.sample_conversations, t->size(),
                         o.causal_turns ? "causal" : "open"};
  } else {
    auto t = load_trace(o.trace_path, o.requests);
    if (!t)
      return unexpected(bench_failure{t.error().line == 0 ? exit_code::no_input
                                                          : exit_code::data_error,
                                      t.error().message});
    w.base = std::move(*t);
    for (auto& r : w.base)
      r.prompt_tokens = static_cast<std::uint32_t>(
        std::max(1.0, std::round(static_cast<double>(r.prompt_tokens) * o.input_scale)));
    ctx.workload_source = "trace";
    ctx.trace_path = o.trace_path;
    ctx.trace_format = "azure-csv";
  }
  ctx.input_scale = o.input_scale;
  ctx.requests = w.base.size();
  ctx.clamped = clamp_to_context(w.base, setup.info.max_context);
  ctx.interactive = mark_interactive(w.base, o.interactive_share, o.seed);
  {
    // After the clamp: what is sent is what an unlimited cache could match.
    const auto seen = achievable_reuse(w.base, setup.cfg.reuse.min_prefix_tokens);
    for (std::size_t i = 0; i < w.base.size(); ++i) {
      w.base[i].seen_prefix_tokens = seen[i];
      ctx.prompt_tokens_total += w.base[i].prompt_tokens;
      ctx.achievable_reused_tokens += seen[i];
      ctx.reusable_requests += seen[i] > 0;
    }
  }
  w.wm = work_model_for(setup.cfg, setup.model());
  w.rate_scale = o.rate_scale;
  w.main_load = o.load;
  if (!w.main_load && !o.rate_scale && !o.synthetic)
    w.main_load = 1.0;
  double factor = 1.0;
  w.main = w.at_load(w.main_load, factor);

  ctx.load = w.main_load;
  ctx.rate_scale = 1.0 / factor;
  ctx.offered_load = offered_load(w.main, w.wm).value_or(0);
  ctx.capacity_req_s = capacity_req_s(w.main, w.wm);
  ctx.work_s = work_ms(w.main, w.wm) / 1000.0;
  {
    // The bound for every mode: every slot decodes (no spare kept).
    auto loosest = w.wm;
    loosest.decode_batch = std::max(loosest.decode_batch, setup.info.slots);
    const double work_s = work_ms(w.main, loosest) / 1000.0;
    double output = 0;
    for (const auto& r : w.main)
      output += r.output_tokens;
    ctx.capacity_tok_s = work_s > 0 ? output / work_s : 0;
  }
  ctx.arrival_span_s = w.main.empty() ? 0 : w.main.back().arrival_s;
  double prompt = 0, output = 0;
  for (const auto& r : w.main) {
    prompt += r.prompt_tokens;
    output += r.output_tokens;
  }
  const auto n = static_cast<double>(std::max<std::size_t>(1, w.main.size()));
  ctx.prompt_tokens_mean = prompt / n;
  ctx.output_tokens_mean = output / n;
  return w;
}

} // namespace kvlane::tools::bench
