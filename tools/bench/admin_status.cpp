#include "tools/bench/admin_status.hpp"

#include <fmt/format.h>

namespace kvlane::tools::bench {

using json = nlohmann::json;

expected<actors::scheduler_stats, std::string> stats_from_status(const json& reply,
                                                                 const std::string& model) {
  try {
    for (const auto& m : reply.at("models")) {
      if (m.at("name").get<std::string>() != model)
        continue;
      actors::scheduler_stats s;
      s.model = model;
      auto u32 = [&](const char* k) { return m.at(k).get<std::uint32_t>(); };
      auto u64 = [&](const char* k) { return m.at(k).get<std::uint64_t>(); };
      auto ms = [&](const char* k) { return m.at(k).get<double>() * 1000.0; };
      s.slots = u32("slots");
      s.slots_busy = u32("slots_busy");
      s.resident = u32("resident");
      s.parked = u32("parked");
      s.loading = u32("loading");
      s.dumping = u32("dumping");
      s.queued = u32("queued");
      s.without_slot_interactive = u32("without_slot_interactive");
      s.without_slot_batch = u32("without_slot_batch");
      s.submitted = u64("submitted");
      s.finished = u64("finished");
      s.cancelled = u64("cancelled");
      s.failed = u64("failed");
      s.tokens_generated = u64("tokens_generated");
      s.steps = u64("steps");
      s.step_busy_ms = ms("step_busy_s");
      s.preemptions = u64("preemptions");
      s.swaps = u64("swaps");
      s.recomputes = u64("recomputes");
      s.transfer_ms = ms("transfer_s");
      s.transfer_hidden_ms = ms("transfer_hidden_s");
      return s;
    }
  } catch (const json::exception& e) {
    return unexpected(fmt::format("unexpected admin status reply: {}", e.what()));
  }
  return unexpected(fmt::format("the admin status lists no model '{}'", model));
}

std::optional<store_peaks> store_peaks_from_status(const json& reply) {
  const auto store = reply.find("store");
  if (store == reply.end() || !store->is_object())
    return std::nullopt;
  const auto bytes = store->find("peak_used_bytes");
  const auto snapshots = store->find("peak_snapshots");
  if (bytes == store->end() || snapshots == store->end() || !bytes->is_number_unsigned()
      || !snapshots->is_number_unsigned())
    return std::nullopt;
  return store_peaks{bytes->get<std::uint64_t>(), snapshots->get<std::uint64_t>()};
}

} // namespace kvlane::tools::bench
