#include "tests/support/child_process.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

namespace kvlane::test {

using clock = std::chrono::steady_clock;

child_process::child_process(const std::string& path, const std::vector<std::string>& args,
                             const std::vector<std::string>& env) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string{"pipe2: "} + std::strerror(errno));
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(path.c_str()));
  for (auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ < 0)
    throw std::runtime_error(std::string{"fork: "} + std::strerror(errno));
  if (pid_ == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (auto& e : env)
      ::putenv(const_cast<char*>(e.c_str()));
    ::execv(path.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  out_fd_ = fds[0];
}

child_process::~child_process() {
  if (!status_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  if (out_fd_ >= 0)
    ::close(out_fd_);
}

bool child_process::read_some(int timeout_ms) {
  if (eof_)
    return false;
  pollfd p{out_fd_, POLLIN, 0};
  int rc = ::poll(&p, 1, timeout_ms);
  if (rc <= 0)
    return false;
  char buf[4096];
  auto n = ::read(out_fd_, buf, sizeof buf);
  if (n <= 0) {
    eof_ = true;
    return false;
  }
  output_.append(buf, static_cast<std::size_t>(n));
  return true;
}

bool child_process::wait_for_output(std::string_view needle, std::chrono::milliseconds timeout) {
  auto deadline = clock::now() + timeout;
  for (;;) {
    if (output_.find(needle, scanned_) != std::string::npos) {
      scanned_ = output_.find(needle, scanned_) + needle.size();
      return true;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    if (left.count() <= 0 || eof_)
      return false;
    read_some(static_cast<int>(left.count()));
  }
}

void child_process::signal(int sig) {
  if (pid_ > 0 && !status_)
    ::kill(pid_, sig);
}

std::optional<int> child_process::wait_exit(std::chrono::milliseconds timeout) {
  if (status_)
    return status_;
  auto deadline = clock::now() + timeout;
  // Drain output until EOF (the child closed it, normally by exiting).
  while (!eof_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    if (left.count() <= 0)
      return std::nullopt;
    read_some(static_cast<int>(left.count()));
  }
  // EOF seen: the child has exited or is about to; reap it within the deadline.
  for (;;) {
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return status_;
    }
    if (clock::now() >= deadline)
      return std::nullopt;
    // The output is closed, so there is no event left to wait on; the exit is
    // imminent. A blocking waitpid is correct here, bounded by the caller's
    // ctest timeout.
    r = ::waitpid(pid_, &st, 0);
    if (r == pid_) {
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return status_;
    }
  }
}

temp_dir::temp_dir() {
  std::string tmpl = std::filesystem::temp_directory_path().string() + "/kvlane-test-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    throw std::runtime_error(std::string{"mkdtemp: "} + std::strerror(errno));
  path_ = tmpl;
}

temp_dir::~temp_dir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string temp_dir::write(const std::string& name, std::string_view content) const {
  auto p = path_ + "/" + name;
  std::ofstream f{p};
  f << content;
  return p;
}

} // namespace kvlane::test
