// kvlane-schemabench: one stream's decode speed with a JSON Schema against the same stream
// without one, through the OpenAI chat API (docs/benchmarks.md, "Decoding with a schema").
//
//   kvlane-schemabench --sim [--kvlaned PATH] [--rounds N] [--max-tokens N]
//   kvlane-schemabench --gguf FILE [--llama-server PATH] [--threads N] [--kvlaned PATH] ...
//
// --sim serves the simulated NPU at real-time speed (time_scale 1: each step takes the
// modeled 31 ms + 1.7 ms per token); --gguf serves the file through the llamacpp backend, and
// with --llama-server the same pair of requests also runs on llama-server (its json_schema
// goes through its own grammar sampler), on the same GGUF and settings. Requests with and
// without the schema alternate; each side's median decode rate is printed with the ratio.
// Target (issue 22): kvlane's ratio >= 0.95.

#include "common/temp_dir.hpp"
#include "tools/bench/ipc_driver.hpp"
#include "tools/bench/race_server.hpp"
#include "tools/schemabench/schema_decode.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <filesystem>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace kvlane;
using namespace kvlane::tools;

constexpr std::string_view usage =
  "usage: kvlane-schemabench (--sim | --gguf FILE [--llama-server PATH] [--threads N])\n"
  "                          [--kvlaned PATH] [--rounds N] [--max-tokens N]\n"
  "  --sim               kvlaned with a simulated NPU at real-time speed\n"
  "  --gguf FILE         kvlaned with the llamacpp backend on FILE\n"
  "  --llama-server PATH also measure llama-server on the same GGUF\n"
  "  --threads N         llama.cpp threads (default 2)\n"
  "  --kvlaned PATH      the daemon (default: kvlaned next to this program)\n"
  "  --rounds N          requests per side (default 6)\n"
  "  --max-tokens N      max_tokens of every request (default 160)\n";

struct options {
  bool sim = false;
  std::string gguf;
  std::string llama_server;
  std::string kvlaned;
  std::uint32_t threads = 2;
  std::uint32_t rounds = 6;
  std::uint32_t max_tokens = 160;
};

std::optional<std::uint32_t> parse_count(std::string_view s, std::uint32_t lo, std::uint32_t hi) {
  std::uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || v < lo || v > hi)
    return std::nullopt;
  return v;
}

expected<options, std::string> parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::optional<std::string_view> {
      if (i + 1 >= argc)
        return std::nullopt;
      return std::string_view{argv[++i]};
    };
    auto count = [&](std::uint32_t lo, std::uint32_t hi) -> expected<std::uint32_t, std::string> {
      auto v = value();
      auto n = v ? parse_count(*v, lo, hi) : std::nullopt;
      if (!n)
        return unexpected(fmt::format("{} needs a whole number in {}..{}", a, lo, hi));
      return *n;
    };
    if (a == "--sim") {
      o.sim = true;
    } else if (a == "--gguf" || a == "--llama-server" || a == "--kvlaned") {
      auto v = value();
      if (!v || v->empty())
        return unexpected(fmt::format("{} needs a path", a));
      (a == "--gguf" ? o.gguf : a == "--kvlaned" ? o.kvlaned : o.llama_server) = std::string{*v};
    } else if (a == "--threads" || a == "--rounds" || a == "--max-tokens") {
      auto n = a == "--threads" ? count(1, 256) : a == "--rounds" ? count(1, 1000) : count(8, 4096);
      if (!n)
        return unexpected(std::move(n).error());
      (a == "--threads" ? o.threads : a == "--rounds" ? o.rounds : o.max_tokens) = *n;
    } else {
      return unexpected(fmt::format("unknown argument '{}'", a));
    }
  }
  if (o.sim == !o.gguf.empty())
    return unexpected(std::string{"give one of --sim and --gguf"});
  if (o.sim && !o.llama_server.empty())
    return unexpected(std::string{"--llama-server needs --gguf (llama-server serves GGUF files)"});
  if (o.kvlaned.empty())
    o.kvlaned = bench::default_kvlaned_path();
  if (!o.gguf.empty()) { // both servers are started in directories of their own
    std::error_code ec;
    auto abs = std::filesystem::absolute(o.gguf, ec);
    if (!ec)
      o.gguf = abs.lexically_normal().string();
  }
  return o;
}

// The simulated NPU of etc/kvlane.toml at real-time speed, one model answering to "bench".
constexpr std::string_view sim_toml = R"(version = 1
[[model]]
name = "bench"
backend = "sim"
chat_format = "chatml"
[model.sim]
slots = 4
max_context = 4096
snapshot_bytes = "4MiB"
time_scale = 1.0
[store]
max_bytes = "256MiB"
)";

struct side {
  std::string label;
  std::vector<double> plain;
  std::vector<double> schema;
  std::vector<double> plain_tokens;
  std::vector<double> schema_tokens;
  std::uint32_t schema_complete = 0; ///< schema answers that ended by themselves (finish "stop")
  std::uint32_t json_ok = 0;         ///< of those, the ones whose content parses as JSON
};

