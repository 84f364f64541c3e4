#include "tools/cli.hpp"

#include "backends/factory.hpp"
#include "daemon/config.hpp"
#include "tools/admin_client.hpp"
#include "tools/chat_command.hpp"
#include "tools/client_exit_code.hpp"
#include "tools/probe.hpp"
#include "tools/tokenize_command.hpp"

#include <kvlane/client.hpp>

#include <fmt/format.h>

#include <atomic>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <unistd.h>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools {

namespace {

// The command list; each command prints its own options with --help.
constexpr std::string_view usage_text =
  "usage: kvlane <command> [options]\n"
  "       kvlane <command> --help     the command's own usage and options\n"
  "\n"
  "commands:\n"
  "  run        send a prompt to kvlaned and stream the answer to stdout\n"
  "  chat       talk with a model; kvlaned keeps the conversation (/bye leaves,\n"
  "             /clear forgets it, \"\"\" begins and ends several lines)\n"
  "  status     version, uptime, models, slots, queues, store, mode\n"
  "  ps         one line per live sequence\n"
  "  cancel ID  cancel a sequence\n"
  "  drain      stop admitting, let running work finish, report\n"
  "  resume     admit new requests again after a drain\n"
  "  reload     re-read the configuration, apply what can change live\n"
  "  load MODEL load a model now (models also load on first use)\n"
  "  unload MODEL\n"
  "             unload a model; its conversations continue from the store later\n"
  "  log-level LOGGER LEVEL\n"
  "             set a logger's level\n"
  "  metrics    Prometheus text\n"
  "  top        live view of slots, lanes, tokens/s and store\n"
  "  cache      retained conversation KV: 'cache ls', 'cache drop --all | --id ID'\n"
  "  probe      measure a backend: step time vs rows/tokens, dump/load time and\n"
  "             bandwidth, and whether transfers overlap compute\n"
  "  tokenize   print the token ids of a text (a model's tokenizer.json)\n"
  "  detokenize write the text of token ids\n"
  "\n"
  "kvlane --version prints the version; kvlane help COMMAND is kvlane COMMAND --help.\n";

constexpr std::string_view probe_usage =
  "usage: kvlane probe [--config PATH] [--model NAME] [--iterations N] [--tokens N]\n"
  "                    [--time-scale X] [--overlap MODE] [--concurrency MODE] [--verify]\n"
  "                    [--json]\n"
  "measure a backend: step time against rows and tokens (with a fitted base +\n"
  "per-token cost), dump and load time and bandwidth of one snapshot, and whether\n"
  "transfers overlap compute (1 hidden completely, 0 serialized). Times are device ms.\n"
  "\n"
  "  --config PATH        configuration (default /etc/kvlane/kvlane.toml)\n"
  "  --model NAME         model to probe (default: the first one)\n"
  "  --iterations N       repetitions per measurement (default 5)\n"
  "  --tokens N           tokens in the probed snapshot (default max_context/2)\n"
  "  --time-scale X       sim only: override [model.sim] time_scale\n"
  "  --overlap MODE       sim only: override [model.sim] overlap (full|none|shared)\n"
  "  --concurrency MODE   qbruntime only: override [model.qbruntime] concurrency\n"
  "                       (serialize|allow)\n"
  "  --verify             first check correctness: repeatable greedy decoding, dump ->\n"
  "                       overwrite -> load continuity, slot isolation and, when\n"
  "                       transfers overlap compute, decoding during transfers;\n"
  "                       exit status 1 if a check fails\n"
  "  --json               print one JSON object instead of text\n"
  "\n"
  "The probe overwrites every slot of the device: run it with kvlaned stopped.\n"
  "exit codes: 0 done, 1 the backend failed or a --verify check failed, 64 usage,\n"
  "  78 invalid configuration.\n";

constexpr std::string_view run_usage =
  "usage: kvlane run [options] [\"prompt\"]   (no prompt: read it from stdin)\n"
  "send a prompt to kvlaned and stream the answer to stdout\n"
  "\n"
  "  --model NAME                model (default: the daemon's first model)\n"
  "  --priority interactive|batch  scheduling class (default interactive)\n"
  "  --max-tokens N              tokens to generate (default 256)\n"
  "  --temperature X --top-k N --top-p X --seed N   sampling (default greedy)\n"
  "  --socket PATH               daemon socket (default $KVLANE_SOCKET, else\n"
  "                              /run/kvlane/kvlane.sock as root, else\n"
  "                              $XDG_RUNTIME_DIR/kvlane/kvlane.sock)\n"
  "  --timeout MS                give up when no token arrives for MS (default 60000)\n"
  "  --session NAME              a conversation kvlaned keeps: the prompt is appended to\n"
  "                              NAME's history (1..64 of A-Z a-z 0-9 . _ -)\n"
  "  --stats                     print the request's timings on stderr at the end\n"
  "\n"
  "exit codes: 0 done (length or stop), 1 the request failed or was cancelled,\n"
  "  64 usage, 69 kvlaned is not running, 75 timeout, 76 protocol/version mismatch,\n"
  "  77 permission denied or user not allowed, 130 interrupted (Ctrl-C).\n";

bool is_help(std::string_view a) {
  return a == "--help" || a == "-h";
}

int print_usage(std::string_view usage) {
  std::fwrite(usage.data(), 1, usage.size(), stdout);
  return 0;
}

template <class T>
bool parse_number(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size();
}

int fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "kvlane: %s\n", message.c_str());
  return code;
}

