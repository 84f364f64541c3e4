#include "tools/admin_client.hpp"

#include "common/expected.hpp"
#include "common/logging.hpp"
#include "daemon/app.hpp"
#include "tools/admin_connection.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <string_view>
#include <charconv>
#include <chrono>
#include <csignal>
#include <poll.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace kvlane::tools {

namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr std::array<std::string_view, 12> commands{"status", "ps",        "cancel",  "drain",
                                                    "resume", "reload",    "log-level", "metrics",
                                                    "top",    "cache",     "load",    "unload"};

/// One admin command's synopsis and what it does; admin_usage() adds the common options.
struct command_help {
  std::string_view name, synopsis, what;
};

constexpr command_help command_helps[] = {
  {"status", "kvlane status [--socket PATH] [--json]",
   "version, uptime, mode, admitting or draining, clients; per model slots busy/total,\n"
   "sequences without a slot, tokens, preemptions, backend, reuse; the store\n"},
  {"ps", "kvlane ps [--socket PATH] [--json]",
   "one line per live sequence: id, client, model, priority, state, slot, tokens in\n"
   "and out, age; then each model's retained conversation KV\n"},
  {"cancel", "kvlane cancel ID [--socket PATH] [--json]",
   "cancel sequence ID (the ID column of kvlane ps); its stream ends with reason\n"
   "cancelled\n"},
  {"drain", "kvlane drain [--no-wait] [--socket PATH] [--json]",
   "stop admitting new requests, wait until the running ones finish, report how many\n"
   "finished and how long it took (kvlane resume admits again)\n"
   "  --no-wait       report at once how many sequences still run\n"},
  {"resume", "kvlane resume [--socket PATH] [--json]", "admit new requests again after a drain\n"},
  {"load", "kvlane load MODEL [--keep-alive DURATION] [--socket PATH] [--json]",
   "load a configured model now and wait until it serves (requests load models on\n"
   "first use too); it then unloads after its keep_alive once idle\n"
   "  --keep-alive D  how long it stays loaded when idle: \"10m\", \"1h30m\", \"0\",\n"
   "                  \"pinned\" (default: its [[model]] keep_alive)\n"},
  {"unload", "kvlane unload MODEL [--socket PATH] [--json]",
   "unload a model: its warm conversation KV goes to the store first (the model\n"
   "continues from it when it loads again); a model running requests unloads when\n"
   "they end\n"},
  {"reload", "kvlane reload [--socket PATH] [--json]",
   "re-read the configuration file, apply what can change live and list what needs\n"
   "a restart (the same as SIGHUP); a file that does not validate changes nothing\n"},
  {"log-level", "kvlane log-level LOGGER LEVEL [--socket PATH] [--json]",
   "set a logger's level now (reload and restart apply the configured levels again)\n"},
  {"metrics", "kvlane metrics [--socket PATH] [--json]",
   "the Prometheus text (the same as the HTTP /metrics endpoint)\n"},
  {"top", "kvlane top [--socket PATH]",
   "live view refreshed every second: per-slot state, lanes, tokens/s, reuse, store,\n"
   "sequences (q or Ctrl-C quits)\n"},
  {"cache",
   "kvlane cache ls [--model M] [--socket PATH] [--json]\n"
   "       kvlane cache drop --all [--model M] | --id ID [--model M] [--socket PATH] [--json]\n"
   "       kvlane cache drop --session NAME [--model M] [--uid UID] [--socket PATH] [--json]",
   "retained conversation KV.\n"
   "  ls              one line per retained entry: id, model, owner, session, tokens,\n"
   "                  where (slot or store), bytes, idle time, hits\n"
   "  drop --all      drop every retained entry (of model M): free its slots and store\n"
   "                  bytes, print what was freed\n"
   "  drop --id ID    drop one entry\n"
   "  drop --session NAME\n"
   "                  forget a conversation kept for kvlane chat / --session (default:\n"
   "                  this user's, of the default model; --uid: another user's)\n"},
};

