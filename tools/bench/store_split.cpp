#include "tools/bench/store_split.hpp"

#include "tools/bench/comma_list.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

namespace kvlane::tools::bench {

namespace {

// The longest model name the configuration accepts (docs/config.md, [[model]] name).
constexpr std::size_t max_model_name = 64;

} // namespace

std::string_view to_string(store_split s) noexcept {
  return s == store_split::shared ? "shared" : "static";
}

expected<std::vector<store_split>, std::string> parse_store_split_list(std::string_view list) {
  std::vector<store_split> out;
  for (const auto name : split_list(list)) {
    store_split s{};
    if (name == "shared")
      s = store_split::shared;
    else if (name == "static")
      s = store_split::static_halves;
    else
      return unexpected(fmt::format("unknown store split '{}' (known: shared, static)", name));
    if (std::find(out.begin(), out.end(), s) == out.end())
      out.push_back(s);
  }
  return out;
}

std::string split_model_name(std::string_view base, std::uint32_t index) {
  return fmt::format("{}-{}", base, static_cast<char>('a' + index % 26));
}

std::uint64_t static_share_bytes(std::uint64_t max_bytes, std::uint32_t models,
                                 std::uint64_t granularity) noexcept {
  if (models == 0)
    return 0;
  const std::uint64_t share = max_bytes / models;
  return granularity > 0 ? share / granularity * granularity : share;
}

expected<daemon::config, std::string> split_config(const daemon::config& cfg, store_split split) {
  if (cfg.models.empty())
    return unexpected(std::string{"the configuration has no model to split"});
  const auto base = cfg.models.front();
  if (base.name.size() + 2 > max_model_name)
    return unexpected(fmt::format("model name '{}' is too long to derive '{}' from it (at most {} "
                                  "characters)",
                                  base.name, split_model_name(base.name, 0), max_model_name));
  auto out = cfg;
  out.models.clear();
  const std::uint64_t share =
    static_share_bytes(cfg.store.max_bytes, split_models, ipc::store_options{}.granularity);
  for (std::uint32_t i = 0; i < split_models; ++i) {
    auto m = base;
    m.name = split_model_name(base.name, i);
    if (split == store_split::static_halves) {
      m.store_floor_bytes = share;
      m.store_cap_bytes = share;
    }
    out.models.push_back(std::move(m));
  }
  return out;
}

std::string split_device(const daemon::config& cfg) {
  return cfg.models.empty() ? std::string{} : backends::device_of(cfg.models.front().backend);
}

std::vector<std::uint32_t> assign_in_bursts(std::span<const trace_request> requests,
                                            double burst_s, std::uint32_t models) {
  std::vector<std::uint32_t> out(requests.size(), 0);
  if (models <= 1 || !(burst_s > 0))
    return out;
  std::unordered_map<std::uint32_t, std::uint32_t> model_of; // by conversation
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    auto [it, fresh] = model_of.try_emplace(r.conversation, 0);
    if (fresh) {
      // Bounded before the conversion: a tiny burst_s must not overflow it.
      const double index = std::min(std::max(0.0, r.arrival_s) / burst_s, 1e18);
      const auto window = static_cast<std::uint64_t>(index);
      it->second = static_cast<std::uint32_t>(window % models);
    }
    out[i] = it->second;
  }
  return out;
}

} // namespace kvlane::tools::bench
