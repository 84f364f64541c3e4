#include "ipc/spsc_ring.hpp"

#include <cerrno>
#include <cstring>
#include <new>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kvlane::ipc {

namespace {

using clock = std::chrono::steady_clock;

template <class T>
std::atomic<T>* at(std::byte* base, std::uint64_t offset) {
  return std::launder(reinterpret_cast<std::atomic<T>*>(base + offset));
}

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

} // namespace

bool valid_geometry(const ring_geometry& g, std::uint64_t map_size) noexcept {
  if (g.capacity == 0 || (g.capacity & (g.capacity - 1)) != 0 || g.capacity > (1u << 24))
    return false;
  if (g.record_size == 0 || g.record_size % 8 != 0 || g.record_size > 65536)
    return false;
  if (g.offset % ring_layout::cache_line != 0)
    return false;
  const auto bytes = ring_bytes(g.capacity, g.record_size);
  return g.offset <= map_size && bytes <= map_size - g.offset;
}

void ring_init(std::byte* base, const ring_geometry& g) noexcept {
  std::byte* r = base + g.offset;
  std::memset(r, 0, ring_layout::data);
  new (r + ring_layout::head) std::atomic<std::uint64_t>(0);
  new (r + ring_layout::tail) std::atomic<std::uint64_t>(0);
  new (r + ring_layout::reader_waiting) std::atomic<std::uint32_t>(0);
  new (r + ring_layout::writer_waiting) std::atomic<std::uint32_t>(0);
}

// -- writer -------------------------------------------------------------------

ring_writer::ring_writer(std::byte* base, const ring_geometry& g, bool checked) noexcept
  : head_ptr_(at<std::uint64_t>(base, g.offset + ring_layout::head)),
    tail_ptr_(at<std::uint64_t>(base, g.offset + ring_layout::tail)),
    reader_waiting_(at<std::uint32_t>(base, g.offset + ring_layout::reader_waiting)),
    writer_waiting_(at<std::uint32_t>(base, g.offset + ring_layout::writer_waiting)),
    data_(base + g.offset + ring_layout::data),
    mask_(g.capacity - 1),
    capacity_(g.capacity),
    record_size_(g.record_size),
    checked_(checked) {
  // Resume where the ring stands (the writer's own index is authoritative only
  // for a fresh ring; a checked writer never trusts the peer's view of it).
  tail_ = checked ? 0 : tail_ptr_->load(std::memory_order_relaxed);
  head_cache_ = checked ? 0 : head_ptr_->load(std::memory_order_acquire);
}

std::uint32_t ring_writer::free_slots() noexcept {
  const auto head = head_ptr_->load(std::memory_order_acquire);
  const auto used = tail_ - head; // unsigned: a head ahead of tail wraps to huge
  if (used > capacity_ || (checked_ && head < head_cache_))
    return 0;
  head_cache_ = head;
  return static_cast<std::uint32_t>(capacity_ - used);
}

ring_status ring_writer::try_push(std::span<const std::byte> record) noexcept {
  if (tail_ - head_cache_ >= capacity_) {
    const auto head = head_ptr_->load(std::memory_order_acquire);
    const auto used = tail_ - head;
    if (used > capacity_ || (checked_ && head < head_cache_))
      return ring_status::corrupt;
    head_cache_ = head;
    if (used == capacity_)
      return ring_status::full;
  }
  std::byte* slot = data_ + (tail_ & mask_) * record_size_;
  std::memcpy(slot, record.data(), record.size() < record_size_ ? record.size() : record_size_);
  ++tail_;
  tail_ptr_->store(tail_, std::memory_order_release);
  return ring_status::ok;
}

bool ring_writer::reader_sleeping() noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Claim the wake-up: one write to the eventfd serves every record published
  // before the reader runs again (it re-checks the ring when it wakes).
  return reader_waiting_->load(std::memory_order_relaxed) != 0
         && reader_waiting_->exchange(0, std::memory_order_relaxed) != 0;
}

bool ring_writer::prepare_wait_for_room() noexcept {
  writer_waiting_->store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const auto head = head_ptr_->load(std::memory_order_acquire);
  return tail_ - head < capacity_;
}

void ring_writer::clear_wait_for_room() noexcept {
  writer_waiting_->store(0, std::memory_order_relaxed);
}

// -- reader -------------------------------------------------------------------

ring_reader::ring_reader(std::byte* base, const ring_geometry& g, bool checked) noexcept
  : head_ptr_(at<std::uint64_t>(base, g.offset + ring_layout::head)),
    tail_ptr_(at<std::uint64_t>(base, g.offset + ring_layout::tail)),
    reader_waiting_(at<std::uint32_t>(base, g.offset + ring_layout::reader_waiting)),
    writer_waiting_(at<std::uint32_t>(base, g.offset + ring_layout::writer_waiting)),
    data_(base + g.offset + ring_layout::data),
    mask_(g.capacity - 1),
    capacity_(g.capacity),
    record_size_(g.record_size),
    checked_(checked) {
  head_ = checked ? 0 : head_ptr_->load(std::memory_order_relaxed);
  tail_cache_ = head_;
}

