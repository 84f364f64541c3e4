#include "tools/bench/config_toml.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <utility>

namespace kvlane::tools::bench {

namespace {

std::string_view extent_name(backends::snapshot_extent e) {
  return e == backends::snapshot_extent::full_slot ? "full" : "used";
}

std::string_view overlap_name(backends::transfer_overlap o) {
  switch (o) {
    case backends::transfer_overlap::full: return "full";
    case backends::transfer_overlap::none: return "none";
    case backends::transfer_overlap::shared: return "shared";
  }
  return "full";
}

/// Builds the tables; remembers the first integer TOML cannot hold.
class writer {
public:
  std::int64_t integer(std::uint64_t v, std::string_view key) {
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      if (error_.empty())
        error_ = std::string{key} + " = " + std::to_string(v)
                 + " does not fit in a TOML integer (at most 2^63 - 1)";
      return 0;
    }
    return static_cast<std::int64_t>(v);
  }

  /// Permission bits, written in octal (0o660) as people write them.
  static toml::value<std::int64_t> mode(std::uint32_t bits) {
    toml::value<std::int64_t> v{static_cast<std::int64_t>(bits)};
    v.flags(toml::value_flags::format_as_octal);
    return v;
  }

  /// The config keeps numeric user and group ids as their decimal text;
  /// they are written back as integers, names as strings.
  static toml::array principals(const std::vector<std::string>& list) {
    toml::array out;
    for (const auto& p : list) {
      const bool numeric = !p.empty() && p.size() <= 18
                           && std::all_of(p.begin(), p.end(), [](char c) {
                                return c >= '0' && c <= '9';
                              });
      if (numeric)
        out.push_back(std::stoll(p));
      else
        out.push_back(p);
    }
    return out;
  }

  toml::table faults(const backends::fault_spec& f, std::string_view key) {
    return toml::table{{"fail_nth", integer(f.fail_nth, key)},
                       {"fail_rate", f.fail_rate},
                       {"code", std::string{backends::to_string(f.code)}}};
  }

  toml::table model(const daemon::model_section& m, std::size_t index) {
    const auto& s = m.backend.sim;
    const auto at = "model[" + std::to_string(index) + "]";
    toml::table sim{{"slots", s.slots},
                    {"max_context", s.max_context},
                    {"max_prefill_chunk", s.max_prefill_chunk},
                    {"snapshot_bytes", integer(s.snapshot_bytes, at + ".sim.snapshot_bytes")},
                    {"snapshot", extent_name(s.extent)},
                    {"step_base_ms", s.step_base_ms},
                    {"step_per_token_ms", s.step_per_token_ms},
                    {"dump_min_ms", s.dump_min_ms},
                    {"dump_max_ms", s.dump_max_ms},
                    {"load_min_ms", s.load_min_ms},
                    {"load_max_ms", s.load_max_ms},
                    {"time_scale", s.time_scale},
                    {"overlap", overlap_name(s.overlap)},
                    {"seed", integer(s.seed, at + ".sim.seed")},
                    {"eos_rate", s.eos_rate}};
    sim.insert("faults", toml::table{{"step", faults(s.step_faults, at + ".sim.faults.step")},
                                     {"dump", faults(s.dump_faults, at + ".sim.faults.dump")},
                                     {"load", faults(s.load_faults, at + ".sim.faults.load")}});
    toml::table out{
      {"name", m.name},
      {"backend", m.backend.kind},
      {"store_floor_bytes", integer(m.store_floor_bytes, at + ".store_floor_bytes")},
      {"store_cap_bytes", integer(m.store_cap_bytes, at + ".store_cap_bytes")},
      {"keep_alive", actors::to_string(m.keep)},
      {"load_at_start", m.load_at_start},
      {"sim", std::move(sim)}};
    if (!m.backend.device.empty()) // empty: the backend's default
      out.insert("device", m.backend.device);
    return out;
  }

  toml::table store(const actors::store_config& s) {
    toml::table t{{"max_bytes", integer(s.max_bytes, "store.max_bytes")},
                  {"prefault_warm_pool", s.prefault_warm_pool},
                  {"eviction", ipc::to_string(s.eviction)}};
    // The default pool may exceed a small store (the store caps it); an
    // explicit value may not, so such a pool is left to the default.
    if (s.warm_pool_bytes <= s.max_bytes)
      t.insert("warm_pool_bytes", integer(s.warm_pool_bytes, "store.warm_pool_bytes"));
    if (!s.disk.dir.empty()) // absent: no disk tier
      t.insert("disk",
               toml::table{{"dir", s.disk.dir},
                           {"max_bytes", integer(s.disk.max_bytes, "store.disk.max_bytes")},
                           {"write_bytes_per_s",
                            integer(s.disk.write_bytes_per_s, "store.disk.write_bytes_per_s")}});
    return t;
  }

