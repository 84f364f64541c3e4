#include "tools/bench/service_host.hpp"

#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

using namespace kvlane;
using namespace kvlane::tools::bench;
using namespace std::chrono_literals;

namespace {

/// The service's end: one datagram to `path`, with `fd` as SCM_RIGHTS if >= 0,
/// never blocking. Returns 0 or the errno of the send.
int send_notify(const std::string& path, const std::string& text, int fd = -1) {
  const int s = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  REQUIRE(s >= 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  iovec iov{const_cast<char*>(text.data()), text.size()};
  msghdr m{};
  m.msg_name = &a;
  m.msg_namelen = sizeof a;
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    auto* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  const int rc = ::sendmsg(s, &m, MSG_DONTWAIT) < 0 ? errno : 0;
  ::close(s);
  return rc;
}

} // namespace

TEST_CASE("bench service_host: the notify socket keeps FDSTORE descriptors by name, replaces and "
          "removes them, and reports READY=1") {
  test::temp_dir dir;
  auto sut = notify_socket::bind(dir.path() + "/notify");
  REQUIRE(sut.has_value());
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  CHECK(send_notify(sut->path(), "FDSTORE=1\nFDNAME=a", pipe_fds[0]) == 0);
  CHECK(send_notify(sut->path(), "FDSTORE=1\nFDNAME=b", pipe_fds[1]) == 0);
  CHECK(send_notify(sut->path(), "FDSTORE=1\nFDNAME=a", pipe_fds[1]) == 0); // replaces a
  CHECK(send_notify(sut->path(), "STATUS=up\nREADY=1") == 0);
  auto ready = sut->wait_for("READY=1", 5s);
  REQUIRE(ready.has_value());
  CHECK(ready->has_value());
  CHECK(sut->store().size() == 2);
  CHECK(send_notify(sut->path(), "FDSTOREREMOVE=1\nFDNAME=b") == 0);
  REQUIRE(sut->drain().has_value());
  REQUIRE(sut->store().size() == 1);
  CHECK(sut->store().count("a") == 1);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);

  // A FDSTORE=1 message without a descriptor is an error that says so.
  CHECK(send_notify(sut->path(), "FDSTORE=1\nFDNAME=c") == 0);
  auto bad = sut->drain();
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().find("FDNAME=c") != std::string::npos);

  // Nothing came: wait_for times out without an error.
  auto none = sut->wait_for("READY=1", 20ms);
  REQUIRE(none.has_value());
  CHECK_FALSE(none->has_value());
}

TEST_CASE("bench service_host: while a serve_thread reads it, a service's sends never find the "
          "notify socket full") {
  test::temp_dir dir;
  auto sut = notify_socket::bind(dir.path() + "/notify");
  REQUIRE(sut.has_value());
  // Unread, the socket's queue fills after a few datagrams (net.unix.max_dgram_qlen) and a
  // service's send would block: here, with MSG_DONTWAIT, it fails with EAGAIN.
  int unread_failures = 0;
  for (int i = 0; i < 2000 && unread_failures == 0; ++i)
    unread_failures += send_notify(sut->path(), "STATUS=unread") == EAGAIN;
  CHECK(unread_failures == 1);
  REQUIRE(sut->drain().has_value());

  auto reader = serve_thread::start(*sut);
  REQUIRE(reader.has_value());
  // Many times the queue's length: the reader makes room as they come (a send
  // may still find the queue full for a moment, so each is retried until the
  // reader made room, within a bound; the first one that never fits ends it).
  int failures = 0;
  for (int i = 0; i < 200 && failures == 0; ++i) {
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    int rc = 0;
    while ((rc = send_notify(sut->path(), "STATUS=" + std::to_string(i))) == EAGAIN
           && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    failures += rc != 0;
  }
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  CHECK(send_notify(sut->path(), "FDSTORE=1\nFDNAME=kept", pipe_fds[0]) == 0);
  REQUIRE((*reader)->stop().has_value()); // reads what came before the stop
  CHECK(failures == 0);
  CHECK(sut->store().count("kept") == 1);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}
