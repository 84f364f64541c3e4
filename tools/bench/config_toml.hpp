#pragma once

// kvlane::tools::bench — config_toml: a daemon configuration as a kvlane.toml.
//
// Problem it solves: the IPC driver starts kvlaned on exactly the
// configuration the bench runs in process (profile, flags, the mode under
// test). It writes every key, through toml++, so that daemon::parse gives back
// an equal configuration (a unit test holds it to that).
//
// Threading: a plain function.

#include "common/expected.hpp"
#include "daemon/config.hpp"

#include <string>

namespace kvlane::tools::bench {

/// `cfg` as a kvlane.toml. Fails only for a value TOML cannot hold (an
/// integer above 2^63 - 1), naming its key.
expected<std::string, std::string> config_toml(const daemon::config& cfg);

} // namespace kvlane::tools::bench
