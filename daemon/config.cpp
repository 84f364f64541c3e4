#include "daemon/config.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <charconv>
#include <limits>
#include <memory>
#include <span>
#include <tuple>
#include <utility>

// Returns the error of a failed status from the enclosing function.
#define KVLANE_CONFIG_TRY(...)                                                                    \
  do {                                                                                            \
    if (auto status_ = (__VA_ARGS__); !status_)                                                   \
      return ::kvlane::unexpected(std::move(status_.error()));                                    \
  } while (false)

namespace kvlane::daemon {

namespace {

using backends::backend_errc;
using backends::fault_spec;
using backends::sim_options;
using backends::snapshot_extent;
using backends::transfer_overlap;
using status = expected<void, config_error>;

constexpr std::uint64_t kib = 1ull << 10;
constexpr std::uint64_t mib = 1ull << 20;
constexpr std::uint64_t tib = 1ull << 40;

template <class E>
struct choice {
  std::string_view name;
  E value;
};

constexpr choice<scheduler_mode> scheduler_modes[] = {
  {"fcfs", scheduler_mode::fcfs},
  {"sync", scheduler_mode::sync},
  {"overlap", scheduler_mode::overlap},
  {"ideal", scheduler_mode::ideal},
};

constexpr choice<transfer_overlap> overlap_modes[] = {
  {"full", transfer_overlap::full},
  {"none", transfer_overlap::none},
  {"shared", transfer_overlap::shared},
};

constexpr choice<snapshot_extent> snapshot_extents[] = {
  {"full", snapshot_extent::full_slot},
  {"used", snapshot_extent::used_length},
};

// Stored as written; each is a level name spdlog::level::from_str() accepts.
constexpr choice<std::string_view> log_level_names[] = {
  {"trace", "trace"}, {"debug", "debug"},       {"info", "info"}, {"warn", "warn"},
  {"error", "error"}, {"critical", "critical"}, {"off", "off"},
};

constexpr std::string_view known_backends[] = {"sim"};

// Built by probing backends::to_string(backend_errc) so that the accepted names
// cannot drift from the names the backend reports in its errors.
std::vector<choice<backend_errc>> fault_codes() {
  std::vector<choice<backend_errc>> out;
  for (unsigned v = 0; v <= std::numeric_limits<std::uint8_t>::max(); ++v) {
    const auto code = static_cast<backend_errc>(v);
    if (const auto name = backends::to_string(code); name != "unknown")
      out.push_back({name, code});
  }
  return out;
}

std::uint32_t line_of(const toml::node& n) {
  return n.source().begin.line;
}

std::string_view type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::none: return "nothing";
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
  }
  return "unknown";
}

std::string quoted(std::string_view s) {
  return fmt::format("{:?}", s);
}

/// "64MiB" when the value is a whole number of a binary unit, else plain bytes.
std::string format_bytes(std::uint64_t v) {
  constexpr std::pair<std::uint64_t, std::string_view> units[] = {
    {tib, "TiB"}, {1ull << 30, "GiB"}, {mib, "MiB"}, {kib, "KiB"}};
  for (const auto& [size, name] : units)
    if (v != 0 && v % size == 0)
      return fmt::format("{}{}", v / size, name);
  return fmt::format("{}", v);
}