std::string admin_usage(std::string_view cmd) {
  for (const auto& h : command_helps) {
    if (h.name != cmd)
      continue;
    std::string text = fmt::format("usage: {}\n{}", h.synopsis, h.what);
    if (cmd == "log-level") {
      std::string loggers;
      for (auto n : logging::logger_names())
        loggers += fmt::format("{}{}", loggers.empty() ? "" : ", ", n);
      text += fmt::format("  LOGGER          a logger, or '*' for all of them:\n"
                          "                  {}\n"
                          "  LEVEL           trace, debug, info, warn, error, critical, off\n",
                          loggers);
    }
    text += fmt::format("  --socket PATH   the admin socket (default {})\n", default_admin_socket());
    if (cmd != "top")
      text += "  --json          print the daemon's JSON answer as is\n";
    text += "exit codes: 0 ok, 1 the daemon answered with an error, 2 the daemon is not\n"
            "  running or this user is not an admin, 64 usage\n";
    return text;
  }
  return {};
}

bool is_help(std::string_view a) {
  return a == "--help" || a == "-h";
}

int print_help(std::string_view cmd) {
  std::fputs(admin_usage(cmd).c_str(), stdout);
  return 0;
}

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "kvlane: %s\n", message.c_str());
  return code;
}

constexpr auto reply_timeout = 30s;

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} {}", b, units[u]) : fmt::format("{:.1f} {}", b, units[u]);
}

std::string human_duration(double s) {
  if (s < 60)
    return fmt::format("{:.0f}s", s);
  if (s < 3600)
    return fmt::format("{:.0f}m{:02.0f}s", std::floor(s / 60), std::fmod(s, 60));
  return fmt::format("{:.0f}h{:02.0f}m", std::floor(s / 3600), std::fmod(s / 60, 60));
}

std::string bar(double fraction, int width) {
  fraction = std::clamp(fraction, 0.0, 1.0);
  int full = static_cast<int>(std::lround(fraction * width));
  return std::string(full, '#') + std::string(width - full, '.');
}

std::string retained_summary(const json& m) {
  return fmt::format("{} entries ({} in slots, {} stored), {} in slots, {} in the store",
                     m["entries"].get<std::uint64_t>(), m["warm"].get<std::uint64_t>(),
                     m["stored"].get<std::uint64_t>(), human_bytes(m["warm_bytes"].get<double>()),
                     human_bytes(m["store_bytes"].get<double>()));
}

std::string reuse_line(const json& u) {
  auto& ev = u["evictions"];
  return fmt::format("retained {}; hits {} warm, {} load, {} recomputed; {} tokens reused "
                     "({} prefilled); evicted {} slot, {} store, {} ttl, {} superseded, {} admin",
                     retained_summary(u), u["hits_warm"].get<std::uint64_t>(),
                     u["hits_load"].get<std::uint64_t>(), u["recomputed"].get<std::uint64_t>(),
                     u["reused_tokens"].get<std::uint64_t>(),
                     u["prefill_tokens"].get<std::uint64_t>(), ev["slot"].get<std::uint64_t>(),
                     ev["store"].get<std::uint64_t>(), ev["ttl"].get<std::uint64_t>(),
                     ev["superseded"].get<std::uint64_t>(), ev["admin"].get<std::uint64_t>());
}

