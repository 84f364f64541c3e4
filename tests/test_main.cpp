#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tests/support/skip.hpp"

int main(int argc, char** argv) {
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  const int rc = context.run();
  if (context.shouldExit())
    return rc;
  // Every test case that ran skipped itself: say so to ctest (SKIP_RETURN_CODE).
  const int started = kvlane::test::test_cases_started();
  if (rc == 0 && started > 0 && kvlane::test::test_cases_skipped() == started)
    return kvlane::test::skip_exit_code;
  return rc;
}
