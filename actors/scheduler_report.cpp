#include "actors/scheduler_report.hpp"

#include "actors/kv_keeper.hpp"
#include "actors/sequence_table.hpp"
#include "common/elapsed.hpp"

#include <algorithm>

namespace kvlane::actors {

std::string_view to_string(seq_phase p) noexcept {
  switch (p) {
    case seq_phase::queued: return "queued";
    case seq_phase::resident: return "resident";
    case seq_phase::dumping: return "dumping";
    case seq_phase::parked: return "parked";
    case seq_phase::loading: return "loading";
    case seq_phase::ended: return "ended";
  }
  return "unknown";
}

seq_phase phase_of(kv_state s) noexcept {
  switch (s) {
    case kv_state::queued: return seq_phase::queued;
    case kv_state::resident: return seq_phase::resident;
    case kv_state::dumping: return seq_phase::dumping;
    case kv_state::parked: return seq_phase::parked;
    case kv_state::loading: return seq_phase::loading;
  }
  return seq_phase::queued;
}

scheduler_stats report_stats(const scheduler_stats& counters, const backends::backend_info& info,
                             const sequence_table& seqs, const cost_model& costs,
                             const fault_policy& faults, const kv_keeper& keeper,
                             std::chrono::steady_clock::time_point now) {
  auto out = counters;
  out.slots = info.slots;
  for (const auto& o : seqs.owners())
    out.slots_busy += o.has_value();
  auto in_state = [&](kv_state k) { return seqs.count(k)[0] + seqs.count(k)[1]; };
  out.queued = in_state(kv_state::queued);
  out.resident = in_state(kv_state::resident);
  out.parked = in_state(kv_state::parked);
  out.loading = in_state(kv_state::loading);
  out.dumping = in_state(kv_state::dumping);
  const auto interactive = static_cast<std::size_t>(priority_class::interactive);
  const auto batch = static_cast<std::size_t>(priority_class::batch);
  out.without_slot_interactive =
    seqs.count(kv_state::queued)[interactive] + seqs.count(kv_state::parked)[interactive];
  out.without_slot_batch =
    seqs.count(kv_state::queued)[batch] + seqs.count(kv_state::parked)[batch];
  const auto full = info.caps.extent == backends::snapshot_extent::full_slot
                      ? info.snapshot_bytes
                      : info.snapshot_header_bytes + info.bytes_per_token * info.max_context;
  out.step_base_ms = costs.step_base_ms().value_or(0);
  out.step_per_token_ms = costs.step_per_token_ms().value_or(0);
  out.dump_ms = costs.dump_ms(full).value_or(0);
  out.load_ms = costs.load_ms(full).value_or(0);
  out.device = faults.health();
  out.device_backoff_ms = static_cast<double>(faults.backoff().count());
  out.faults = faults.counters();

  const auto& c = keeper.counters();
  out.snapshots_lost = c.snapshots_lost;
  out.reuse_hits = c.reuse_hits;
  out.reuse_warm_hits = c.reuse_warm_hits;
  out.reused_tokens = c.reused_tokens;
  out.reuse_recomputed = c.reuse_recomputed;
  out.retained_dumps = c.retained_dumps;
  out.retained_dropped = c.retained_dropped;
  out.retained_lost = c.retained_lost;
  out.retained_expired = c.retained_expired;
  out.retained_superseded = c.retained_superseded;
  out.retained_admin_dropped = c.retained_admin_dropped;
  out.retained = static_cast<std::uint32_t>(keeper.retained().size());
  out.retained_warm = keeper.warm_count();
  for (const auto id : keeper.retained().ids()) {
    const auto r = describe_retained(*keeper.retained().find(id), keeper, out.model, now);
    if (r.stored) {
      ++out.retained_stored;
      out.retained_store_bytes += r.bytes;
    } else {
      out.retained_warm_bytes += r.bytes;
    }
  }
  return out;
}

std::vector<sequence_info> list_sequences(const sequence_table& seqs, std::string_view model,
                                          std::chrono::steady_clock::time_point now) {
  std::vector<sequence_info> out;
  seqs.for_each([&](const sequence& s) {
    if (s.cancelled)
      return;
    sequence_info i;
    i.id = s.id;
    i.client = s.client;
    i.model = std::string{model};
    i.priority = s.position.cls;
    i.phase = phase_of(s.state);
    i.tokens_in = s.prompt_len;
    i.tokens_out = s.generated;
    i.level = s.position.level;
    i.preemptions = s.preemptions;
    i.slot = s.slot ? static_cast<std::int32_t>(*s.slot) : -1;
    i.age_ms = ms_between(s.arrived, now);
    out.push_back(std::move(i));
  });
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.id < b.id; });
  return out;
}

std::vector<retained_info> list_retained(const kv_keeper& keeper, std::string_view model,
                                         std::chrono::steady_clock::time_point now) {
  std::vector<retained_info> out;
  for (const auto id : keeper.retained().ids())
    out.push_back(describe_retained(*keeper.retained().find(id), keeper, model, now));
  return out;
}

retained_info describe_retained(const retained_entry& e, const kv_keeper& keeper,
                                std::string_view model, std::chrono::steady_clock::time_point now) {
  retained_info i;
  i.id = e.id;
  i.model = std::string{model};
  i.owner = e.scope.owner;
  i.session = e.origin.session;
  i.tokens = e.kv_len;
  i.slot = e.slot ? static_cast<std::int32_t>(*e.slot) : -1;
  i.stored = e.snapshot.has_value();
  i.dumping = e.dumping;
  if (const auto t = keeper.tier_of(e))
    i.tier = std::string{ipc::to_string(*t)};
  i.bytes = i.stored ? keeper.store_bytes_of(e.kv_len) : keeper.snapshot_size(e.kv_len);
  i.hits = e.hits;
  i.idle_ms = ms_between(e.last_use, now);
  return i;
}

} // namespace kvlane::actors
