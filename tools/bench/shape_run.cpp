#include "tools/bench/shape_run.hpp"

#include "tools/bench/bench_workload.hpp"

#include <fmt/format.h>

namespace kvlane::tools::bench {

bench_options shape_options(const bench_options& o, workload_shape shape, double load) {
  auto s = o;
  s.shapes.clear();
  s.sweep_loads.clear();
  s.load = load;
  s.synthetic = false;
  s.trace_path.clear();
  switch (shape) {
  case workload_shape::conv:
    s.trace_path = o.race.azure_trace;
    break;
  case workload_shape::mooncake:
    // As `make bench-reuse` samples it, then the first --requests of the sample.
    s.trace_path = o.race.mooncake_trace;
    s.sample_conversations = mooncake_shape_sample;
    s.sample_given = true;
    s.input_scale = mooncake_shape_input_scale;
    s.input_scale_given = true;
    s.keep_requests = o.requests;
    s.requests = 0;
    break;
  case workload_shape::prefill_heavy:
  case workload_shape::decode_heavy: {
    const auto& len =
      shape == workload_shape::prefill_heavy ? prefill_heavy_lengths : decode_heavy_lengths;
    s.synthetic = true;
    s.synth = synthetic_options{};
    s.synth.prompt_mean = len.prompt_mean;
    s.synth.output_mean = len.output_mean;
    break;
  }
  }
  return s;
}

std::vector<double> shape_loads(const bench_options& o) {
  if (!o.sweep_loads.empty())
    return o.sweep_loads;
  return {o.load.value_or(1.0)};
}

expected<shapes_report, bench_failure>
run_shapes(const bench_options& o, const bench_setup& setup, const bench_run_options& run,
           const std::function<void(const shape_cell&)>& on_cell) {
  auto progress = [&](std::string_view line) {
    if (run.progress)
      run.progress(line);
  };
  shapes_report report;
  report.loads = shape_loads(o);
  report.devices = o.devices;
  if (report.devices.empty())
    report.devices.push_back(setup.model().backend.sim.overlap);
  for (auto shape : o.shapes) {
    for (double load : report.loads) {
      const auto so = shape_options(o, shape, load);
      report_context ctx;
      ctx.slo = o.slo;
      ctx.slo_defaults = !o.slo_given;
      auto w = prepare_workload(so, setup, ctx);
      if (!w)
        return unexpected(bench_failure{w.error().exit_code,
                                        fmt::format("shape {}: {}", to_string(shape),
                                                    w.error().message)});
      ctx.cfg = setup.cfg;
      if (load == report.loads.front()) {
        progress(fmt::format("shape {}: {} requests, {} interactive, {} clamped; mean prompt "
                             "{:.0f}, mean output {:.0f} tokens",
                             to_string(shape), ctx.requests, ctx.interactive, ctx.clamped,
                             ctx.prompt_tokens_mean, ctx.output_tokens_mean));
        report.shapes.push_back({shape, ctx});
      }
      progress(fmt::format("shape {}, load {}: offered load {:.3f} over {:.0f} s simulated",
                           to_string(shape), load, ctx.offered_load, ctx.arrival_span_s));
      auto cell_opts = so;
      cell_opts.devices = report.devices;
      auto r = run_benchmark(cell_opts, setup, *w, run);
      if (!r)
        return unexpected(bench_failure{exit_code::other,
                                        fmt::format("shape {}, load {}: {}", to_string(shape),
                                                    load, r.error())});
      for (auto& d : r->devices) {
        shape_cell c;
        c.shape = shape;
        c.load = load;
        c.offered_load = ctx.offered_load;
        c.device = d.overlap;
        c.modes = std::move(d.modes);
        c.targets = shape_targets(c.modes, o.slo);
        for (auto& m : c.modes) {
          m.ttft_samples_ms.clear(); // bounded memory: the grid keeps no per-request samples
          m.timeline.clear();
        }
        if (on_cell)
          on_cell(c);
        report.cells.push_back(std::move(c));
      }
    }
  }
  return report;
}

} // namespace kvlane::tools::bench
