#include "actors/model_instance.hpp"

#include "actors/door_forecast.hpp"
#include "actors/model_fingerprint.hpp"
#include "backends/factory.hpp"
#include "common/logging.hpp"

#include <caf/scoped_actor.hpp>

#include <algorithm>
#include <filesystem>

namespace kvlane::actors {

expected<std::shared_ptr<model_entry>, std::string>
load_model_instance(const instance_context& ctx, const engine_config& cfg, std::uint32_t index) {
  const auto started = std::chrono::steady_clock::now();
  const auto& m = cfg.models.at(index);
  auto backend_cfg = m.backend;
  if (ctx.free_transfers) {
    backend_cfg.sim.dump_min_ms = backend_cfg.sim.dump_max_ms = 0;
    backend_cfg.sim.load_min_ms = backend_cfg.sim.load_max_ms = 0;
  }
  auto b = ctx.make_backend(m.name, backend_cfg);
  if (!b)
    return unexpected(fmt::format("model '{}': backend '{}' failed to load: {} ({})", m.name,
                                  m.backend.kind, b.error().message,
                                  backends::to_string(b.error().code)));
  // Retained snapshots (an earlier daemon's, or this model's before it was
  // unloaded) are taken back only under this fingerprint.
  auto fp = fingerprint_of(m, **b, ctx.hash_cache);
  if (!fp)
    return unexpected(fmt::format("model '{}': fingerprint: {}", m.name, fp.error()));
  if (auto r = ctx.store->set_fingerprint(index, m.name, std::move(*fp)); !r)
    return unexpected(fmt::format("model '{}': snapshot store: {}", m.name, r.error().message));
  if (const auto taken = ctx.store->claim(index, m.name); taken > 0)
    logging::get("store")->info("model '{}': {} retained snapshots taken back", m.name, taken);
  if (const auto taken = ctx.store->reclaim_unloaded(index, m.name); taken > 0)
    logging::get("store")->info("model '{}': {} retained snapshots it left at its unload taken back",
                                m.name, taken);

  auto e = std::make_shared<model_entry>();
  e->name = m.name;
  e->index = index;
  e->backend = std::shared_ptr<backends::backend>{std::move(*b)};
  e->info = e->backend->info();
  const auto& info = e->info;
  scheduler_setup setup;
  setup.model = m.name;
  setup.model_index = index;
  setup.backend = e->backend;
  setup.store = ctx.store;
  setup.policy = cfg.scheduler;
  setup.reuse = cfg.reuse;
  setup.observer = ctx.observer;
  e->compute_heartbeat = std::make_shared<lane_heartbeat>();
  e->transfer_heartbeat = std::make_shared<lane_heartbeat>();
  e->device = ctx.devices->get(backends::device_of(m.backend));
  setup.compute_heartbeat = e->compute_heartbeat;
  setup.transfer_heartbeat = e->transfer_heartbeat;
  setup.device = e->device;
  e->door = std::make_shared<door_board>();
  setup.door = e->door;
  e->scheduler = spawn_scheduler(*ctx.sys, std::move(setup));
  e->health = std::make_shared<model_health>();
  e->grammar = std::make_shared<model_grammar>(
    e->backend, std::min(e->backend->tokens().size(), info.vocab_size));
  e->monitor = spawn_engine_monitor(*ctx.sys, {{e->name, e->scheduler, e->health}},
                                    ctx.stats_refresh, ctx.on_failure);
  if (m.backend.kind == "llamacpp") {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(m.backend.llamacpp.gguf, ec);
    e->weights_bytes = ec ? 0 : bytes;
  }
  e->load_time = std::chrono::duration_cast<std::chrono::milliseconds>(
    std::chrono::steady_clock::now() - started);
  logging::get("backend")->info(
    "model '{}' loaded on backend '{}': {} slots, max context {}, prefill chunk {}, "
    "vocab {}, snapshot {} MiB ({}), transfer overlaps compute: {}, device '{}'; took {} ms",
    m.name, m.backend.kind, info.slots, info.max_context, info.max_prefill_chunk,
    info.vocab_size, info.snapshot_bytes >> 20, backends::to_string(info.caps.extent),
    info.caps.transfer_overlaps_compute ? "yes" : "no", e->device->name, e->load_time.count());
  return e;
}

void stop_model_instance(caf::actor_system& sys, const model_entry& m, std::string_view why,
                         bool wait) {
  caf::scoped_actor self{sys};
  // The monitor goes first: the scheduler stopping now is not a failure.
  if (m.monitor)
    self->send_exit(m.monitor, caf::exit_reason::user_shutdown);
  if (m.health->failed())
    return; // its streams ended when it failed
  // Retained KV still warm in slots goes to the store first, where it stays
  // sealed under the model's fingerprint (bounded: a slow device loses it).
  self->request(m.scheduler, std::chrono::seconds(5), flush_warm_atom::value)
    .receive([](bool) {},
             [&](caf::error& err) {
               logging::get("store")->warn("model '{}': warm retained KV not all stored: {}",
                                           m.name, caf::to_string(err));
             });
  self->request(m.scheduler, std::chrono::seconds(10), shutdown_atom::value, std::string{why})
    .receive([](bool) {},
             [&](caf::error& err) {
               logging::get("scheduler")
                 ->error("model '{}': shutdown request failed: {}", m.name, caf::to_string(err));
             });
  if (wait)
    self->monitor(m.scheduler);
  self->send_exit(m.scheduler, caf::exit_reason::user_shutdown);
  if (wait)
    self->receive([](const caf::down_msg&) {},
                  caf::after(std::chrono::seconds(10)) >> [&] {
                    logging::get("scheduler")
                      ->warn("model '{}': its scheduler did not stop within 10 s", m.name);
                  });
}

} // namespace kvlane::actors
