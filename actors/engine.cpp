#include "actors/engine.hpp"

#include "actors/constrained_decoding.hpp"
#include "actors/model_fingerprint.hpp"
#include "actors/store_restart.hpp"
#include "backends/factory.hpp"
#include "common/logging.hpp"

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <algorithm>

namespace kvlane::actors {

std::string_view to_string(priority_class c) noexcept {
  return c == priority_class::interactive ? "interactive" : "batch";
}

std::string_view to_string(end_reason r) noexcept {
  switch (r) {
    case end_reason::length: return "length";
    case end_reason::stop: return "stop";
    case end_reason::cancelled: return "cancelled";
    case end_reason::error: return "error";
  }
  return "unknown";
}

std::string_view to_string(submit_errc e) noexcept {
  switch (e) {
    case submit_errc::unknown_model: return "unknown_model";
    case submit_errc::invalid_request: return "invalid_request";
    case submit_errc::too_long: return "too_long";
    case submit_errc::draining: return "draining";
    case submit_errc::shutting_down: return "shutting_down";
    case submit_errc::model_failed: return "model_failed";
  }
  return "unknown";
}

namespace {

// Retained KV may hold this share of the store (0 in mode off: none at all).
std::uint64_t retained_share_bytes(const engine_config& cfg) {
  if (cfg.reuse.mode != reuse_mode::store)
    return 0;
  return static_cast<std::uint64_t>(cfg.reuse.store_share
                                    * static_cast<double>(cfg.store.max_bytes));
}

// Why `c` cannot constrain a request, if it cannot.
std::optional<std::string> check_constraint(const output_constraint& c) {
  if (!c.grammar)
    return "the output constraint has no grammar";
  grammar::matcher m{c.grammar};
  if (m.exhausted())
    return "the output constraint's grammar passes the matcher's bounds at its start";
  for (std::size_t i = 0; i < c.triggers.size(); ++i) {
    const auto& t = c.triggers[i];
    if (t.empty())
      return fmt::format("output constraint trigger {} is empty", i);
    m.rollback_to(0);
    if (!m.feed(std::string_view{t}))
      return fmt::format("output constraint trigger {} ('{}') does not begin the grammar's "
                         "language (the constrained text starts with its trigger)",
                         i, t);
  }
  return std::nullopt;
}

} // namespace

engine::engine(caf::actor_system& sys, std::shared_ptr<ipc::snapshot_store> store)
  : sys_(sys), store_(std::move(store)) {}

engine::~engine() {
  shutdown();
}

expected<std::unique_ptr<engine>, std::string> engine::create(caf::actor_system& sys,
                                                              const engine_config& cfg,
                                                              scheduler_observer observer,
                                                              completion_hook on_complete,
                                                              failure_hook on_failure,
                                                              store_handoff handoff) {
  const bool free_transfers = actors::rules_of(cfg.scheduler.mode).free_transfers;
  for (auto& m : cfg.models)
    if (free_transfers && m.backend.kind != "sim")
      return unexpected(fmt::format("scheduler mode 'free-transfer' models free transfers and needs the "
                                    "sim backend; model '{}' uses '{}'",
                                    m.name, m.backend.kind));

  ipc::store_options so;
  so.limit_bytes = cfg.store.max_bytes;
  so.retained_limit_bytes = retained_share_bytes(cfg);
  so.warm_pool_bytes = cfg.store.warm_pool_bytes;
  so.prefault_warm_pool = cfg.store.prefault_warm_pool;
  so.value = cfg.store.eviction;
  auto opened = open_store(cfg.store, so, handoff);
  if (!opened)
    return unexpected(fmt::format("snapshot store: {}", opened.error()));
  std::shared_ptr<ipc::snapshot_store> shared_store{std::move(opened->store)};
  if (!opened->note.empty())
    logging::get("store")->warn("snapshot store: {}", opened->note);

  std::unique_ptr<engine> self{new engine(sys, shared_store)};
  self->on_complete_ = std::move(on_complete);
  if (!cfg.store.disk.dir.empty()) {
    std::vector<std::string> names;
    for (const auto& m : cfg.models)
      names.push_back(m.name);
    auto disk = disk_lane::start(cfg.store.disk, *shared_store, names);
    if (!disk)
      return unexpected(fmt::format("snapshot store: disk tier: {}", disk.error()));
    self->disk_ = std::move(*disk);
  }
  auto log = logging::get("backend");
  for (std::uint32_t i = 0; i < cfg.models.size(); ++i) {
    const auto& m = cfg.models[i];
    auto backend_cfg = m.backend;
    if (free_transfers) {
      backend_cfg.sim.dump_min_ms = backend_cfg.sim.dump_max_ms = 0;
      backend_cfg.sim.load_min_ms = backend_cfg.sim.load_max_ms = 0;
    }
    auto b = backends::make_backend(m.name, backend_cfg);
    if (!b)
      return unexpected(fmt::format("model '{}': backend '{}' failed to load: {} ({})", m.name,
                                    m.backend.kind, b.error().message,
                                    backends::to_string(b.error().code)));
    if (auto r = shared_store->register_model(i, m.store_floor_bytes, m.store_cap_bytes); !r)
      return unexpected(fmt::format("model '{}': snapshot store: {}", m.name, r.error().message));
    // Retained snapshots of an earlier daemon are taken back only under this fingerprint.
    auto fp = fingerprint_of(m, **b, handoff.hash_cache);
    if (!fp)
      return unexpected(fmt::format("model '{}': fingerprint: {}", m.name, fp.error()));
    if (auto r = shared_store->set_fingerprint(i, m.name, std::move(*fp)); !r)
      return unexpected(fmt::format("model '{}': snapshot store: {}", m.name, r.error().message));
    if (opened->arena_inherited || self->disk_)
      logging::get("store")->info("model '{}': {} retained snapshots taken back", m.name,
                                  shared_store->claim(i, m.name));
    model_entry e;
    e.name = m.name;
    e.index = i;
    e.backend = std::shared_ptr<backends::backend>{std::move(*b)};
    e.info = e.backend->info();
    const auto& info = e.info;
    log->info("model '{}' loaded on backend '{}': {} slots, max context {}, prefill chunk {}, "
              "vocab {}, snapshot {} MiB ({}), transfer overlaps compute: {}",
              m.name, m.backend.kind, info.slots, info.max_context, info.max_prefill_chunk,
              info.vocab_size, info.snapshot_bytes >> 20, backends::to_string(info.caps.extent),
              info.caps.transfer_overlaps_compute ? "yes" : "no");
    scheduler_setup setup;
    setup.model = m.name;
    setup.model_index = i;
    setup.backend = e.backend;
    setup.store = shared_store;
    setup.policy = cfg.scheduler;
    setup.reuse = cfg.reuse;
    setup.observer = observer;
    e.compute_heartbeat = std::make_shared<lane_heartbeat>();
    e.transfer_heartbeat = std::make_shared<lane_heartbeat>();
    setup.compute_heartbeat = e.compute_heartbeat;
    setup.transfer_heartbeat = e.transfer_heartbeat;
    e.scheduler = spawn_scheduler(sys, std::move(setup));
    e.health = std::make_shared<model_health>();
    e.grammar = std::make_shared<model_grammar>(
      e.backend, std::min(e.backend->tokens().size(), info.vocab_size));
    self->models_.push_back(std::move(e));
  }
  std::vector<monitored_model> watched;
  for (auto& e : self->models_)
    watched.push_back({e.name, e.scheduler, e.health});
  self->monitor_ = spawn_engine_monitor(sys, std::move(watched), stats_refresh, std::move(on_failure));
  if (opened->arena_inherited) {
    const auto unclaimed = shared_store->discard_unclaimed();
    logging::get("store")->info(
      "snapshot store: inherited arena mapped in place; its index listed {} snapshots ({} MiB), "
      "{} of models no longer configured were dropped",
      opened->recovered.records, opened->recovered.bytes >> 20, unclaimed);
  }
  logging::get("store")->info("snapshot store: {} MiB limit, committed on use",
                                      cfg.store.max_bytes >> 20);
  return self;
}

const model_entry* engine::find_model(std::string_view name) const noexcept {
  for (auto& m : models_)
    if (m.name == name)
      return &m;
  return nullptr;
}

expected<std::pair<const model_entry*, submission_ptr>, submit_error>
engine::prepare(submit_request& req) {
  auto fail = [](submit_errc code, std::string msg) {
    return unexpected(submit_error{code, std::move(msg)});
  };
  if (stopped_)
    return fail(submit_errc::shutting_down, "the daemon is shutting down");
  auto* m = find_model(req.model);
  if (!m) {
    std::string known;
    for (auto& x : models_)
      known += (known.empty() ? "" : ", ") + x.name;
    return fail(submit_errc::unknown_model,
                fmt::format("unknown model '{}' (loaded: {})", req.model, known));
  }
  if (m->health->failed())
    return fail(submit_errc::model_failed,
                fmt::format("model '{}' failed and accepts no requests: {}", m->name,
                            m->health->reason()));
  if (!admitting_)
    return fail(submit_errc::draining, "the daemon is draining and admits no new requests");
  const auto& info = m->info;
  const auto& tok = m->backend->tokens();

  auto sub = std::make_shared<submission>();
  if (!req.prompt_text.empty()) {
    if (!req.prompt_tokens.empty())
      return fail(submit_errc::invalid_request, "give the prompt as text or as tokens, not both");
    if (const auto bos = tok.bos())
      sub->prompt.push_back(*bos);
    auto body = tok.encode(req.prompt_text);
    sub->prompt.insert(sub->prompt.end(), body.begin(), body.end());
  } else {
    sub->prompt = std::move(req.prompt_tokens);
  }
  if (sub->prompt.empty())
    return fail(submit_errc::invalid_request, "the prompt is empty");
  const std::uint32_t vocabulary = std::min(tok.size(), info.vocab_size);
  for (std::size_t i = 0; i < sub->prompt.size(); ++i)
    if (sub->prompt[i] >= vocabulary)
      return fail(submit_errc::invalid_request,
                  fmt::format("prompt token {} at position {} is outside the vocabulary (size {})",
                              sub->prompt[i], i, vocabulary));
  if (req.stop_at_eos)
    for (const auto stop : tok.stop_tokens())
      if (std::find(req.sampling.stop_tokens.begin(), req.sampling.stop_tokens.end(), stop)
          == req.sampling.stop_tokens.end())
        req.sampling.stop_tokens.push_back(stop);
  req.sampling.token_limit = vocabulary;
  if (auto ok = validate(req.sampling, vocabulary, info.max_context); !ok)
    return fail(submit_errc::invalid_request, ok.error());
  const auto need = sub->prompt.size() + req.sampling.max_tokens;
  if (need > info.max_context)
    return fail(submit_errc::too_long,
                fmt::format("the request needs {} tokens of context ({} prompt + {} max_tokens); "
                            "model '{}' has {}",
                            need, sub->prompt.size(), req.sampling.max_tokens, m->name,
                            info.max_context));
  if (req.client.empty())
    return fail(submit_errc::invalid_request, "the client name is empty");
  if (req.constraint) {
    if (auto bad = check_constraint(*req.constraint))
      return fail(submit_errc::invalid_request, std::move(*bad));
    sub->constraint = std::make_shared<const constraint_setup>(m->grammar->setup_for(req.constraint));
  }

  sub->id = next_id_.fetch_add(1);
  sub->fairness_unit = req.fairness_unit.empty() ? req.client : std::move(req.fairness_unit);
  sub->client = std::move(req.client);
  sub->priority = req.priority;
  sub->owner = req.owner;
  sub->session_name = std::move(req.session_name);
  sub->sampling = std::move(req.sampling);
  return std::pair{m, std::move(sub)};
}

expected<std::shared_ptr<token_stream>, submit_error> engine::submit(submit_request req) {
  auto p = prepare(req);
  if (!p)
    return unexpected(std::move(p).error());
  auto [m, sub] = std::move(*p);
  auto stream = std::make_shared<token_stream>(sub->id, m->name, m->scheduler);
  sub->session = spawn_session(sys_, stream, std::chrono::steady_clock::now(),
                               {m->name, m->scheduler, m->health}, end_hook_for(*m, *sub));
  caf::anon_send(m->scheduler, submit_atom::value, std::move(sub));
  return stream;
}

expected<seq_id, submit_error> engine::submit(submit_request req,
                                              std::shared_ptr<stream_sink> sink) {
  auto p = prepare(req);
  if (!p)
    return unexpected(std::move(p).error());
  auto [m, sub] = std::move(*p);
  auto id = sub->id;
  sub->session = spawn_session(sys_, std::move(sink), std::chrono::steady_clock::now(),
                               {m->name, m->scheduler, m->health}, end_hook_for(*m, *sub));
  caf::anon_send(m->scheduler, submit_atom::value, std::move(sub));
  return id;
}

void engine::cancel(std::string_view model, seq_id id) {
  if (auto* m = find_model(model))
    caf::anon_send(m->scheduler, cancel_atom::value, id);
}

void engine::stop(std::string_view model, seq_id id, std::uint32_t generated, std::uint32_t keep) {
  if (auto* m = find_model(model))
    caf::anon_send(m->scheduler, stop_atom::value, id, generated, std::min(keep, generated));
}

bool engine::cancel(seq_id id, std::chrono::milliseconds timeout) {
  for (auto& s : list(timeout))
    if (s.id == id) {
      cancel(s.model, id);
      return true;
    }
  return false;
}

std::string engine::stuck_call(std::chrono::nanoseconds limit) const {
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  for (auto& m : models_)
    for (auto [lane, hb] : {std::pair{"compute", m.compute_heartbeat.get()},
                             std::pair{"transfer", m.transfer_heartbeat.get()}}) {
      auto since = hb->busy_since_ns.load(std::memory_order_relaxed);
      if (since != 0 && now - since > limit.count())
        return fmt::format("model '{}': the {} lane's backend call has run for {} ms", m.name,
                           lane, (now - since) / 1'000'000);
    }
  return {};
}

bool engine::update_reuse(const actors::reuse_policy& reuse, std::chrono::milliseconds timeout) {
  engine_config share;
  share.reuse = reuse;
  share.store.max_bytes = store_->limit();
  store_->set_retained_limit(retained_share_bytes(share));
  bool ok = true;
  caf::scoped_actor self{sys_};
  for (auto& m : models_)
    self->request(m.scheduler, timeout, reuse_atom::value, reuse)
      .receive([](bool) {}, [&](caf::error&) { ok = false; });
  return ok;
}

bool engine::update_policy(const actors::scheduler_policy& policy,
                           std::chrono::milliseconds timeout) {
  bool ok = true;
  caf::scoped_actor self{sys_};
  for (auto& m : models_)
    self->request(m.scheduler, timeout, policy_atom::value, policy)
      .receive([](bool) {}, [&](caf::error&) { ok = false; });
  return ok;
}

std::vector<sequence_info> engine::list(std::chrono::milliseconds timeout) const {
  std::vector<sequence_info> out;
  caf::scoped_actor self{sys_};
  for (auto& m : models_)
    self->request(m.scheduler, timeout, list_atom::value)
      .receive([&](sequence_list_ptr l) { out.insert(out.end(), l->begin(), l->end()); },
               [](caf::error&) {});
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.id < b.id; });
  return out;
}

