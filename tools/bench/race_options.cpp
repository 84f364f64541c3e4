#include "tools/bench/race_options.hpp"

#include "tools/bench/bench_options.hpp"
#include "tools/bench/comma_list.hpp"
#include "tools/bench/http_client.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>

namespace kvlane::tools::bench {

namespace {

constexpr std::string_view usage_text = R"(
over HTTP (docs/benchmarks.md, "Raced against llama-server"):
  --path http             drive one running OpenAI-compatible server with the workload of
                          the flags above (streamed /v1/completions, one thread per request)
  --url http://HOST:PORT  --path http: the server
  --server KIND           --path http: kvlane (default) or llama-server (how to ask)
  --model NAME            --path http: the model name to send (default bench)
  --race-llama            start kvlaned, then llama-server, on one GGUF with the same
                          settings, race them on each workload and print both side by side
                          with the targets; writes --json
  --gguf PATH             the model file both servers load
  --llama-server PATH     llama.cpp's llama-server binary
  --kvlaned PATH          the daemon (default: kvlaned next to this program)
  --kvlane-config PATH    a kvlane.toml for kvlaned instead of the generated llamacpp one
                          (its runtime_dir and [http] listen are replaced)
  --threads N             -t and [model.llamacpp] threads (default 2)
  --threads-batch N       -tb and threads_batch (default: --threads)
  --parallel N            slots / parallel sequences (default 4)
  --ctx-per-seq N         tokens per slot; llama-server -c is N x --parallel (default 2048)
  --batch N               -b, -ub, batch and [scheduler] max_step_tokens (default 512)
  --kv-type T             f16 (default), q8_0 or f32
  --flash-attn M          auto (default), on or off
  --cache-ram MIB         llama-server --cache-ram and kvlane [store] max_bytes (default 2048)
  --servers LIST          which servers race, in order (default llama-server,kvlane); the
                          first one's decode and prefill speeds set the arrival rate
  --race-workloads LIST   decode,prefill,azure,mooncake (default all four)
  --azure-trace PATH      default ../shared/traces/azure-llm-2023-conv.csv
  --azure-requests N      first rows of it (default 100)
  --mooncake-trace PATH   default ../shared/traces/mooncake-conversation.jsonl
  --mooncake-rows N       first rows of it, before --sample-conversations (default 0 =
                          all; the race keeps 0.01 of its conversations unless given)
  --decode-tokens N       decode workload: output tokens (default 256)
  --decode-prompt N       decode workload: prompt tokens (default 32)
  --repeats N             decode and prefill workloads: requests, one at a time (default 8;
                          the figure is their median)
  --trace-rounds N        trace workloads: whole runs on each server, pooled into one
                          figure (default 2)
  Rounds alternate the servers' order (A B, B A, A B, ...), so that a slow spell of the
  machine or a warm page cache favours neither side.
  --output-scale F        trace workloads: output lengths x F (race default 0.25, else 1)
  Race arrivals: --load L (default 1.0) against the capacity the first server's decode
  and prefill speeds imply, or --rate-scale X; --input-scale (default: fitted to
  --ctx-per-seq), --interactive-share, --seed, --turns and --timeout apply.
)";

template <class T>
bool parse_number(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc{} && p == s.data() + s.size();
}

std::string absolute(std::string_view path) {
  std::error_code ec;
  auto p = std::filesystem::absolute(std::filesystem::path{std::string{path}}, ec);
  return ec ? std::string{path} : p.lexically_normal().string();
}

} // namespace

std::string_view race_usage() noexcept {
  return usage_text;
}

