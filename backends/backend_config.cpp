#include "backends/backend_config.hpp"

#include <algorithm>
#include <array>

namespace kvlane::backends {

namespace {

using namespace config_reader;

constexpr std::array<std::string_view, 3> kinds{"sim", "qbruntime", "llamacpp"};
constexpr std::array<std::string_view, 5> model_keys{"backend", "device", "sim", "qbruntime",
                                                     "llamacpp"};

} // namespace

std::span<const std::string_view> backend_kinds() noexcept {
  return kinds;
}

std::span<const std::string_view> backend_model_keys() noexcept {
  return model_keys;
}

std::string device_of(const backend_config& cfg) {
  if (!cfg.device.empty())
    return cfg.device;
  if (cfg.kind == "qbruntime")
    return fmt::format("aries:{}", cfg.qbruntime.dev_no);
  if (cfg.kind == "llamacpp")
    return cfg.llamacpp.gpu_layers > 0 ? "gpu:0" : "cpu";
  return cfg.kind; // "sim": one simulated NPU for every simulated model
}

bool valid_device_name(std::string_view name) noexcept {
  constexpr std::size_t max_length = 64;
  if (name.empty() || name.size() > max_length)
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.'
           || c == '_' || c == '-' || c == ':' || c == '/';
  });
}

status parse_backend_config(const reporter& r, const section& model, backend_config& out) {
  KVLANE_CONFIG_TRY(read_string(r, model, "backend", out.kind));
  if (std::find(kinds.begin(), kinds.end(), out.kind) == kinds.end()) {
    std::string known;
    for (auto k : kinds)
      known += (known.empty() ? "" : ", ") + quoted(k);
    return unexpected(r.bad_value(
      model.key("backend"), model.line("backend"),
      fmt::format("unknown backend {} (known backends: {})", quoted(out.kind), known)));
  }
  KVLANE_CONFIG_TRY(read_string(r, model, "device", out.device));
  if (model.find("device") != nullptr && !valid_device_name(out.device))
    return unexpected(r.bad_value(
      model.key("device"), model.line("device"),
      fmt::format("must be 1 to 64 characters from A-Z a-z 0-9 . _ - : / (got {})",
                  quoted(out.device))));
  // A table for another kind is a mistake worth naming: its keys would be ignored.
  for (auto kind : kinds) {
    if (kind != out.kind && model.find(kind) != nullptr)
      return unexpected(r.bad_value(
        model.key(kind), model.line(kind),
        fmt::format("options for backend {} but this model uses backend {}", quoted(kind),
                    quoted(out.kind))));
  }
  if (out.kind == "sim")
    KVLANE_CONFIG_TRY(parse_sim_options(r, model, out.sim));
  else if (out.kind == "qbruntime")
    KVLANE_CONFIG_TRY(parse_qbruntime_options(r, model, out.qbruntime));
  else if (out.kind == "llamacpp")
    KVLANE_CONFIG_TRY(parse_llamacpp_options(r, model, out.llamacpp));
  return {};
}

} // namespace kvlane::backends
