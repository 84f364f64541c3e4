#pragma once

// kvlane — the command-line tool. Subcommands:
//   probe   measure a backend's step, dump/load and overlap behaviour
//   run     send a prompt to kvlaned and stream the answer (the client library)
//   chat    an interactive conversation kept by kvlaned (tools/chat_command.hpp)
// and the admin subcommands (tools/admin_client.hpp). Each answers `--help` and
// `-h` with its own usage on stdout and exit 0; `kvlane help COMMAND` is the same.

namespace kvlane::tools {

int cli_main(int argc, char** argv);

} // namespace kvlane::tools
