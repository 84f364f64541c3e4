#include "tools/bench/bench_options.hpp"

#include "tools/bench/comma_list.hpp"

#include "common/config_reader.hpp"
#include "common/logging.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

namespace kvlane::tools::bench {

namespace {

constexpr std::string_view usage_text = R"(usage: kvlane-bench (--trace PATH | --synthetic) [options]

Replays a workload against the serving core once per scheduling mode (same
requests, same seed, a fresh engine or daemon each) and reports throughput,
latency percentiles, NPU busy time, transfers and preemptions, with ratios against
the `free-transfer` mode and of `overlap` against the others. Times are simulated
milliseconds (wall ms x time_scale). See docs/benchmarks.md.

workload:
  --trace PATH            a trace, by extension: .jsonl = the Mooncake conversation trace
                          (timestamp, input_length, output_length, hash_ids: prompts
                          are built from the blocks), else CSV:
                          TIMESTAMP,ContextTokens,GeneratedTokens
  --requests N            first N rows (or N synthetic requests); 0 = all rows (default 200)
  --input-scale F         multiply prompt lengths (and the 512-token Mooncake block) by F,
                          e.g. 0.125 for a 4,096-token model (default 1)
  --sample-conversations F  Mooncake: keep every request of a seeded share F of the
                          conversations (requests sharing their first non-system block)
  --users WHO             Mooncake: conversation (one user per conversation, default) or
                          one (a single user sends them all); reuse is scoped per user
  --turns causal|open     Mooncake: causal (default) sends a turn at its trace time or,
                          if later, when the previous turn of its conversation ended (no
                          prompt quotes an answer that does not exist yet); open sends
                          every request at its trace time
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
  --modes LIST            comma list of fcfs,prio-fcfs,recompute,sync,overlap,
                          free-transfer (default all six; `ideal` is accepted for
                          free-transfer; --sweep-quantum: sync,overlap,free-transfer)
  --sweep LOADS           also run every mode at each load, e.g. 0.5,0.75,1.0,1.25
  --reuse LIST            compare conversation reuse policies instead of the modes, in
                          one mode (--modes, default overlap): off, slot (KV kept
                          only in its slot), store (also in the snapshot store, cost-
                          aware eviction) and store-recency (the store with LRU
                          eviction); e.g. off,slot,store. In process only
  --store-split LIST      two models built from the profile's model (<model>-a, -b, same
                          sim) share the snapshot store; the trace's conversations go to
                          them in alternating bursts (--burst-s); compare shared (the
                          elastic pool) and static (store_floor_bytes = store_cap_bytes =
                          half the store each), e.g. shared,static. Mooncake trace, in
                          process, one reuse policy (--reuse, default store)
  --burst-s S             --store-split: a conversation goes to model floor(t / S) mod 2,
                          t its first request's arrival in simulated s (default 300)
  --restart LIST          fdstore,disk,swap: the same requests through kvlaned children with
                          reuse through the store, half way drained then restarted keeping
                          the store in the fd store (fdstore; this program plays systemd),
                          restarted with the disk tier only (disk), or the model swapped
                          out by a request to a second one under max_loaded = 1 (swap);
                          each against a baseline run that pauses without an event.
                          Mooncake trace, one mode (--modes, default overlap)
  --shapes LIST           the grid: conv,mooncake,prefill-heavy,decode-heavy (the traces
                          from --azure-trace and --mooncake-trace), each at every --sweep
                          load (or --load) under every --devices assumption, all modes
                          in each cell on the same requests; --requests per shape
  --sweep-quantum         halve scheduler.quantum_steps from its configured value until
                          a mode preempts >= 1 time per slot per simulated second
  --path inproc|ipc|both|http  inproc: an in-process engine (default); ipc: a kvlaned
                          child per mode, driven through the client library; both: each
                          mode in process then via ipc, with the ipc/inproc ratio; http:
                          a running server over its OpenAI API (below)
  --kvlaned PATH          the daemon for ipc/both (default: kvlaned next to this program)
  --config PATH           kvlane.toml to use (default: the built-in bench profile)
  --print-profile         print the built-in profile (a kvlane.toml) and exit
  --model NAME            model to drive (default: the first)
  --time-scale S          sim: simulated ms per wall ms (overrides the profile)
  --sim-overlap MODE      sim: full, none or shared (overrides the profile)
  --snapshot-bytes SIZE   sim: KV bytes of a full slot, e.g. 64MiB (overrides the profile)
  --store-bytes SIZE      [store] max_bytes, e.g. 4GiB (overrides the profile)
  --warm-pool-bytes SIZE  [store] warm_pool_bytes, e.g. 4GiB (at most the store)
  --prefault-warm-pool    [store] prefault_warm_pool = true: commit the pool before the run
  --devices LIST          sim: run the comparison once per overlap assumption, e.g.
                          none,shared,full (side by side in the report and JSON)
  --slo-interactive T,P   interactive SLO: TTFT <= T ms and TPOT <= P ms (default 2000,200)
  --slo-batch T,P         batch SLO (default 60000,1000)
  --timeout SECONDS       wall bound on one mode's run (default: 60 + 4x the arrival span)

output:
  --json OUT              write the report as JSON
  --plot OUT.png          draw the charts with gnuplot (the script goes to OUT.gp)
  --timeline              add each mode's scheduler gauges (every ~100 ms wall) to the JSON
  --log-level LEVEL       daemon loggers' level (default warn)
  --quiet                 no progress lines on stderr
  --help                  this text
)";