std::string shout(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

/// The device line of a model: shown while it is not healthy or once it has
/// failed a step.
void print_device(const json& m) {
  if (!m.contains("device"))
    return; // an older daemon
  const auto& d = m["device"];
  const auto state = d.value("state", std::string{"healthy"});
  if (state == "healthy" && d.value("step_failures", std::uint64_t{0}) == 0)
    return;
  std::string wait;
  if (state == "failing")
    wait = fmt::format(", admission paused, backing off {:.0f} ms between steps",
                       d.value("backoff_ms", 0.0));
  else if (state == "degraded")
    wait = ", admission paused while the failed step is retried";
  fmt::print("  device {}{}  (failed steps {}, retries {}, rows run alone {}, faulty rows {}, "
             "backoffs {})\n",
             state == "healthy" ? state : shout(state), wait,
             d.value("step_failures", std::uint64_t{0}), d.value("step_retries", std::uint64_t{0}),
             d.value("isolated_rows", std::uint64_t{0}), d.value("row_faults", std::uint64_t{0}),
             d.value("backoffs", std::uint64_t{0}));
}

void print_status(const json& r) {
  fmt::print("kvlaned {}  up {}  mode {}  {}  clients {}\n", r["version"].get<std::string>(),
             human_duration(r["uptime_s"].get<double>()), r["mode"].get<std::string>(),
             r["admitting"].get<bool>() ? "admitting" : "DRAINING", r["clients"].get<std::uint64_t>());
  if (r.contains("slo")) {
    const auto& slo = r["slo"];
    const auto ms = [](const json& b, const char* key) { return b.value(key, 0.0); };
    const double refuse = slo.value("refuse_over", 0.0);
    fmt::print("slo interactive TTFT {:g} ms, TPOT {:g} ms; batch TTFT {:g} ms, TPOT {:g} ms; {}\n",
               ms(slo["interactive"], "ttft_ms"), ms(slo["interactive"], "tpot_ms"),
               ms(slo["batch"], "ttft_ms"), ms(slo["batch"], "tpot_ms"),
               refuse > 0 ? fmt::format("refused past {:g}x the TTFT objective", refuse)
                          : std::string{"no refusal at the door"});
  }
  for (auto& m : r["models"]) {
    if (!m.contains("slots")) { // not loaded: its lifecycle only
      fmt::print("model {:<20} {}{}\n", m["name"].get<std::string>(),
                 shout(m.value("state", std::string{"unloaded"})),
                 m.value("error", std::string{}).empty()
                   ? std::string{}
                   : "  (last load failed: " + m.value("error", std::string{}) + ")");
      continue;
    }
    if (m.value("state", std::string{"serving"}) == "failed") {
      fmt::print("model {:<20} FAILED: {}\n", m["name"].get<std::string>(),
                 m.value("error", std::string{}));
      continue;
    }
    fmt::print("model {:<20} slots {:>3}/{:<3} without a slot {} interactive, {} batch "
               "(queued {}, parked {})  tokens {}  preemptions {} (swap {}, recompute {})"
               "  demoted {}  refused {}\n",
               m["name"].get<std::string>(), m["slots_busy"].get<int>(), m["slots"].get<int>(),
               m["without_slot_interactive"].get<int>(), m["without_slot_batch"].get<int>(),
               m["queued"].get<int>(), m["parked"].get<int>(),
               m["tokens_generated"].get<std::uint64_t>(), m["preemptions"].get<std::uint64_t>(),
               m["swaps"].get<std::uint64_t>(), m["recomputes"].get<std::uint64_t>(),
               m.value("demoted", std::uint64_t{0}), m.value("refused", std::uint64_t{0}));
    fmt::print("      {:<20} backend {}{}, context {}, KV {} per token, {} per full slot\n", "",
               m.value("backend", std::string{"?"}),
               m.value("runtime", std::string{}).empty()
                 ? std::string{}
                 : " (" + m.value("runtime", std::string{}) + ")",
               m.value("max_context", 0u), human_bytes(m.value("kv_bytes_per_token", 0.0)),
               human_bytes(m.value("snapshot_bytes", 0.0)));
    fmt::print("      {:<20} {}\n", "", reuse_line(m["reuse"]));
    if (m.contains("lifecycle") && m["lifecycle"].is_object()) {
      const auto& l = m["lifecycle"];
      const auto until = l["expires_at"].is_string()
                           ? "unloads at " + l["expires_at"].get<std::string>().substr(0, 19)
                               + "Z if idle"
                           : std::string{"stays loaded"};
      fmt::print("      {:<20} keep_alive {}, {}; {} request(s) using it\n", "",
                 l.value("keep_alive", std::string{}), until, l.value("in_use", 0));
    }
    print_device(m);
  }
  auto& s = r["store"];
  fmt::print("store {} used, {} committed of {} ({} snapshots, {} evictions: {} parked, {} "
             "retained of which {} for the retained share); retained {} of {}\n",
             human_bytes(s["used_bytes"].get<double>()),
             human_bytes(s["committed_bytes"].get<double>()),
             human_bytes(s["limit_bytes"].get<double>()), s["snapshots"].get<std::uint64_t>(),
             s["evictions"].get<std::uint64_t>(), s["parked_evictions"].get<std::uint64_t>(),
             s["retained_evictions"].get<std::uint64_t>(),
             s["retained_share_evictions"].get<std::uint64_t>(),
             human_bytes(s["retained_bytes"].get<double>()),
             human_bytes(s["retained_limit_bytes"].get<double>()));
}

/// One model's lifecycle (daemon/model_commands: model_state_json).
void print_model_line(const json& m) {
  std::string until = "-";
  if (m.value("state", std::string{}) == "loaded")
    until = m["expires_at"].is_string() ? m["expires_at"].get<std::string>().substr(0, 19) + "Z"
                                        : std::string{"pinned"};
  fmt::print("{:<20} {:<9} {:>6} {:>7} {:>10} {:<8} {}\n", m["name"].get<std::string>(),
             m["state"].get<std::string>(), m.value("in_use", 0), m.value("waiting", 0),
             human_bytes(m.value("size", 0.0)), m.value("keep_alive", std::string{}), until);
  if (!m.value("error", std::string{}).empty())
    fmt::print("  last load failed: {}\n", m["error"].get<std::string>());
}

void print_ps(const json& r) {
  fmt::print("{:>8} {:<16} {:<16} {:<11} {:<9} {:>4} {:>7} {:>7} {:>7}\n", "ID", "CLIENT", "MODEL",
             "PRIORITY", "STATE", "SLOT", "IN", "OUT", "AGE");
  for (auto& q : r["sequences"]) {
    auto slot = q["slot"].get<int>();
    fmt::print("{:>8} {:<16.16} {:<16.16} {:<11} {:<9} {:>4} {:>7} {:>7} {:>7}\n",
               q["id"].get<std::uint64_t>(), q["client"].get<std::string>(),
               q["model"].get<std::string>(), q["priority"].get<std::string>(),
               q["state"].get<std::string>(), slot < 0 ? std::string{"-"} : std::to_string(slot),
               q["tokens_in"].get<std::uint32_t>(), q["tokens_out"].get<std::uint32_t>(),
               human_duration(q["age_s"].get<double>()));
  }
  for (auto& m : r["retained"])
    fmt::print("retained {}: {}\n", m["model"].get<std::string>(), retained_summary(m));
  if (!r.contains("models"))
    return; // an older daemon
  fmt::print("\n{:<20} {:<9} {:>6} {:>7} {:>10} {:<8} {}\n", "MODEL", "STATE", "IN USE", "WAITING",
             "SIZE", "KEEP", "UNTIL");
  for (auto& m : r["models"])
    print_model_line(m);
}

void print_cache_ls(const json& r) {
  fmt::print("{:>6} {:<16} {:<10} {:<16} {:>7} {:<8} {:<6} {:>10} {:>7} {:>5}\n", "ID", "MODEL",
             "OWNER", "SESSION", "TOKENS", "WHERE", "TIER", "BYTES", "IDLE", "HITS");
  for (auto& e : r["entries"]) {
    auto where = e["where"] == "store"  ? std::string{"store"}
                 : e["dumping"].get<bool>() ? fmt::format("slot {}>", e["slot"].get<int>())
                                            : fmt::format("slot {}", e["slot"].get<int>());
    auto owner = e["owner"].is_string() ? e["owner"].get<std::string>()
                                        : std::to_string(e["owner"].get<std::uint64_t>());
    auto session = e["session"].get<std::string>();
    // A stored entry's tier: memory, disk (read back before a load) or both.
    auto tier = e.value("tier", std::string{});
    fmt::print("{:>6} {:<16.16} {:<10.10} {:<16.16} {:>7} {:<8} {:<6} {:>10} {:>7} {:>5}\n",
               e["id"].get<std::uint64_t>(), e["model"].get<std::string>(), owner,
               session.empty() ? std::string{"-"} : session, e["tokens"].get<std::uint32_t>(),
               where, tier.empty() ? std::string{"-"} : tier, human_bytes(e["bytes"].get<double>()),
               human_duration(e["idle_s"].get<double>()), e["hits"].get<std::uint64_t>());
  }
}

void print_cache_drop(const json& r) {
  fmt::print("dropped {} retained entries ({} tokens): freed {} slots, {} snapshots, {} of the "
             "store\n",
             r["entries"].get<std::uint64_t>(), r["tokens"].get<std::uint64_t>(),
             r["slots"].get<std::uint64_t>(), r["snapshots"].get<std::uint64_t>(),
             human_bytes(r["store_bytes"].get<double>()));
  for (auto& m : r["dropped"])
    if (m["entries"].get<std::uint64_t>() > 0)
      fmt::print("  {}: {} entries, {} slots, {} snapshots, {}\n", m["model"].get<std::string>(),
                 m["entries"].get<std::uint64_t>(), m["slots"].get<std::uint64_t>(),
                 m["snapshots"].get<std::uint64_t>(), human_bytes(m["store_bytes"].get<double>()));
}

/// `kvlane cache ls|drop ...` as an admin request (`args` without the
/// global options). A drop takes exactly one selector; a new selector is one
/// more option below and one more field in the request (docs/admin.md).
expected<json, std::string> cache_request(const std::vector<std::string>& args) {
  if (args.empty() || (args[0] != "ls" && args[0] != "drop"))
    return unexpected(std::string{"cache: expected 'ls' or 'drop'"});
  const bool drop = args[0] == "drop";
  json req{{"cmd", drop ? "cache-drop" : "cache-ls"}};
  int selectors = 0;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string_view a = args[i];
    const bool has_value = i + 1 < args.size();
    if (a == "--model" && has_value) {
      req["model"] = args[++i];
    } else if (drop && a == "--all") {
      req["all"] = true;
      ++selectors;
    } else if (drop && a == "--id" && has_value) {
      std::uint64_t id = 0;
      const auto& v = args[++i];
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), id);
      if (ec != std::errc{} || p != v.data() + v.size())
        return unexpected(fmt::format("cache drop: '{}' is not an entry id", v));
      req["id"] = id;
      ++selectors;
    } else {
      return unexpected(fmt::format("cache {}: unexpected argument '{}'", args[0], a));
    }
  }
  if (drop && selectors != 1)
    return unexpected(std::string{"cache drop: give exactly one of --all or --id ID"});
  return req;
}