std::int64_t ring_reader::available() noexcept {
  const auto tail = tail_ptr_->load(std::memory_order_acquire);
  const auto n = tail - head_;
  if (n > capacity_ || (checked_ && tail < tail_cache_))
    return -1;
  tail_cache_ = tail;
  return static_cast<std::int64_t>(n);
}

ring_status ring_reader::try_pop(std::span<std::byte> out) noexcept {
  if (tail_cache_ == head_) {
    const auto n = available();
    if (n < 0)
      return ring_status::corrupt;
    if (n == 0)
      return ring_status::empty;
  }
  const std::byte* slot = data_ + (head_ & mask_) * record_size_;
  std::memcpy(out.data(), slot, out.size() < record_size_ ? out.size() : record_size_);
  ++head_;
  head_ptr_->store(head_, std::memory_order_release);
  return ring_status::ok;
}

bool ring_reader::prepare_sleep() noexcept {
  reader_waiting_->store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return tail_ptr_->load(std::memory_order_acquire) != head_;
}

void ring_reader::done_waiting() noexcept {
  reader_waiting_->store(0, std::memory_order_relaxed);
}

bool ring_reader::take_writer_waiting() noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (writer_waiting_->load(std::memory_order_relaxed) == 0)
    return false;
  writer_waiting_->store(0, std::memory_order_relaxed);
  return true;
}

// -- wake-ups -------------------------------------------------------------------

bool eventfd_signal(int fd) noexcept {
  const std::uint64_t one = 1;
  for (;;) {
    const auto n = ::write(fd, &one, sizeof one);
    if (n == sizeof one)
      return true;
    if (n < 0 && errno == EINTR)
      continue;
    return false;
  }
}

std::uint64_t eventfd_drain(int fd) noexcept {
  std::uint64_t v = 0;
  for (;;) {
    const auto n = ::read(fd, &v, sizeof v);
    if (n == sizeof v)
      return v;
    if (n < 0 && errno == EINTR)
      continue;
    return 0;
  }
}

bool wake_socket_signal(int fd) noexcept {
  const char one = 1;
  for (;;) {
    const auto n = ::send(fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == 1)
      return true;
    if (n < 0 && errno == EINTR)
      continue;
    return false;
  }
}

void wake_drain(int fd) noexcept {
  // An eventfd needs a buffer of at least 8 bytes; a socket gives up to 256
  // pending wake-ups at once (any left over only cause one spurious wake-up).
  std::byte buf[256];
  for (;;) {
    const auto n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    return;
  }
}

bool wait_readable(ring_reader& reader, int wake_fd, std::chrono::microseconds spin,
                   std::chrono::milliseconds timeout, std::span<const int> extra_fds) noexcept {
  if (reader.available() != 0)
    return true;
  const auto start = clock::now();
  if (spin.count() > 0) {
    // Poll the tail on every iteration (one shared cache line); read the
    // clock only every 64 (a pause is ~40 ns on current x86, a clock read ~20 ns).
    const auto spin_end = start + spin;
    for (unsigned i = 1;; ++i) {
      if (reader.available() != 0)
        return true;
      cpu_relax();
      if ((i & 63) == 0 && clock::now() >= spin_end)
        break;
    }
  }
  constexpr std::size_t max_extra = 4;
  const std::size_t extra = extra_fds.size() < max_extra ? extra_fds.size() : max_extra;
  const auto deadline = start + timeout;
  for (;;) {
    if (reader.prepare_sleep()) {
      reader.done_waiting();
      return true;
    }
    int ms = -1;
    if (timeout.count() >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
      ms = left.count() > 0 ? static_cast<int>(left.count()) : 0;
      // poll() rounds down: wait at least 1 ms while time remains.
      if (ms == 0 && clock::now() < deadline)
        ms = 1;
    }
    pollfd fds[1 + max_extra] = {{wake_fd, POLLIN, 0}};
    for (std::size_t i = 0; i < extra; ++i)
      fds[1 + i] = {extra_fds[i], POLLIN, 0};
    const int rc = ::poll(fds, static_cast<nfds_t>(1 + extra), ms);
    reader.done_waiting();
    if (rc > 0 && (fds[0].revents & POLLIN))
      wake_drain(wake_fd);
    if (reader.available() != 0)
      return true;
    if (rc > 0)
      for (std::size_t i = 0; i < extra; ++i)
        if (fds[1 + i].revents != 0)
          return false;
    if (rc < 0 && errno != EINTR)
      return false;
    if (timeout.count() >= 0 && clock::now() >= deadline)
      return false;
  }
}

} // namespace kvlane::ipc