template <class E>
std::string list_names(std::span<const choice<E>> choices) {
  std::string out;
  for (const auto& c : choices)
    out += (out.empty() ? "" : ", ") + quoted(c.name);
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

/// Builds errors that start with "<source>:<line>: ".
class reporter {
public:
  explicit reporter(std::string_view source) : source_(source) {}

  config_error error(std::string key, std::uint32_t line, std::string_view body) const {
    std::string message = line != 0 ? fmt::format("{}:{}: {}", source_, line, body)
                                    : fmt::format("{}: {}", source_, body);
    return config_error{std::move(key), line, std::move(message)};
  }

  /// "<source>:<line>: <key>: <what>"
  config_error bad_value(std::string key, std::uint32_t line, std::string_view what) const {
    auto body = fmt::format("{}: {}", key, what);
    return error(std::move(key), line, body);
  }

  config_error wrong_type(std::string key, const toml::node& n, std::string_view expected) const {
    return bad_value(std::move(key), line_of(n),
                     fmt::format("expected {}, got {}", expected, type_name(n)));
  }

private:
  std::string_view source_;
};

/// One TOML table and its dotted path in error messages ("model[0].sim").
struct section {
  const toml::table& table;
  std::string path;

  std::string key(std::string_view name) const {
    return path.empty() ? std::string(name) : fmt::format("{}.{}", path, name);
  }
  const toml::node* find(std::string_view name) const { return table.get(name); }
  std::uint32_t line() const { return line_of(table); }
  /// Line of `name` if present, else of the table (for checks on defaulted keys).
  std::uint32_t line(std::string_view name) const {
    const auto* n = find(name);
    return n != nullptr ? line_of(*n) : line();
  }
};

/// Rejects keys of `s` that are not in `known`; reports the first by line.
status check_keys(const reporter& r, const section& s, std::initializer_list<std::string_view> known) {
  const toml::key* first = nullptr;
  std::uint32_t first_line = 0;
  for (auto&& [k, v] : s.table) {
    if (std::find(known.begin(), known.end(), k.str()) != known.end())
      continue;
    const std::uint32_t line = k.source().begin.line != 0 ? k.source().begin.line : line_of(v);
    if (first == nullptr || line < first_line) {
      first = &k;
      first_line = line;
    }
  }
  if (first == nullptr)
    return {};
  auto key = s.key(first->str());
  auto body = fmt::format("unknown key '{}'", key);
  const auto best = std::min_element(known.begin(), known.end(), [&](auto a, auto b) {
    return edit_distance(first->str(), a) < edit_distance(first->str(), b);
  });
  if (best != known.end() && edit_distance(first->str(), *best) <= 2)
    body += fmt::format(" (did you mean '{}'?)", *best);
  return unexpected(r.error(std::move(key), first_line, body));
}

/// The sub-table `name` of `s`, or nullptr when absent.
expected<const toml::table*, config_error> find_table(const reporter& r, const section& s,
                                                      std::string_view name) {
  const auto* n = s.find(name);
  if (n == nullptr)
    return static_cast<const toml::table*>(nullptr);
  if (!n->is_table())
    return unexpected(r.wrong_type(s.key(name), *n, "table"));
  return n->as_table();
}

template <class T>
status read_int(const reporter& r, const section& s, std::string_view name, T& out,
                std::int64_t lo, std::int64_t hi) {
  const auto* n = s.find(name);
  if (n == nullptr)
    return {};
  const auto* v = n->as_integer();
  if (v == nullptr)
    return unexpected(r.wrong_type(s.key(name), *n, "integer"));
  const std::int64_t x = v->get();
  if (x < lo || x > hi)
    return unexpected(r.bad_value(s.key(name), line_of(*n),
                                  fmt::format("must be between {} and {} (got {})", lo, hi, x)));
  out = static_cast<T>(x);
  return {};
}

struct real_range {
  double lo;
  bool lo_open;
  double hi; ///< infinity = unbounded (the value must still be finite)
  bool hi_open;

  bool contains(double x) const {
    return std::isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
  }
  std::string describe() const {
    if (std::isinf(hi))
      return fmt::format("a finite number {} {}", lo_open ? ">" : ">=", lo);
    if (!lo_open && !hi_open)
      return fmt::format("between {} and {}", lo, hi);
    return fmt::format("{} {} and {} {}", lo_open ? ">" : ">=", lo, hi_open ? "<" : "<=", hi);
  }
};

constexpr real_range non_negative{0.0, false, std::numeric_limits<double>::infinity(), false};
constexpr real_range unit_interval{0.0, false, 1.0, false};

/// Reads a float; integers are accepted too (`time_scale = 100`).
status read_real(const reporter& r, const section& s, std::string_view name, double& out,
                 real_range range) {
  const auto* n = s.find(name);
  if (n == nullptr)
    return {};
  double x = 0.0;
  if (const auto* f = n->as_floating_point())
    x = f->get();
  else if (const auto* i = n->as_integer())
    x = static_cast<double>(i->get());
  else
    return unexpected(r.wrong_type(s.key(name), *n, "number"));
  if (!range.contains(x))
    return unexpected(r.bad_value(s.key(name), line_of(*n),
                                  fmt::format("must be {} (got {})", range.describe(), x)));
  out = x;
  return {};
}

status read_string(const reporter& r, const section& s, std::string_view name, std::string& out) {
  const auto* n = s.find(name);
  if (n == nullptr)
    return {};
  const auto* v = n->as_string();
  if (v == nullptr)
    return unexpected(r.wrong_type(s.key(name), *n, "string"));
  out = v->get();
  return {};
}

template <class Out, class E>
status read_choice(const reporter& r, const section& s, std::string_view name, Out& out,
                   std::span<const choice<E>> choices) {
  if (s.find(name) == nullptr)
    return {};
  std::string text;
  KVLANE_CONFIG_TRY(read_string(r, s, name, text));
  for (const auto& c : choices) {
    if (c.name == text) {
      out = c.value;
      return {};
    }
  }
  return unexpected(r.bad_value(s.key(name), s.line(name),
                                fmt::format("must be one of {} (got {})", list_names(choices),
                                            quoted(text))));
}

/// Reads a byte size: a non-negative integer or a string such as "64MiB".
status read_bytes(const reporter& r, const section& s, std::string_view name, std::uint64_t& out,
                  std::uint64_t lo, std::uint64_t hi) {
  const auto* n = s.find(name);
  if (n == nullptr)
    return {};
  std::uint64_t x = 0;
  bool written_as_string = false;
  if (const auto* i = n->as_integer()) {
    if (i->get() < 0)
      return unexpected(r.bad_value(
        s.key(name), line_of(*n),
        fmt::format("must be between {} and {} (got {})", format_bytes(lo), format_bytes(hi), i->get())));
    x = static_cast<std::uint64_t>(i->get());
  } else if (const auto* str = n->as_string()) {
    const auto parsed = parse_byte_size(str->get());
    if (!parsed)
      return unexpected(r.bad_value(
        s.key(name), line_of(*n),
        fmt::format("expected a byte size such as \"64MiB\", \"8 GiB\", \"1GB\" or an integer "
                    "(got {})",
                    quoted(str->get()))));
    x = *parsed;
    written_as_string = true;
  } else {
    return unexpected(r.wrong_type(s.key(name), *n, "integer or byte-size string"));
  }
  if (x < lo || x > hi)
    return unexpected(r.bad_value(s.key(name), line_of(*n),
                                  fmt::format("must be between {} and {} (got {})",
                                              format_bytes(lo), format_bytes(hi),
                                              written_as_string ? format_bytes(x) : std::to_string(x))));
  out = x;
  return {};
}

bool valid_model_name(std::string_view name) {
  if (name.empty() || name.size() > 64)
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.'
           || c == '_' || c == '-';
  });
}