expected<side, std::string> measure(const options& o, bench::server_kind kind,
                                    const std::string& exe, const std::string& config) {
  bench::race_server_options so;
  so.kind = kind;
  so.exe = exe;
  so.settings.gguf = o.gguf;
  so.settings.threads = o.threads;
  so.settings.threads_batch = o.threads;
  so.kvlane_config = config;
  so.progress = [](std::string_view line) { std::fprintf(stderr, "  %.*s\n", int(line.size()), line.data()); };
  auto server = bench::race_server::start(so);
  if (!server)
    return unexpected(std::move(server).error());
  bench::http_client client{(*server)->endpoint(), 2};
  side s;
  s.label = std::string{bench::to_string(kind)};
  schemabench::decode_request r;
  r.model = so.settings.model_name;
  r.prompt = "Write the incident report of this morning's outage as JSON.";
  r.max_tokens = o.max_tokens;
  const auto bound = [] { return bench::http_client::clock::now() + std::chrono::minutes(5); };
  // One warm-up of each kind (first-use costs: a grammar vocabulary, a schema compile).
  for (bool with_schema : {false, true}) {
    r.with_schema = with_schema;
    if (auto w = schemabench::run_decode(client, r, bound()); !w)
      return unexpected(fmt::format("{} warm-up ({}): {}\n{}", s.label,
                                    with_schema ? "schema" : "no schema", w.error(), (*server)->tail()));
  }
  for (std::uint32_t i = 0; i < 2 * o.rounds; ++i) {
    r.with_schema = i % 2 == 1;
    auto got = schemabench::run_decode(client, r, bound());
    if (!got)
      return unexpected(fmt::format("{} ({}): {}", s.label, r.with_schema ? "schema" : "no schema", got.error()));
    const double rate = got->decode_tok_s();
    if (!(rate > 0))
      return unexpected(fmt::format("{}: a stream too short to time ({} tokens)", s.label, got->tokens));
    (r.with_schema ? s.schema : s.plain).push_back(rate);
    (r.with_schema ? s.schema_tokens : s.plain_tokens).push_back(static_cast<double>(got->tokens));
    if (r.with_schema && got->finish_reason == "stop") {
      ++s.schema_complete;
      s.json_ok += nlohmann::json::parse(got->text, nullptr, false).is_discarded() ? 0 : 1;
    }
    std::fprintf(stderr, "  %s %s: %llu tokens, %.1f tok/s, %s\n", s.label.c_str(),
                 r.with_schema ? "schema   " : "no schema", static_cast<unsigned long long>(got->tokens),
                 rate, got->finish_reason.c_str());
    if (i < 2) // what each kind of answer looks like, to see that the schema was applied
      std::fprintf(stderr, "    %.100s\n", got->text.c_str());
  }
  (void)(*server)->stop();
  return s;
}

} // namespace

int main(int argc, char** argv) {
  auto o = parse(argc, argv);
  if (!o) {
    std::fprintf(stderr, "kvlane-schemabench: %s\n%.*s", o.error().c_str(), int(usage.size()), usage.data());
    return 64;
  }
  std::optional<temp_dir> dir;
  std::string config;
  if (o->sim) {
    auto d = temp_dir::create("kvlane-schemabench");
    auto path = d ? d->write("kvlane.toml", sim_toml) : expected<std::string, std::string>{unexpected(d.error())};
    if (!path) {
      std::fprintf(stderr, "kvlane-schemabench: %s\n", path.error().c_str());
      return 1;
    }
    config = *path;
    dir = std::move(*d);
  }
  std::vector<side> sides;
  auto k = measure(*o, bench::server_kind::kvlane, o->kvlaned, config);
  if (!k) {
    std::fprintf(stderr, "kvlane-schemabench: %s\n", k.error().c_str());
    return 1;
  }
  sides.push_back(std::move(*k));
  if (!o->llama_server.empty()) {
    auto l = measure(*o, bench::server_kind::llama_server, o->llama_server, "");
    if (!l) {
      std::fprintf(stderr, "kvlane-schemabench: %s\n", l.error().c_str());
      return 1;
    }
    sides.push_back(std::move(*l));
  }
  std::printf("model: %s; %u requests per side, max_tokens %u, greedy, alternating\n",
              o->sim ? "simulated NPU at real-time speed" : o->gguf.c_str(), o->rounds, o->max_tokens);
  std::printf("%-13s %14s %14s %14s %14s %8s %10s\n", "server", "tok/s no schema", "tok/s schema",
              "tokens no sch.", "tokens schema", "ratio", "JSON ok/ended");
  for (const auto& s : sides) {
    const double p = schemabench::median(s.plain), c = schemabench::median(s.schema);
    std::printf("%-13s %14.1f %14.1f %14.0f %14.0f %7.2fx %7u/%u\n", s.label.c_str(), p, c,
                schemabench::median(s.plain_tokens), schemabench::median(s.schema_tokens), c / p,
                s.json_ok, s.schema_complete);
  }
  const double ratio = schemabench::median(sides[0].schema) / schemabench::median(sides[0].plain);
  std::printf("target: kvlane's decode with a schema >= 0.95x without: %.2fx %s\n", ratio,
              ratio >= 0.95 ? "PASS" : "MISS");
  if (sides.size() == 2)
    std::printf("kvlane with a schema / llama-server with the same schema: %.2fx\n",
                schemabench::median(sides[0].schema) / schemabench::median(sides[1].schema));
  return 0;
}