expected<race_flag, std::string> parse_race_flag(std::span<const std::string_view> args,
                                                 std::size_t& i, race_options& o) {
  const auto a = args[i];
  auto fail = [](std::string m) { return unexpected(std::move(m)); };
  auto value = [&]() -> std::optional<std::string_view> {
    if (i + 1 >= args.size())
      return std::nullopt;
    return args[++i];
  };
  auto count = [&](auto& out, std::uint64_t lo, std::uint64_t hi) -> bool {
    auto v = value();
    std::uint64_t x = 0;
    if (!v || !parse_number(*v, x) || x < lo || x > hi)
      return false;
    out = static_cast<std::remove_reference_t<decltype(out)>>(x);
    return true;
  };
  auto path = [&](std::string& out) -> bool {
    auto v = value();
    if (!v || v->empty())
      return false;
    out = absolute(*v);
    return true;
  };
  auto& s = o.settings;
  if (a == "--race-llama") {
    o.race_llama = true;
  } else if (a == "--url") {
    auto v = value();
    if (!v)
      return fail("--url needs http://HOST:PORT");
    if (auto ep = parse_http_url(*v); !ep)
      return fail("--url: " + ep.error());
    o.url = *v;
  } else if (a == "--server") {
    auto v = value();
    auto k = v ? parse_server_kind(*v) : std::nullopt;
    if (!k)
      return fail("--server needs kvlane or llama-server");
    o.server = *k;
  } else if (a == "--gguf") {
    if (!path(s.gguf))
      return fail("--gguf needs a path");
  } else if (a == "--llama-server") {
    if (!path(o.llama_server_path))
      return fail("--llama-server needs a path");
  } else if (a == "--kvlane-config") {
    if (!path(o.kvlane_config))
      return fail("--kvlane-config needs a path");
  } else if (a == "--threads") {
    if (!count(s.threads, 1, 1024))
      return fail("--threads needs a whole number in 1..1024");
  } else if (a == "--threads-batch") {
    if (!count(s.threads_batch, 1, 1024))
      return fail("--threads-batch needs a whole number in 1..1024");
    o.threads_batch_given = true;
  } else if (a == "--parallel") {
    if (!count(s.parallel, 1, 256))
      return fail("--parallel needs a whole number in 1..256");
  } else if (a == "--ctx-per-seq") {
    if (!count(s.ctx_per_seq, 64, 1u << 20))
      return fail("--ctx-per-seq needs a whole number of tokens in 64..1048576");
  } else if (a == "--batch") {
    if (!count(s.batch, 1, 65536))
      return fail("--batch needs a whole number in 1..65536");
  } else if (a == "--kv-type") {
    auto v = value();
    if (!v || (*v != "f16" && *v != "q8_0" && *v != "f32"))
      return fail("--kv-type needs f16, q8_0 or f32");
    s.kv_type = *v;
  } else if (a == "--flash-attn") {
    auto v = value();
    if (!v || (*v != "auto" && *v != "on" && *v != "off"))
      return fail("--flash-attn needs auto, on or off");
    s.flash_attn = *v;
  } else if (a == "--cache-ram") {
    if (!count(s.cache_ram_mib, 1, 1u << 24))
      return fail("--cache-ram needs a whole number of MiB in 1..16777216");
  } else if (a == "--servers") {
    auto v = value();
    if (!v)
      return fail("--servers needs a comma list of kvlane,llama-server");
    o.servers.clear();
    for (auto name : split_list(*v, ',')) {
      auto k = parse_server_kind(name);
      if (!k)
        return fail(fmt::format("--servers: unknown server '{}' (known: kvlane, llama-server)", name));
      if (std::find(o.servers.begin(), o.servers.end(), *k) == o.servers.end())
        o.servers.push_back(*k);
    }
  } else if (a == "--race-workloads") {
    auto v = value();
    if (!v)
      return fail("--race-workloads needs a comma list of decode,prefill,azure,mooncake");
    std::vector<std::string> picked;
    for (auto name : split_list(*v, ',')) {
      if (std::find(std::begin(race_workload_names), std::end(race_workload_names), name)
          == std::end(race_workload_names))
        return fail(fmt::format("--race-workloads: unknown workload '{}' (known: decode, prefill, "
                                "azure, mooncake)",
                                name));
      picked.emplace_back(name);
    }
    o.workloads.clear(); // in the race's own order
    for (auto name : race_workload_names)
      if (std::find(picked.begin(), picked.end(), name) != picked.end())
        o.workloads.emplace_back(name);
  } else if (a == "--azure-trace") {
    if (!path(o.azure_trace))
      return fail("--azure-trace needs a path");
  } else if (a == "--mooncake-trace") {
    if (!path(o.mooncake_trace))
      return fail("--mooncake-trace needs a path");
  } else if (a == "--azure-requests") {
    if (!count(o.azure_requests, 1, 1'000'000))
      return fail("--azure-requests needs a whole number in 1..1000000");
  } else if (a == "--mooncake-rows") {
    if (!count(o.mooncake_rows, 0, 1'000'000))
      return fail("--mooncake-rows needs a whole number in 0..1000000 (0 = every row)");
  } else if (a == "--decode-tokens") {
    if (!count(o.decode_tokens, 2, 1u << 20))
      return fail("--decode-tokens needs a whole number in 2..1048576");
  } else if (a == "--decode-prompt") {
    if (!count(o.decode_prompt, 1, 1u << 20))
      return fail("--decode-prompt needs a whole number in 1..1048576");
  } else if (a == "--repeats") {
    if (!count(o.repeats, 1, 1000))
      return fail("--repeats needs a whole number in 1..1000");
  } else if (a == "--trace-rounds") {
    if (!count(o.trace_rounds, 1, 100))
      return fail("--trace-rounds needs a whole number in 1..100");
  } else if (a == "--output-scale") {
    auto v = value();
    if (!v || !parse_number(*v, o.output_scale) || !std::isfinite(o.output_scale)
        || !(o.output_scale > 0) || o.output_scale > 1000)
      return fail("--output-scale needs a number in (0, 1000]");
    o.output_scale_given = true;
  } else {
    return race_flag::not_mine;
  }
  return race_flag::taken;
}