status parse_daemon(const reporter& r, const section& root, daemon_section& out) {
  auto table = find_table(r, root, "daemon");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, "daemon"};
  KVLANE_CONFIG_TRY(check_keys(
    r, s,
    {"runtime_dir", "worker_threads", "log_level", "log_levels", "shutdown_timeout_ms",
     "shutdown_grace_ms"}));

  KVLANE_CONFIG_TRY(read_string(r, s, "runtime_dir", out.runtime_dir));
  if (!out.runtime_dir.empty() && out.runtime_dir.front() != '/')
    return unexpected(r.bad_value(s.key("runtime_dir"), s.line("runtime_dir"),
                                  fmt::format("must be an absolute path or empty (got {})",
                                              quoted(out.runtime_dir))));
  KVLANE_CONFIG_TRY(read_int(r, s, "worker_threads", out.worker_threads, 0, 256));
  KVLANE_CONFIG_TRY(read_choice(r, s, "log_level", out.log_level,
                                std::span<const choice<std::string_view>>(log_level_names)));

  auto levels = find_table(r, s, "log_levels");
  if (!levels)
    return unexpected(std::move(levels.error()));
  if (*levels != nullptr) {
    const section ls{**levels, "daemon.log_levels"};
    for (auto&& [logger, node] : ls.table) {
      const auto key = ls.key(logger.str());
      if (logger.str().empty())
        return unexpected(r.bad_value(key, line_of(node), "logger name must not be empty"));
      std::string level;
      KVLANE_CONFIG_TRY(read_choice(r, ls, logger.str(), level,
                                    std::span<const choice<std::string_view>>(log_level_names)));
      out.log_levels[std::string(logger.str())] = level;
    }
  }

  std::int64_t timeout_ms = out.shutdown_timeout.count();
  KVLANE_CONFIG_TRY(read_int(r, s, "shutdown_timeout_ms", timeout_ms, 100, 600'000));
  out.shutdown_timeout = std::chrono::milliseconds(timeout_ms);
  std::int64_t grace_ms = out.shutdown_grace.count();
  KVLANE_CONFIG_TRY(read_int(r, s, "shutdown_grace_ms", grace_ms, 0, 3'600'000));
  out.shutdown_grace = std::chrono::milliseconds(grace_ms);
  return {};
}

status parse_fault(const reporter& r, const section& faults, std::string_view op, fault_spec& out,
                   std::span<const choice<backend_errc>> codes) {
  auto table = find_table(r, faults, op);
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, faults.key(op)};
  KVLANE_CONFIG_TRY(check_keys(r, s, {"fail_nth", "fail_rate", "code"}));
  KVLANE_CONFIG_TRY(
    read_int(r, s, "fail_nth", out.fail_nth, 0, std::numeric_limits<std::int64_t>::max()));
  KVLANE_CONFIG_TRY(read_real(r, s, "fail_rate", out.fail_rate, unit_interval));
  KVLANE_CONFIG_TRY(read_choice(r, s, "code", out.code, codes));
  return {};
}

