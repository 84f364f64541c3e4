#pragma once

// kvlane::tools::admin — the `kvlane` subcommands that talk to the admin
// socket: status, ps, cancel, drain, resume, reload, log-level, metrics, top,
// cache (ls, drop).
// Each sends one JSON line and prints the response for people, or as is with
// --json. Protocol: docs/admin.md.

#include <string>
#include <string_view>

namespace kvlane::tools {

/// True if `command` is one of the admin subcommands.
bool is_admin_command(std::string_view command);

/// Runs an admin subcommand; argv[0] is the subcommand. Returns the exit code:
/// 0 ok, 1 the daemon answered with an error, 2 cannot reach the daemon or not
/// allowed, 64 bad usage.
int admin_main(int argc, char** argv);

/// The admin socket path used when --socket is not given.
std::string default_admin_socket();

} // namespace kvlane::tools
