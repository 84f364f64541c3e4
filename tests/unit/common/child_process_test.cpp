#include "common/child_process.hpp"

#include <doctest/doctest.h>

#include <csignal>
#include <mutex>
#include <string>
#include <vector>

using namespace kvlane;
using namespace std::chrono_literals;

namespace {

child_process shell(const std::string& script, child_options o = {}) {
  o.args = {"-c", script};
  auto c = child_process::start("/bin/sh", std::move(o));
  REQUIRE_MESSAGE(c.has_value(), (c ? std::string{} : c.error()));
  return std::move(*c);
}

} // namespace

TEST_CASE("child_process: captures stdout and stderr in one stream and returns the exit code") {
  auto sut = shell("echo out; echo err >&2; exit 3");
  CHECK(sut.wait_exit(10s) == 3);
  CHECK(sut.output() == "out\nerr\n");
}

TEST_CASE("child_process: a child killed by a signal reports 128 + the signal") {
  auto sut = shell("echo started; exec sleep 30");
  REQUIRE(sut.wait_for_output("started", 10s));
  CHECK_FALSE(sut.exit_status().has_value());
  sut.signal(SIGKILL);
  CHECK(sut.wait_exit(10s) == 128 + SIGKILL);
}

TEST_CASE("child_process: wait_for_output returns when the line arrives, not at its deadline") {
  // The child outlives the line by 30 s and the wait's deadline is 60 s: had the
  // wait run to its deadline, the child would have exited by then.
  auto sut = shell("echo started; exec sleep 30");
  REQUIRE(sut.wait_for_output("started", 60s));
  CHECK_FALSE(sut.exit_status().has_value());
  sut.signal(SIGKILL);
  CHECK(sut.wait_exit(10s) == 128 + SIGKILL);
}

TEST_CASE("child_process: wait_for_output finds each needle after the previous match and fails at EOF") {
  auto sut = shell("echo step; echo step; echo done");
  CHECK(sut.wait_for_output("step", 10s));
  CHECK(sut.wait_for_output("step", 10s));
  CHECK(sut.wait_for_output("done", 10s));
  CHECK_FALSE(sut.wait_for_output("step", 10s)); // no third one: the output closed
  CHECK(sut.wait_exit(10s) == 0);
}

TEST_CASE("child_process: the environment drops unset names and adds or replaces set entries") {
  ::setenv("KVLANE_CHILD_TEST_KEEP", "kept", 1);
  ::setenv("KVLANE_CHILD_TEST_DROP", "dropped", 1);
  ::setenv("KVLANE_CHILD_TEST_SET", "old", 1);
  child_options o;
  o.unset_env = {"KVLANE_CHILD_TEST_DROP"};
  o.set_env = {"KVLANE_CHILD_TEST_SET=new", "KVLANE_CHILD_TEST_ADD=added"};
  auto sut = shell("echo \"$KVLANE_CHILD_TEST_KEEP ${KVLANE_CHILD_TEST_DROP-unset} "
                   "$KVLANE_CHILD_TEST_SET $KVLANE_CHILD_TEST_ADD\"",
                   std::move(o));
  CHECK(sut.wait_exit(10s) == 0);
  CHECK(sut.output() == "kept unset new added\n");
  for (auto name : {"KVLANE_CHILD_TEST_KEEP", "KVLANE_CHILD_TEST_DROP", "KVLANE_CHILD_TEST_SET"})
    ::unsetenv(name);
}

TEST_CASE("child_process: a program that cannot be executed is an error that names it") {
  auto sut = child_process::start("/nonexistent/kvlane-no-such-program");
  REQUIRE_FALSE(sut.has_value());
  CHECK(sut.error().find("cannot execute '/nonexistent/kvlane-no-such-program'")
        != std::string::npos);
}

TEST_CASE("child_process: stop returns the status of a child that exits on SIGTERM") {
  auto sut = shell("echo started; exec sleep 30");
  REQUIRE(sut.wait_for_output("started", 10s));
  auto status = sut.stop(10s, 10s);
  REQUIRE(status.has_value());
  CHECK(*status == 128 + SIGTERM);
}

TEST_CASE("child_process: stop kills a child that ignores SIGTERM and says so") {
  auto sut = shell("trap '' TERM; echo armed; while :; do :; done");
  REQUIRE(sut.wait_for_output("armed", 10s));
  auto status = sut.stop(50ms, 50ms);
  REQUIRE_FALSE(status.has_value());
  CHECK(status.error().find("did not exit within 100 ms of SIGTERM; killed it")
        != std::string::npos);
  CHECK(sut.exit_status() == 128 + SIGKILL);
}

TEST_CASE("child_process: output keeps the newest bytes within its bound and on_line sees every line") {
  std::mutex mutex;
  std::vector<std::string> lines;
  child_options o;
  o.max_output_bytes = 12;
  o.on_line = [&](std::string_view l) {
    std::lock_guard lock{mutex};
    lines.emplace_back(l);
  };
  auto sut = shell("for i in 1 2 3 4 5; do echo line$i; done; printf tail", std::move(o));
  REQUIRE(sut.wait_exit(10s) == 0);
  CHECK(sut.output() == "4\nline5\ntail"); // the last 12 bytes
  CHECK(sut.last_lines(2) == std::vector<std::string>{"line5", "tail"});
  std::lock_guard lock{mutex};
  CHECK(lines == std::vector<std::string>{"line1", "line2", "line3", "line4", "line5", "tail"});
}