/// min <= max for a [min, max] timing pair; the error names the max key.
status check_min_max(const reporter& r, const section& s, std::string_view min_name, double min,
                     std::string_view max_name, double max) {
  if (min <= max)
    return {};
  return unexpected(r.bad_value(s.key(max_name), s.line(max_name),
                                fmt::format("must be >= {} ({}) (got {}{})", min_name, min,
                                            s.find(max_name) != nullptr ? "" : "the default, ", max)));
}

status parse_sim(const reporter& r, const section& model, sim_options& out) {
  auto table = find_table(r, model, "sim");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, model.key("sim")};
  KVLANE_CONFIG_TRY(check_keys(
    r, s,
    {"slots", "max_context", "max_prefill_chunk", "snapshot_bytes", "snapshot", "step_base_ms",
     "step_per_token_ms", "dump_min_ms", "dump_max_ms", "load_min_ms", "load_max_ms", "time_scale",
     "overlap", "seed", "eos_rate", "faults"}));

  KVLANE_CONFIG_TRY(read_int(r, s, "slots", out.slots, 1, 1024));
  KVLANE_CONFIG_TRY(read_int(r, s, "max_context", out.max_context, 1, 1'048'576));
  if (s.find("max_prefill_chunk") != nullptr) {
    KVLANE_CONFIG_TRY(read_int(r, s, "max_prefill_chunk", out.max_prefill_chunk, 1, out.max_context));
  } else if (out.max_prefill_chunk > out.max_context) {
    return unexpected(r.bad_value(
      s.key("max_prefill_chunk"), s.line(),
      fmt::format("must be between 1 and max_context ({}) (got the default, {}); set it explicitly",
                  out.max_context, out.max_prefill_chunk)));
  }

  KVLANE_CONFIG_TRY(read_bytes(r, s, "snapshot_bytes", out.snapshot_bytes, 4 * kib, tib));
  if (out.snapshot_bytes % out.max_context != 0) {
    const std::uint64_t below = out.snapshot_bytes / out.max_context * out.max_context;
    const std::uint64_t above = below + out.max_context;
    const bool set = s.find("snapshot_bytes") != nullptr;
    return unexpected(r.bad_value(
      s.key("snapshot_bytes"), s.line("snapshot_bytes"),
      fmt::format("must be a multiple of max_context ({}) so that bytes per token is a whole "
                  "number (got {}{}; nearest valid: {} or {})",
                  out.max_context, out.snapshot_bytes, set ? "" : ", the default", below, above)));
  }
  KVLANE_CONFIG_TRY(read_choice(r, s, "snapshot", out.extent,
                                std::span<const choice<snapshot_extent>>(snapshot_extents)));

  KVLANE_CONFIG_TRY(read_real(r, s, "step_base_ms", out.step_base_ms, non_negative));
  KVLANE_CONFIG_TRY(read_real(r, s, "step_per_token_ms", out.step_per_token_ms, non_negative));
  KVLANE_CONFIG_TRY(read_real(r, s, "dump_min_ms", out.dump_min_ms, non_negative));
  KVLANE_CONFIG_TRY(read_real(r, s, "dump_max_ms", out.dump_max_ms, non_negative));
  KVLANE_CONFIG_TRY(check_min_max(r, s, "dump_min_ms", out.dump_min_ms, "dump_max_ms", out.dump_max_ms));
  KVLANE_CONFIG_TRY(read_real(r, s, "load_min_ms", out.load_min_ms, non_negative));
  KVLANE_CONFIG_TRY(read_real(r, s, "load_max_ms", out.load_max_ms, non_negative));
  KVLANE_CONFIG_TRY(check_min_max(r, s, "load_min_ms", out.load_min_ms, "load_max_ms", out.load_max_ms));
  KVLANE_CONFIG_TRY(read_real(r, s, "time_scale", out.time_scale, {0.0, true, 1e6, false}));
  KVLANE_CONFIG_TRY(read_choice(r, s, "overlap", out.overlap,
                                std::span<const choice<transfer_overlap>>(overlap_modes)));
  KVLANE_CONFIG_TRY(read_int(r, s, "seed", out.seed, 0, std::numeric_limits<std::int64_t>::max()));
  KVLANE_CONFIG_TRY(read_real(r, s, "eos_rate", out.eos_rate, unit_interval));

  auto faults = find_table(r, s, "faults");
  if (!faults)
    return unexpected(std::move(faults.error()));
  if (*faults != nullptr) {
    const section fs{**faults, s.key("faults")};
    KVLANE_CONFIG_TRY(check_keys(r, fs, {"step", "dump", "load"}));
    const auto codes = fault_codes();
    KVLANE_CONFIG_TRY(parse_fault(r, fs, "step", out.step_faults, codes));
    KVLANE_CONFIG_TRY(parse_fault(r, fs, "dump", out.dump_faults, codes));
    KVLANE_CONFIG_TRY(parse_fault(r, fs, "load", out.load_faults, codes));
  }
  return {};
}

