// kvlane: the command-line tool (tools/cli.hpp).
#include "tools/cli.hpp"

int main(int argc, char** argv) {
  return kvlane::tools::cli_main(argc, argv);
}