// The live view: per-slot state, lanes, tokens/s, store usage.
int run_top(admin_connection& c) {
  std::uint64_t last_tokens = 0;
  auto last_time = std::chrono::steady_clock::now();
  bool first = true;
  for (;;) {
    auto st = c.ask({{"cmd", "status"}}, reply_timeout);
    if (!st)
      return fail(2, st.error().message);
    auto ps = c.ask({{"cmd", "ps"}}, reply_timeout);
    if (!ps)
      return fail(2, ps.error().message);
    auto cache = c.ask({{"cmd", "cache-ls"}}, reply_timeout);
    if (!cache)
      return fail(2, cache.error().message);
    if (st->contains("error"))
      return fail(1, (*st)["error"]["message"].get<std::string>());
    std::uint64_t tokens = 0;
    for (auto& m : (*st)["models"])
      tokens += m.value("tokens_generated", std::uint64_t{0});
    auto now = std::chrono::steady_clock::now();
    double dt = std::chrono::duration<double>(now - last_time).count();
    double rate = first || dt <= 0 ? 0 : double(tokens - last_tokens) / dt;
    last_tokens = tokens;
    last_time = now;
    first = false;

    std::string out = "\x1b[H\x1b[2J";
    auto w = std::back_inserter(out);
    fmt::format_to(w, "kvlane top — {} — mode {} — {:.0f} tokens/s — clients {} — {}\n\n",
                   (*st)["version"].get<std::string>(), (*st)["mode"].get<std::string>(), rate,
                   (*st)["clients"].get<std::uint64_t>(),
                   (*st)["admitting"].get<bool>() ? "admitting" : "DRAINING");
    for (auto& m : (*st)["models"]) {
      auto name = m["name"].get<std::string>();
      if (!m.contains("slots")) {
        fmt::format_to(w, "{:<16} {}\n", name, m.value("state", std::string{"unloaded"}));
        continue;
      }
      int slots = m["slots"].get<int>();
      std::vector<std::string> cells(static_cast<std::size_t>(slots), "·");
      for (auto& e : cache->value("entries", json::array())) {
        auto slot = e["slot"].get<int>();
        if (e["model"] == name && slot >= 0 && slot < slots)
          cells[static_cast<std::size_t>(slot)] = "w";
      }
      for (auto& q : (*ps)["sequences"]) {
        auto slot = q["slot"].get<int>();
        if (q["model"] != name || slot < 0 || slot >= slots)
          continue;
        auto state = q["state"].get<std::string>();
        cells[static_cast<std::size_t>(slot)] = state == "dumping" ? "D" : state == "loading" ? "L"
                                                : q["priority"] == "interactive"       ? "I"
                                                                                      : "B";
      }
      std::string row;
      for (auto& c : cells)
        row += c;
      fmt::format_to(w,
                     "{:<16} slots [{}] {}/{}  compute {}  transfer {}\n"
                     "{:<16} without a slot {} interactive, {} batch (queued {}, parked {}); "
                     "swaps {}, recomputes {}\n",
                     name, row, m["slots_busy"].get<int>(), slots,
                     m["compute_busy"].get<bool>() ? "BUSY" : "idle",
                     m["transfer_busy"].get<bool>() ? "BUSY" : "idle", "",
                     m["without_slot_interactive"].get<int>(), m["without_slot_batch"].get<int>(),
                     m["queued"].get<int>(), m["parked"].get<int>(),
                     m["swaps"].get<std::uint64_t>(), m["recomputes"].get<std::uint64_t>());
      fmt::format_to(w, "{:<16} {}\n", "", reuse_line(m["reuse"]));
    }
    auto& s = (*st)["store"];
    double limit = std::max(1.0, s["limit_bytes"].get<double>());
    fmt::format_to(w, "\nstore [{}] {} committed of {}; retained {} of {}\n",
                   bar(s["committed_bytes"].get<double>() / limit, 40),
                   human_bytes(s["committed_bytes"].get<double>()), human_bytes(limit),
                   human_bytes(s["retained_bytes"].get<double>()),
                   human_bytes(s["retained_limit_bytes"].get<double>()));
    fmt::format_to(w, "slots: I interactive, B batch, L loading, D dumping, w retained KV, · free\n\n");
    std::fwrite(out.data(), 1, out.size(), stdout);
    print_ps(*ps);
    std::fflush(stdout);
    // Wait a second, or less if the user types q.
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (::poll(&p, 1, 1000) > 0) {
      char ch = 0;
      if (::read(STDIN_FILENO, &ch, 1) <= 0 || ch == 'q')
        return 0;
    }
  }
}

