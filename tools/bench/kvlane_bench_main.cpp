// kvlane-bench: replays a request trace against every scheduling mode (docs/benchmarks.md).
#include "tools/bench/bench_cli.hpp"

int main(int argc, char** argv) {
  return kvlane::tools::bench::bench_main(argc, argv);
}