int probe_main(int argc, char** argv) {
  std::string config_path = "/etc/kvlane/kvlane.toml";
  std::optional<std::string> model;
  std::optional<double> time_scale;
  std::optional<backends::transfer_overlap> overlap;
  std::optional<backends::qbr_concurrency> concurrency;
  probe_options opts;
  bool json = false;
  for (int i = 0; i < argc; ++i) {
    std::string_view a{argv[i]};
    auto value = [&]() -> std::optional<std::string_view> {
      if (i + 1 >= argc)
        return std::nullopt;
      return std::string_view{argv[++i]};
    };
    if (is_help(a)) {
      return print_usage(probe_usage);
    } else if (a == "--json") {
      json = true;
    } else if (a == "--verify") {
      opts.verify = true;
    } else if (a == "--concurrency") {
      auto v = value();
      if (v == "serialize")
        concurrency = backends::qbr_concurrency::serialize;
      else if (v == "allow")
        concurrency = backends::qbr_concurrency::allow;
      else
        return fail("--concurrency needs serialize or allow", 64);
    } else if (a == "--config") {
      auto v = value();
      if (!v)
        return fail("--config needs a path", 64);
      config_path = *v;
    } else if (a == "--model") {
      auto v = value();
      if (!v)
        return fail("--model needs a name", 64);
      model = std::string{*v};
    } else if (a == "--iterations" || a == "--tokens") {
      auto v = value();
      std::uint32_t n = 0;
      if (!v || !parse_number(*v, n) || n == 0 || n > 1000000)
        return fail(fmt::format("{} needs a whole number between 1 and 1000000", a), 64);
      (a == "--iterations" ? opts.iterations : opts.snapshot_tokens) = n;
    } else if (a == "--time-scale") {
      auto v = value();
      double x = 0;
      if (!v || !parse_number(*v, x) || !(x > 0) || x > 1e6)
        return fail("--time-scale needs a number in (0, 1000000]", 64);
      time_scale = x;
    } else if (a == "--overlap") {
      auto v = value();
      if (v == "full")
        overlap = backends::transfer_overlap::full;
      else if (v == "none")
        overlap = backends::transfer_overlap::none;
      else if (v == "shared")
        overlap = backends::transfer_overlap::shared;
      else
        return fail("--overlap needs full, none or shared", 64);
    } else {
      return fail(fmt::format("probe: unknown argument '{}' (kvlane probe --help lists the options)", a), 64);
    }
  }

  auto cfg = daemon::load(config_path);
  if (!cfg)
    return fail("invalid configuration: " + cfg.error().message, 78);
  const daemon::model_section* m = model ? nullptr : &cfg->models.front();
  for (auto& candidate : cfg->models)
    if (model && candidate.name == *model)
      m = &candidate;
  if (!m)
    return fail(fmt::format("no model named '{}' in {}", *model, config_path), 64);

  auto backend_cfg = m->backend;
  auto& sim = backend_cfg.sim;
  if (time_scale)
    sim.time_scale = *time_scale;
  if (overlap)
    sim.overlap = *overlap;
  if (concurrency)
    backend_cfg.qbruntime.concurrency = *concurrency;
  auto b = backends::make_backend(m->name, backend_cfg);
  if (!b)
    return fail(fmt::format("model '{}': backend failed to load: {}", m->name, b.error().message));
  opts.clock_scale = backend_cfg.kind == "sim" ? sim.time_scale : 1.0;

  auto report = run_probe(**b, opts, [&](std::string_view step) {
    if (!json)
      std::fprintf(stderr, "probe: %.*s...\n", static_cast<int>(step.size()), step.data());
  });
  if (!report)
    return fail(fmt::format("probe failed: {} ({})", report.error().message,
                            backends::to_string(report.error().code)));
  auto text = json ? format_json(*report) + "\n" : format_text(*report);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return report->verify && !report->verify->passed() ? 1 : 0;
}

