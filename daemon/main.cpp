// kvlaned: parse the command line, load the config, build the app, run it.
#include "daemon/app.hpp"

int main(int argc, char** argv) {
  return kvlane::daemon::run_main(argc, argv);
}