status parse_model(const reporter& r, const section& s, model_section& out) {
  KVLANE_CONFIG_TRY(
    check_keys(r, s, {"name", "backend", "store_floor_bytes", "store_cap_bytes", "sim"}));

  if (s.find("name") == nullptr)
    return unexpected(r.bad_value(s.key("name"), s.line(), "required key is missing"));
  KVLANE_CONFIG_TRY(read_string(r, s, "name", out.name));
  if (!valid_model_name(out.name))
    return unexpected(r.bad_value(
      s.key("name"), s.line("name"),
      fmt::format("must be 1 to 64 characters from A-Z a-z 0-9 . _ - (got {})", quoted(out.name))));

  KVLANE_CONFIG_TRY(read_string(r, s, "backend", out.backend));
  if (std::find(std::begin(known_backends), std::end(known_backends), out.backend)
      == std::end(known_backends)) {
    std::string known;
    for (auto b : known_backends)
      known += (known.empty() ? "" : ", ") + quoted(b);
    return unexpected(r.bad_value(
      s.key("backend"), s.line("backend"),
      fmt::format("unknown backend {} (known backends: {})", quoted(out.backend), known)));
  }
  KVLANE_CONFIG_TRY(parse_sim(r, s, out.sim));

  constexpr std::uint64_t store_limit = 1ull << 44;
  KVLANE_CONFIG_TRY(read_bytes(r, s, "store_floor_bytes", out.store_floor_bytes, 0, store_limit));
  KVLANE_CONFIG_TRY(read_bytes(r, s, "store_cap_bytes", out.store_cap_bytes, 0, store_limit));
  if (out.store_cap_bytes != 0 && out.store_floor_bytes > out.store_cap_bytes)
    return unexpected(r.bad_value(
      s.key("store_cap_bytes"), s.line("store_cap_bytes"),
      fmt::format("must be 0 (no cap) or >= store_floor_bytes ({}) (got {})",
                  format_bytes(out.store_floor_bytes), format_bytes(out.store_cap_bytes))));
  return {};
}

status parse_models(const reporter& r, const section& root, std::vector<model_section>& out) {
  const auto* n = root.find("model");
  if (n == nullptr)
    return unexpected(r.bad_value("model", root.line(),
                                  "at least one [[model]] table is required"));
  const auto* array = n->as_array();
  const bool tables = array != nullptr
                      && std::all_of(array->begin(), array->end(),
                                     [](const toml::node& e) { return e.is_table(); });
  if (!tables)
    return unexpected(r.wrong_type("model", *n, "array of tables ([[model]])"));
  if (array->empty())
    return unexpected(r.bad_value("model", line_of(*n),
                                  "at least one [[model]] table is required"));

  for (std::size_t i = 0; i < array->size(); ++i) {
    const section s{*array->get(i)->as_table(), fmt::format("model[{}]", i)};
    model_section m;
    KVLANE_CONFIG_TRY(parse_model(r, s, m));
    for (std::size_t j = 0; j < out.size(); ++j) {
      if (out[j].name == m.name)
        return unexpected(r.bad_value(
          s.key("name"), s.line("name"),
          fmt::format("duplicate model name {} (also used by model[{}] at line {})", quoted(m.name),
                      j, line_of(*array->get(j)->as_table()->get("name")))));
    }
    out.push_back(std::move(m));
  }
  return {};
}

