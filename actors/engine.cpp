#include "actors/engine.hpp"

#include "actors/constrained_decoding.hpp"
#include "actors/door_forecast.hpp"
#include "actors/model_fingerprint.hpp"
#include "actors/store_restart.hpp"
#include "backends/factory.hpp"
#include "common/logging.hpp"

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <cmath>

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
    case submit_errc::busy: return "busy";
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

// A request of class `cls` that `m` would start too late ([scheduler.slo] refuse_over).
std::optional<submit_error> refuse_at_door(const model_entry& m, priority_class cls) {
  if (!m.door)
    return std::nullopt;
  const auto figures = m.door->read();
  const auto start = door_refusal(figures, cls);
  if (!start)
    return std::nullopt;
  m.door->count_refusal();
  const auto limit = figures.refuse_after_ms[static_cast<std::size_t>(cls)];
  submit_error e{submit_errc::busy, {}, static_cast<std::uint64_t>(std::ceil(*start))};
  e.message = fmt::format("model '{}' is predicted to start this {} request in {:.1f} s "
                          "(its recent {} requests waited {:.1f} s for a slot), later than the "
                          "{:.1f} s it may wait ([scheduler.slo] refuse_over times the {} TTFT "
                          "objective); retry after {:.1f} s",
                          m.name, to_string(cls), *start / 1000.0, to_string(cls),
                          figures.recent_wait_ms[static_cast<std::size_t>(cls)].value_or(0) / 1000.0,
                          limit / 1000.0, to_string(cls), *start / 1000.0);
  return e;
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
  self->models_ = cfg.models;
  self->cfg_ = cfg;
  self->ctx_.sys = &sys;
  self->ctx_.store = shared_store;
  self->ctx_.observer = std::move(observer);
  self->ctx_.on_failure = std::move(on_failure);
  self->ctx_.stats_refresh = stats_refresh;
  self->ctx_.hash_cache = handoff.hash_cache;
  self->ctx_.free_transfers = free_transfers;
  // Every configured model has its store account (and floor) whether loaded or not.
  for (std::uint32_t i = 0; i < cfg.models.size(); ++i) {
    const auto& m = cfg.models[i];
    if (auto r = shared_store->register_model(i, m.store_floor_bytes, m.store_cap_bytes); !r)
      return unexpected(fmt::format("model '{}': snapshot store: {}", m.name, r.error().message));
  }
  std::vector<std::string> names;
  std::vector<keep_alive> keeps;
  for (const auto& m : cfg.models) {
    names.push_back(m.name);
    keeps.push_back(m.keep);
  }
  model_loader loader;
  auto* raw = self.get();
  loader.load = [raw](std::size_t i) {
    return load_model_instance(raw->ctx_, raw->current_config(), static_cast<std::uint32_t>(i));
  };
  loader.unload = [raw](const model_entry& m) {
    stop_model_instance(raw->sys_, m, fmt::format("model '{}' unloaded", m.name), true);
  };
  self->registry_ = std::make_unique<model_registry>(
    std::move(names), std::move(keeps),
    model_registry::options{cfg.lifecycle.max_loaded, cfg.lifecycle.load_timeout},
    std::move(loader));
  if (!cfg.store.disk.dir.empty()) {
    auto disk = disk_lane::start(cfg.store.disk, *shared_store, self->registry_->names());
    if (!disk)
      return unexpected(fmt::format("snapshot store: disk tier: {}", disk.error()));
    self->disk_ = std::move(*disk);
  }
  for (std::uint32_t i = 0; i < cfg.models.size(); ++i) {
    if (!cfg.models[i].load_at_start)
      continue;
    auto e = load_model_instance(self->ctx_, cfg, i);
    if (!e) {
      for (auto& loaded : self->registry_->stop("start-up failed"))
        stop_model_instance(sys, *loaded, "start-up failed", false);
      return unexpected(std::move(e).error());
    }
    self->registry_->adopt(i, std::move(*e));
  }
  if (opened->arena_inherited) {
    // KV of a configured model that loads later stays pending until it loads.
    std::vector<std::string> later;
    for (const auto& m : cfg.models)
      if (!m.load_at_start)
        later.push_back(m.name);
    const auto unclaimed = later.empty() ? shared_store->discard_unclaimed()
                                         : shared_store->discard_pending_except(later);
    logging::get("store")->info(
      "snapshot store: inherited arena mapped in place; its index listed {} snapshots ({} MiB), "
      "{} of models no longer configured were dropped",
      opened->recovered.records, opened->recovered.bytes >> 20, unclaimed);
  }
  logging::get("store")->info("snapshot store: {} MiB limit, committed on use",
                                      cfg.store.max_bytes >> 20);
  self->registry_->start();
  return self;
}

