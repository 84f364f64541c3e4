#include "tools/bench/bench_cli.hpp"

#include "backends/factory.hpp"
#include "common/logging.hpp"
#include "tools/bench/bench_runner.hpp"
#include "tools/bench/ipc_driver.hpp"
#include "tools/bench/plot.hpp"
#include "tools/bench/report.hpp"
#include "tools/bench/stats.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace kvlane::tools::bench {

namespace {

constexpr std::string_view usage_text = R"(usage: kvlane-bench (--trace PATH | --synthetic) [options]

Replays a workload against the serving core once per scheduling mode (same
requests, same seed, a fresh engine or daemon each) and reports throughput,
latency percentiles, NPU busy time, transfers and preemptions, with ratios against
the `ideal` mode and of `overlap` against `fcfs` and `sync`. Times are simulated
milliseconds (wall ms x time_scale). See docs/benchmarks.md.

workload:
  --trace PATH            CSV trace: TIMESTAMP,ContextTokens,GeneratedTokens
  --requests N            first N rows (or N synthetic requests); 0 = all rows (default 200)
  --synthetic             Poisson arrivals instead of a trace
  --rate R                synthetic: requests per simulated second (default 1)
  --prompt-mean X         synthetic: mean prompt tokens (default 512)
  --output-mean X         synthetic: mean output tokens (default 128)
  --length-dist D         synthetic: lognormal (default) or exponential
  --length-sigma S        synthetic lognormal: sigma of log length (default 0.5)
  --load L                scale arrivals to L x the model's capacity (trace default 1.0)
  --rate-scale X          multiply the arrival rate by X instead
  --interactive-share F   fraction of requests marked interactive, seeded (default 0.2)
  --seed N                seed of every random choice (default 1)

what to run:
  --modes LIST            comma list of fcfs,sync,overlap,ideal (default all four;
                          --sweep-quantum: sync,overlap,ideal)
  --sweep LOADS           also run every mode at each load, e.g. 0.5,0.75,1.0,1.25
  --sweep-quantum         halve scheduler.quantum_steps from its configured value until
                          a mode preempts >= 1 time per slot per simulated second
  --path inproc|ipc|both  inproc: an in-process engine (default); ipc: a kvlaned child
                          per mode, driven through the client library; both: each
                          mode in process then via ipc, with the ipc/inproc ratio
  --kvlaned PATH          the daemon for ipc/both (default: kvlaned next to this program)
  --config PATH           kvlane.toml to use (default: the built-in bench profile)
  --print-profile         print the built-in profile (a kvlane.toml) and exit
  --model NAME            model to drive (default: the first)
  --time-scale S          sim: simulated ms per wall ms (overrides the profile)
  --sim-overlap MODE      sim: full, none or shared (overrides the profile)
  --timeout SECONDS       wall bound on one mode's run (default: 60 + 4x the arrival span)

output:
  --json OUT              write the report as JSON
  --plot OUT.png          draw the charts with gnuplot (the script goes to OUT.gp)
  --timeline              add each mode's scheduler gauges (every ~100 ms wall) to the JSON
  --log-level LEVEL       daemon loggers' level (default warn)
  --quiet                 no progress lines on stderr
  --help                  this text
)";

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
spare_slots = 1
max_step_tokens = 512
aging_steps = 2048
ewma_alpha = 0.2

[store]
# 8 GiB scaled like the snapshots (x 1/256): room for the same 128 snapshots.
max_bytes = "32MiB"
)";

constexpr int ex_usage = 64, ex_dataerr = 65, ex_noinput = 66, ex_unavailable = 69,
              ex_config = 78;

template <class T>
bool parse_number(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc{} && p == s.data() + s.size();
}

std::optional<actors::scheduler_mode> parse_mode(std::string_view s) {
  using actors::scheduler_mode;
  if (s == "fcfs")
    return scheduler_mode::fcfs;
  if (s == "sync")
    return scheduler_mode::sync;
  if (s == "overlap")
    return scheduler_mode::overlap;
  if (s == "ideal")
    return scheduler_mode::ideal;
  return std::nullopt;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    auto p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos)
      return out;
    start = p + 1;
  }
}