expected<std::vector<retained_info>, std::string>
engine::list_retained(std::string_view model, std::chrono::milliseconds timeout) const {
  if (!model.empty() && find_model(model) == nullptr)
    return unexpected(fmt::format("unknown model '{}'", model));
  std::vector<retained_info> out;
  caf::scoped_actor self{sys_};
  for (auto& m : models_) {
    if ((!model.empty() && m.name != model) || m.health->failed())
      continue; // a failed model holds nothing reusable any more
    std::optional<std::string> failure;
    self->request(m.scheduler, timeout, cache_list_atom::value)
      .receive([&](retained_list_ptr l) { out.insert(out.end(), l->begin(), l->end()); },
               [&](caf::error& err) {
                 failure = fmt::format("model '{}' did not answer: {}", m.name, caf::to_string(err));
               });
    if (failure)
      return unexpected(std::move(*failure));
  }
  return out;
}

expected<retained_drop_result, std::string>
engine::drop_retained(std::string_view model, const retained_drop_request& req,
                      std::chrono::milliseconds timeout) {
  const auto* m = find_model(model);
  if (m == nullptr)
    return unexpected(fmt::format("unknown model '{}'", model));
  if (m->health->failed())
    return unexpected(fmt::format("model '{}' failed: {}", model, m->health->reason()));
  caf::scoped_actor self{sys_};
  expected<retained_drop_result, std::string> out = unexpected(std::string{"no reply"});
  self->request(m->scheduler, timeout, cache_drop_atom::value, req)
    .receive([&](retained_drop_result r) { out = r; },
             [&](caf::error& err) {
               out = unexpected(fmt::format("model '{}' did not answer: {}", model,
                                            caf::to_string(err)));
             });
  return out;
}