std::optional<submit_error> engine::refuse(const submit_request& req) const {
  if (stopped_)
    return submit_error{submit_errc::shutting_down, "the daemon is shutting down"};
  if (!is_configured(req.model))
    return submit_error{submit_errc::unknown_model, unknown_model(req.model)};
  if (!admitting_)
    return submit_error{submit_errc::draining, "the daemon is draining and admits no new requests"};
  return std::nullopt;
}

expected<submission_ptr, submit_error> engine::prepare(submit_request& req, const model_entry& mm,
                                                      seq_id preset_id) {
  auto fail = [](submit_errc code, std::string msg) {
    return unexpected(submit_error{code, std::move(msg)});
  };
  const auto* m = &mm;
  if (m->health->failed())
    return fail(submit_errc::model_failed,
                fmt::format("model '{}' failed and accepts no requests: {}", m->name,
                            m->health->reason()));
  const auto& info = m->info;
  const auto& tok = m->backend->tokens();

  auto sub = std::make_shared<submission>();
  sub->id = preset_id;
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
  }
  // A valid request may be refused at the door now; an invalid one got its own error above.
  if (auto busy = refuse_at_door(*m, req.priority))
    return unexpected(std::move(*busy));
  if (req.constraint)
    sub->constraint = std::make_shared<const constraint_setup>(m->grammar->setup_for(req.constraint));

  if (sub->id == 0)
    sub->id = next_id_.fetch_add(1);
  sub->fairness_unit = req.fairness_unit.empty() ? req.client : std::move(req.fairness_unit);
  sub->client = std::move(req.client);
  sub->priority = req.priority;
  sub->owner = req.owner;
  sub->session_name = std::move(req.session_name);
  sub->sampling = std::move(req.sampling);
  return sub;
}

expected<std::shared_ptr<token_stream>, submit_error> engine::submit(submit_request req) {
  if (auto no = refuse(req))
    return unexpected(std::move(*no));
  auto lease = registry_->acquire_wait(*registry_->index_of(req.model), req.keep);
  if (!lease)
    return unexpected(submit_error{submit_errc::model_failed, std::move(lease).error()});
  const auto& m = (*lease)->model();
  auto sub = prepare(req, m, 0);
  if (!sub)
    return unexpected(std::move(sub).error());
  auto stream = std::make_shared<token_stream>((*sub)->id, m.name, m.scheduler);
  (*sub)->session = spawn_session(sys_, stream, std::chrono::steady_clock::now(),
                                  {m.name, m.scheduler, m.health},
                                  end_hook_for(m, **sub, *lease));
  caf::anon_send(m.scheduler, submit_atom::value, std::move(*sub));
  return stream;
}

expected<seq_id, submit_error> engine::submit_loaded(submit_request req,
                                                     std::shared_ptr<stream_sink> sink,
                                                     lease_ptr lease, seq_id id) {
  const auto& m = lease->model();
  auto sub = prepare(req, m, id);
  if (!sub)
    return unexpected(std::move(sub).error());
  const auto seq = (*sub)->id;
  (*sub)->session = spawn_session(sys_, std::move(sink), std::chrono::steady_clock::now(),
                                  {m.name, m.scheduler, m.health},
                                  end_hook_for(m, **sub, std::move(lease)));
  caf::anon_send(m.scheduler, submit_atom::value, std::move(*sub));
  return seq;
}

expected<seq_id, submit_error> engine::submit(submit_request req,
                                              std::shared_ptr<stream_sink> sink) {
  if (auto no = refuse(req))
    return unexpected(std::move(*no));
  const auto index = *registry_->index_of(req.model);
  if (auto lease = registry_->try_acquire(index, req.keep))
    return submit_loaded(std::move(req), std::move(sink), std::move(lease), 0);
  // The model is not loaded: the request goes in once it is.
  const seq_id id = next_id_.fetch_add(1);
  {
    std::lock_guard lock{deferred_mu_};
    deferred_.insert(id);
  }
  auto keep = req.keep;
  registry_->acquire(index, keep, [this, id, req = std::move(req), sink](model_registry::acquired a) mutable {
    bool cancelled = false;
    {
      std::lock_guard lock{deferred_mu_};
      deferred_.erase(id);
      cancelled = cancelled_.erase(id) > 0;
    }
    stream_end end;
    if (cancelled) {
      end.reason = end_reason::cancelled;
      end.message = "cancelled while its model loaded";
    } else if (!a) {
      end.reason = end_reason::error;
      end.message = std::move(a).error();
    } else if (auto r = submit_loaded(std::move(req), sink, std::move(*a), id); !r) {
      end.reason = end_reason::error;
      end.message = std::move(r).error().message;
    } else {
      return;
    }
    sink->on_end(end);
  });
  return id;
}