/// `kvlane cache drop --session NAME [--model M] [--uid UID]`: the admin
/// command cache-drop-session. argv[0] is "cache".
int cache_drop_session_main(int argc, char** argv, std::string socket) {
  bool as_json = false;
  std::optional<std::string> session;
  std::string model;
  std::uint64_t uid = ::getuid();
  std::vector<std::string_view> words;
  for (int i = 1; i < argc; ++i) {
    std::string_view a{argv[i]};
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= argc)
        return std::nullopt;
      return std::string{argv[++i]};
    };
    if (is_help(a)) {
      return print_help("cache");
    } else if (a == "--json") {
      as_json = true;
    } else if (a == "--socket" || a == "--session" || a == "--model" || a == "--uid") {
      auto v = value();
      if (!v)
        return fail(64, fmt::format("cache: {} needs a value", a));
      if (a == "--socket")
        socket = *v;
      else if (a == "--session")
        session = *v;
      else if (a == "--model")
        model = *v;
      else if (auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), uid);
               ec != std::errc{} || p != v->data() + v->size())
        return fail(64, fmt::format("cache: '{}' is not a user id", *v));
    } else if (a.starts_with("--")) {
      return fail(64, fmt::format("cache: unknown option '{}'\n{}", a, admin_usage("cache")));
    } else {
      words.push_back(a);
    }
  }
  if (words.size() != 1 || words[0] != "drop" || !session)
    return fail(64, fmt::format("cache: expected 'drop --session NAME'\n{}", admin_usage("cache")));
  json req{{"cmd", "cache-drop-session"}, {"session", *session}, {"uid", uid}};
  if (!model.empty())
    req["model"] = model;
  auto c = admin_connection::open(socket);
  if (!c)
    return fail(2, c.error().message);
  auto r = c->ask(req, reply_timeout);
  if (!r)
    return fail(2, r.error().message);
  if (as_json)
    fmt::print("{}\n", r->dump());
  if (r->contains("error")) {
    auto& e = (*r)["error"];
    return fail(e["code"] == "not_allowed" ? 2 : 1,
                fmt::format("{}: {}", e["code"].get<std::string>(), e["message"].get<std::string>()));
  }
  if (!as_json)
    fmt::print("dropped session '{}' of uid {} (model '{}'): {}, {} retained entries "
               "({} tokens, {} store bytes)\n",
               (*r)["dropped"].get<std::string>(), (*r)["uid"].get<std::uint64_t>(),
               (*r)["model"].get<std::string>(),
               (*r)["history"].get<bool>() ? "its history" : "no history",
               (*r)["retained_entries"].get<std::uint32_t>(),
               (*r)["retained_tokens"].get<std::uint64_t>(),
               (*r)["store_bytes"].get<std::uint64_t>());
  return 0;
}

} // namespace

