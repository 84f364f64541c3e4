#include "backends/factory.hpp"

#include "backends/sim_backend.hpp"

#if KVLANE_HAVE_QBRUNTIME
#include "backends/qbruntime/qbr_backend.hpp"
#endif
#if KVLANE_HAVE_LLAMACPP
#include "backends/llamacpp/llama_backend.hpp"
#endif

namespace kvlane::backends {

expected<std::unique_ptr<backend>, backend_error> make_backend(std::string model_name,
                                                               const backend_config& cfg) {
  if (cfg.kind == "sim") {
    auto made = sim_backend::create(std::move(model_name), cfg.sim);
    if (!made)
      return unexpected(std::move(made).error());
    return std::unique_ptr<backend>(std::move(*made));
  }
  if (cfg.kind == "qbruntime") {
#if KVLANE_HAVE_QBRUNTIME
    auto made = qbr_backend::create(std::move(model_name), cfg.qbruntime);
    if (!made)
      return unexpected(std::move(made).error());
    return std::unique_ptr<backend>(std::move(*made));
#else
    return unexpected(backend_error{backend_errc::invalid_argument,
                                    "backend 'qbruntime' is not in this build: configure kvlane "
                                    "with -DKVLANE_QBRUNTIME=sdk (docs/backends.md)"});
#endif
  }
  if (cfg.kind == "llamacpp") {
#if KVLANE_HAVE_LLAMACPP
    auto made = llama_backend::create(std::move(model_name), cfg.llamacpp);
    if (!made)
      return unexpected(std::move(made).error());
    return std::unique_ptr<backend>(std::move(*made));
#else
    return unexpected(backend_error{backend_errc::invalid_argument,
                                    "backend 'llamacpp' is not in this build: run scripts/llama-cpp "
                                    "(or install llama.cpp's headers) and reconfigure with "
                                    "-DKVLANE_LLAMACPP=on (docs/backends.md)"});
#endif
  }
  return unexpected(backend_error{backend_errc::invalid_argument,
                                  "unknown backend '" + cfg.kind + "' (known: sim, qbruntime, llamacpp)"});
}

} // namespace kvlane::backends
