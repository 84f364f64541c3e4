#include "backends/sim_options.hpp"

#include <limits>
#include <vector>

namespace kvlane::backends {

namespace {

using namespace config_reader;

constexpr choice<transfer_overlap> overlap_modes[] = {
  {"full", transfer_overlap::full},
  {"none", transfer_overlap::none},
  {"shared", transfer_overlap::shared},
};

/// `snapshot`: what a dump copies, or "none" for a device without per-slot transfers.
enum class snapshot_mode : std::uint8_t { full, used, none };

constexpr choice<snapshot_mode> snapshot_modes[] = {
  {"full", snapshot_mode::full},
  {"used", snapshot_mode::used},
  {"none", snapshot_mode::none},
};

// Built by probing backends::to_string(backend_errc) so that the accepted names
// cannot drift from the names the backend reports in its errors.
std::vector<choice<backend_errc>> fault_codes() {
  std::vector<choice<backend_errc>> out;
  for (unsigned v = 0; v <= std::numeric_limits<std::uint8_t>::max(); ++v) {
    const auto code = static_cast<backend_errc>(v);
    if (const auto name = backends::to_string(code); name != "unknown")
      out.push_back({name, code});
  }
  return out;
}

status parse_fault(const reporter& r, const section& faults, std::string_view op, fault_spec& out,
                   std::span<const choice<backend_errc>> codes) {
  auto table = find_table(r, faults, op);
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, faults.key(op)};
  KVLANE_CONFIG_TRY(
    check_keys(r, s, {"fail_nth", "fail_rate", "code", "crash_nth", "fail_token"}));
  KVLANE_CONFIG_TRY(
    read_int(r, s, "fail_nth", out.fail_nth, 0, std::numeric_limits<std::int64_t>::max()));
  KVLANE_CONFIG_TRY(read_real(r, s, "fail_rate", out.fail_rate, unit_interval));
  KVLANE_CONFIG_TRY(read_choice(r, s, "code", out.code, codes));
  KVLANE_CONFIG_TRY(
    read_int(r, s, "crash_nth", out.crash_nth, 0, std::numeric_limits<std::int64_t>::max()));
  KVLANE_CONFIG_TRY(read_int(r, s, "fail_token", out.fail_token, -1,
                             std::int64_t{std::numeric_limits<token_id>::max()}));
  return {};
}

/// min <= max for a [min, max] timing pair; the error names the max key.
status check_min_max(const reporter& r, const section& s, std::string_view min_name, double min,
                     std::string_view max_name, double max) {
  if (min <= max)
    return {};
  return unexpected(r.bad_value(s.key(max_name), s.line(max_name),
                                fmt::format("must be >= {} ({}) (got {}{})", min_name, min,
                                            s.find(max_name) != nullptr ? "" : "the default, ", max)));
}


} // namespace

std::string_view to_string(transfer_overlap o) noexcept {
  switch (o) {
    case transfer_overlap::full: return "full";
    case transfer_overlap::none: return "none";
    case transfer_overlap::shared: return "shared";
  }
  return "unknown";
}