status parse_scheduler(const reporter& r, const section& root, scheduler_section& out) {
  auto table = find_table(r, root, "scheduler");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, "scheduler"};
  KVLANE_CONFIG_TRY(check_keys(r, s,
                               {"mode", "quantum_tokens", "levels", "spare_slots", "max_step_tokens",
                                "aging_steps", "ewma_alpha"}));
  KVLANE_CONFIG_TRY(read_choice(r, s, "mode", out.mode,
                                std::span<const choice<scheduler_mode>>(scheduler_modes)));
  KVLANE_CONFIG_TRY(read_int(r, s, "quantum_tokens", out.quantum_tokens, 1, 1'000'000));
  KVLANE_CONFIG_TRY(read_int(r, s, "levels", out.levels, 1, 16));
  // The top level's quantum, quantum_tokens * 2^(levels - 1), must fit the scheduler's uint32.
  const std::uint64_t top_quantum = std::uint64_t{out.quantum_tokens} << (out.levels - 1);
  if (top_quantum > std::numeric_limits<std::uint32_t>::max())
    return unexpected(r.bad_value(
      s.key("levels"), s.line("levels"),
      fmt::format("quantum_tokens * 2^(levels - 1) must be at most {} (got {} * 2^{} = {})",
                  std::numeric_limits<std::uint32_t>::max(), out.quantum_tokens, out.levels - 1,
                  top_quantum)));
  KVLANE_CONFIG_TRY(read_int(r, s, "spare_slots", out.spare_slots, 0, 64));
  KVLANE_CONFIG_TRY(read_int(r, s, "max_step_tokens", out.max_step_tokens, 0, 1'048'576));
  KVLANE_CONFIG_TRY(read_int(r, s, "aging_steps", out.aging_steps, 0, 1'000'000'000));
  KVLANE_CONFIG_TRY(read_real(r, s, "ewma_alpha", out.ewma_alpha, {0.0, true, 1.0, false}));
  return {};
}

status parse_store(const reporter& r, const section& root, store_section& out) {
  auto table = find_table(r, root, "store");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, "store"};
  KVLANE_CONFIG_TRY(check_keys(r, s, {"max_bytes"}));
  KVLANE_CONFIG_TRY(read_bytes(r, s, "max_bytes", out.max_bytes, mib, 1ull << 44));
  return {};
}

