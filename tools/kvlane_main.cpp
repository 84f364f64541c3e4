// kvlane: the command-line tool (probe now; client and admin commands later).
#include "tools/cli.hpp"

int main(int argc, char** argv) {
  return kvlane::tools::cli_main(argc, argv);
}
