#include "backends/backend_config.hpp"

#include <algorithm>
#include <array>

namespace kvlane::backends {

namespace {

using namespace config_reader;

constexpr std::array<std::string_view, 3> kinds{"sim", "qbruntime", "llamacpp"};
constexpr std::array<std::string_view, 4> model_keys{"backend", "sim", "qbruntime", "llamacpp"};

} // namespace

std::span<const std::string_view> backend_kinds() noexcept {
  return kinds;
}

std::span<const std::string_view> backend_model_keys() noexcept {
  return model_keys;
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