  toml::table document(const daemon::config& cfg) {
    const auto& d = cfg.daemon;
    toml::table log_levels;
    for (const auto& [logger, level] : d.log_levels)
      log_levels.insert(logger, level);
    toml::array models;
    for (std::size_t i = 0; i < cfg.models.size(); ++i)
      models.push_back(model(cfg.models[i], i));
    const auto& p = cfg.scheduler;
    const auto& c = cfg.clients;
    const auto& a = cfg.admin;
    const auto& h = cfg.http;
    return toml::table{
      {"version", 1},
      {"daemon", toml::table{{"runtime_dir", d.runtime_dir},
                             {"worker_threads", d.worker_threads},
                             {"log_level", d.log_level},
                             {"shutdown_timeout_ms", d.shutdown_timeout.count()},
                             {"shutdown_grace_ms", d.shutdown_grace.count()},
                             {"log_levels", std::move(log_levels)}}},
      {"model", std::move(models)},
      {"models", toml::table{{"max_loaded", cfg.lifecycle.max_loaded},
                             {"load_timeout_ms", cfg.lifecycle.load_timeout.count()}}},
      {"scheduler", toml::table{{"mode", actors::to_string(p.mode)},
                                {"quantum_steps", p.quantum_steps},
                                {"levels", p.levels},
                                {"spare_slots", p.spare_slots},
                                {"max_step_tokens", p.max_step_tokens},
                                {"batch_prefill_yields", p.batch_prefill_yields},
                                {"aging_steps", p.aging_steps},
                                {"ewma_alpha", p.ewma_alpha}}},
      {"reuse", toml::table{{"mode", actors::to_string(cfg.reuse.mode)},
                            {"scope", actors::to_string(cfg.reuse.scope)},
                            {"store_share", cfg.reuse.store_share},
                            {"idle_ttl_s", cfg.reuse.idle_ttl_s},
                            {"min_prefix_tokens", cfg.reuse.min_prefix_tokens}}},
      {"store", store(cfg.store)},
      {"clients",
       toml::table{{"socket_mode", mode(c.socket_mode)},
                   {"allow_users", principals(c.allow_users)},
                   {"allow_groups", principals(c.allow_groups)},
                   {"max_clients", c.max_clients},
                   {"max_requests", c.max_requests},
                   {"max_prompt_bytes", integer(c.max_prompt_bytes, "clients.max_prompt_bytes")},
                   {"submit_ring_records", c.submit_ring_records},
                   {"events_ring_records", c.events_ring_records},
                   {"max_backlog_records", c.max_backlog_records},
                   {"spin_us", c.spin_us},
                   {"hello_timeout_ms", c.hello_timeout.count()}}},
      {"admin", toml::table{{"socket_mode", mode(a.socket_mode)},
                            {"allow_users", principals(a.allow_users)},
                            {"allow_groups", principals(a.allow_groups)}}},
      {"metrics", toml::table{{"listen", cfg.metrics.listen}}},
      {"http", toml::table{{"listen", h.listen},
                           {"api_key", h.api_key},
                           {"api_key_file", h.api_key_file},
                           {"cors_origins", principals(h.cors_origins)},
                           {"max_connections", h.max_connections},
                           {"max_body_bytes", integer(h.max_body_bytes, "http.max_body_bytes")},
                           {"max_header_bytes", h.max_header_bytes},
                           {"idle_timeout_ms", h.idle_timeout.count()},
                           {"header_timeout_ms", h.header_timeout.count()}}}};
  }

  const std::string& error() const noexcept { return error_; }

private:
  std::string error_;
};

} // namespace

expected<std::string, std::string> config_toml(const daemon::config& cfg) {
  writer w;
  const auto doc = w.document(cfg);
  if (!w.error().empty())
    return unexpected(w.error());
  std::ostringstream out;
  out << "# written by kvlane-bench --path ipc\n"
      << toml::toml_formatter{doc, toml::toml_formatter::default_flags
                                     | toml::format_flags::allow_octal_integers}
      << '\n';
  return out.str();
}

} // namespace kvlane::tools::bench
