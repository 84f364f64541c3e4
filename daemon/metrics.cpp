#include "daemon/metrics.hpp"

#include <fmt/format.h>

#include <cmath>
#include <utility>

namespace kvlane::daemon {

void histogram::observe(double seconds) noexcept {
  if (!(seconds >= 0))
    seconds = 0;
  std::size_t i = 0;
  while (i < bounds.size() && seconds > bounds[i])
    ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_micros_.fetch_add(static_cast<std::uint64_t>(std::llround(seconds * 1e6)),
                        std::memory_order_relaxed);
}

histogram::snapshot histogram::read() const noexcept {
  snapshot s;
  std::uint64_t running = 0;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = running;
  }
  s.sum = double(sum_micros_.load(std::memory_order_relaxed)) / 1e6;
  return s;
}

metrics::metrics(std::vector<std::string> models, std::vector<std::string> http_identities) {
  for (auto& m : models) {
    models_.push_back(std::make_unique<per_model>());
    models_.back()->name = std::move(m);
  }
  for (auto& i : http_identities) {
    identities_.push_back(std::make_unique<per_identity>());
    identities_.back()->name = std::move(i);
  }
}

metrics::per_identity* metrics::find_identity(std::string_view client) noexcept {
  constexpr std::string_view prefix = "http:";
  if (!client.starts_with(prefix))
    return nullptr;
  client.remove_prefix(prefix.size());
  client = client.substr(0, client.find('/'));
  for (auto& i : identities_)
    if (i->name == client)
      return i.get();
  return nullptr;
}

metrics::per_model* metrics::find(std::string_view model) noexcept {
  for (auto& m : models_)
    if (m->name == model)
      return m.get();
  return nullptr;
}

void metrics::record(const actors::completion& c) noexcept {
  auto* m = find(c.model);
  if (!m || !c.end)
    return;
  const auto& e = *c.end;
  m->outcomes[static_cast<std::size_t>(e.reason)].fetch_add(1, std::memory_order_relaxed);
  if (auto* i = find_identity(c.client))
    i->outcomes[static_cast<std::size_t>(e.reason)].fetch_add(1, std::memory_order_relaxed);
  if (e.generated_tokens > 0)
    m->ttft.observe(e.ttft_ms / 1000);
  if (e.generated_tokens > 1)
    m->tpot.observe(e.tpot_ms / 1000);
  m->e2e.observe(e.e2e_ms / 1000);
}