std::atomic<bool> interrupted{false};

extern "C" void on_interrupt(int) {
  interrupted = true;
}

int run_main(int argc, char** argv) {
  client::connect_options opts;
  opts.client_name = "kvlane-run";
  client::request req;
  std::optional<std::string> prompt;
  long timeout_ms = 60000;
  bool stats = false;
  for (int i = 0; i < argc; ++i) {
    std::string_view a{argv[i]};
    auto value = [&]() -> std::optional<std::string_view> {
      if (i + 1 >= argc)
        return std::nullopt;
      return std::string_view{argv[++i]};
    };
    auto number = [&](auto& out, std::string_view what) {
      auto v = value();
      if (!v || !parse_number(*v, out))
        return fail(fmt::format("{} needs {}", a, what), 64);
      return 0;
    };
    if (is_help(a)) {
      return print_usage(run_usage);
    } else if (a == "--model") {
      auto v = value();
      if (!v)
        return fail("--model needs a name", 64);
      req.model = *v;
    } else if (a == "--priority") {
      auto v = value();
      if (v == "interactive")
        req.prio = client::priority::interactive;
      else if (v == "batch")
        req.prio = client::priority::batch;
      else
        return fail("--priority needs interactive or batch", 64);
    } else if (a == "--socket") {
      auto v = value();
      if (!v)
        return fail("--socket needs a path", 64);
      opts.socket_path = *v;
    } else if (a == "--max-tokens") {
      if (int rc = number(req.sampling.max_tokens, "a whole number"); rc)
        return rc;
    } else if (a == "--temperature") {
      if (int rc = number(req.sampling.temperature, "a number"); rc)
        return rc;
    } else if (a == "--top-k") {
      if (int rc = number(req.sampling.top_k, "a whole number"); rc)
        return rc;
    } else if (a == "--top-p") {
      if (int rc = number(req.sampling.top_p, "a number"); rc)
        return rc;
    } else if (a == "--seed") {
      if (int rc = number(req.sampling.seed, "a whole number"); rc)
        return rc;
    } else if (a == "--timeout") {
      if (int rc = number(timeout_ms, "milliseconds"); rc)
        return rc;
    } else if (a == "--session") {
      auto v = value();
      if (!v)
        return fail("--session needs a name", 64);
      req.session = *v;
    } else if (a == "--stats") {
      stats = true;
    } else if (a.starts_with("--")) {
      return fail(fmt::format("run: unknown option '{}' (kvlane run --help lists the options)", a), 64);
    } else if (prompt) {
      return fail("run: give one prompt (quote it)", 64);
    } else {
      prompt = std::string{a};
    }
  }
  if (!prompt) {
    prompt = std::string{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
    while (!prompt->empty() && (prompt->back() == '\n' || prompt->back() == '\r'))
      prompt->pop_back();
  }
  if (prompt->empty())
    return fail("run: the prompt is empty", 64);
  req.prompt = *prompt;

  auto conn = client::connect(opts);
  if (!conn)
    return fail(conn.error().message, client_exit_code(conn.error().code));
  auto stream = (*conn)->submit(req);
  if (!stream)
    return fail(stream.error().message, client_exit_code(stream.error().code));

  struct sigaction sa{};
  sa.sa_handler = on_interrupt;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  auto last = std::chrono::steady_clock::now();
  bool cancelled = false;
  for (;;) {
    if (interrupted && !cancelled) {
      (void)(*stream)->cancel();
      cancelled = true;
    }
    auto chunk = (*stream)->next(std::chrono::milliseconds(100));
    if (!chunk) {
      if (chunk.error().code == client::errc::timeout) {
        if (std::chrono::steady_clock::now() - last > std::chrono::milliseconds(timeout_ms))
          return fail(fmt::format("no token from kvlaned for {} ms", timeout_ms), 75);
        continue;
      }
      std::fputs("\n", stdout);
      std::fflush(stdout);
      return fail(chunk.error().message, client_exit_code(chunk.error().code));
    }
    last = std::chrono::steady_clock::now();
    std::fwrite(chunk->text.data(), 1, chunk->text.size(), stdout);
    std::fflush(stdout);
    if (!chunk->end)
      continue;
    std::fputs("\n", stdout);
    std::fflush(stdout);
    const auto& e = *chunk->end;
    if (stats)
      std::fprintf(stderr, "kvlane: %s; %u prompt + %u generated tokens; ttft %.1f ms, tpot %.2f ms, total %.1f ms\n",
                   client::to_string(e.reason), e.prompt_tokens, e.generated_tokens,
                   static_cast<double>(e.ttft.count()) / 1000.0, static_cast<double>(e.tpot.count()) / 1000.0,
                   static_cast<double>(e.e2e.count()) / 1000.0);
    if (interrupted)
      return 130;
    if (e.reason == client::end_reason::length || e.reason == client::end_reason::stop)
      return 0;
    return fail(fmt::format("the request ended: {}{}{}", client::to_string(e.reason),
                            e.message.empty() ? "" : ": ", e.message));
  }
}

} // namespace

