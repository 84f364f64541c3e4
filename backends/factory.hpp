#pragma once

// kvlane::backends::make_backend — builds a backend from its configured kind.
//
// Problem it solves: the daemon and the tools pick a backend by name from the
// config ([[model]] backend = "sim", options in [model.sim]) without knowing the implementations. A new
// device adds one branch here (guarded by its build option).

#include "backends/backend.hpp"
#include "backends/backend_config.hpp"
#include "common/expected.hpp"

#include <memory>
#include <string>
#include <string_view>

namespace kvlane::backends {

/// "sim" → sim_backend::create(model_name, cfg.sim); "qbruntime" →
/// qbr_backend::create(model_name, cfg.qbruntime) in a build with it (else an
/// invalid_argument error saying how to build it); "llamacpp" → llama_backend::create
/// likewise. Any other kind is an
/// invalid_argument error naming it and the known kinds.
expected<std::unique_ptr<backend>, backend_error> make_backend(std::string model_name,
                                                               const backend_config& cfg);

} // namespace kvlane::backends