void engine::cancel(std::string_view model, seq_id id) {
  {
    std::lock_guard lock{deferred_mu_};
    if (deferred_.contains(id)) {
      cancelled_.insert(id); // it ends as cancelled once its model has loaded
      return;
    }
  }
  if (auto m = find_model(model))
    caf::anon_send(m->scheduler, cancel_atom::value, id);
}

void engine::stop(std::string_view model, seq_id id, std::uint32_t generated, std::uint32_t keep) {
  if (auto m = find_model(model))
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
  for (auto& e : loaded_models())
    for (const auto& m = *e; auto [lane, hb] : {std::pair{"compute", m.compute_heartbeat.get()},
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
  {
    std::lock_guard lock{cfg_mu_};
    cfg_.reuse = reuse; // models loaded later start with it
  }
  bool ok = true;
  caf::scoped_actor self{sys_};
  for (auto& m : loaded_models())
    self->request(m->scheduler, timeout, reuse_atom::value, reuse)
      .receive([](bool) {}, [&](caf::error&) { ok = false; });
  return ok;
}

bool engine::update_policy(const actors::scheduler_policy& policy,
                           std::chrono::milliseconds timeout) {
  {
    std::lock_guard lock{cfg_mu_};
    const auto mode = cfg_.scheduler.mode; // the mode stays
    cfg_.scheduler = policy;
    cfg_.scheduler.mode = mode;
  }
  bool ok = true;
  caf::scoped_actor self{sys_};
  for (auto& m : loaded_models())
    self->request(m->scheduler, timeout, policy_atom::value, policy)
      .receive([](bool) {}, [&](caf::error&) { ok = false; });
  return ok;
}

std::vector<sequence_info> engine::list(std::chrono::milliseconds timeout) const {
  std::vector<sequence_info> out;
  caf::scoped_actor self{sys_};
  for (auto& m : loaded_models())
    self->request(m->scheduler, timeout, list_atom::value)
      .receive([&](sequence_list_ptr l) { out.insert(out.end(), l->begin(), l->end()); },
               [](caf::error&) {});
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.id < b.id; });
  return out;
}

expected<std::vector<retained_info>, std::string>
engine::list_retained(std::string_view model, std::chrono::milliseconds timeout) const {
  if (!model.empty() && !is_configured(model))
    return unexpected(fmt::format("unknown model '{}'", model));
  std::vector<retained_info> out;
  caf::scoped_actor self{sys_};
  for (auto& e : loaded_models()) { // an unloaded model's KV waits in the store, unlisted
    const auto& m = *e;
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
  if (!is_configured(model))
    return unexpected(fmt::format("unknown model '{}'", model));
  const auto m = find_model(model);
  if (m == nullptr)
    return unexpected(fmt::format("model '{}' is not loaded", model));
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
  const auto m = find_model(model);
  if (m == nullptr || m->health->failed())
    return;
  retained_drop_request req;
  req.session = retained_drop_request::session_selector{user, std::move(session)};
  // Ahead of any later submit in the scheduler's mailbox; the reply is not needed.
  caf::anon_send(m->scheduler, cache_drop_atom::value, std::move(req));
}

end_hook engine::end_hook_for(const model_entry& m, const submission& sub, lease_ptr lease) const {
  // The lease goes with the hook: the model stays loaded until the stream ends.
  return [hook = on_complete_, model = m.name, client = sub.client, id = sub.id,
          priority = sub.priority, lease = std::move(lease)](const stream_end& end) {
    if (!hook)
      return;
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
  // Requests waiting for a model to load fail; a load or unload under way completes first.
  if (registry_) // (null: create() failed before any model)
    for (auto& m : registry_->stop(fmt::format("the model did not load: {}", why))) {
      stop_model_instance(sys_, *m, why, false);
      logging::get("backend")->info("model '{}' unloaded", m->name);
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
  if (!is_configured(model))
    return unexpected(fmt::format("unknown model '{}'", model));
  const auto m = find_model(model);
  if (!m)
    return unexpected(fmt::format("model '{}' is not loaded", model));
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
  const auto m = find_model(model);
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
  for (auto& m : loaded_models())
    if (m->health->failed())
      out.push_back({m->name, m->health->reason()});
  return out;
}

ipc::store_stats engine::store_stats() const {
  return store_->stats();
}

} // namespace kvlane::actors
