#include "tools/bench/bench_workload.hpp"

#include "tools/bench/trace.hpp"

#include <fmt/format.h>

#include <algorithm>

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
  } else {
    auto t = load_trace(o.trace_path, o.requests);
    if (!t)
      return unexpected(bench_failure{t.error().line == 0 ? exit_code::no_input
                                                          : exit_code::data_error,
                                      t.error().message});
    w.base = std::move(*t);
    ctx.workload_source = "trace";
    ctx.trace_path = o.trace_path;
  }
  ctx.requests = w.base.size();
  ctx.clamped = clamp_to_context(w.base, setup.info.max_context);
  ctx.interactive = mark_interactive(w.base, o.interactive_share, o.seed);
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