std::string shell_quote(std::string_view a) {
  const bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view{"_./=,:+-@%"}.find(c)
                                                            != std::string_view::npos;
  });
  if (plain)
    return std::string{a};
  std::string out = "'";
  for (char c : a)
    out += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return out + "'";
}

void progress_line(const bench_options& o, std::string_view line) {
  if (!o.quiet)
    std::fprintf(stderr, "kvlane-bench: %.*s\n", static_cast<int>(line.size()), line.data());
}

bool write_file(const std::string& path, const std::string& text, std::string& error) {
  std::error_code ec;
  auto parent = std::filesystem::path{path}.parent_path();
  if (!parent.empty())
    std::filesystem::create_directories(parent, ec);
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out << text;
  out.flush();
  if (!out) {
    error = fmt::format("cannot write '{}'", path);
    return false;
  }
  return true;
}

struct workload_info {
  std::vector<trace_request> base; ///< clamped and marked, arrivals unscaled
  work_model wm;
};

/// The base workload scaled by the flags (or to `load` when given).
std::vector<trace_request> scaled(const workload_info& w, const bench_options& o,
                                  std::optional<double> load, double& factor) {
  auto reqs = w.base;
  factor = 1.0;
  if (load) {
    factor = factor_for_load(reqs, w.wm, *load).value_or(1.0);
  } else if (o.rate_scale) {
    factor = 1.0 / *o.rate_scale;
  }
  scale_arrivals(reqs, factor);
  return reqs;
}

} // namespace

std::string_view usage() noexcept {
  return usage_text;
}

std::string_view builtin_profile_toml() noexcept {
  return profile_text;
}

expected<daemon::config, std::string> builtin_profile() {
  auto c = daemon::parse(profile_text, "<built-in bench profile>");
  if (!c)
    return unexpected(c.error().message);
  return std::move(*c);
}