namespace {

class writer {
public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    fmt::format_to(out(), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(std::string_view name, std::string_view labels, double value) {
    if (labels.empty())
      fmt::format_to(out(), "{} {}\n", name, number(value));
    else
      fmt::format_to(out(), "{}{{{}}} {}\n", name, labels, number(value));
  }
  void histogram(std::string_view name, std::string_view labels, const histogram::snapshot& h) {
    auto sep = labels.empty() ? "" : ",";
    for (std::size_t i = 0; i < histogram::bounds.size(); ++i)
      fmt::format_to(out(), "{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep,
                     histogram::bounds[i], h.cumulative[i]);
    fmt::format_to(out(), "{}_bucket{{{}{}le=\"+Inf\"}} {}\n", name, labels, sep,
                   h.cumulative.back());
    sample(std::string{name} + "_sum", labels, h.sum);
    sample(std::string{name} + "_count", labels, double(h.cumulative.back()));
  }
  std::string take() { return std::move(text_); }

private:
  std::back_insert_iterator<std::string> out() { return std::back_inserter(text_); }
  static std::string number(double v) {
    if (std::isnan(v))
      return "NaN";
    if (v == std::floor(v) && std::abs(v) < 1e15)
      return fmt::format("{}", static_cast<long long>(v));
    return fmt::format("{:.6f}", v);
  }
  std::string text_;
};

std::string model_label(std::string_view model) {
  // Model names are validated to [A-Za-z0-9._-], so no escaping is needed.
  return fmt::format("model=\"{}\"", model);
}

/// Step faults (docs/scheduling.md, "Failures").
void render_device(writer& w, const std::vector<actors::scheduler_stats>& schedulers) {
  w.family("kvlane_device_state", "gauge",
           "How the model's device behaves: 0 healthy, 1 degraded (retrying a failed step or "
           "running its rows alone), 2 failing (backing off, admission paused).");
  for (auto& s : schedulers)
    w.sample("kvlane_device_state", model_label(s.model), double(static_cast<int>(s.device)));
  w.family("kvlane_device_backoff_seconds", "gauge",
           "The current wait before the next step while the device is failing, else 0.");
  for (auto& s : schedulers)
    w.sample("kvlane_device_backoff_seconds", model_label(s.model), s.device_backoff_ms / 1000);
  w.family("kvlane_step_fault_events_total", "counter",
           "What failed steps led to: whole-step retries, rows run alone to find a faulty one, "
           "rows found faulty (recomputed or failed), backoffs.");
  for (auto& s : schedulers) {
    const std::pair<const char*, std::uint64_t> kinds[] = {
      {"retry", s.faults.step_retries},
      {"isolated_row", s.faults.isolated_rows},
      {"row_fault", s.faults.row_faults},
      {"backoff", s.faults.backoffs}};
    for (const auto& [kind, n] : kinds)
      w.sample("kvlane_step_fault_events_total",
               fmt::format("{},kind=\"{}\"", model_label(s.model), kind), double(n));
  }
}

/// Models sharing a device (docs/architecture.md, "Models sharing a device").
void render_device_sharing(writer& w, const std::vector<device_wait>& waits) {
  w.family("kvlane_model_device_info", "gauge",
           "The device a loaded model runs on (1); models on one device take turns on it.");
  for (const auto& x : waits)
    if (x.lane == "compute")
      w.sample("kvlane_model_device_info",
               fmt::format("{},device=\"{}\"", model_label(x.model), x.device), 1);
  w.family("kvlane_device_wait_seconds_total", "counter",
           "Time a model's lane waited for its device while another model's call held it.");
  for (const auto& x : waits)
    w.sample("kvlane_device_wait_seconds_total",
             fmt::format("{},lane=\"{}\"", model_label(x.model), x.lane), x.seconds);
}

} // namespace

std::vector<device_wait>
device_waits_of(const std::vector<std::shared_ptr<const actors::model_entry>>& models) {
  std::vector<device_wait> out;
  for (const auto& m : models) {
    if (!m || !m->device)
      continue;
    for (auto [lane, hb] : {std::pair{"compute", m->compute_heartbeat.get()},
                            std::pair{"transfer", m->transfer_heartbeat.get()}})
      if (hb != nullptr)
        out.push_back({m->name, m->device->name, lane, hb->device_wait.wait_seconds()});
  }
  return out;
}

std::string metrics::render(const std::vector<actors::scheduler_stats>& schedulers,
                            const ipc::store_stats& store, std::uint64_t clients_connected,
                            const std::vector<device_wait>& waits) const {
  writer w;
  w.family("kvlane_requests_total", "counter", "Finished requests by outcome.");
  for (auto& m : models_)
    for (auto reason : {actors::end_reason::length, actors::end_reason::stop,
                        actors::end_reason::cancelled, actors::end_reason::error})
      w.sample("kvlane_requests_total",
               fmt::format("{},outcome=\"{}\"", model_label(m->name), actors::to_string(reason)),
               double(m->outcomes[static_cast<std::size_t>(reason)].load()));
  if (!identities_.empty()) {
    w.family("kvlane_http_requests_total", "counter",
             "Finished HTTP API requests by identity (API key name) and outcome.");
    for (auto& i : identities_)
      for (auto reason : {actors::end_reason::length, actors::end_reason::stop,
                          actors::end_reason::cancelled, actors::end_reason::error})
        w.sample("kvlane_http_requests_total",
                 fmt::format("identity=\"{}\",outcome=\"{}\"", i->name, actors::to_string(reason)),
                 double(i->outcomes[static_cast<std::size_t>(reason)].load()));
  }
  w.family("kvlane_ttft_seconds", "histogram", "Time from submit to the first token.");
  for (auto& m : models_)
    w.histogram("kvlane_ttft_seconds", model_label(m->name), m->ttft.read());
  w.family("kvlane_tpot_seconds", "histogram", "Mean time per output token after the first.");
  for (auto& m : models_)
    w.histogram("kvlane_tpot_seconds", model_label(m->name), m->tpot.read());
  w.family("kvlane_e2e_seconds", "histogram", "Time from submit to the end of the stream.");
  for (auto& m : models_)
    w.histogram("kvlane_e2e_seconds", model_label(m->name), m->e2e.read());

  auto per_scheduler = [&](std::string_view name, std::string_view type, std::string_view help,
                           auto value) {
    w.family(name, type, help);
    for (auto& s : schedulers)
      w.sample(name, model_label(s.model), double(value(s)));
  };
  per_scheduler("kvlane_model_up", "gauge",
                "1 while the model serves, 0 after its scheduler (or a lane) stopped.",
                [](auto& s) { return s.failed_model ? 0 : 1; });
  per_scheduler("kvlane_tokens_generated_total", "counter", "Tokens generated.",
                [](auto& s) { return s.tokens_generated; });
  per_scheduler("kvlane_slots", "gauge", "KV slots of the model.", [](auto& s) { return s.slots; });
  per_scheduler("kvlane_slots_busy", "gauge", "Slots resident, loading or dumping.",
                [](auto& s) { return s.slots_busy; });
  w.family("kvlane_sequences_without_slot", "gauge",
           "Sequences that hold no slot (queued or parked), by priority class.");
  for (auto& s : schedulers) {
    w.sample("kvlane_sequences_without_slot", model_label(s.model) + ",class=\"interactive\"",
             s.without_slot_interactive);
    w.sample("kvlane_sequences_without_slot", model_label(s.model) + ",class=\"batch\"",
             s.without_slot_batch);
  }
  w.family("kvlane_preemptions_total", "counter", "Preemptions by kind.");
  for (auto& s : schedulers) {
    w.sample("kvlane_preemptions_total", model_label(s.model) + ",kind=\"swap\"", double(s.swaps));
    w.sample("kvlane_preemptions_total", model_label(s.model) + ",kind=\"recompute\"",
             double(s.recomputes));
  }
  w.family("kvlane_demoted_total", "counter",
           "Sequences ranked after their class's others: they could no longer meet their TTFT "
           "objective.");
  for (auto& s : schedulers)
    w.sample("kvlane_demoted_total", model_label(s.model), double(s.demoted));
  w.family("kvlane_refused_total", "counter",
           "Requests refused at the door: predicted to start later than [scheduler.slo] "
           "refuse_over allows.");
  for (auto& s : schedulers)
    w.sample("kvlane_refused_total", model_label(s.model), double(s.refused));
  w.family("kvlane_transfers_total", "counter", "KV transfers by kind.");
  for (auto& s : schedulers) {
    w.sample("kvlane_transfers_total", model_label(s.model) + ",kind=\"dump\"", double(s.dumps));
    w.sample("kvlane_transfers_total", model_label(s.model) + ",kind=\"load\"", double(s.loads));
  }
  w.family("kvlane_transfer_seconds_total", "counter", "Time spent in KV transfers by kind.");
  for (auto& s : schedulers) {
    w.sample("kvlane_transfer_seconds_total", model_label(s.model) + ",kind=\"dump\"",
             s.dump_ms_total / 1000);
    w.sample("kvlane_transfer_seconds_total", model_label(s.model) + ",kind=\"load\"",
             s.load_ms_total / 1000);
  }
  w.family("kvlane_transfer_overlap_seconds_total", "counter",
           "Transfer time hidden behind compute or exposed.");
  for (auto& s : schedulers) {
    w.sample("kvlane_transfer_overlap_seconds_total", model_label(s.model) + ",part=\"hidden\"",
             s.transfer_hidden_ms / 1000);
    w.sample("kvlane_transfer_overlap_seconds_total", model_label(s.model) + ",part=\"exposed\"",
             std::max(0.0, s.transfer_ms - s.transfer_hidden_ms) / 1000);
  }
  w.family("kvlane_grammar_masks_total", "counter",
           "Token masks of constrained sequences by where they were computed.");
  for (auto& s : schedulers) {
    w.sample("kvlane_grammar_masks_total", model_label(s.model) + ",when=\"hidden\"",
             double(s.masks.hidden));
    w.sample("kvlane_grammar_masks_total", model_label(s.model) + ",when=\"late\"",
             double(s.masks.during_step - std::min(s.masks.hidden, s.masks.during_step)));
    w.sample("kvlane_grammar_masks_total", model_label(s.model) + ",when=\"at_sampling\"",
             double(s.masks.at_sampling));
  }
  per_scheduler("kvlane_grammar_mask_seconds_total", "counter",
                "Host time spent computing token masks.",
                [](auto& s) { return s.masks.total_ms / 1000; });
  per_scheduler("kvlane_step_busy_seconds_total", "counter", "Compute lane time spent in steps.",
                [](auto& s) { return s.step_busy_ms / 1000; });
  per_scheduler("kvlane_backend_failures_total", "counter", "Failed step, dump and load calls.",
                [](auto& s) { return s.step_failures + s.dump_failures + s.load_failures; });
  render_device(w, schedulers);
  render_device_sharing(w, waits);

  w.family("kvlane_retained_entries", "gauge",
           "Retained conversation KV entries by where their copy is: warm in a slot or in the store.");
  for (auto& s : schedulers) {
    w.sample("kvlane_retained_entries", model_label(s.model) + ",where=\"slot\"",
             double(s.retained - s.retained_stored));
    w.sample("kvlane_retained_entries", model_label(s.model) + ",where=\"store\"",
             double(s.retained_stored));
  }
  w.family("kvlane_retained_bytes", "gauge",
           "Bytes of retained KV: KV positions held in slots, store bytes charged to stored entries.");
  for (auto& s : schedulers) {
    w.sample("kvlane_retained_bytes", model_label(s.model) + ",where=\"slot\"",
             double(s.retained_warm_bytes));
    w.sample("kvlane_retained_bytes", model_label(s.model) + ",where=\"store\"",
             double(s.retained_store_bytes));
  }
  w.family("kvlane_reuse_total", "counter",
           "Prompts that matched retained KV: served from a warm slot, by a snapshot load, or "
           "prefilled anyway because the cost model preferred recomputing to loading.");
  for (auto& s : schedulers) {
    w.sample("kvlane_reuse_total", model_label(s.model) + ",outcome=\"warm\"",
             double(s.reuse_warm_hits));
    w.sample("kvlane_reuse_total", model_label(s.model) + ",outcome=\"load\"",
             double(s.reuse_hits - s.reuse_warm_hits));
    w.sample("kvlane_reuse_total", model_label(s.model) + ",outcome=\"recompute\"",
             double(s.reuse_recomputed));
  }
  per_scheduler("kvlane_reused_tokens_total", "counter",
                "Prompt tokens served from retained KV instead of prefilled (prefill tokens saved).",
                [](auto& s) { return s.reused_tokens; });
  per_scheduler("kvlane_prefill_tokens_total", "counter", "Tokens prefilled (prompts and recomputes).",
                [](auto& s) { return s.prefill_tokens; });
  w.family("kvlane_retained_evictions_total", "counter",
           "Retained KV given up, by reason: slot (a warm copy dropped to free its slot), store "
           "(a stored copy evicted or lost), ttl (idle too long), superseded (a longer entry of "
           "the same conversation replaced it), admin (kvlane cache drop).");
  for (auto& s : schedulers) {
    const std::pair<const char*, std::uint64_t> reasons[] = {
      {"slot", s.retained_dropped},          {"store", s.retained_lost},
      {"ttl", s.retained_expired},           {"superseded", s.retained_superseded},
      {"admin", s.retained_admin_dropped}};
    for (auto& [reason, n] : reasons)
      w.sample("kvlane_retained_evictions_total",
               fmt::format("{},reason=\"{}\"", model_label(s.model), reason), double(n));
  }

  w.family("kvlane_store_bytes", "gauge",
           "Snapshot store bytes: used (reserved), committed, and the free committed bytes of "
           "the warm pool.");
  w.sample("kvlane_store_bytes", "state=\"used\"", double(store.used_bytes));
  w.sample("kvlane_store_bytes", "state=\"committed\"", double(store.committed_bytes));
  w.sample("kvlane_store_bytes", "state=\"warm_pool\"", double(store.pool_bytes));
  w.family("kvlane_store_limit_bytes", "gauge", "Snapshot store limit.");
  w.sample("kvlane_store_limit_bytes", "", double(store.limit_bytes));
  w.family("kvlane_store_snapshots", "gauge", "Snapshots held.");
  w.sample("kvlane_store_snapshots", "", double(store.snapshots));
  w.family("kvlane_store_evictions_total", "counter", "Snapshots evicted to make room.");
  w.sample("kvlane_store_evictions_total", "", double(store.evictions));
  w.family("kvlane_store_evictions_by_class_total", "counter",
           "Snapshots evicted by class and reason: parked (a preempted sequence, which then "
           "recomputes) or retained (conversation KV); pressure (the limit or a model's cap) or "
           "retained_share (the retained share was full).");
  w.sample("kvlane_store_evictions_by_class_total", "class=\"parked\",reason=\"pressure\"",
           double(store.parked_evictions));
  w.sample("kvlane_store_evictions_by_class_total", "class=\"retained\",reason=\"pressure\"",
           double(store.retained_evictions - store.retained_share_evictions));
  w.sample("kvlane_store_evictions_by_class_total",
           "class=\"retained\",reason=\"retained_share\"", double(store.retained_share_evictions));
  w.family("kvlane_store_retained_bytes", "gauge", "Store bytes held by retained snapshots.");
  w.sample("kvlane_store_retained_bytes", "", double(store.retained_bytes));
  w.family("kvlane_store_retained_limit_bytes", "gauge",
           "Most store bytes retained snapshots may hold ([reuse] store_share of the limit).");
  w.sample("kvlane_store_retained_limit_bytes", "", double(store.retained_limit_bytes));
  w.family("kvlane_store_discarded_total", "counter",
           "Retained KV thrown away instead of used, by reason: the model file, tokenizer, KV "
           "layout, backend or chat format differs from the loaded model's (a snapshot kept "
           "across a restart), its tokens are not the prompt's, its bytes fail their checksum, "
           "its model is gone, its disk tier file is damaged; or a whole inherited index was "
           "refused (corrupt, unclean stop, another arena).");
  for (std::size_t r = 0; r < ipc::discard_reason_count; ++r)
    w.sample("kvlane_store_discarded_total",
             fmt::format("reason=\"{}\"", ipc::to_string(static_cast<ipc::discard_reason>(r))),
             double(store.discarded[r]));
  w.family("kvlane_store_restored_snapshots_total", "counter",
           "Retained snapshots taken back from the previous daemon's store at start.");
  w.sample("kvlane_store_restored_snapshots_total", "", double(store.restored_snapshots));
  w.family("kvlane_store_disk_snapshots", "gauge",
           "Snapshots with a copy in the disk tier, by where their bytes are: on disk only, or "
           "in memory too.");
  w.sample("kvlane_store_disk_snapshots", "tier=\"disk\"", double(store.disk_only_snapshots));
  w.sample("kvlane_store_disk_snapshots", "tier=\"both\"",
           double(store.disk_snapshots - store.disk_only_snapshots));
  w.family("kvlane_store_disk_demotions_total", "counter",
           "Evictions from memory that kept the snapshot's disk copy.");
  w.sample("kvlane_store_disk_demotions_total", "", double(store.disk_demotions));
  w.family("kvlane_store_disk_reads_total", "counter",
           "Snapshots read back from the disk tier for a load.");
  w.sample("kvlane_store_disk_reads_total", "", double(store.disk_fetches));
  w.family("kvlane_store_disk_read_bytes_total", "counter", "Bytes read back from the disk tier.");
  w.sample("kvlane_store_disk_read_bytes_total", "", double(store.disk_fetch_bytes));
  w.family("kvlane_clients_connected", "gauge", "Client connections.");
  w.sample("kvlane_clients_connected", "", double(clients_connected));
  return w.take();
}

} // namespace kvlane::daemon
