// kvlane-shm-survival — what a client process killed with SIGKILL leaves behind, for the two
// ways of sharing memory and locks with clients that were considered (docs/architecture.md,
// "Why no Boost.Interprocess").
//
//  (a) a named POSIX shared memory object, as boost::interprocess::managed_shared_memory
//      creates it (/dev/shm/<name>): the object and its memory outlive the killed creator
//      until someone unlinks it;
//  (b) a memfd, as kvlane shares its rings: the memory goes when the last fd closes;
//  (c) a process-shared boost::interprocess::interprocess_mutex held by the killed process:
//      it stays locked for every other process (Boost 1.74 does not make it robust), while
//      a robust pthread mutex reports EOWNERDEAD to the next locker.
//
// Each case forks a child that sets up the resource, reports ready on a pipe and waits; the
// parent kills it with SIGKILL, reaps it, and looks. Memory figures are the Shmem line of
// /proc/meminfo (all shared memory on the machine), so other processes add noise to them.
// Exits 0 when every case behaves as described, 1 otherwise.

#include <boost/date_time/posix_time/posix_time_types.hpp>
#include <boost/interprocess/managed_shared_memory.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <boost/interprocess/sync/interprocess_mutex.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <new>
#include <string>

#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

namespace bip = boost::interprocess;

namespace {

constexpr std::size_t payload_bytes = 64u << 20;
constexpr std::uint64_t marker = 0x4B564C414E45ull; // "KVLANE"

/// Shmem from /proc/meminfo, in MiB.
double shmem_mib() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "Shmem:")
      return kib / 1024.0;
  return 0;
}

/// Forks a child that runs `setup`, tells the parent it is ready and waits to be killed.
/// Returns the child's pid once it is ready, or -1.
pid_t spawn_ready(const std::function<void()>& setup) {
  int fds[2];
  if (::pipe(fds) != 0)
    return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    setup();
    const char ready = 'r';
    (void)::write(fds[1], &ready, 1);
    for (;;)
      ::pause();
  }
  ::close(fds[1]);
  char c = 0;
  const bool ready = pid > 0 && ::read(fds[0], &c, 1) == 1;
  ::close(fds[0]);
  if (!ready && pid > 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  return ready ? pid : -1;
}

/// SIGKILL and reap.
bool kill_and_reap(pid_t pid) {
  int status = 0;
  return ::kill(pid, SIGKILL) == 0 && ::waitpid(pid, &status, 0) == pid && WIFSIGNALED(status)
         && WTERMSIG(status) == SIGKILL;
}

bool named_shared_memory() {
  const std::string name = fmt::format("kvlane-shm-survival-{}", ::getpid());
  const double before = shmem_mib();
  const pid_t pid = spawn_ready([&] {
    bip::managed_shared_memory segment(bip::create_only, name.c_str(), payload_bytes + (1u << 20));
    segment.construct<std::uint64_t>("marker")(marker);
    void* payload = segment.allocate(payload_bytes);
    std::memset(payload, 0x5A, payload_bytes); // commit the pages
  });
  if (pid < 0 || !kill_and_reap(pid))
    return false;
  const double after_kill = shmem_mib();
  bool found = false;
  try {
    bip::managed_shared_memory segment(bip::open_only, name.c_str());
    const auto [value, count] = segment.find<std::uint64_t>("marker");
    found = value != nullptr && count == 1 && *value == marker;
  } catch (const bip::interprocess_exception&) {
    found = false;
  }
  bip::shared_memory_object::remove(name.c_str());
  const double after_unlink = shmem_mib();
  fmt::print("(a) named POSIX shared memory (boost::interprocess::managed_shared_memory, "
             "/dev/shm/{})\n"
             "    creator killed with SIGKILL: segment still opens by name, marker intact: {}\n"
             "    Shmem: {:+.1f} MiB after the kill, {:+.1f} MiB after shm_unlink "
             "(baseline {:.1f} MiB, payload {} MiB)\n",
             name, found ? "yes" : "no", after_kill - before, after_unlink - before, before,
             payload_bytes >> 20);
  return found && after_kill - before > 0.5 * (payload_bytes >> 20);
}

bool memfd() {
  const double before = shmem_mib();
  const pid_t pid = spawn_ready([] {
    const int fd = ::memfd_create("kvlane-shm-survival", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, payload_bytes) != 0)
      std::_Exit(1);
    void* p = ::mmap(nullptr, payload_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
      std::_Exit(1);
    std::memset(p, 0x5A, payload_bytes);
  });
  if (pid < 0)
    return false;
  const double alive = shmem_mib();
  if (!kill_and_reap(pid))
    return false;
  const double after_kill = shmem_mib();
  fmt::print("(b) memfd (how kvlane shares its rings)\n"
             "    Shmem: {:+.1f} MiB while the creator lives, {:+.1f} MiB after its SIGKILL: "
             "nothing to unlink, no name to find\n",
             alive - before, after_kill - before);
  const double mib = static_cast<double>(payload_bytes >> 20);
  return alive - before > 0.5 * mib && after_kill - before < 0.5 * mib;
}

template <class T>
T* shared_anonymous() {
  void* p = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<T*>(p);
}

bool interprocess_mutex() {
  auto* m = new (shared_anonymous<bip::interprocess_mutex>()) bip::interprocess_mutex;
  const pid_t pid = spawn_ready([m] { m->lock(); });
  if (pid < 0 || !kill_and_reap(pid))
    return false;
  const bool try_lock = m->try_lock();
  const auto deadline = boost::posix_time::microsec_clock::universal_time()
                        + boost::posix_time::milliseconds(500);
  const bool timed_lock = !try_lock && m->timed_lock(deadline);
  fmt::print("(c) boost::interprocess::interprocess_mutex in shared memory, held by a process "
             "killed with SIGKILL\n"
             "    another process: try_lock {}, timed_lock(500 ms) {}: {}\n",
             try_lock ? "succeeds" : "fails", timed_lock ? "succeeds" : "times out",
             try_lock || timed_lock ? "recovered" : "locked for good");

  auto* robust = shared_anonymous<pthread_mutex_t>();
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(robust, &attr);
  const pid_t holder = spawn_ready([robust] { pthread_mutex_lock(robust); });
  if (holder < 0 || !kill_and_reap(holder))
    return false;
  const int rc = pthread_mutex_lock(robust);
  fmt::print("    for comparison, a robust pthread mutex (PTHREAD_MUTEX_ROBUST): lock returns {}\n",
             rc == EOWNERDEAD ? "EOWNERDEAD (the survivor may repair and take over)"
                              : std::strerror(rc));
  return !try_lock && !timed_lock && rc == EOWNERDEAD;
}

} // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  fmt::print("kvlane-shm-survival: what a process killed with SIGKILL leaves behind\n");
  const bool a = named_shared_memory();
  const bool b = memfd();
  const bool c = interprocess_mutex();
  const bool ok = a && b && c;
  fmt::print("{}\n", ok ? "every case behaved as docs/architecture.md says"
                        : "a case did NOT behave as docs/architecture.md says");
  return ok ? 0 : 1;
}
