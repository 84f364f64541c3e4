#include "tools/bench/bench_cli.hpp"

#include "common/logging.hpp"
#include "tools/bench/bench_profile.hpp"
#include "tools/bench/bench_run.hpp"
#include "tools/bench/bench_workload.hpp"
#include "tools/bench/ipc_driver.hpp"
#include "tools/bench/plot.hpp"
#include "tools/bench/race_run.hpp"
#include "tools/bench/report.hpp"
#include "tools/bench/report_json.hpp"
#include "tools/bench/report_plot.hpp"
#include "tools/bench/restart_run.hpp"
#include "tools/bench/shape_run.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace kvlane::tools::bench {

namespace {

int fail(int code, std::string_view message) {
  std::fprintf(stderr, "kvlane-bench: %.*s\n", static_cast<int>(message.size()), message.data());
  return code;
}

int fail(const bench_failure& f) {
  return fail(f.exit_code, f.message);
}

void create_parent_directories(const std::string& path) {
  std::error_code ec; // a failure shows when the file is written
  if (auto parent = std::filesystem::path{path}.parent_path(); !parent.empty())
    std::filesystem::create_directories(parent, ec);
}

expected<void, std::string> write_file(const std::string& path, const std::string& text) {
  create_parent_directories(path);
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out << text;
  out.flush();
  if (!out)
    return unexpected(fmt::format("cannot write '{}'", path));
  return {};
}

std::string_view path_name(bench_path p) {
  return p == bench_path::inproc ? "inproc" : p == bench_path::ipc ? "ipc" : "both";
}

/// --shapes: each cell printed as it ends, then the grid; JSON and chart of the grid.
int print_shapes(const bench_options& o, const bench_setup& setup, const bench_run_options& run) {
  auto grid = run_shapes(o, setup, run, [](const shape_cell& c) {
    const auto text = format_cell(c) + "\n";
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  if (!grid)
    return fail(grid.error());
  grid->ctx.command_line = o.command_line;
  grid->ctx.profile_source = setup.profile_source;
  grid->ctx.profile_toml = setup.profile_toml;
  grid->ctx.cfg = setup.cfg;
  grid->ctx.model = setup.model().name;
  grid->ctx.path = std::string{path_name(o.path)};
  grid->ctx.time_scale = setup.time_scale;
  grid->ctx.slo = o.slo;
  grid->ctx.slo_defaults = !o.slo_given;
  const auto text = format_grid(*grid);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  int code = 0;
  if (!o.json_out.empty()) {
    const auto json = shapes_json(*grid).dump(2, ' ', false,
                                              nlohmann::ordered_json::error_handler_t::replace);
    if (auto ok = write_file(o.json_out, json + "\n"); !ok)
      code = fail(exit_code::other, ok.error());
    else if (run.progress)
      run.progress("wrote " + o.json_out);
  }
  if (!o.plot_out.empty()) {
    create_parent_directories(o.plot_out);
    if (auto ok = render(shapes_plot(*grid), o.plot_out); !ok)
      std::fprintf(stderr, "kvlane-bench: plot: %s\n", ok.error().c_str());
    else if (run.progress)
      run.progress("wrote " + o.plot_out);
  }
  return code;
}

/// --restart: the baseline and each event through kvlaned children; JSON of the comparison.
int print_restarts(const bench_options& o, const bench_setup& setup, const bench_workload& w,
                   report_context ctx, const bench_run_options& run) {
  auto c = run_restarts(o, setup, w, run);
  if (!c)
    return fail(exit_code::other, c.error());
  ctx.cfg = restart_profile(setup);
  c->report.ctx = std::move(ctx);
  const auto text = format_restart_comparison(*c);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  if (o.json_out.empty())
    return 0;
  if (auto ok = write_file(o.json_out, restart_comparison_json(*c)); !ok)
    return fail(exit_code::other, ok.error());
  if (run.progress)
    run.progress("wrote " + o.json_out);
  return 0;
}

} // namespace

int run_bench(const bench_options& o) {
  auto progress = [&](std::string_view line) {
    if (!o.quiet)
      std::fprintf(stderr, "kvlane-bench: %.*s\n", static_cast<int>(line.size()), line.data());
  };
  if (o.help) {
    const auto text = usage();
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  if (o.print_profile) {
    const auto text = builtin_profile_toml();
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  if (o.race.race_llama)
    return run_race(o);
  if (o.path == bench_path::http)
    return run_http_path(o);
  bench_run_options run;
  run.progress = progress;
  run.kvlaned_path = o.kvlaned_path.empty() ? default_kvlaned_path() : o.kvlaned_path;
  if (o.path != bench_path::inproc
      && (run.kvlaned_path.empty() || ::access(run.kvlaned_path.c_str(), X_OK) != 0))
    return fail(exit_code::unavailable,
                fmt::format("--path {}: no executable kvlaned at '{}'; build it (cmake --build "
                            "build --target kvlaned) or pass --kvlaned PATH",
                            path_name(o.path), run.kvlaned_path));
  if (auto err = logging::setup(o.log_level, {}, logging::sink_style::terminal);
      !err.empty())
    return fail(exit_code::usage, err);

  auto setup = load_setup(o);
  if (!setup)
    return fail(setup.error());
  if (!o.shapes.empty())
    return print_shapes(o, *setup, run);
  const auto& model = setup->model();

  report_context ctx;
  ctx.command_line = o.command_line;
  ctx.profile_source = setup->profile_source;
  ctx.profile_toml = setup->profile_toml;
  ctx.model = model.name;
  ctx.path = std::string{path_name(o.path)};
  ctx.time_scale = setup->time_scale;
  ctx.scheduler_mode = std::string{actors::to_string(o.modes.front())};
  if (!o.store_splits.empty()) {
    ctx.burst_s = o.burst_s;
    ctx.split_policy = o.reuse.front().name;
  }
  ctx.slo = o.slo;
  ctx.slo_defaults = !o.slo_given;
  auto workload = prepare_workload(o, *setup, ctx);
  if (!workload)
    return fail(workload.error());
  ctx.cfg = setup->cfg;
  progress(fmt::format("{} requests ({} from {}), {} clamped to {} tokens of context, {} "
                       "interactive; mean prompt {:.0f}, mean output {:.0f} tokens",
                       ctx.requests, ctx.workload_source,
                       o.synthetic ? ctx.synthetic_desc : o.trace_path, ctx.clamped,
                       setup->info.max_context, ctx.interactive, ctx.prompt_tokens_mean,
                       ctx.output_tokens_mean));
  if (ctx.conversations)
    progress(fmt::format("conversations: {} of {} kept, {}-token blocks, users: {}; an unlimited "
                         "prefix cache would reuse {} of {} prompt tokens ({} requests)",
                         ctx.conversations->kept_conversations, ctx.conversations->conversations,
                         ctx.conversations->block_tokens, ctx.conversations->users,
                         ctx.achievable_reused_tokens, ctx.prompt_tokens_total,
                         ctx.reusable_requests));
  progress(fmt::format("model '{}' on {}: capacity {:.3f} req/s (NPU work {:.0f} s simulated); "
                       "offered load {:.3f} over {:.0f} s simulated = {:.1f} s wall at "
                       "time_scale {}",
                       model.name, model.backend.kind, ctx.capacity_req_s, ctx.work_s,
                       ctx.offered_load, ctx.arrival_span_s,
                       ctx.arrival_span_s / setup->time_scale, setup->time_scale));

  if (!o.restarts.empty())
    return print_restarts(o, *setup, *workload, std::move(ctx), run);

  auto report = run_benchmark(o, *setup, *workload, run);
  if (!report)
    return fail(exit_code::other, report.error());
  report->ctx = std::move(ctx);

  const auto text = format_report(*report);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);

  int code = 0;
  if (!o.json_out.empty()) {
    if (auto ok = write_file(o.json_out, to_json(*report)); !ok)
      code = fail(exit_code::other, ok.error());
    else
      progress("wrote " + o.json_out);
  }
  if (!o.plot_out.empty()) {
    create_parent_directories(o.plot_out);
    if (auto ok = render(report_plot(*report, o.modes), o.plot_out); !ok)
      std::fprintf(stderr, "kvlane-bench: plot: %s\n", ok.error().c_str());
    else
      progress("wrote " + o.plot_out);
  }
  return code;
}

int bench_main(int argc, char** argv) {
  std::vector<std::string_view> args;
  for (int i = 1; i < argc; ++i)
    args.emplace_back(argv[i]);
  auto o = parse_args(args);
  if (!o)
    return fail(exit_code::usage, o.error());
  return run_bench(*o);
}

} // namespace kvlane::tools::bench