expected<void, std::string> check_race_options(bench_options& o) {
  auto& r = o.race;
  auto fail = [](std::string m) { return unexpected(std::move(m)); };
  const bool http = o.path == bench_path::http;
  if (!r.threads_batch_given)
    r.settings.threads_batch = r.settings.threads;
  if (!r.race_llama && !r.output_scale_given)
    r.output_scale = 1.0;
  if (r.race_llama && http)
    return fail("--race-llama starts its own servers: it cannot be combined with --path http");
  if (!r.race_llama && !http) {
    if (!r.url.empty() || !r.settings.gguf.empty() || !r.llama_server_path.empty()
        || !r.kvlane_config.empty() || r.output_scale_given)
      return fail("--url needs --path http; --gguf, --llama-server and --kvlane-config need "
                  "--race-llama; --output-scale needs one of them");
    return {};
  }
  const std::string_view mode = http ? "--path http" : "--race-llama";
  if (!o.reuse.empty() || !o.store_splits.empty() || !o.sweep_loads.empty() || o.sweep_quantum
      || !o.devices.empty() || o.modes_given || !o.plot_out.empty())
    return fail(fmt::format("{} drives whole servers: --reuse, --store-split, --sweep, "
                            "--sweep-quantum, --devices, --modes and --plot do not apply",
                            mode));
  if (o.load && o.rate_scale)
    return fail("--load and --rate-scale both scale arrivals: give one");
  if (auto ok = check_race_settings(r.settings); !ok)
    return ok;
  if (http) {
    if (r.url.empty())
      return fail("--path http needs --url http://HOST:PORT");
    if (o.load)
      return fail("--path http replays the workload at its own pace (or --rate-scale X): "
                  "--load needs a capacity, which only --race-llama measures");
    if (o.synthetic && !o.trace_path.empty())
      return fail("--synthetic and --trace are exclusive");
    if (!o.synthetic && o.trace_path.empty())
      return fail("give --trace PATH or --synthetic (see --help)");
    if (o.synthetic && o.requests == 0)
      return fail("--requests must be at least 1 with --synthetic");
    if (o.model.empty())
      o.model = "bench";
    return {};
  }
  if (o.synthetic || !o.trace_path.empty())
    return fail("--race-llama runs its own workloads (--race-workloads, --azure-trace, "
                "--mooncake-trace): --trace and --synthetic do not apply");
  if (r.kvlane_config.empty() && r.settings.gguf.empty())
    return fail("--race-llama needs --gguf PATH (or --kvlane-config PATH with --servers kvlane)");
  const bool llama = std::find(r.servers.begin(), r.servers.end(), server_kind::llama_server)
                     != r.servers.end();
  if (llama && r.settings.gguf.empty())
    return fail("--race-llama with llama-server needs --gguf PATH");
  if (llama && r.llama_server_path.empty())
    return fail("--race-llama needs --llama-server PATH (llama.cpp's server binary)");
  if (r.workloads.empty())
    return fail("--race-workloads needs at least one workload");
  if (!o.model.empty())
    r.settings.model_name = o.model;
  else
    o.model = r.settings.model_name;
  if (!o.load && !o.rate_scale)
    o.load = r.default_load;
  return {};
}

} // namespace kvlane::tools::bench
