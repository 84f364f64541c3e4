#pragma once

// Skipping a test case at run time, visibly.
//
// doctest 2.4 can only skip through a decorator fixed at registration; a test
// that needs a capability known at run time (root, for setuid or another
// user's connection) calls KVLANE_SKIP_UNLESS_ROOT instead. The test case
// prints "SKIPPED: <why>" and returns; the test binary's main then exits with
// skip_exit_code when every test case it ran was skipped, which ctest reports
// as "Skipped" (SKIP_RETURN_CODE), not "Passed".

#include <string>
#include <string_view>

namespace kvlane::test {

inline constexpr int skip_exit_code = 77;

bool running_as_root() noexcept;

/// Records the current test case as skipped and prints why.
void skip_test_case(std::string_view why);

/// Test cases started and skipped in this run of the binary.
int test_cases_started() noexcept;
int test_cases_skipped() noexcept;

} // namespace kvlane::test

/// Skips the current test case (prints "SKIPPED: needs root: <why>") unless
/// the process runs as root.
#define KVLANE_SKIP_UNLESS_ROOT(why)                                                               \
  do {                                                                                             \
    if (!::kvlane::test::running_as_root()) {                                                      \
      ::kvlane::test::skip_test_case(std::string{"needs root: "} + (why));                         \
      return;                                                                                      \
    }                                                                                              \
  } while (false)