void engine::forget_session(std::string_view model, std::uint64_t user, std::string session) {
  const auto* m = find_model(model);
  if (m == nullptr || m->health->failed())
    return;
  retained_drop_request req;
  req.session = retained_drop_request::session_selector{user, std::move(session)};
  // Ahead of any later submit in the scheduler's mailbox; the reply is not needed.
  caf::anon_send(m->scheduler, cache_drop_atom::value, std::move(req));
}

end_hook engine::end_hook_for(const model_entry& m, const submission& sub) const {
  if (!on_complete_)
    return {};
  return [hook = on_complete_, model = m.name, client = sub.client, id = sub.id,
          priority = sub.priority](const stream_end& end) {
    completion c;
    c.model = model;
    c.client = client;
    c.id = id;
    c.priority = priority;
    c.end = &end;
    hook(c);
  };
}

void engine::shutdown(std::string_view why) {
  if (stopped_.exchange(true))
    return;
  caf::scoped_actor self{sys_};
  // The monitor goes first: schedulers stopping now are not failures.
  if (monitor_)
    self->send_exit(monitor_, caf::exit_reason::user_shutdown);
  // Retained KV still warm in slots goes to the store first, so the index
  // written below keeps it across a restart (bounded: a slow device loses it).
  for (auto& m : models_)
    if (!m.health->failed())
      self->request(m.scheduler, std::chrono::seconds(5), flush_warm_atom::value)
        .receive([](bool) {},
                 [&](caf::error& err) {
                   logging::get("store")->warn("model '{}': warm retained KV not all stored: {}",
                                               m.name, caf::to_string(err));
                 });
  for (auto& m : models_) {
    if (m.health->failed())
      continue; // its streams ended when it failed
    self->request(m.scheduler, std::chrono::seconds(10), shutdown_atom::value, std::string{why})
      .receive([](bool) {},
               [&](caf::error& err) {
                 logging::get("scheduler")
                   ->error("model '{}': shutdown request failed: {}", m.name, caf::to_string(err));
               });
    self->send_exit(m.scheduler, caf::exit_reason::user_shutdown);
  }
  // What the stop's flush sealed reaches the disk tier before the index is written.
  if (disk_)
    disk_->stop(std::chrono::seconds(10));
  // The last word on the store: its retained snapshots, for the next start.
  if (auto n = store_->persist(); n)
    logging::get("store")->log(*n > 0 ? spdlog::level::info : spdlog::level::debug,
                               "snapshot store: index of {} retained snapshots written", *n);
  else
    logging::get("store")->error("snapshot store: writing the index failed: {}",
                                 n.error().message);
}