expected<bench_options, std::string> parse_args(std::span<const std::string_view> args) {
  bench_options o;
  o.command_line = "kvlane-bench";
  for (auto a : args)
    o.command_line += " " + shell_quote(a);
  auto fail = [](std::string msg) { return unexpected(std::move(msg)); };
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto a = args[i];
    auto value = [&]() -> std::optional<std::string_view> {
      if (i + 1 >= args.size())
        return std::nullopt;
      return args[++i];
    };
    auto positive = [&](double& out, double max = 1e12) -> bool {
      auto v = value();
      return v && parse_number(*v, out) && std::isfinite(out) && out > 0 && out <= max;
    };
    if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "--print-profile") {
      o.print_profile = true;
    } else if (a == "--trace") {
      auto v = value();
      if (!v || v->empty())
        return fail("--trace needs a path");
      o.trace_path = *v;
    } else if (a == "--synthetic") {
      o.synthetic = true;
    } else if (a == "--requests") {
      auto v = value();
      if (!v || !parse_number(*v, o.requests) || o.requests > 10'000'000)
        return fail("--requests needs a whole number (0 = every row)");
    } else if (a == "--rate") {
      if (!positive(o.synth.rate_per_s))
        return fail("--rate needs a positive number (requests per simulated second)");
    } else if (a == "--prompt-mean") {
      if (!positive(o.synth.prompt_mean, 1e7))
        return fail("--prompt-mean needs a positive number of tokens");
    } else if (a == "--output-mean") {
      if (!positive(o.synth.output_mean, 1e7))
        return fail("--output-mean needs a positive number of tokens");
    } else if (a == "--length-dist") {
      auto v = value();
      if (v == "lognormal")
        o.synth.dist = length_dist::lognormal;
      else if (v == "exponential")
        o.synth.dist = length_dist::exponential;
      else
        return fail("--length-dist needs lognormal or exponential");
    } else if (a == "--length-sigma") {
      if (!positive(o.synth.sigma, 10))
        return fail("--length-sigma needs a number in (0, 10]");
    } else if (a == "--load") {
      double x = 0;
      if (!positive(x, 1000))
        return fail("--load needs a positive number (1.0 = the model's capacity)");
      o.load = x;
    } else if (a == "--rate-scale") {
      double x = 0;
      if (!positive(x, 1e9))
        return fail("--rate-scale needs a positive number");
      o.rate_scale = x;
    } else if (a == "--interactive-share") {
      auto v = value();
      if (!v || !parse_number(*v, o.interactive_share) || !(o.interactive_share >= 0)
          || o.interactive_share > 1)
        return fail("--interactive-share needs a number between 0 and 1");
    } else if (a == "--modes") {
      auto v = value();
      if (!v)
        return fail("--modes needs a comma list of fcfs,sync,overlap,ideal");
      o.modes.clear();
      for (auto name : split(*v, ',')) {
        auto m = parse_mode(name);
        if (!m)
          return fail(fmt::format("--modes: unknown mode '{}' (known: fcfs, sync, overlap, ideal)",
                                  name));
        if (std::find(o.modes.begin(), o.modes.end(), *m) == o.modes.end())
          o.modes.push_back(*m);
      }
      o.modes_given = true;
    } else if (a == "--time-scale") {
      double x = 0;
      if (!positive(x, 1e6))
        return fail("--time-scale needs a number in (0, 1000000]");
      o.time_scale = x;
    } else if (a == "--sim-overlap") {
      auto v = value();
      if (v == "full")
        o.sim_overlap = backends::transfer_overlap::full;
      else if (v == "none")
        o.sim_overlap = backends::transfer_overlap::none;
      else if (v == "shared")
        o.sim_overlap = backends::transfer_overlap::shared;
      else
        return fail("--sim-overlap needs full, none or shared");
    } else if (a == "--path") {
      auto v = value();
      if (v == "inproc")
        o.path = bench_path::inproc;
      else if (v == "ipc")
        o.path = bench_path::ipc;
      else if (v == "both")
        o.path = bench_path::both;
      else
        return fail("--path needs inproc, ipc or both");
    } else if (a == "--kvlaned") {
      auto v = value();
      if (!v || v->empty())
        return fail("--kvlaned needs a path");
      o.kvlaned_path = *v;
    } else if (a == "--config") {
      auto v = value();
      if (!v || v->empty())
        return fail("--config needs a path");
      o.config_path = *v;
    } else if (a == "--model") {
      auto v = value();
      if (!v || v->empty())
        return fail("--model needs a name");
      o.model = *v;
    } else if (a == "--json") {
      auto v = value();
      if (!v || v->empty())
        return fail("--json needs an output path");
      o.json_out = *v;
    } else if (a == "--plot") {
      auto v = value();
      if (!v || v->empty())
        return fail("--plot needs an output path (OUT.png)");
      o.plot_out = *v;
    } else if (a == "--seed") {
      auto v = value();
      if (!v || !parse_number(*v, o.seed))
        return fail("--seed needs a whole number");
    } else if (a == "--sweep") {
      auto v = value();
      if (!v)
        return fail("--sweep needs a comma list of loads, e.g. 0.5,0.75,1.0,1.25");
      o.sweep_loads.clear();
      for (auto s : split(*v, ',')) {
        double x = 0;
        if (!parse_number(s, x) || !(x > 0) || x > 1000)
          return fail(fmt::format("--sweep: '{}' is not a positive load", s));
        o.sweep_loads.push_back(x);
      }
    } else if (a == "--sweep-quantum") {
      o.sweep_quantum = true;
    } else if (a == "--timeout") {
      if (!positive(o.timeout_s, 1e6))
        return fail("--timeout needs a positive number of seconds");
    } else if (a == "--log-level") {
      auto v = value();
      if (!v || !logging::valid_level(*v))
        return fail("--log-level needs trace, debug, info, warn, error, critical or off");
      o.log_level = *v;
    } else if (a == "--timeline") {
      o.timeline = true;
    } else if (a == "--quiet") {
      o.quiet = true;
    } else {
      return fail(fmt::format("unknown argument '{}' (see --help)", a));
    }
  }
  if (o.help || o.print_profile)
    return o;
  if (o.load && o.rate_scale)
    return fail("--load and --rate-scale both scale arrivals: give one");
  if (!o.sweep_loads.empty() && o.rate_scale)
    return fail("--sweep scales arrivals to each load: it cannot be combined with --rate-scale");
  if (!o.sweep_loads.empty() && o.sweep_quantum)
    return fail("--sweep and --sweep-quantum are separate runs: give one");
  if (o.path == bench_path::both && (!o.sweep_loads.empty() || o.sweep_quantum))
    return fail("--path both compares the paths at one load: it cannot be combined with --sweep "
                "or --sweep-quantum (run a sweep with --path inproc or ipc)");
  if (o.synthetic && !o.trace_path.empty())
    return fail("--synthetic and --trace are exclusive");
  if (!o.synthetic && o.trace_path.empty())
    return fail("give --trace PATH or --synthetic (see --help)");
  if (o.synthetic && o.requests == 0)
    return fail("--requests must be at least 1 with --synthetic");
  if (o.modes.empty())
    return fail("--modes needs at least one mode");
  if (o.sweep_quantum && !o.modes_given)
    o.modes = {actors::scheduler_mode::sync, actors::scheduler_mode::overlap,
               actors::scheduler_mode::ideal};
  if (o.sweep_quantum)
    std::erase(o.modes, actors::scheduler_mode::fcfs); // fcfs has no quantum
  if (o.modes.empty())
    return fail("--sweep-quantum needs a preempting mode (sync, overlap or ideal)");
  return o;
}