config_reader::status parse_sim_options(const config_reader::reporter& r,
                                        const config_reader::section& model, sim_options& out) {
  auto table = find_table(r, model, "sim");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return {};
  const section s{**table, model.key("sim")};
  KVLANE_CONFIG_TRY(check_keys(
    r, s,
    {"slots", "max_context", "max_prefill_chunk", "snapshot_bytes", "snapshot", "step_base_ms",
     "step_per_token_ms", "dump_min_ms", "dump_max_ms", "load_min_ms", "load_max_ms", "time_scale",
     "overlap", "seed", "eos_rate", "faults"}));

  KVLANE_CONFIG_TRY(read_int(r, s, "slots", out.slots, 1, 1024));
  KVLANE_CONFIG_TRY(read_int(r, s, "max_context", out.max_context, 1, 1'048'576));
  if (s.find("max_prefill_chunk") != nullptr) {
    KVLANE_CONFIG_TRY(read_int(r, s, "max_prefill_chunk", out.max_prefill_chunk, 1, out.max_context));
  } else if (out.max_prefill_chunk > out.max_context) {
    return unexpected(r.bad_value(
      s.key("max_prefill_chunk"), s.line(),
      fmt::format("must be between 1 and max_context ({}) (got the default, {}); set it explicitly",
                  out.max_context, out.max_prefill_chunk)));
  }

  KVLANE_CONFIG_TRY(read_bytes(r, s, "snapshot_bytes", out.snapshot_bytes, 4 * kib, tib));
  if (out.snapshot_bytes % out.max_context != 0) {
    const std::uint64_t below = out.snapshot_bytes / out.max_context * out.max_context;
    const std::uint64_t above = below + out.max_context;
    const bool set = s.find("snapshot_bytes") != nullptr;
    return unexpected(r.bad_value(
      s.key("snapshot_bytes"), s.line("snapshot_bytes"),
      fmt::format("must be a multiple of max_context ({}) so that bytes per token is a whole "
                  "number (got {}{}; nearest valid: {} or {})",
                  out.max_context, out.snapshot_bytes, set ? "" : ", the default", below, above)));
  }
  if (s.find("snapshot") != nullptr) {
    auto mode = snapshot_mode::full;
    KVLANE_CONFIG_TRY(read_choice(r, s, "snapshot", mode,
                                  std::span<const choice<snapshot_mode>>(snapshot_modes)));
    out.extent = mode == snapshot_mode::used ? snapshot_extent::used_length : snapshot_extent::full_slot;
    out.snapshots = mode != snapshot_mode::none;
  }

  KVLANE_CONFIG_TRY(read_real(r, s, "step_base_ms", out.step_base_ms, non_negative));
  KVLANE_CONFIG_TRY(read_real(r, s, "step_per_token_ms", out.step_per_token_ms, non_negative));
  KVLANE_CONFIG_TRY(read_real(r, s, "dump_min_ms", out.dump_min_ms, non_negative));
  KVLANE_CONFIG_TRY(read_real(r, s, "dump_max_ms", out.dump_max_ms, non_negative));
  KVLANE_CONFIG_TRY(check_min_max(r, s, "dump_min_ms", out.dump_min_ms, "dump_max_ms", out.dump_max_ms));
  KVLANE_CONFIG_TRY(read_real(r, s, "load_min_ms", out.load_min_ms, non_negative));
  KVLANE_CONFIG_TRY(read_real(r, s, "load_max_ms", out.load_max_ms, non_negative));
  KVLANE_CONFIG_TRY(check_min_max(r, s, "load_min_ms", out.load_min_ms, "load_max_ms", out.load_max_ms));
  KVLANE_CONFIG_TRY(read_real(r, s, "time_scale", out.time_scale, {0.0, true, 1e6, false}));
  KVLANE_CONFIG_TRY(read_choice(r, s, "overlap", out.overlap,
                                std::span<const choice<transfer_overlap>>(overlap_modes)));
  KVLANE_CONFIG_TRY(read_int(r, s, "seed", out.seed, 0, std::numeric_limits<std::int64_t>::max()));
  KVLANE_CONFIG_TRY(read_real(r, s, "eos_rate", out.eos_rate, unit_interval));

  auto faults = find_table(r, s, "faults");
  if (!faults)
    return unexpected(std::move(faults.error()));
  if (*faults != nullptr) {
    const section fs{**faults, s.key("faults")};
    KVLANE_CONFIG_TRY(check_keys(r, fs, {"step", "dump", "load"}));
    const auto codes = fault_codes();
    KVLANE_CONFIG_TRY(parse_fault(r, fs, "step", out.step_faults, codes));
    KVLANE_CONFIG_TRY(parse_fault(r, fs, "dump", out.dump_faults, codes));
    KVLANE_CONFIG_TRY(parse_fault(r, fs, "load", out.load_faults, codes));
  }
  return {};
}

} // namespace kvlane::backends
