#include "backends/factory.hpp"

#include "backends/sim_backend.hpp"

namespace kvlane::backends {

expected<std::unique_ptr<backend>, backend_error> make_backend(std::string model_name,
                                                               const backend_config& cfg) {
  if (cfg.kind == "sim") {
    auto made = sim_backend::create(std::move(model_name), cfg.sim);
    if (!made)
      return unexpected(std::move(made).error());
    return std::unique_ptr<backend>(std::move(*made));
  }
  return unexpected(backend_error{backend_errc::invalid_argument,
                                  "unknown backend '" + cfg.kind + "' (known: sim)"});
}

} // namespace kvlane::backends