bool is_admin_command(std::string_view command) {
  return std::find(commands.begin(), commands.end(), command) != commands.end();
}

std::string default_admin_socket() {
  return daemon::resolve_runtime_dir({}) + "/kvlane-admin.sock";
}

int admin_main(int argc, char** argv) {
  std::string cmd = argv[0];
  std::string socket = default_admin_socket();
  // `cache drop --session` forgets a conversation; the other cache forms
  // (ls, drop --all | --id) go through the common path below.
  if (cmd == "cache"
      && std::any_of(argv + 1, argv + argc, [](const char* a) { return std::string_view{a} == "--session"; }))
    return cache_drop_session_main(argc, argv, socket);
  bool as_json = false, wait = true;
  std::optional<std::string> keep_alive;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string_view a{argv[i]};
    if (is_help(a))
      return print_help(cmd);
    if (a == "--json")
      as_json = true;
    else if (cmd == "cache" && (a == "--model" || a == "--id") && i + 1 < argc) {
      args.emplace_back(a);
      args.emplace_back(argv[++i]);
    } else if (cmd == "cache" && a == "--all")
      args.emplace_back(a);
    else if (cmd == "load" && a == "--keep-alive" && i + 1 < argc)
      keep_alive = argv[++i];
    else if (a == "--no-wait")
      wait = false;
    else if (a == "--socket" && i + 1 < argc)
      socket = argv[++i];
    else if (a.starts_with("--"))
      return fail(64, fmt::format("{}: unknown option '{}'\n{}", cmd, a, admin_usage(cmd)));
    else
      args.emplace_back(a);
  }

  json req{{"cmd", cmd}};
  std::size_t want_args = 0;
  if (cmd == "cancel") {
    want_args = 1;
    std::uint64_t id = 0;
    if (args.size() == 1) {
      auto [p, ec] = std::from_chars(args[0].data(), args[0].data() + args[0].size(), id);
      if (ec != std::errc{} || p != args[0].data() + args[0].size())
        return fail(64, fmt::format("cancel: '{}' is not a sequence id", args[0]));
    }
    req["id"] = id;
  } else if (cmd == "log-level") {
    want_args = 2;
    if (args.size() == 2) {
      req["logger"] = args[0];
      req["level"] = args[1];
    }
  } else if (cmd == "load" || cmd == "unload") {
    want_args = 1;
    if (args.size() == 1)
      req["model"] = args[0];
    if (keep_alive)
      req["keep_alive"] = *keep_alive;
  } else if (cmd == "cache") {
    auto r = cache_request(args);
    if (!r)
      return fail(64, fmt::format("{}\n{}", r.error(), admin_usage(cmd)));
    req = std::move(*r);
    want_args = args.size();
  }
  if (args.size() != want_args)
    return fail(64, fmt::format("{}: expected {} argument(s)\n{}", cmd, want_args, admin_usage(cmd)));

  auto c = admin_connection::open(socket);
  if (!c)
    return fail(2, c.error().message);
  if (cmd == "top")
    return run_top(*c);

  // A load waits for the model (the daemon bounds it by [models] load_timeout_ms).
  auto r = c->ask(req, cmd == "load" ? std::chrono::milliseconds(1h) : reply_timeout);
  if (!r)
    return fail(2, r.error().message);
  if (r->contains("error")) {
    if (as_json)
      fmt::print("{}\n", r->dump());
    auto& e = (*r)["error"];
    return fail(e["code"] == "not_allowed" ? 2 : 1,
                fmt::format("{}: {}", e["code"].get<std::string>(), e["message"].get<std::string>()));
  }
  if (cmd == "drain" && wait) {
    // Poll until the running work is done, then report.
    auto started = std::chrono::steady_clock::now();
    auto initial = (*r)["active"].get<std::uint64_t>();
    for (;;) {
      auto ps = c->ask({{"cmd", "ps"}}, reply_timeout);
      if (!ps)
        return fail(2, ps.error().message);
      if ((*ps)["sequences"].empty())
        break;
      std::this_thread::sleep_for(200ms); // a person is waiting, not a test
    }
    auto took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    (*r)["active"] = 0;
    (*r)["finished"] = initial;
    (*r)["seconds"] = took;
    if (!as_json) {
      fmt::print("drained: {} sequence(s) finished in {:.1f} s; no new requests are admitted "
                 "(kvlane resume to admit again)\n",
                 initial, took);
      return 0;
    }
  }
  if (as_json) {
    fmt::print("{}\n", r->dump());
    return 0;
  }
  if (cmd == "status")
    print_status(*r);
  else if (cmd == "ps")
    print_ps(*r);
  else if (cmd == "metrics")
    std::fputs((*r)["text"].get<std::string>().c_str(), stdout);
  else if (req["cmd"] == "cache-ls")
    print_cache_ls(*r);
  else if (req["cmd"] == "cache-drop")
    print_cache_drop(*r);
  else if (cmd == "reload") {
    for (auto& a : (*r)["applied"])
      fmt::print("applied: {}\n", a.get<std::string>());
    for (auto& a : (*r)["needs_restart"])
      fmt::print("needs a restart: {}\n", a.get<std::string>());
    if ((*r)["applied"].empty() && (*r)["needs_restart"].empty())
      fmt::print("nothing changed\n");
  } else if (cmd == "drain")
    fmt::print("draining: {} sequence(s) still running\n", (*r)["active"].get<std::uint64_t>());
  else if (cmd == "load" || cmd == "unload") {
    fmt::print("{}\n", (*r)["message"].get<std::string>());
    if ((*r)["model"].is_object())
      print_model_line((*r)["model"]);
  }
  else
    fmt::print("{}\n", r->dump());
  return 0;
}

} // namespace kvlane::tools