/// Reads an array of user or group names / numeric ids into their text form.
status read_principals(const reporter& r, const section& s, std::string_view name,
                       std::vector<std::string>& out) {
  const auto* n = s.find(name);
  if (n == nullptr)
    return {};
  const auto* array = n->as_array();
  if (array == nullptr)
    return unexpected(r.wrong_type(s.key(name), *n, "array of names or numeric ids"));
  out.clear();
  for (std::size_t i = 0; i < array->size(); ++i) {
    const auto& e = *array->get(i);
    const auto key = fmt::format("{}[{}]", s.key(name), i);
    if (const auto* str = e.as_string()) {
      const auto& v = str->get();
      const bool ok = !v.empty() && v.size() <= 256 && std::all_of(v.begin(), v.end(), [](char c) {
        return c != ':' && c != '\n' && c != '\0' && static_cast<unsigned char>(c) > 0x20;
      });
      if (!ok)
        return unexpected(r.bad_value(key, line_of(e),
                                      fmt::format("must be a user or group name (got {})", quoted(v))));
      out.push_back(v);
    } else if (const auto* i64 = e.as_integer()) {
      const auto v = i64->get();
      if (v < 0 || v > 4'294'967'294)
        return unexpected(r.bad_value(
          key, line_of(e), fmt::format("must be a numeric id between 0 and 4294967294 (got {})", v)));
      out.push_back(std::to_string(v));
    } else {
      return unexpected(r.wrong_type(key, e, "name (string) or numeric id (integer)"));
    }
  }
  return {};
}

status read_socket_mode(const reporter& r, const section& s, std::uint32_t& out) {
  const auto* n = s.find("socket_mode");
  if (n == nullptr)
    return {};
  const auto* v = n->as_integer();
  if (v == nullptr)
    return unexpected(r.wrong_type(s.key("socket_mode"), *n, "integer (e.g. 0o660)"));
  if (v->get() < 0 || v->get() > 0777)
    return unexpected(r.bad_value(s.key("socket_mode"), line_of(*n),
                                  fmt::format("must be between 0o000 and 0o777 (got {:#o})",
                                              v->get())));
  if ((v->get() & 0600) != 0600)
    return unexpected(r.bad_value(
      s.key("socket_mode"), line_of(*n),
      fmt::format("must give the owner read and write (0o600) (got 0o{:03o})", v->get())));
  out = static_cast<std::uint32_t>(v->get());
  return {};
}

status parse_clients(const reporter& r, const section& root, clients_section& out) {
  auto table = find_table(r, root, "clients");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, "clients"};
  KVLANE_CONFIG_TRY(check_keys(r, s,
                               {"socket_mode", "allow_users", "allow_groups", "max_clients",
                                "max_requests", "max_prompt_bytes", "submit_ring_records",
                                "events_ring_records", "max_backlog_records", "spin_us",
                                "hello_timeout_ms"}));
  KVLANE_CONFIG_TRY(read_socket_mode(r, s, out.socket_mode));
  KVLANE_CONFIG_TRY(read_principals(r, s, "allow_users", out.allow_users));
  KVLANE_CONFIG_TRY(read_principals(r, s, "allow_groups", out.allow_groups));
  KVLANE_CONFIG_TRY(read_int(r, s, "max_clients", out.max_clients, 1, 4096));
  KVLANE_CONFIG_TRY(read_int(r, s, "max_requests", out.max_requests, 1, 65536));
  KVLANE_CONFIG_TRY(read_bytes(r, s, "max_prompt_bytes", out.max_prompt_bytes, 256, 256 * mib));
  for (const auto& [key, field, lo, hi] :
       {std::tuple{"submit_ring_records", &out.submit_ring_records, 8u, 65536u},
        std::tuple{"events_ring_records", &out.events_ring_records, 16u, 1'048'576u}}) {
    KVLANE_CONFIG_TRY(read_int(r, s, key, *field, lo, hi));
    if ((*field & (*field - 1)) != 0)
      return unexpected(r.bad_value(s.key(key), s.line(key),
                                    fmt::format("must be a power of two (got {})", *field)));
  }
  KVLANE_CONFIG_TRY(read_int(r, s, "max_backlog_records", out.max_backlog_records, 16, 16'777'216));
  KVLANE_CONFIG_TRY(read_int(r, s, "spin_us", out.spin_us, 0, 100'000));
  std::int64_t hello_ms = out.hello_timeout.count();
  KVLANE_CONFIG_TRY(read_int(r, s, "hello_timeout_ms", hello_ms, 10, 60'000));
  out.hello_timeout = std::chrono::milliseconds(hello_ms);
  return {};
}

status parse_admin(const reporter& r, const section& root, admin_section& out) {
  auto table = find_table(r, root, "admin");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, "admin"};
  KVLANE_CONFIG_TRY(check_keys(r, s, {"socket_mode", "allow_users", "allow_groups"}));
  KVLANE_CONFIG_TRY(read_socket_mode(r, s, out.socket_mode));
  KVLANE_CONFIG_TRY(read_principals(r, s, "allow_users", out.allow_users));
  KVLANE_CONFIG_TRY(read_principals(r, s, "allow_groups", out.allow_groups));
  return {};
}

status parse_metrics(const reporter& r, const section& root, metrics_section& out) {
  auto table = find_table(r, root, "metrics");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, "metrics"};
  KVLANE_CONFIG_TRY(check_keys(r, s, {"listen"}));
  KVLANE_CONFIG_TRY(read_string(r, s, "listen", out.listen));
  if (!out.listen.empty() && !parse_listen(out.listen))
    return unexpected(r.bad_value(
      s.key("listen"), s.line("listen"),
      fmt::format("must be a loopback address and port such as \"127.0.0.1:9464\" or "
                  "\"[::1]:9464\", or empty to turn HTTP metrics off (got {})",
                  quoted(out.listen))));
  return {};
}

/// Floors are reservations: together they must fit in the store.
status check_floors(const reporter& r, const section& root, const config& c) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < c.models.size(); ++i) {
    sum += c.models[i].store_floor_bytes; // each <= 2^44: no overflow for any realistic count
    if (sum > c.store.max_bytes) {
      const section s{*root.table["model"][i].as_table(), fmt::format("model[{}]", i)};
      return unexpected(r.bad_value(
        s.key("store_floor_bytes"), s.line("store_floor_bytes"),
        i == 0 ? fmt::format("must be <= store.max_bytes ({}) (got {})",
                             format_bytes(c.store.max_bytes), format_bytes(sum))
               : fmt::format("the store floors of model[0..{}] add up to {}, more than "
                             "store.max_bytes ({})",
                             i, format_bytes(sum), format_bytes(c.store.max_bytes))));
    }
  }
  return {};
}

