#pragma once

// kvlane — the command-line tool. Subcommands:
//   probe   measure a backend's step, dump/load and overlap behaviour
//   run     send a prompt to kvlaned and stream the answer (the client library)
// Client and admin subcommands arrive with the client library and admin socket.

namespace kvlane::tools {

int cli_main(int argc, char** argv);

} // namespace kvlane::tools