template <class T>
bool parse_number(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc{} && p == s.data() + s.size();
}

std::optional<backends::transfer_overlap> parse_overlap(std::string_view s) {
  using backends::transfer_overlap;
  for (auto d : {transfer_overlap::none, transfer_overlap::shared, transfer_overlap::full})
    if (backends::to_string(d) == s)
      return d;
  return std::nullopt;
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

} // namespace

bool is_mooncake_trace(std::string_view path) noexcept {
  constexpr std::string_view ext = ".jsonl";
  return path.size() > ext.size() && path.substr(path.size() - ext.size()) == ext;
}

std::string_view usage() noexcept {
  static const std::string text = std::string{usage_text} + std::string{race_usage()};
  return text;
}

expected<bench_options, std::string> parse_args(std::span<const std::string_view> args) {
  bench_options o;
  o.command_line = "kvlane-bench";
  for (auto a : args)
    o.command_line += " " + shell_quote(a);
  auto fail = [](std::string msg) { return unexpected(std::move(msg)); };
  bool sample_given = false, users_given = false, turns_given = false, burst_given = false;
  bool synth_given = false; // a synthetic length or rate flag
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
    } else if (a == "--input-scale") {
      if (!positive(o.input_scale, 1000))
        return fail("--input-scale needs a number in (0, 1000]");
      o.input_scale_given = true;
    } else if (a == "--sample-conversations") {
      auto v = value();
      if (!v || !parse_number(*v, o.sample_conversations) || !(o.sample_conversations > 0)
          || o.sample_conversations > 1)
        return fail("--sample-conversations needs a share in (0, 1]");
      sample_given = true;
      o.sample_given = true;
    } else if (a == "--users") {
      auto v = value();
      auto u = v ? parse_trace_users(*v) : std::nullopt;
      if (!u)
        return fail("--users needs conversation or one");
      o.users = *u;
      users_given = true;
    } else if (a == "--turns") {
      auto v = value();
      if (!v || (*v != "causal" && *v != "open"))
        return fail("--turns needs causal or open");
      o.causal_turns = *v == "causal";
      turns_given = true;
    } else if (a == "--reuse") {
      auto v = value();
      if (!v)
        return fail("--reuse needs a comma list of off,slot,store,store-recency");
      auto list = parse_reuse_list(*v);
      if (!list)
        return fail("--reuse: " + list.error());
      o.reuse = std::move(*list);
    } else if (a == "--store-split") {
      auto v = value();
      if (!v)
        return fail("--store-split needs a comma list of shared,static");
      auto list = parse_store_split_list(*v);
      if (!list)
        return fail("--store-split: " + list.error());
      o.store_splits = std::move(*list);
    } else if (a == "--restart") {
      auto v = value();
      if (!v)
        return fail("--restart needs a comma list of fdstore,disk,swap");
      auto list = parse_restart_list(*v);
      if (!list)
        return fail("--restart: " + list.error());
      o.restarts = std::move(*list);
    } else if (a == "--burst-s") {
      if (!positive(o.burst_s, 1e9))
        return fail("--burst-s needs a positive number of simulated seconds");
      burst_given = true;
    } else if (a == "--snapshot-bytes" || a == "--store-bytes" || a == "--warm-pool-bytes") {
      auto v = value();
      auto bytes = v ? parse_byte_size(*v) : std::nullopt;
      if (!bytes)
        return fail(fmt::format("{} needs a byte size such as 64MiB or 4GiB", a));
      (a == "--snapshot-bytes" ? o.snapshot_bytes
       : a == "--store-bytes"  ? o.store_bytes
                               : o.warm_pool_bytes) = *bytes;
    } else if (a == "--prefault-warm-pool") {
      o.prefault_warm_pool = true;
    } else if (a == "--synthetic") {
      o.synthetic = true;
    } else if (a == "--requests") {
      auto v = value();
      if (!v || !parse_number(*v, o.requests) || o.requests > 10'000'000)
        return fail("--requests needs a whole number (0 = every row)");
    } else if (a == "--rate") {
      synth_given = true;
      if (!positive(o.synth.rate_per_s))
        return fail("--rate needs a positive number (requests per simulated second)");
    } else if (a == "--prompt-mean") {
      synth_given = true;
      if (!positive(o.synth.prompt_mean, 1e7))
        return fail("--prompt-mean needs a positive number of tokens");
    } else if (a == "--output-mean") {
      synth_given = true;
      if (!positive(o.synth.output_mean, 1e7))
        return fail("--output-mean needs a positive number of tokens");
    } else if (a == "--length-dist") {
      synth_given = true;
      auto v = value();
      if (v == "lognormal")
        o.synth.dist = length_dist::lognormal;
      else if (v == "exponential")
        o.synth.dist = length_dist::exponential;
      else
        return fail("--length-dist needs lognormal or exponential");
    } else if (a == "--length-sigma") {
      synth_given = true;
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
        return fail("--modes needs a comma list of fcfs,prio-fcfs,recompute,sync,overlap,"
                    "free-transfer");
      o.modes.clear();
      for (auto name : split_list(*v, ',')) {
        auto m = actors::parse_scheduler_mode(name);
        if (!m)
          return fail(fmt::format("--modes: unknown mode '{}' (known: fcfs, prio-fcfs, recompute, "
                                  "sync, overlap, free-transfer)",
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
      auto d = v ? parse_overlap(*v) : std::nullopt;
      if (!d)
        return fail("--sim-overlap needs full, none or shared");
      o.sim_overlap = *d;
    } else if (a == "--devices") {
      auto v = value();
      if (!v)
        return fail("--devices needs a comma list of none,shared,full");
      o.devices.clear();
      for (auto name : split_list(*v, ',')) {
        auto d = parse_overlap(name);
        if (!d)
          return fail(fmt::format("--devices: unknown overlap '{}' (known: none, shared, full)",
                                  name));
        if (std::find(o.devices.begin(), o.devices.end(), *d) == o.devices.end())
          o.devices.push_back(*d);
      }
    } else if (a == "--slo-interactive" || a == "--slo-batch") {
      auto v = value();
      if (!v)
        return fail(fmt::format("{} needs TTFT_MS,TPOT_MS", a));
      auto b = parse_slo_bound(*v);
      if (!b)
        return fail(fmt::format("{}: {}", a, b.error()));
      (a == "--slo-interactive" ? o.slo.interactive : o.slo.batch) = *b;
      o.slo_given = true;
    } else if (a == "--path") {
      auto v = value();
      if (v == "inproc")
        o.path = bench_path::inproc;
      else if (v == "ipc")
        o.path = bench_path::ipc;
      else if (v == "both")
        o.path = bench_path::both;
      else if (v == "http")
        o.path = bench_path::http;
      else
        return fail("--path needs inproc, ipc, both or http");
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
      for (auto s : split_list(*v, ',')) {
        double x = 0;
        if (!parse_number(s, x) || !(x > 0) || x > 1000)
          return fail(fmt::format("--sweep: '{}' is not a positive load", s));
        o.sweep_loads.push_back(x);
      }
    } else if (a == "--shapes") {
      auto v = value();
      if (!v)
        return fail("--shapes needs a comma list of conv,mooncake,prefill-heavy,decode-heavy");
      auto list = parse_shape_list(*v);
      if (!list)
        return fail("--shapes: " + list.error());
      o.shapes = std::move(*list);
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
    } else if (auto r = parse_race_flag(args, i, o.race); !r) {
      return fail(r.error());
    } else if (*r == race_flag::not_mine) {
      return fail(fmt::format("unknown argument '{}' (see --help)", a));
    }
  }
  if (o.help || o.print_profile)
    return o;
  if (!o.restarts.empty() && (o.path == bench_path::http || o.race.race_llama || !o.shapes.empty()))
    return fail("--restart drives its own kvlaned children: it cannot be combined with --path "
                "http, --race-llama or --shapes");
  if (!o.shapes.empty() && (o.race.race_llama || o.path == bench_path::http
                            || o.path == bench_path::both))
    return fail("--shapes runs the grid in process or through kvlaned: give --path inproc or ipc "
                "(not both, http or --race-llama)");
  if (auto ok = check_race_options(o); !ok)
    return fail(ok.error());
  if (o.path == bench_path::http || o.race.race_llama) {
    const bool mooncake_trace = !o.synthetic && is_mooncake_trace(o.trace_path);
    if ((sample_given || users_given || turns_given) && o.path == bench_path::http && !mooncake_trace)
      return fail("--sample-conversations, --users and --turns need a Mooncake conversation trace "
                  "(--trace FILE.jsonl)");
    if (users_given)
      return fail("--users scopes reuse per user in process; over HTTP every request is one "
                  "client's");
    return o;
  }
  if (!o.shapes.empty()) {
    if (o.synthetic || !o.trace_path.empty())
      return fail("--shapes builds each shape's requests (the traces from --azure-trace and "
                  "--mooncake-trace): --trace and --synthetic do not apply");
    if (synth_given || o.input_scale_given || sample_given || users_given || turns_given)
      return fail("--shapes fixes each shape's lengths and sampling: --rate, --prompt-mean, "
                  "--output-mean, --length-dist, --length-sigma, --input-scale, "
                  "--sample-conversations, --users and --turns do not apply");
    if (!o.reuse.empty() || !o.store_splits.empty() || o.sweep_quantum || o.rate_scale)
      return fail("--shapes compares the modes at each load (--sweep or --load): --reuse, "
                  "--store-split, --sweep-quantum and --rate-scale do not apply");
    if (o.requests == 0)
      return fail("--shapes needs --requests of at least 1 (requests per shape)");
    if (o.modes.empty())
      return fail("--modes needs at least one mode");
    return o;
  }
  if (o.load && o.rate_scale)
    return fail("--load and --rate-scale both scale arrivals: give one");
  if (!o.sweep_loads.empty() && o.rate_scale)
    return fail("--sweep scales arrivals to each load: it cannot be combined with --rate-scale");
  if (!o.devices.empty() && o.sweep_quantum)
    return fail("--devices and --sweep-quantum are exclusive");
  if (!o.sweep_loads.empty() && o.sweep_quantum)
    return fail("--sweep and --sweep-quantum are separate runs: give one");
  if (o.path == bench_path::both && (!o.sweep_loads.empty() || o.sweep_quantum))
    return fail("--path both compares the paths at one load: it cannot be combined with --sweep "
                "or --sweep-quantum (run a sweep with --path inproc or ipc)");
  if (o.synthetic && !o.trace_path.empty())
    return fail("--synthetic and --trace are exclusive");
  if (!o.synthetic && o.trace_path.empty())
    return fail("give --trace PATH or --synthetic (see --help)");
  const bool mooncake = !o.synthetic && is_mooncake_trace(o.trace_path);
  if ((sample_given || users_given || turns_given) && !mooncake)
    return fail("--sample-conversations, --users and --turns need a Mooncake conversation trace "
                "(--trace FILE.jsonl)");
  if (burst_given && o.store_splits.empty())
    return fail("--burst-s applies to --store-split");
  if (!o.restarts.empty()) {
    if (!mooncake)
      return fail("--restart replays a conversation trace's turns across the restart: give "
                  "--trace FILE.jsonl");
    if (!o.reuse.empty() || !o.store_splits.empty() || !o.sweep_loads.empty() || o.sweep_quantum
        || !o.devices.empty())
      return fail("--restart compares its runs in one configuration: it cannot be combined with "
                  "--reuse, --store-split, --sweep, --sweep-quantum or --devices");
    if (o.path == bench_path::both)
      return fail("--restart runs through kvlaned children only: give --path ipc (or no --path)");
    if (users_given && o.users != trace_users::one)
      return fail("--restart sends every request as this program's user: --users conversation "
                  "cannot be honoured (give --users one or no --users)");
    if (!o.plot_out.empty())
      return fail("--plot draws the mode comparison; --restart prints and writes JSON only");
    o.path = bench_path::ipc;
    o.users = trace_users::one; // achievable reuse counted as the daemon scopes it
    if (!o.modes_given)
      o.modes = {actors::scheduler_mode::overlap};
    if (o.modes.size() != 1)
      return fail("--restart runs in one mode: give --modes with a single mode");
  }
  if (!o.store_splits.empty()) {
    if (!mooncake)
      return fail("--store-split splits a conversation trace's conversations between two models: "
                  "give --trace FILE.jsonl");
    if (o.reuse.empty())
      o.reuse = *parse_reuse_list("store");
    if (o.reuse.size() != 1 || o.reuse.front().mode != actors::reuse_mode::store)
      return fail("--store-split compares how two models share the store under one reuse policy: "
                  "give --reuse store or --reuse store-recency (or no --reuse)");
  }
  if (!o.reuse.empty()) {
    const std::string_view flag = o.store_splits.empty() ? "--reuse" : "--store-split";
    if (o.path != bench_path::inproc)
      return fail(fmt::format("{} runs in process only (--path inproc): through kvlaned every "
                              "request would come from this program's user, so reuse scoping "
                              "could not be honoured",
                              flag));
    if (!o.sweep_loads.empty() || o.sweep_quantum || !o.devices.empty())
      return fail(fmt::format("{} compares its runs in one mode: it cannot be combined with "
                              "--sweep, --sweep-quantum or --devices",
                              flag));
    if (!o.plot_out.empty())
      return fail("--plot draws the mode comparison; --reuse and --store-split print and write "
                  "JSON only");
    if (!o.modes_given)
      o.modes = {actors::scheduler_mode::overlap};
    if (o.modes.size() != 1)
      return fail(fmt::format("{} runs in one mode: give --modes with a single mode", flag));
  }
  if (o.synthetic && o.requests == 0)
    return fail("--requests must be at least 1 with --synthetic");
  if (o.modes.empty())
    return fail("--modes needs at least one mode");
  if (o.sweep_quantum && !o.modes_given)
    o.modes = {actors::scheduler_mode::sync, actors::scheduler_mode::overlap,
               actors::scheduler_mode::free_transfer};
  if (o.sweep_quantum) // only the MLFQ modes have a quantum
    std::erase_if(o.modes, [](actors::scheduler_mode m) {
      return actors::rules_of(m).order != actors::rank_order::mlfq;
    });
  if (o.modes.empty())
    return fail("--sweep-quantum needs an MLFQ mode (sync, overlap or free-transfer)");
  return o;
}

} // namespace kvlane::tools::bench
