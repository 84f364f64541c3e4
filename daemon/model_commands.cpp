#include "daemon/model_commands.hpp"

#include <fmt/format.h>

#include <ctime>

namespace kvlane::daemon {

using json = nlohmann::json;

std::string rfc3339(std::chrono::system_clock::time_point t) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ns / 1'000'000'000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ns % 1'000'000'000);
}

std::uint64_t resident_bytes(const actors::model_entry& m) {
  return m.weights_bytes + m.info.snapshot_bytes * m.info.slots;
}

json model_state_json(const actors::model_status& m) {
  json j{{"name", m.name},
         {"state", std::string{actors::to_string(m.state)}},
         {"keep_alive", actors::to_string(m.keep)},
         {"expires_at", m.expires_at ? json(rfc3339(*m.expires_at)) : json(nullptr)},
         {"in_use", m.users},
         {"waiting", m.waiting},
         {"size", m.entry ? resident_bytes(*m.entry) : 0},
         {"error", m.last_error}};
  if (m.entry)
    j["load_ms"] = m.entry->load_time.count();
  return j;
}

json model_states_json(const actors::engine& engine) {
  json out = json::array();
  for (const auto& m : engine.model_statuses())
    out.push_back(model_state_json(m));
  return out;
}

expected<actors::keep_alive, std::string> keep_alive_of(const json& v, std::string_view field) {
  if (v.is_string()) {
    auto k = actors::parse_keep_alive(v.get<std::string>());
    if (!k)
      return unexpected(fmt::format("field '{}': {}", field, k.error()));
    return *k;
  }
  if (v.is_number()) {
    auto k = actors::keep_alive_seconds(v.get<double>());
    if (!k)
      return unexpected(fmt::format("field '{}': {}", field, k.error()));
    return *k;
  }
  return unexpected(fmt::format("field '{}' must be a duration string (\"5m\") or a number of "
                                "seconds, got {}",
                                field, v.type_name()));
}

namespace {

expected<std::string, command_failure> model_of(const json& req, const actors::engine& engine) {
  const auto it = req.find("model");
  if (it == req.end())
    return unexpected(command_failure{"missing_field", "missing field 'model'"});
  if (!it->is_string())
    return unexpected(command_failure{"bad_field", "field 'model' must be a string"});
  auto name = it->get<std::string>();
  if (!engine.is_configured(name)) {
    std::string known;
    for (const auto& m : engine.configured())
      known += (known.empty() ? "" : ", ") + m.name;
    return unexpected(command_failure{
      "not_found", fmt::format("unknown model '{}' (configured: {})", name, known)});
  }
  return name;
}

json state_of(const actors::engine& engine, const std::string& name) {
  for (const auto& m : engine.model_statuses())
    if (m.name == name)
      return model_state_json(m);
  return nullptr;
}

} // namespace

expected<json, command_failure> load_command(const json& req, actors::engine& engine) {
  auto name = model_of(req, engine);
  if (!name)
    return unexpected(std::move(name).error());
  std::optional<actors::keep_alive> keep;
  if (const auto it = req.find("keep_alive"); it != req.end()) {
    auto k = keep_alive_of(*it, "keep_alive");
    if (!k)
      return unexpected(command_failure{"bad_field", std::move(k).error()});
    keep = *k;
  }
  auto r = engine.load(*name, keep);
  if (!r)
    return unexpected(command_failure{"failed", std::move(r).error()});
  return json{{"message", *r}, {"model", state_of(engine, *name)}};
}

expected<json, command_failure> unload_command(const json& req, actors::engine& engine) {
  auto name = model_of(req, engine);
  if (!name)
    return unexpected(std::move(name).error());
  auto r = engine.unload(*name);
  if (!r)
    return unexpected(command_failure{"failed", std::move(r).error()});
  return json{{"message", *r}, {"model", state_of(engine, *name)}};
}

} // namespace kvlane::daemon
