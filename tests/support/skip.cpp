#include "tests/support/skip.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <set>
#include <string>
#include <unistd.h>

namespace kvlane::test {

namespace {

std::atomic<int> started{0};
std::string current; // the running test case (test cases run one at a time)
std::set<std::string>& skipped_names() {
  static std::set<std::string> names;
  return names;
}

// Counts the test cases that start (subcase re-entries are not new cases).
struct start_counter : doctest::IReporter {
  explicit start_counter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    started.fetch_add(1);
    current = tc.m_name;
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

} // namespace

bool running_as_root() noexcept {
  return ::geteuid() == 0;
}

void skip_test_case(std::string_view why) {
  MESSAGE("SKIPPED: " << std::string{why});
  skipped_names().insert(current);
}

int test_cases_started() noexcept {
  return started.load();
}

int test_cases_skipped() noexcept {
  return static_cast<int>(skipped_names().size());
}

} // namespace kvlane::test

DOCTEST_REGISTER_LISTENER("kvlane_start_counter", 1, kvlane::test::start_counter);