int run_bench(const bench_options& o) {
  auto fail = [](int code, const std::string& msg) {
    std::fprintf(stderr, "kvlane-bench: %s\n", msg.c_str());
    return code;
  };
  if (o.help) {
    std::fwrite(usage_text.data(), 1, usage_text.size(), stdout);
    return 0;
  }
  if (o.print_profile) {
    std::fwrite(profile_text.data(), 1, profile_text.size(), stdout);
    return 0;
  }
  const bool run_inproc = o.path != bench_path::ipc;
  const bool run_ipc = o.path != bench_path::inproc;
  std::string kvlaned = o.kvlaned_path.empty() ? default_kvlaned_path() : o.kvlaned_path;
  if (run_ipc && (kvlaned.empty() || ::access(kvlaned.c_str(), X_OK) != 0))
    return fail(ex_unavailable,
                fmt::format("--path {}: no executable kvlaned at '{}'; build it (cmake --build "
                            "build --target kvlaned) or pass --kvlaned PATH",
                            o.path == bench_path::ipc ? "ipc" : "both", kvlaned));

  if (auto err = logging::setup(o.log_level, {}, logging::sink_style::terminal);
      !err.empty())
    return fail(ex_usage, err);

  // -- configuration -------------------------------------------------------------
  daemon::config cfg;
  std::string profile_source, profile_toml;
  if (o.config_path.empty()) {
    auto c = builtin_profile();
    if (!c)
      return fail(1, "built-in profile: " + c.error());
    cfg = std::move(*c);
    profile_source = "built-in bench profile";
    profile_toml = std::string{profile_text};
  } else {
    auto c = daemon::load(o.config_path);
    if (!c)
      return fail(ex_config, "invalid configuration: " + c.error().message);
    cfg = std::move(*c);
    profile_source = o.config_path;
  }
  daemon::model_section* m = o.model.empty() ? &cfg.models.front() : nullptr;
  for (auto& x : cfg.models)
    if (!o.model.empty() && x.name == o.model)
      m = &x;
  if (!m)
    return fail(ex_usage, fmt::format("no model named '{}' in {}", o.model, profile_source));
  // Only the driven model runs: the others would share the store and the CPU.
  {
    auto keep = *m;
    cfg.models = {keep};
    m = &cfg.models.front();
  }
  const bool sim = m->backend.kind == "sim";
  if ((o.time_scale || o.sim_overlap) && !sim)
    return fail(ex_usage, fmt::format("--time-scale and --sim-overlap apply to the sim; model "
                                      "'{}' uses backend '{}'",
                                      m->name, m->backend.kind));
  if (o.time_scale)
    m->backend.sim.time_scale = *o.time_scale;
  if (o.sim_overlap)
    m->backend.sim.overlap = *o.sim_overlap;
  if (!sim && std::find(o.modes.begin(), o.modes.end(), actors::scheduler_mode::ideal)
                != o.modes.end())
    return fail(ex_usage, fmt::format("mode 'ideal' models free transfers and needs the sim; "
                                      "model '{}' uses backend '{}': pass --modes "
                                      "fcfs,sync,overlap",
                                      m->name, m->backend.kind));
  const double ts = sim ? m->backend.sim.time_scale : 1.0;
  backends::backend_info info;
  {
    auto b = backends::make_backend(m->name, m->backend);
    if (!b)
      return fail(ex_config, fmt::format("model '{}': backend failed to load: {}", m->name,
                                         b.error().message));
    info = (*b)->info();
  }

  // -- workload --------------------------------------------------------------------
  workload_info w;
  report_context ctx;
  ctx.command_line = o.command_line;
  ctx.profile_source = profile_source;
  ctx.profile_toml = profile_toml;
  ctx.model = m->name;
  ctx.path = o.path == bench_path::inproc ? "inproc" : o.path == bench_path::ipc ? "ipc" : "both";
  ctx.time_scale = ts;
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
      return fail(t.error().line == 0 ? ex_noinput : ex_dataerr, t.error().message);
    w.base = std::move(*t);
    ctx.workload_source = "trace";
    ctx.trace_path = o.trace_path;
  }
  ctx.requests = w.base.size();
  ctx.clamped = clamp_to_context(w.base, info.max_context);
  ctx.interactive = mark_interactive(w.base, o.interactive_share, o.seed);
  w.wm = work_model_for(cfg, *m);
  std::optional<double> main_load = o.load;
  if (!main_load && !o.rate_scale && !o.synthetic)
    main_load = 1.0;
  double factor = 1.0;
  auto main_reqs = scaled(w, o, main_load, factor);
  ctx.load = main_load;
  ctx.rate_scale = 1.0 / factor;
  ctx.offered_load = offered_load(main_reqs, w.wm).value_or(0);
  ctx.capacity_req_s = capacity_req_s(main_reqs, w.wm);
  ctx.work_s = work_ms(main_reqs, w.wm) / 1000.0;
  ctx.arrival_span_s = main_reqs.empty() ? 0 : main_reqs.back().arrival_s;
  {
    double p = 0, g = 0;
    for (auto& r : main_reqs) {
      p += r.prompt_tokens;
      g += r.output_tokens;
    }
    ctx.prompt_tokens_mean = p / static_cast<double>(std::max<std::size_t>(1, main_reqs.size()));
    ctx.output_tokens_mean = g / static_cast<double>(std::max<std::size_t>(1, main_reqs.size()));
  }
  ctx.cfg = cfg;

  progress_line(o, fmt::format(
    "{} requests ({} from {}), {} clamped to {} tokens of context, {} interactive; mean prompt "
    "{:.0f}, mean output {:.0f} tokens",
    ctx.requests, ctx.workload_source, o.synthetic ? ctx.synthetic_desc : o.trace_path,
    ctx.clamped, info.max_context, ctx.interactive, ctx.prompt_tokens_mean,
    ctx.output_tokens_mean));
  progress_line(o, fmt::format(
    "model '{}' on {}: capacity {:.3f} req/s (NPU work {:.0f} s simulated); offered load {:.3f} "
    "over {:.0f} s simulated = {:.1f} s wall at time_scale {}",
    m->name, m->backend.kind, ctx.capacity_req_s, ctx.work_s, ctx.offered_load, ctx.arrival_span_s,
    ctx.arrival_span_s / ts, ts));

  // -- runs --------------------------------------------------------------------------
  const bool overlaps = info.caps.transfer_overlaps_compute;
  // Runs every mode on the requested path(s). With --path both, each mode
  // runs in process then via ipc (back to back, so both see the same machine
  // state) and the ipc figures go to *ipc_out.
  auto run_all = [&](const std::vector<trace_request>& reqs, const daemon::config& run_cfg,
                     const std::string& label, std::vector<mode_summary>* ipc_out)
    -> expected<std::vector<mode_summary>, std::string> {
    std::vector<mode_summary> out;
    auto done = [&](const mode_summary& s, const run_result& r, std::string_view path) {
      progress_line(o, fmt::format(
        "{}{}{}: {}/{} completed in {:.1f} s wall; {:.1f} tokens/s, TTFT p99 {:.0f} ms, "
        "{} preemptions{}",
        label, s.mode, path, s.completed, s.requests, r.wall_ms / 1000.0, s.throughput_tok_s,
        s.ttft_p99_ms, s.preemptions, s.timed_out ? " (TIMED OUT)" : ""));
    };
    for (auto mode : o.modes) {
      run_options ro;
      ro.cfg = run_cfg;
      ro.model = m->name;
      ro.time_scale = ts;
      ro.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.timeout_s * 1000));
      ro.progress = [&](std::string_view line) { progress_line(o, line); };
      if (run_inproc) {
        progress_line(o, fmt::format("{}{}: running {} requests", label, actors::to_string(mode),
                                     reqs.size()));
        auto r = run_mode(ro, mode, reqs);
        if (!r)
          return unexpected(fmt::format("mode {}: {}", actors::to_string(mode), r.error()));
        auto s = summarize(*r);
        done(s, *r, "");
        out.push_back(std::move(s));
      }
      if (run_ipc) {
        ipc_run_options io;
        io.run = ro;
        io.kvlaned_path = kvlaned;
        io.log_level = o.log_level;
        io.transfers_overlap = overlaps;
        progress_line(o, fmt::format("{}{} (ipc): running {} requests through {}", label,
                                     actors::to_string(mode), reqs.size(), kvlaned));
        auto r = run_mode_ipc(io, mode, reqs);
        if (!r)
          return unexpected(fmt::format("mode {} (ipc): {}", actors::to_string(mode), r.error()));
        auto s = summarize(*r);
        done(s, *r, " (ipc)");
        (run_inproc && ipc_out ? *ipc_out : out).push_back(std::move(s));
      }
    }
    return out;
  };

  bench_report report;
  if (o.sweep_quantum) {
    std::uint32_t q = std::max(1u, cfg.scheduler.quantum_steps);
    for (;;) {
      auto run_cfg = cfg;
      run_cfg.scheduler.quantum_steps = q;
      auto modes = run_all(main_reqs, run_cfg, fmt::format("quantum {}: ", q), nullptr);
      if (!modes)
        return fail(1, modes.error());
      quantum_point p{q, std::move(*modes)};
      // The criterion is overlap's rate (kvlane's mode); without it, any mode's.
      double rate = 0;
      for (auto& s : p.modes)
        if (s.mode == "overlap")
          rate = s.preemptions_per_slot_s;
      if (std::find(o.modes.begin(), o.modes.end(), actors::scheduler_mode::overlap)
          == o.modes.end())
        for (auto& s : p.modes)
          rate = std::max(rate, s.preemptions_per_slot_s);
      report.quantum_sweep.push_back(std::move(p));
      progress_line(o, fmt::format("quantum {}: {:.3f} preemptions per slot per second", q, rate));
      if (rate >= 1.0)
        break;
      if (q == 1) {
        progress_line(o, "quantum 1 reached before 1 preemption per slot per second");
        break;
      }
      q = std::max(1u, q / 2);
    }
    report.modes = report.quantum_sweep.front().modes;
    report.ratios = standard_ratios(report.modes);
    report.targets = sweep_targets(report.quantum_sweep);
  } else {
    bool have_main = false;
    for (double load : o.sweep_loads) {
      double f = 1;
      auto reqs = scaled(w, o, load, f);
      auto modes = run_all(reqs, cfg, fmt::format("load {}: ", load), nullptr);
      if (!modes)
        return fail(1, modes.error());
      load_point p{load, offered_load(reqs, w.wm).value_or(0), std::move(*modes)};
      if (main_load && std::fabs(load - *main_load) < 1e-9) {
        report.modes = p.modes;
        have_main = true;
      }
      report.load_sweep.push_back(std::move(p));
    }
    if (!have_main) {
      auto modes = run_all(main_reqs, cfg, "", &report.ipc_modes);
      if (!modes)
        return fail(1, modes.error());
      report.modes = std::move(*modes);
    }
    report.ratios = standard_ratios(report.modes);
    report.targets = comparison_targets(report.modes, overlaps);
    for (auto& t : compare_paths(report.modes, report.ipc_modes))
      report.targets.push_back(std::move(t));
  }
  report.ctx = std::move(ctx);
  report.include_timeline = o.timeline;

  // -- output ----------------------------------------------------------------------------
  std::string_view path_desc = o.path == bench_path::inproc ? "in-process engine"
                               : o.path == bench_path::ipc
                                 ? "kvlaned child via the client library"
                                 : "in process, then kvlaned via the client library (\"ipc\" columns)";
  std::string text = fmt::format(
    "\nkvlane-bench: {} requests, offered load {:.3f}, time_scale {}, sim overlap {}\n"
    "path: {}\nall times in simulated ms (wall ms x {})\n\n",
    report.ctx.requests, report.ctx.offered_load, ts,
    sim ? backends::to_string(m->backend.sim.overlap) : std::string_view{"n/a"}, path_desc, ts);
  // --path both: each mode's in-process column next to its ipc column.
  auto columns = report.modes;
  if (!report.ipc_modes.empty()) {
    columns.clear();
    for (auto& s : report.modes) {
      columns.push_back(s);
      for (auto x : report.ipc_modes)
        if (x.mode == s.mode) {
          x.mode += " ipc";
          columns.push_back(std::move(x));
        }
    }
  }
  if (o.sweep_quantum) {
    text += "quantum sweep (scheduler.quantum_steps halved until >= 1 preemption/slot/s):\n";
    text += format_quantum_sweep(report.quantum_sweep);
    text += "\n" + format_targets(report.targets);
  } else {
    text += format_table(columns, report.ratios, report.targets);
    if (!report.ipc_modes.empty())
      text += "\n" + format_path_comparison(report.modes, report.ipc_modes);
    if (!report.load_sweep.empty())
      text += "\nload sweep:\n" + format_load_sweep(report.load_sweep);
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);

  int code = 0;
  if (!o.json_out.empty()) {
    std::string err;
    if (!write_file(o.json_out, to_json(report), err))
      code = fail(1, err);
    else
      progress_line(o, "wrote " + o.json_out);
  }
  if (!o.plot_out.empty()) {
    plot_page page;
    if (o.sweep_quantum) {
      page.title = fmt::format("kvlane-bench quantum sweep ({} requests, load {:.2f})",
                               report.ctx.requests, report.ctx.offered_load);
      plot_panel a{"output tokens/s vs preemptions/s", "preemptions per simulated second",
                   "output tokens/s", false, plot_style::linespoints, {}, {}};
      plot_panel b{"output tokens/s vs quantum", "scheduler.quantum_steps (log)",
                   "output tokens/s", true, plot_style::linespoints, {}, {}};
      for (auto mode : o.modes) {
        plot_series sa{std::string{actors::to_string(mode)}, {}}, sb = sa;
        for (auto& p : report.quantum_sweep)
          for (auto& s : p.modes)
            if (s.mode == sa.title) {
              sa.points.emplace_back(s.preemptions_per_s, s.throughput_tok_s);
              sb.points.emplace_back(p.quantum_tokens, s.throughput_tok_s);
            }
        a.series.push_back(std::move(sa));
        b.series.push_back(std::move(sb));
      }
      a.key = b.key = "bottom left";
      page.panels = {std::move(a), std::move(b)};
      page.columns = 2;
      page.width = 1300;
      page.height = 550;
    } else {
      page.title = fmt::format("kvlane-bench: {} requests, offered load {:.2f}, {}",
                               report.ctx.requests, report.ctx.offered_load,
                               report.ctx.workload_source == "trace" ? report.ctx.trace_path
                                                                     : std::string{"synthetic"});
      plot_panel cdfp{"TTFT CDF", "TTFT, simulated ms (log)", "fraction of requests", true,
                      plot_style::lines, {}, {}};
      plot_panel thr{"output tokens/s", "mode", "tokens per simulated second", false,
                     plot_style::bars, {}, {}};
      plot_panel inter{"TTFT p99, interactive requests", "mode", "simulated ms", false,
                       plot_style::bars, {}, {}};
      plot_series bars{"tokens/s", {}}, ibars{"interactive TTFT p99", {}};
      for (std::size_t i = 0; i < columns.size(); ++i) {
        const auto& s = columns[i];
        cdfp.series.push_back({s.mode, cdf(s.ttft_samples_ms)});
        bars.points.emplace_back(static_cast<double>(i), s.throughput_tok_s);
        ibars.points.emplace_back(static_cast<double>(i), s.ttft_p99_interactive_ms);
        thr.bar_labels.push_back(s.mode);
        inter.bar_labels.push_back(s.mode);
      }
      thr.series.push_back(std::move(bars));
      inter.series.push_back(std::move(ibars));
      page.panels = {std::move(cdfp), std::move(thr), std::move(inter)};
      page.columns = 3;
      page.width = 1800;
      page.height = 550;
      if (!report.load_sweep.empty()) {
        plot_panel sw{"TTFT p99 vs offered load", "offered load (x capacity)",
                      "TTFT p99, simulated ms", false, plot_style::linespoints, {}, {}};
        sw.key = "top left";
        for (auto mode : o.modes) {
          plot_series s{std::string{actors::to_string(mode)}, {}};
          for (auto& p : report.load_sweep)
            for (auto& x : p.modes)
              if (x.mode == s.title)
                s.points.emplace_back(p.offered_load, x.ttft_p99_ms);
          sw.series.push_back(std::move(s));
        }
        page.panels.push_back(std::move(sw));
        page.columns = 2;
        page.width = 1400;
        page.height = 1000;
      }
    }
    std::error_code ec;
    auto parent = std::filesystem::path{o.plot_out}.parent_path();
    if (!parent.empty())
      std::filesystem::create_directories(parent, ec);
    if (auto r = render(page, o.plot_out); !r)
      std::fprintf(stderr, "kvlane-bench: plot: %s\n", r.error().c_str());
    else
      progress_line(o, "wrote " + o.plot_out);
  }
  return code;
}

int bench_main(int argc, char** argv) {
  std::vector<std::string_view> args;
  for (int i = 1; i < argc; ++i)
    args.emplace_back(argv[i]);
  auto o = parse_args(args);
  if (!o) {
    std::fprintf(stderr, "kvlane-bench: %s\n", o.error().c_str());
    return ex_usage;
  }
  return run_bench(*o);
}

} // namespace kvlane::tools::bench