int cli_main(int argc, char** argv) {
  if (argc < 2) {
    std::fwrite(usage_text.data(), 1, usage_text.size(), stderr);
    return 64;
  }
  std::string_view cmd{argv[1]};
  // `kvlane help COMMAND` is `kvlane COMMAND --help`.
  char help_flag[] = "--help";
  char* help_argv[] = {argv[0], argc >= 3 ? argv[2] : nullptr, help_flag, nullptr};
  if (cmd == "help" && argc == 3) {
    argv = help_argv;
    cmd = argv[1];
  }
  if (cmd == "probe")
    return probe_main(argc - 2, argv + 2);
  if (cmd == "run")
    return run_main(argc - 2, argv + 2);
  if (cmd == "chat") {
    const std::vector<std::string_view> args(argv + 2, argv + argc);
    return chat_main(args, std::cin, std::cout, std::cerr, ::isatty(STDIN_FILENO) == 1);
  }
  if (cmd == "tokenize" || cmd == "detokenize") {
    const std::vector<std::string_view> args(argv + 2, argv + argc);
    return cmd == "tokenize" ? tokenize_main(args, std::cin, std::cout, std::cerr)
                             : detokenize_main(args, std::cin, std::cout, std::cerr);
  }
  if (is_admin_command(cmd))
    return admin_main(argc - 1, argv + 1);
  if (is_help(cmd) || cmd == "help") {
    if (argc > 2 && !is_help(argv[2])) // `kvlane --help X`: `kvlane help X` explains X
      return fail(fmt::format("{} takes one command name (kvlane help COMMAND)", cmd), 64);
    return print_usage(usage_text);
  }
  if (cmd == "--version") {
    std::printf("kvlane %s\n", KVLANE_VERSION);
    return 0;
  }
  return fail(fmt::format("unknown command '{}'\n\n{}", cmd, usage_text), 64);
}

} // namespace kvlane::tools