expected<scheduler_stats, std::string> engine::stats(std::string_view model,
                                                     std::chrono::milliseconds timeout) const {
  auto* m = find_model(model);
  if (!m)
    return unexpected(fmt::format("unknown model '{}'", model));
  if (m->health->failed()) {
    auto s = m->health->last_stats().value_or(scheduler_stats{});
    s.model = m->name;
    s.slots = m->info.slots;
    s.failed_model = true;
    s.failure = m->health->reason();
    return s;
  }
  caf::scoped_actor self{sys_};
  expected<scheduler_stats, std::string> out = unexpected(std::string{"no reply"});
  self->request(m->scheduler, timeout, stats_atom::value)
    .receive([&](scheduler_stats_ptr s) { out = *s; },
             [&](caf::error& err) { out = unexpected(caf::to_string(err)); });
  return out;
}

std::optional<scheduler_stats> engine::cached_stats(std::string_view model) const {
  auto* m = find_model(model);
  if (!m)
    return std::nullopt;
  auto s = m->health->last_stats();
  if (m->health->failed()) {
    if (!s)
      s = scheduler_stats{};
    s->model = m->name;
    s->slots = m->info.slots;
    s->failed_model = true;
    s->failure = m->health->reason();
  }
  return s;
}

std::vector<model_failure> engine::failures() const {
  std::vector<model_failure> out;
  for (auto& m : models_)
    if (m.health->failed())
      out.push_back({m.name, m.health->reason()});
  return out;
}

ipc::store_stats engine::store_stats() const {
  return store_->stats();
}

} // namespace kvlane::actors
