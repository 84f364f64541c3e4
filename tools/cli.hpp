#pragma once

// kvlane — the command-line tool. Subcommands:
//   probe   measure a backend's step, dump/load and overlap behaviour
//   run     send a prompt to kvlaned and stream the answer (the client library)
//   chat    an interactive conversation kept by kvlaned (tools/chat_command.hpp)
// and the admin subcommands (tools/admin_client.hpp).

#include <kvlane/client.hpp>

namespace kvlane::tools {

int cli_main(int argc, char** argv);

/// The exit code of `kvlane run` / `kvlane chat` for a client error: 69
/// daemon not running, 77 permission denied or not allowed, 76 protocol or
/// version mismatch, 75 timeout, 64 invalid argument, else 1.
int client_exit_code(client::errc e);

} // namespace kvlane::tools