expected<config, config_error> build(const reporter& r, const toml::table& doc) {
  const section root{doc, ""};

  // Checked before unknown keys: another version has other keys.
  const auto* version = root.find("version");
  if (version != nullptr) {
    const auto* v = version->as_integer();
    if (v == nullptr)
      return unexpected(r.wrong_type("version", *version, "integer"));
    if (v->get() != 1)
      return unexpected(r.bad_value(
        "version", line_of(*version),
        fmt::format("unsupported config version {} (this kvlaned reads version 1)", v->get())));
  }
  KVLANE_CONFIG_TRY(
    check_keys(r, root,
               {"version", "daemon", "model", "scheduler", "store", "clients", "admin", "metrics"}));
  if (version == nullptr)
    return unexpected(
      r.bad_value("version", root.line(), "required key is missing (add 'version = 1' at the top)"));

  config c;
  KVLANE_CONFIG_TRY(parse_daemon(r, root, c.daemon));
  KVLANE_CONFIG_TRY(parse_models(r, root, c.models));
  KVLANE_CONFIG_TRY(parse_scheduler(r, root, c.scheduler));
  KVLANE_CONFIG_TRY(parse_store(r, root, c.store));
  KVLANE_CONFIG_TRY(check_floors(r, root, c));
  KVLANE_CONFIG_TRY(parse_clients(r, root, c.clients));
  KVLANE_CONFIG_TRY(parse_admin(r, root, c.admin));
  KVLANE_CONFIG_TRY(parse_metrics(r, root, c.metrics));
  return c;
}

} // namespace

std::optional<listen_address> parse_listen(std::string_view text) {
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos)
    return std::nullopt;
  auto host = text.substr(0, colon);
  auto port_text = text.substr(colon + 1);
  unsigned port = 0;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc{} || p != port_text.data() + port_text.size() || port == 0 || port > 65535)
    return std::nullopt;
  listen_address out;
  out.port = static_cast<std::uint16_t>(port);
  if (host == "127.0.0.1" || host == "localhost")
    out.host = "127.0.0.1";
  else if (host == "[::1]")
    out.host = "::1";
  else
    return std::nullopt;
  return out;
}

std::string_view to_string(scheduler_mode m) noexcept {
  for (const auto& c : scheduler_modes)
    if (c.value == m)
      return c.name;
  return "unknown";
}

std::optional<std::uint64_t> parse_byte_size(std::string_view text) noexcept {
  constexpr std::pair<std::string_view, std::uint64_t> units[] = {
    {"B", 1},
    {"KiB", kib},           {"MiB", mib},       {"GiB", 1ull << 30},   {"TiB", tib},
    {"kB", 1'000},          {"KB", 1'000},      {"MB", 1'000'000},     {"GB", 1'000'000'000},
    {"TB", 1'000'000'000'000},
  };
  constexpr auto max = std::numeric_limits<std::uint64_t>::max();

  std::size_t i = 0;
  std::uint64_t n = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const auto digit = static_cast<std::uint64_t>(text[i] - '0');
    if (n > (max - digit) / 10)
      return std::nullopt;
    n = n * 10 + digit;
  }
  if (i == 0)
    return std::nullopt;
  auto unit = text.substr(i);
  if (unit.empty())
    return n;
  if (unit.front() == ' ')
    unit.remove_prefix(1);
  for (const auto& [name, factor] : units) {
    if (unit == name) {
      if (n > max / factor)
        return std::nullopt;
      return n * factor;
    }
  }
  return std::nullopt;
}

expected<config, config_error> parse(std::string_view toml_text, std::string_view source_name) {
  const reporter r(source_name);
  toml::table doc;
  try {
    doc = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    return unexpected(config_error{
      "", where.line,
      fmt::format("{}:{}:{}: syntax error: {}", source_name, where.line, where.column,
                  e.description())});
  }
  return build(r, doc);
}

expected<config, config_error> load(const std::string& path) {
  const auto cannot_read = [&](int err) {
    return unexpected(config_error{
      "", 0, fmt::format("cannot read config file '{}': {}", path, std::strerror(err))});
  };
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file)
    return cannot_read(errno);
  std::string text;
  char buffer[8192];
  while (const std::size_t n = std::fread(buffer, 1, sizeof buffer, file.get()))
    text.append(buffer, n);
  if (std::ferror(file.get()))
    return cannot_read(errno); // e.g. EISDIR: fopen succeeds on a directory, fread does not
  return parse(text, path);
}

} // namespace kvlane::daemon

#undef KVLANE_CONFIG_TRY
