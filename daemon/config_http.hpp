#pragma once

// kvlane::daemon::config_tables — the [http] table of kvlaned's config
// (daemon/config): listeners, API keys and their files, TLS, limits and
// access. Parsed with the same `PATH:LINE: key: what` errors as every table
// (common/config_reader); daemon/config.cpp calls it once per file.

#include "common/config_reader.hpp"
#include "daemon/config.hpp"

namespace kvlane::daemon::config_tables {

/// Reads [http] of `root` into `out` (defaults where a key is absent).
config_reader::status parse_http(const config_reader::reporter& r,
                                 const config_reader::section& root, http_section& out);

} // namespace kvlane::daemon::config_tables
