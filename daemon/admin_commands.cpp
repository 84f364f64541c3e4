#include "daemon/admin_commands.hpp"

#include "common/model_name.hpp"
#include "daemon/model_commands.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <limits>

namespace kvlane::daemon {

namespace {

using json = nlohmann::json;

// Strings from clients may hold invalid UTF-8: replace it rather than fail.
std::string to_line(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json error(std::string_view code, std::string message) {
  return json{{"error", {{"code", code}, {"message", std::move(message)}}}};
}

// A command's failure: rendered as the error object.
struct command_error {
  std::string code;
  std::string message;
};

const json& field(const json& req, std::string_view name) {
  auto it = req.find(name);
  if (it == req.end())
    throw command_error{"missing_field", fmt::format("missing field '{}'", name)};
  return *it;
}

std::string string_field(const json& req, std::string_view name) {
  const auto& v = field(req, name);
  if (!v.is_string())
    throw command_error{"bad_field", fmt::format("field '{}' must be a string", name)};
  return v.get<std::string>();
}

std::uint64_t id_field(const json& req, std::string_view name) {
  const auto& v = field(req, name);
  if (!v.is_number_unsigned())
    throw command_error{"bad_field",
                        fmt::format("field '{}' must be a non-negative integer", name)};
  return v.get<std::uint64_t>();
}

std::vector<actors::scheduler_stats> all_stats(const admin_services& s) {
  std::vector<actors::scheduler_stats> out;
  for (auto& m : s.engine->loaded_models()) { // a model unloaded meanwhile is left out
    auto st = s.engine->stats(m->name);
    if (!st && s.engine->find_model(m->name) == nullptr)
      continue;
    if (!st)
      throw command_error{"failed",
                          fmt::format("model '{}' did not answer: {}", m->name, st.error())};
    out.push_back(std::move(*st));
  }
  return out;
}

/// A model's token-mask figures (docs/admin.md, `status`): where the masks of constrained
/// sequences were computed and what they cost.
json masks_of(const actors::mask_figures& m) {
  return {{"during_step", m.during_step},
          {"hidden", m.hidden},
          {"at_sampling", m.at_sampling},
          {"total_ms", m.total_ms},
          {"p50_us", m.quantile_us(0.5)},
          {"p99_us", m.quantile_us(0.99)},
          {"max_ms", m.max_ms}};
}

/// A model's conversation reuse figures (docs/admin.md, `status`).
json reuse_of(const actors::scheduler_stats& st) {
  return {{"entries", st.retained},
          {"warm", st.retained_warm},
          {"stored", st.retained_stored},
          {"warm_bytes", st.retained_warm_bytes},
          {"store_bytes", st.retained_store_bytes},
          {"hits_warm", st.reuse_warm_hits},
          {"hits_load", st.reuse_hits - st.reuse_warm_hits},
          {"recomputed", st.reuse_recomputed},
          {"reused_tokens", st.reused_tokens},
          {"prefill_tokens", st.prefill_tokens},
          {"dumps", st.retained_dumps},
          {"evictions",
           {{"slot", st.retained_dropped},
            {"store", st.retained_lost},
            {"ttl", st.retained_expired},
            {"superseded", st.retained_superseded},
            {"admin", st.retained_admin_dropped}}}};
}

/// How the model's device behaves (docs/scheduling.md, "Failures"); for a loaded model also
/// which device it is and how long its lanes waited for it while other models used it
/// (docs/architecture.md, "Models sharing a device").
json device_json(const actors::scheduler_stats& st, const actors::model_entry* m) {
  json out{{"state", actors::to_string(st.device)},
           {"backoff_ms", st.device_backoff_ms},
           {"step_failures", st.step_failures},
           {"step_retries", st.faults.step_retries},
           {"isolated_rows", st.faults.isolated_rows},
           {"row_faults", st.faults.row_faults},
           {"backoffs", st.faults.backoffs}};
  if (m != nullptr && m->device) {
    const auto& compute = m->compute_heartbeat->device_wait;
    const auto& transfer = m->transfer_heartbeat->device_wait;
    out["name"] = m->device->name;
    out["compute_wait_s"] = compute.wait_seconds();
    out["compute_waits"] = compute.waits.load(std::memory_order_relaxed);
    out["transfer_wait_s"] = transfer.wait_seconds();
    out["transfer_waits"] = transfer.waits.load(std::memory_order_relaxed);
  }
  return out;
}

json status(const admin_services& s) {
  auto uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.started);
  json models = json::array();
  const auto lifecycle = model_states_json(*s.engine);
  const auto lifecycle_of = [&](const std::string& name) {
    for (const auto& l : lifecycle)
      if (l["name"] == name)
        return l;
    return json(nullptr);
  };
  for (auto& st : all_stats(s)) {
    const auto m = s.engine->find_model(st.model);
    auto busy = [](const auto& hb) { return hb && hb->busy_since_ns.load() != 0; };
    models.push_back({{"name", st.model},
                      {"backend", m ? m->info.kind : std::string{}},
                      {"runtime", m ? m->info.runtime_version : std::string{}},
                      {"max_context", m ? m->info.max_context : 0u},
                      {"kv_bytes_per_token", m ? m->info.bytes_per_token : 0u},
                      {"snapshot_bytes", m ? m->info.snapshot_bytes : 0u},
                      {"state", st.failed_model ? "failed" : "serving"},
                      {"error", st.failure},
                      {"device", device_json(st, m.get())},
                      {"compute_busy", m && busy(m->compute_heartbeat)},
                      {"transfer_busy", m && busy(m->transfer_heartbeat)},
                      {"slots", st.slots},
                      {"slots_busy", st.slots_busy},
                      {"queued", st.queued},
                      {"resident", st.resident},
                      {"parked", st.parked},
                      {"loading", st.loading},
                      {"dumping", st.dumping},
                      {"without_slot_interactive", st.without_slot_interactive},
                      {"without_slot_batch", st.without_slot_batch},
                      {"submitted", st.submitted},
                      {"finished", st.finished},
                      {"cancelled", st.cancelled},
                      {"failed", st.failed},
                      {"tokens_generated", st.tokens_generated},
                      {"steps", st.steps},
                      {"step_busy_s", st.step_busy_ms / 1000},
                      {"preemptions", st.preemptions},
                      {"swaps", st.swaps},
                      {"recomputes", st.recomputes},
                      {"demoted", st.demoted},
                      {"refused", st.refused},
                      {"transfer_s", st.transfer_ms / 1000},
                      {"transfer_hidden_s", st.transfer_hidden_ms / 1000},
                      {"masks", masks_of(st.masks)},
                      {"reuse", reuse_of(st)},
                      {"lifecycle", lifecycle_of(st.model)}});
  }
  // Models not loaded (or loading) show their lifecycle state only.
  for (const auto& l : lifecycle)
    if (l["state"] != "loaded" && l["state"] != "unloading")
      models.push_back({{"name", l["name"]},
                        {"state", l["state"]},
                        {"error", l["error"]},
                        {"lifecycle", l}});
  auto store = s.engine->store_stats();
  const auto conv = s.sessions ? s.sessions->stats() : session_table_stats{};
  const auto slo = s.slo ? s.slo() : actors::slo_targets{};
  const auto objective = [](const actors::slo_bound& b) {
    return json{{"ttft_ms", b.ttft_ms}, {"tpot_ms", b.tpot_ms}};
  };
  return {{"version", s.version},
          {"uptime_s", uptime.count()},
          {"mode", s.mode},
          {"slo",
           {{"interactive", objective(slo.interactive)},
            {"batch", objective(slo.batch)},
            {"refuse_over", s.refuse_over ? s.refuse_over() : 0.0}}},
          {"admitting", s.engine->admitting()},
          {"clients", s.clients_connected ? s.clients_connected() : 0},
          {"models", std::move(models)},
          {"store",
           {{"used_bytes", store.used_bytes},
            {"committed_bytes", store.committed_bytes},
            {"warm_pool_bytes", store.pool_bytes},
            {"warm_pool_target_bytes", store.pool_target_bytes},
            {"limit_bytes", store.limit_bytes},
            {"snapshots", store.snapshots},
            {"peak_used_bytes", store.peak_used_bytes},
            {"peak_snapshots", store.peak_snapshots},
            {"evictions", store.evictions},
            {"parked_evictions", store.parked_evictions},
            {"retained_evictions", store.retained_evictions},
            {"retained_share_evictions", store.retained_share_evictions},
            {"retained_bytes", store.retained_bytes},
            {"retained_snapshots", store.retained_snapshots},
            {"retained_limit_bytes", store.retained_limit_bytes},
            {"disk",
             {{"snapshots", store.disk_snapshots},
              {"disk_only_snapshots", store.disk_only_snapshots},
              {"demotions", store.disk_demotions},
              {"reads", store.disk_fetches},
              {"read_bytes", store.disk_fetch_bytes}}}}},
          {"sessions",
           {{"sessions", conv.sessions},
            {"running", conv.running},
            {"history_tokens", conv.history_tokens},
            {"evicted", conv.evicted},
            {"expired", conv.expired},
            {"dropped", conv.dropped}}}};
}

json ps(const admin_services& s) {
  json seqs = json::array();
  for (auto& q : s.engine->list())
    seqs.push_back({{"id", q.id},
                    {"client", q.client},
                    {"model", q.model},
                    {"priority", actors::to_string(q.priority)},
                    {"state", actors::to_string(q.phase)},
                    {"tokens_in", q.tokens_in},
                    {"tokens_out", q.tokens_out},
                    {"level", q.level},
                    {"preemptions", q.preemptions},
                    {"slot", q.slot},
                    {"age_s", q.age_ms / 1000}});
  // Per model retained KV, as fresh as the list (a model that does not
  // answer in time is left out rather than failing the whole listing).
  json retained = json::array();
  for (auto& m : s.engine->loaded_models()) {
    const auto fresh = s.engine->stats(m->name);
    if (!fresh)
      continue;
    const auto& st = *fresh;
    retained.push_back({{"model", st.model},
                        {"entries", st.retained},
                        {"warm", st.retained_warm},
                        {"stored", st.retained_stored},
                        {"warm_bytes", st.retained_warm_bytes},
                        {"store_bytes", st.retained_store_bytes}});
  }
  return {{"sequences", std::move(seqs)},
          {"retained", std::move(retained)},
          {"models", model_states_json(*s.engine)}};
}

std::string optional_model(const json& req) {
  return req.contains("model") ? string_field(req, "model") : std::string{};
}

/// A retained entry's owner: a uid, "all", "http" (the HTTP identity "default") or
/// "http:NAME" (a key of [[http.keys]]).
json owner_json(std::uint64_t owner, const admin_services& s) {
  if (owner == actors::shared_owner)
    return "all";
  if (owner == actors::http_owner)
    return "http";
  if (owner > actors::http_owner && owner - actors::http_owner - 1 < s.http_keys.size())
    return "http:" + s.http_keys[owner - actors::http_owner - 1];
  return owner;
}

json cache_ls(const json& req, const admin_services& s) {
  auto entries = s.engine->list_retained(optional_model(req));
  if (!entries)
    throw command_error{entries.error().starts_with("unknown model") ? "not_found" : "failed",
                        entries.error()};
  json out = json::array();
  for (auto& e : *entries)
    out.push_back({{"id", e.id},
                   {"model", e.model},
                   {"owner", owner_json(e.owner, s)},
                   {"session", e.session},
                   {"tokens", e.tokens},
                   {"where", e.stored ? "store" : "slot"},
                   {"slot", e.slot},
                   {"dumping", e.dumping},
                   {"tier", e.tier},
                   {"bytes", e.bytes},
                   {"idle_s", e.idle_ms / 1000},
                   {"hits", e.hits}});
  return {{"entries", std::move(out)}};
}

/// Which entries a cache-drop selects: exactly one of `all` (true) or `id`.
/// A new selector (e.g. a session name) is one more branch here and one more
/// field of retained_drop_request.
actors::retained_drop_request drop_selector(const json& req) {
  const bool all = req.contains("all");
  const bool by_id = req.contains("id");
  if (all + by_id != 1)
    throw command_error{"bad_request", "cache-drop needs exactly one of 'all' (true) or 'id'"};
  actors::retained_drop_request out;
  if (all) {
    if (const auto& v = field(req, "all"); !v.is_boolean() || !v.get<bool>())
      throw command_error{"bad_field", "field 'all' must be true"};
  } else {
    out.id = id_field(req, "id");
  }
  return out;
}

json cache_drop(const json& req, const admin_services& s) {
  const auto selector = drop_selector(req);
  auto model = optional_model(req);
  std::vector<std::string> models;
  if (!model.empty()) {
    models.push_back(model);
  } else if (selector.id) {
    // Entry ids are unique within a model: find the one model that holds it.
    auto entries = s.engine->list_retained();
    if (!entries)
      throw command_error{"failed", entries.error()};
    for (auto& e : *entries)
      if (e.id == *selector.id)
        models.push_back(e.model);
    if (models.size() > 1)
      throw command_error{"bad_request",
                          fmt::format("retained entry {} exists in models {}: name one with 'model'",
                                      *selector.id, fmt::join(models, ", "))};
  } else {
    for (auto& m : s.engine->loaded_models())
      if (!m->health->failed())
        models.push_back(m->name);
  }
  json dropped = json::array();
  actors::retained_drop_result total;
  for (auto& name : models) {
    auto r = s.engine->drop_retained(name, selector);
    if (!r)
      throw command_error{r.error().starts_with("unknown model") ? "not_found" : "failed", r.error()};
    total.entries += r->entries;
    total.slots += r->slots;
    total.snapshots += r->snapshots;
    total.tokens += r->tokens;
    total.store_bytes += r->store_bytes;
    dropped.push_back({{"model", name},
                       {"entries", r->entries},
                       {"slots", r->slots},
                       {"snapshots", r->snapshots},
                       {"tokens", r->tokens},
                       {"store_bytes", r->store_bytes}});
  }
  if (selector.id && total.entries == 0)
    throw command_error{"not_found", fmt::format("no retained entry with id {}", *selector.id)};
  return {{"dropped", std::move(dropped)},
          {"entries", total.entries},
          {"slots", total.slots},
          {"snapshots", total.snapshots},
          {"tokens", total.tokens},
          {"store_bytes", total.store_bytes}};
}

/// cache-drop-session {session, uid, model?}: forgets one user's conversation:
/// its history and the retained KV its turns left.
json drop_session(const json& req, const admin_services& s) {
  auto name = string_field(req, "session");
  if (!valid_model_name(name))
    throw command_error{"bad_field", "field 'session' must be 1 to 64 characters of [A-Za-z0-9._-]"};
  const auto uid = id_field(req, "uid");
  if (uid > std::numeric_limits<std::uint32_t>::max())
    throw command_error{"bad_field", fmt::format("field 'uid' {} is not a user id", uid)};
  std::string model;
  if (req.contains("model"))
    model = string_field(req, "model");
  if (model.empty() && !s.engine->configured().empty())
    model = s.engine->configured().front().name;
  if (!s.engine->is_configured(model))
    throw command_error{"not_found", fmt::format("unknown model '{}'", model)};
  if (s.sessions == nullptr)
    throw command_error{"failed", "this daemon keeps no sessions"};
  const bool had_history = s.sessions->drop(session_key{static_cast<std::uint32_t>(uid), model, name});
  actors::retained_drop_request selector;
  selector.session = actors::retained_drop_request::session_selector{uid, name};
  // An unloaded model holds no retained entries a keeper knows of.
  auto kv = s.engine->find_model(model) == nullptr
              ? expected<actors::retained_drop_result, std::string>{actors::retained_drop_result{}}
              : s.engine->drop_retained(model, selector);
  if (!kv)
    throw command_error{"failed", kv.error()};
  if (!had_history && kv->entries == 0)
    throw command_error{"not_found", fmt::format("uid {} has no session '{}' of model '{}'", uid,
                                                 name, model)};
  return {{"dropped", name},
          {"uid", uid},
          {"model", model},
          {"history", had_history},
          {"retained_entries", kv->entries},
          {"retained_tokens", kv->tokens},
          {"store_bytes", kv->store_bytes}};
}

json dispatch(const std::string& cmd, const json& req, const admin_services& s) {
  if (cmd == "status")
    return status(s);
  if (cmd == "ps")
    return ps(s);
  if (cmd == "cancel") {
    auto id = id_field(req, "id");
    if (!s.engine->cancel(id))
      throw command_error{"not_found", fmt::format("no live sequence with id {}", id)};
    return {{"cancelled", id}};
  }
  if (cmd == "drain") {
    s.engine->set_admitting(false);
    return {{"admitting", false}, {"active", s.engine->list().size()}};
  }
  if (cmd == "resume") {
    s.engine->set_admitting(true);
    return {{"admitting", true}};
  }
  if (cmd == "reload") {
    if (!s.reload)
      throw command_error{"failed", "reload is not available"};
    auto r = s.reload();
    if (!r.error.empty())
      throw command_error{"failed", "the new configuration was rejected, nothing changed: " + r.error};
    return {{"applied", r.applied}, {"needs_restart", r.needs_restart}};
  }
  if (cmd == "log-level") {
    auto logger = string_field(req, "logger");
    auto level = string_field(req, "level");
    if (!s.set_log_level)
      throw command_error{"failed", "log levels cannot be changed"};
    if (auto err = s.set_log_level(logger, level); !err.empty())
      throw command_error{"bad_field", err};
    return {{"logger", logger}, {"level", level}};
  }
  if (cmd == "metrics")
    return {{"text", render_metrics(s)}};
  if (cmd == "cache-ls")
    return cache_ls(req, s);
  if (cmd == "cache-drop")
    return cache_drop(req, s);
  if (cmd == "cache-drop-session")
    return drop_session(req, s);
  if (cmd == "load" || cmd == "unload") {
    auto r = cmd == "load" ? load_command(req, *s.engine) : unload_command(req, *s.engine);
    if (!r)
      throw command_error{r.error().code, r.error().message};
    return std::move(*r);
  }
  throw command_error{"unknown_command",
                      fmt::format("unknown command '{}' (known: status, ps, cancel, drain, resume, "
                                  "reload, log-level, metrics, cache-ls, cache-drop, "
                                  "cache-drop-session, load, unload)",
                                  cmd)};
}

} // namespace

std::string render_metrics(const admin_services& s) {
  return s.registry->render(all_stats(s), s.engine->store_stats(),
                           s.clients_connected ? s.clients_connected() : 0,
                           device_waits_of(s.engine->loaded_models()));
}

std::string handle_admin_request(std::string_view line, const admin_services& services) {
  json req = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded())
    return to_line(error("bad_json", "the request is not valid JSON"));
  if (!req.is_object())
    return to_line(error("bad_request", "the request must be a JSON object"));
  auto cmd = req.find("cmd");
  if (cmd == req.end())
    return to_line(error("missing_field", "missing field 'cmd'"));
  if (!cmd->is_string())
    return to_line(error("bad_field", "field 'cmd' must be a string"));
  try {
    return to_line(dispatch(cmd->get<std::string>(), req, services));
  } catch (const command_error& e) {
    return to_line(error(e.code, e.message));
  } catch (const std::exception& e) {
    return to_line(error("failed", e.what()));
  }
}

} // namespace kvlane::daemon
