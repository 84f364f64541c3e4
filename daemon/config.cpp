#include "daemon/config.hpp"

#include "daemon/config_http.hpp"

#include "common/config_reader.hpp"
#include "common/logging.hpp"
#include "common/model_name.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cctype>
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

namespace kvlane::daemon {

namespace {

using namespace config_reader;

using actors::scheduler_mode;
using config_tables::parse_http;

// Built from actors::to_string so that config names and reported names agree;
// "ideal", the former name of "free-transfer", is still accepted.
std::vector<choice<scheduler_mode>> scheduler_modes() {
  std::vector<choice<scheduler_mode>> out;
  for (auto m : actors::all_scheduler_modes)
    out.push_back({actors::to_string(m), m});
  out.push_back({"ideal", scheduler_mode::free_transfer});
  return out;
}

// Stored as written; each is a level name spdlog::level::from_str() accepts.
constexpr choice<std::string_view> log_level_names[] = {
  {"trace", "trace"}, {"debug", "debug"},       {"info", "info"}, {"warn", "warn"},
  {"error", "error"}, {"critical", "critical"}, {"off", "off"},
};

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
      // A misspelt logger would otherwise leave the level it meant to set unchanged.
      if (!logging::known_logger(logger.str())) {
        std::string names;
        for (auto n : logging::logger_names())
          names += (names.empty() ? "" : ", ") + quoted(n);
        return unexpected(r.bad_value(key, line_of(node),
                                      fmt::format("unknown logger {} (the loggers are {})",
                                                  quoted(logger.str()), names)));
      }
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




/// [[model]] keep_alive: a duration string ("5m", "1h30m", "0", "pinned") or an
/// integer number of seconds; negative (or "pinned") keeps the model loaded.
status read_keep_alive(const reporter& r, const section& s, actors::keep_alive& out) {
  const auto* n = s.find("keep_alive");
  if (n == nullptr)
    return {};
  expected<actors::keep_alive, std::string> k = unexpected(std::string{});
  if (const auto* text = n->as_string())
    k = actors::parse_keep_alive(text->get());
  else if (const auto* secs = n->as_integer())
    k = actors::keep_alive_seconds(static_cast<double>(secs->get()));
  else
    return unexpected(r.wrong_type(s.key("keep_alive"), *n,
                                   "string (a duration such as \"5m\", or \"pinned\") or integer "
                                   "(seconds; -1 pins)"));
  if (!k)
    return unexpected(r.bad_value(s.key("keep_alive"), line_of(*n), k.error()));
  out = *k;
  return {};
}

/// [models]: how many models are loaded at once, how long a request waits for its model.
status parse_lifecycle(const reporter& r, const section& root, const std::vector<model_section>& models,
                       actors::lifecycle_config& out) {
  auto table = find_table(r, root, "models");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, "models"};
  KVLANE_CONFIG_TRY(check_keys(r, s, {"max_loaded", "load_timeout_ms"}));
  KVLANE_CONFIG_TRY(read_int(r, s, "max_loaded", out.max_loaded, 0u, 1024u));
  std::int64_t timeout_ms = out.load_timeout.count();
  KVLANE_CONFIG_TRY(read_int(r, s, "load_timeout_ms", timeout_ms, 1000, 3'600'000));
  out.load_timeout = std::chrono::milliseconds(timeout_ms);
  const auto at_start = std::count_if(models.begin(), models.end(),
                                      [](const model_section& m) { return m.load_at_start; });
  if (out.max_loaded != 0 && static_cast<std::uint64_t>(at_start) > out.max_loaded)
    return unexpected(r.bad_value(
      s.key("max_loaded"), s.line("max_loaded"),
      fmt::format("{} models load at start (load_at_start, true unless set) but at most {} may "
                  "be loaded: set load_at_start = false on {} of them",
                  at_start, out.max_loaded, at_start - out.max_loaded)));
  return {};
}

status parse_model(const reporter& r, const section& s, model_section& out) {
  std::vector<std::string_view> known{"name",          "chat_format", "store_floor_bytes",
                                     "store_cap_bytes", "keep_alive",  "load_at_start"};
  const auto backend_keys = backends::backend_model_keys();
  known.insert(known.end(), backend_keys.begin(), backend_keys.end());
  KVLANE_CONFIG_TRY(check_keys(r, s, known));

  if (s.find("name") == nullptr)
    return unexpected(r.bad_value(s.key("name"), s.line(), "required key is missing"));
  KVLANE_CONFIG_TRY(read_string(r, s, "name", out.name));
  if (!valid_model_name(out.name))
    return unexpected(r.bad_value(
      s.key("name"), s.line("name"),
      fmt::format("must be 1 to 64 characters from A-Z a-z 0-9 . _ - (got {})", quoted(out.name))));
  KVLANE_CONFIG_TRY(backends::parse_backend_config(r, s, out.backend));
  // A GGUF carries its chat template: its models follow it unless told otherwise.
  if (out.backend.kind == "llamacpp")
    out.chat_format = backends::chat_format::automatic;
  if (s.find("chat_format") != nullptr) {
    std::string name;
    KVLANE_CONFIG_TRY(read_string(r, s, "chat_format", name));
    const auto f = backends::parse_chat_format(name);
    if (!f)
      return unexpected(r.bad_value(
        s.key("chat_format"), s.line("chat_format"),
        fmt::format("must be one of \"chatml\", \"llama3\", \"exaone\", \"auto\", "
                    "\"template\" (got {})",
                    quoted(name))));
    out.chat_format = *f;
  }

  constexpr std::uint64_t store_limit = 1ull << 44;
  KVLANE_CONFIG_TRY(read_bytes(r, s, "store_floor_bytes", out.store_floor_bytes, 0, store_limit));
  KVLANE_CONFIG_TRY(read_bytes(r, s, "store_cap_bytes", out.store_cap_bytes, 0, store_limit));
  if (out.store_cap_bytes != 0 && out.store_floor_bytes > out.store_cap_bytes)
    return unexpected(r.bad_value(
      s.key("store_cap_bytes"), s.line("store_cap_bytes"),
      fmt::format("must be 0 (no cap) or >= store_floor_bytes ({}) (got {})",
                  format_bytes(out.store_floor_bytes), format_bytes(out.store_cap_bytes))));
  KVLANE_CONFIG_TRY(read_keep_alive(r, s, out.keep));
  KVLANE_CONFIG_TRY(read_bool(r, s, "load_at_start", out.load_at_start));
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

status parse_scheduler_faults(const reporter& r, const section& scheduler,
                              actors::fault_knobs& out) {
  auto table = find_table(r, scheduler, "faults");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, scheduler.key("faults")};
  KVLANE_CONFIG_TRY(check_keys(r, s,
                               {"step_retries", "row_recomputes", "backoff_initial_ms",
                                "backoff_max_ms", "give_up_steps"}));
  KVLANE_CONFIG_TRY(read_int(r, s, "step_retries", out.step_retries, 0, 16));
  KVLANE_CONFIG_TRY(read_int(r, s, "row_recomputes", out.row_recomputes, 0, 16));
  KVLANE_CONFIG_TRY(read_int(r, s, "backoff_initial_ms", out.backoff_initial_ms, 1, 60'000));
  KVLANE_CONFIG_TRY(read_int(r, s, "backoff_max_ms", out.backoff_max_ms, 1, 600'000));
  KVLANE_CONFIG_TRY(read_int(r, s, "give_up_steps", out.give_up_steps, 0, 1'000'000));
  if (out.backoff_max_ms < out.backoff_initial_ms)
    return unexpected(r.bad_value(
      s.key("backoff_max_ms"), s.line("backoff_max_ms"),
      fmt::format("must be >= backoff_initial_ms ({}) (got {})", out.backoff_initial_ms,
                  out.backoff_max_ms)));
  return {};
}

// [scheduler.slo]: the objectives per class, in whole milliseconds (1 ms to 1 day), and the
// refusal at the door (0: never, else at least 1: a limit under the objective would refuse
// requests predicted to meet it).
status parse_scheduler_slo(const reporter& r, const section& scheduler, actors::slo_targets& out,
                           double& refuse_over) {
  auto table = find_table(r, scheduler, "slo");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, scheduler.key("slo")};
  KVLANE_CONFIG_TRY(check_keys(
    r, s, {"interactive_ttft_ms", "interactive_tpot_ms", "batch_ttft_ms", "batch_tpot_ms",
           "refuse_over"}));
  const auto read_ms = [&](std::string_view key, double& value) -> status {
    auto ms = static_cast<std::uint32_t>(value);
    KVLANE_CONFIG_TRY(read_int(r, s, key, ms, 1, 86'400'000));
    value = ms;
    return {};
  };
  KVLANE_CONFIG_TRY(read_ms("interactive_ttft_ms", out.interactive.ttft_ms));
  KVLANE_CONFIG_TRY(read_ms("interactive_tpot_ms", out.interactive.tpot_ms));
  KVLANE_CONFIG_TRY(read_ms("batch_ttft_ms", out.batch.ttft_ms));
  KVLANE_CONFIG_TRY(read_ms("batch_tpot_ms", out.batch.tpot_ms));
  KVLANE_CONFIG_TRY(read_real(r, s, "refuse_over", refuse_over, {0.0, false, 1000.0, false}));
  if (refuse_over > 0 && refuse_over < 1)
    return unexpected(r.bad_value(
      s.key("refuse_over"), s.line("refuse_over"),
      fmt::format("must be 0 (never refuse) or at least 1: a request predicted to start within "
                  "its TTFT objective is never refused (got {})",
                  refuse_over)));
  return {};
}

status parse_scheduler(const reporter& r, const section& root, actors::scheduler_policy& out) {
  auto table = find_table(r, root, "scheduler");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, "scheduler"};
  KVLANE_CONFIG_TRY(check_keys(r, s,
                               {"mode", "quantum_steps", "quantum_tokens", "levels", "spare_slots",
                                "max_step_tokens", "batch_prefill_yields", "aging_steps",
                                "ewma_alpha", "faults", "slo"}));
  const auto modes = scheduler_modes();
  KVLANE_CONFIG_TRY(read_choice(r, s, "mode", out.mode, std::span<const choice<scheduler_mode>>(modes)));
  // quantum_tokens is the former name of quantum_steps (it always counted steps), still accepted.
  if (s.find("quantum_steps") != nullptr && s.find("quantum_tokens") != nullptr)
    return unexpected(r.bad_value(
      s.key("quantum_tokens"), s.line("quantum_tokens"),
      "is the former name of quantum_steps: set only one of them (quantum_steps preferred)"));
  const std::string_view quantum_key = s.find("quantum_tokens") != nullptr ? "quantum_tokens"
                                                                           : "quantum_steps";
  KVLANE_CONFIG_TRY(read_int(r, s, quantum_key, out.quantum_steps, 1, 1'000'000));
  KVLANE_CONFIG_TRY(read_int(r, s, "levels", out.levels, 1, 16));
  // The top level's quantum, quantum_steps * 2^(levels - 1), must fit the scheduler's uint32.
  const std::uint64_t top_quantum = std::uint64_t{out.quantum_steps} << (out.levels - 1);
  if (top_quantum > std::numeric_limits<std::uint32_t>::max())
    return unexpected(r.bad_value(
      s.key("levels"), s.line("levels"),
      fmt::format("{} * 2^(levels - 1) must be at most {} (got {} * 2^{} = {})", quantum_key,
                  std::numeric_limits<std::uint32_t>::max(), out.quantum_steps, out.levels - 1,
                  top_quantum)));
  KVLANE_CONFIG_TRY(read_int(r, s, "spare_slots", out.spare_slots, 0, 64));
  KVLANE_CONFIG_TRY(read_int(r, s, "max_step_tokens", out.max_step_tokens, 0, 1'048'576));
  KVLANE_CONFIG_TRY(read_bool(r, s, "batch_prefill_yields", out.batch_prefill_yields));
  KVLANE_CONFIG_TRY(read_int(r, s, "aging_steps", out.aging_steps, 0, 1'000'000'000));
  KVLANE_CONFIG_TRY(read_real(r, s, "ewma_alpha", out.ewma_alpha, {0.0, true, 1.0, false}));
  KVLANE_CONFIG_TRY(parse_scheduler_slo(r, s, out.slo, out.refuse_over));
  return parse_scheduler_faults(r, s, out.faults);
}

status parse_reuse(const reporter& r, const section& root, actors::reuse_policy& out) {
  auto table = find_table(r, root, "reuse");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, "reuse"};
  KVLANE_CONFIG_TRY(
    check_keys(r, s, {"mode", "scope", "store_share", "idle_ttl_s", "min_prefix_tokens"}));
  std::vector<choice<actors::reuse_mode>> modes;
  for (auto m : {actors::reuse_mode::off, actors::reuse_mode::slot, actors::reuse_mode::store})
    modes.push_back({actors::to_string(m), m});
  KVLANE_CONFIG_TRY(
    read_choice(r, s, "mode", out.mode, std::span<const choice<actors::reuse_mode>>(modes)));
  std::vector<choice<actors::reuse_scope>> scopes;
  for (auto c : {actors::reuse_scope::user, actors::reuse_scope::all})
    scopes.push_back({actors::to_string(c), c});
  KVLANE_CONFIG_TRY(
    read_choice(r, s, "scope", out.scope, std::span<const choice<actors::reuse_scope>>(scopes)));
  KVLANE_CONFIG_TRY(read_real(r, s, "store_share", out.store_share, {0.0, false, 1.0, false}));
  KVLANE_CONFIG_TRY(read_int(r, s, "idle_ttl_s", out.idle_ttl_s, 0, 31'536'000));
  KVLANE_CONFIG_TRY(read_int(r, s, "min_prefix_tokens", out.min_prefix_tokens, 1, 1'048'576));
  return {};
}

// [store.disk]: absent, no disk tier; present, `dir` is required.
status parse_store_disk(const reporter& r, const section& store, actors::store_disk_config& out) {
  auto table = find_table(r, store, "disk");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, "store.disk"};
  KVLANE_CONFIG_TRY(check_keys(r, s, {"dir", "max_bytes", "write_bytes_per_s"}));
  if (s.find("dir") == nullptr)
    return unexpected(r.bad_value(s.key("dir"), s.line(), "required key is missing"));
  KVLANE_CONFIG_TRY(read_string(r, s, "dir", out.dir));
  if (out.dir.empty() || out.dir.front() != '/')
    return unexpected(r.bad_value(s.key("dir"), s.line("dir"),
                                  fmt::format("must be an absolute path (got {})", quoted(out.dir))));
  KVLANE_CONFIG_TRY(read_bytes(r, s, "max_bytes", out.max_bytes, mib, 1ull << 50));
  KVLANE_CONFIG_TRY(read_bytes(r, s, "write_bytes_per_s", out.write_bytes_per_s, mib, 1ull << 40));
  return {};
}

status parse_store(const reporter& r, const section& root, store_section& out) {
  auto table = find_table(r, root, "store");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, "store"};
  KVLANE_CONFIG_TRY(check_keys(
    r, s, {"max_bytes", "warm_pool_bytes", "prefault_warm_pool", "eviction", "disk"}));
  KVLANE_CONFIG_TRY(read_bytes(r, s, "max_bytes", out.max_bytes, mib, 1ull << 44));
  KVLANE_CONFIG_TRY(read_bytes(r, s, "warm_pool_bytes", out.warm_pool_bytes, 0, 1ull << 44));
  KVLANE_CONFIG_TRY(read_bool(r, s, "prefault_warm_pool", out.prefault_warm_pool));
  std::vector<choice<ipc::eviction_value>> values;
  for (auto v : {ipc::eviction_value::cost, ipc::eviction_value::recency})
    values.push_back({ipc::to_string(v), v});
  KVLANE_CONFIG_TRY(read_choice(r, s, "eviction", out.eviction,
                                std::span<const choice<ipc::eviction_value>>(values)));
  // The default may exceed a small max_bytes (the store caps it); an explicit value may not.
  if (s.find("warm_pool_bytes") != nullptr && out.warm_pool_bytes > out.max_bytes)
    return unexpected(r.bad_value(s.key("warm_pool_bytes"), s.line("warm_pool_bytes"),
                                  fmt::format("must be <= store.max_bytes ({}) (got {})",
                                              format_bytes(out.max_bytes),
                                              format_bytes(out.warm_pool_bytes))));
  return parse_store_disk(r, s, out.disk);
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
                                "hello_timeout_ms", "max_pending", "max_clients_per_user",
                                "max_requests_per_user", "max_live_sequences", "busy_retry_ms"}));
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
  KVLANE_CONFIG_TRY(read_int(r, s, "max_pending", out.max_pending, 1, 65536));
  KVLANE_CONFIG_TRY(read_int(r, s, "max_clients_per_user", out.max_clients_per_user, 1, 4096));
  KVLANE_CONFIG_TRY(read_int(r, s, "max_requests_per_user", out.max_requests_per_user, 1, 1'048'576));
  KVLANE_CONFIG_TRY(read_int(r, s, "max_live_sequences", out.max_live_sequences, 1, 1'048'576));
  std::int64_t retry_ms = out.busy_retry.count();
  KVLANE_CONFIG_TRY(read_int(r, s, "busy_retry_ms", retry_ms, 1, 60'000));
  out.busy_retry = std::chrono::milliseconds(retry_ms);
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

status parse_sessions(const reporter& r, const section& root, sessions_section& out) {
  auto table = find_table(r, root, "sessions");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, "sessions"};
  KVLANE_CONFIG_TRY(check_keys(r, s, {"max_per_user", "max_sessions"}));
  KVLANE_CONFIG_TRY(read_int(r, s, "max_per_user", out.max_per_user, 0, 65'536));
  KVLANE_CONFIG_TRY(read_int(r, s, "max_sessions", out.max_sessions, 0, 1'048'576));
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
               {"version", "daemon", "model", "models", "scheduler", "reuse", "store", "clients",
                "sessions", "admin", "metrics", "http"}));
  if (version == nullptr)
    return unexpected(
      r.bad_value("version", root.line(), "required key is missing (add 'version = 1' at the top)"));

  config c;
  KVLANE_CONFIG_TRY(parse_daemon(r, root, c.daemon));
  KVLANE_CONFIG_TRY(parse_models(r, root, c.models));
  KVLANE_CONFIG_TRY(parse_lifecycle(r, root, c.models, c.lifecycle));
  KVLANE_CONFIG_TRY(parse_scheduler(r, root, c.scheduler));
  KVLANE_CONFIG_TRY(parse_reuse(r, root, c.reuse));
  KVLANE_CONFIG_TRY(parse_store(r, root, c.store));
  KVLANE_CONFIG_TRY(check_floors(r, root, c));
  KVLANE_CONFIG_TRY(parse_clients(r, root, c.clients));
  KVLANE_CONFIG_TRY(parse_sessions(r, root, c.sessions));
  KVLANE_CONFIG_TRY(parse_admin(r, root, c.admin));
  KVLANE_CONFIG_TRY(parse_metrics(r, root, c.metrics));
  KVLANE_CONFIG_TRY(parse_http(r, root, c.http));
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
