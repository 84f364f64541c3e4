#pragma once

// kvlane::backends::backend_config — which backend a model runs on, with that
// backend's own options, and the parser of both.
//
// Problem it solves: the daemon's config must not know any backend's fields.
// A [[model]] table names its backend (`backend = "sim"`); the backend's
// options live in its own sub-table ([model.sim]) and are read and validated
// here, with the same "<source>:<line>: <key>: <what>" errors as every other
// key. A new backend adds its options type, its table name and a branch.

#include "backends/llamacpp_options.hpp"
#include "backends/qbruntime_options.hpp"
#include "backends/sim_options.hpp"
#include "common/config_reader.hpp"

#include <span>
#include <string>
#include <string_view>

namespace kvlane::backends {

struct backend_config {
  std::string kind = "sim"; ///< `backend` key of [[model]]
  /// `device` key of [[model]]: the device the model runs on, shared with every
  /// other model naming the same one; empty: the kind's default (device_of).
  std::string device;
  sim_options sim;          ///< [model.sim]; read only when kind == "sim"
  qbruntime_options qbruntime; ///< [model.qbruntime]; read only when kind == "qbruntime"
  llamacpp_options llamacpp;   ///< [model.llamacpp]; read only when kind == "llamacpp"

  friend bool operator==(const backend_config&, const backend_config&) = default;
};

/// Backend kinds a config may name (in every build; see make_backend for which
/// this build can create), in the order error messages list them.
std::span<const std::string_view> backend_kinds() noexcept;

/// Keys of a [[model]] table that belong to the backend: "backend" and every
/// kind's sub-table name. The daemon accepts them beside its own keys.
std::span<const std::string_view> backend_model_keys() noexcept;

/// The device a model with `cfg` runs on: its `device` key, else its kind's
/// default — "sim" (every simulated model on one simulated NPU), "aries:<dev_no>"
/// (qbruntime), "gpu:0" for a llamacpp model offloading layers (ggml's main GPU),
/// else "cpu". Models on one device take turns on it (actors/device_gate).
std::string device_of(const backend_config& cfg);

/// A device name: 1 to 64 characters from A-Z a-z 0-9 . _ - : /
bool valid_device_name(std::string_view name) noexcept;

/// Reads `backend`, `device` and the chosen kind's sub-table from one [[model]] table.
/// Unknown kinds, and a sub-table of a kind other than the chosen one, are
/// errors naming the key.
config_reader::status parse_backend_config(const config_reader::reporter& r,
                                           const config_reader::section& model,
                                           backend_config& out);

} // namespace kvlane::backends
