#pragma once

// kvlane::ipc::spsc_ring — a lock-free single-producer single-consumer ring of
// fixed-size records in memory shared between two processes.
//
// Problem it solves: moving per-token records between kvlaned and an app at
// sub-microsecond cost while data flows, without any lock that a dying or
// hostile process could hold, and without trusting the other side.
//
// Layout (offsets from the ring's start, computed here rather than taken from
// a struct's placement so that alignment never depends on the allocator; the
// ring's start is 4096-aligned in the memfd):
//     0 head           std::atomic<uint64_t>, written by the reader: records consumed
//    64 tail           std::atomic<uint64_t>, written by the writer: records produced
//   128 reader_waiting std::atomic<uint32_t>, set by a reader about to sleep
//   192 writer_waiting std::atomic<uint32_t>, set by a writer that found the ring full
//   256 data           capacity * record_size bytes; record i lives at (i & (capacity-1))
// Indices grow forever (2^64 records never wrap in practice); a slot is
// written before tail is published with release ordering and read after tail
// is loaded with acquire ordering.
//
// Wake-ups: a reader spins for a while, then sets reader_waiting, issues a
// seq_cst fence, re-checks, and blocks in poll() on its wake-up fd. A writer
// publishes tail, issues a seq_cst fence and signals the wake-up fd only when
// reader_waiting is set, clearing it (the fences pair up: either the reader
// sees the new tail or the writer sees the flag; one wake-up per sleep).
// The wake-up fd is an eventfd where the writer is the less trusted side (the
// app wakes the daemon), and one end of a socket pair where the reader is (the
// daemon wakes the app: an eventfd's O_NONBLOCK flag is shared with the app,
// which could clear it and saturate the counter so that the daemon's write
// blocks; a send() with MSG_DONTWAIT on the daemon's own socket end never
// blocks, whatever the app does to its end).
//
// Hostility: the writer and the reader keep their own index privately and
// read the peer's index only to learn how far it got. With `checked`, an index
// read from shared memory that is impossible (the reader ahead of the writer,
// or more than `capacity` apart) makes the operation return `corrupt`; every
// slot address is masked, so no value in shared memory can make this code
// touch memory outside the ring. Record bytes are copied out before they are
// decoded (the peer may change them at any time).
//
// Threading: one writer thread and one reader thread at a time per ring (per
// side, hand-overs between threads need a happens-before, e.g. a mutex).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

namespace kvlane::ipc {

/// Where a ring lives in a mapping. Trivially copyable: it travels in the welcome.
struct ring_geometry {
  std::uint64_t offset = 0;   ///< from the start of the mapping; a multiple of 64
  std::uint32_t capacity = 0; ///< records; a power of two
  std::uint32_t record_size = 0;
};
static_assert(std::is_standard_layout_v<ring_geometry>);
static_assert(std::is_trivially_copyable_v<ring_geometry>);

namespace ring_layout {
inline constexpr std::size_t cache_line = 64;
inline constexpr std::size_t head = 0;
inline constexpr std::size_t tail = 1 * cache_line;
inline constexpr std::size_t reader_waiting = 2 * cache_line;
inline constexpr std::size_t writer_waiting = 3 * cache_line;
inline constexpr std::size_t data = 4 * cache_line;
} // namespace ring_layout

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && alignof(std::atomic<std::uint64_t>) == 8);
static_assert(std::is_standard_layout_v<std::atomic<std::uint64_t>>);

/// Bytes a ring of `capacity` records of `record_size` occupies.
constexpr std::uint64_t ring_bytes(std::uint32_t capacity, std::uint32_t record_size) {
  return ring_layout::data + std::uint64_t{capacity} * record_size;
}

/// True if `g` describes a ring that fits in a mapping of `map_size` bytes.
bool valid_geometry(const ring_geometry& g, std::uint64_t map_size) noexcept;

/// Constructs the ring's control words (all zero) at base + g.offset. Called
/// once, by the process that creates the shared memory, before it is shared.
void ring_init(std::byte* base, const ring_geometry& g) noexcept;

enum class ring_status : std::uint8_t { ok, full, empty, corrupt };

class ring_writer {
public:
  ring_writer() = default;
  /// `base` is the mapping; g must be valid_geometry for it.
  ring_writer(std::byte* base, const ring_geometry& g, bool checked) noexcept;

  /// Copies one record in and publishes it. full: no room (try again after the
  /// reader made progress); corrupt: the reader's index is impossible.
  ring_status try_push(std::span<const std::byte> record) noexcept;

  /// Records that fit now (0 on a corrupt head).
  std::uint32_t free_slots() noexcept;

  /// After publishing: true if the reader sleeps and must be woken by the
  /// caller. Clears the reader's flag, so later records published before the
  /// reader wakes do not signal again.
  bool reader_sleeping() noexcept;

  /// Marks the writer as waiting for room (the reader should wake it after it
  /// consumes). Returns true if there is room after all (re-checked after a fence).
  bool prepare_wait_for_room() noexcept;
  void clear_wait_for_room() noexcept;

  std::uint64_t produced() const noexcept { return tail_; }
  bool valid() const noexcept { return data_ != nullptr; }

private:
  std::atomic<std::uint64_t>* head_ptr_ = nullptr;
  std::atomic<std::uint64_t>* tail_ptr_ = nullptr;
  std::atomic<std::uint32_t>* reader_waiting_ = nullptr;
  std::atomic<std::uint32_t>* writer_waiting_ = nullptr;
  std::byte* data_ = nullptr;
  std::uint64_t mask_ = 0;
  std::uint32_t capacity_ = 0;
  std::uint32_t record_size_ = 0;
  std::uint64_t tail_ = 0;        ///< private: records published
  std::uint64_t head_cache_ = 0;  ///< last head read (validated)
  bool checked_ = false;
};

class ring_reader {
public:
  ring_reader() = default;
  ring_reader(std::byte* base, const ring_geometry& g, bool checked) noexcept;

  /// Copies the next record into `out` (record_size bytes) and consumes it.
  /// empty: nothing to read; corrupt: the writer's index is impossible.
  ring_status try_pop(std::span<std::byte> out) noexcept;

  /// Records readable now, or nullopt-like -1 on a corrupt tail.
  std::int64_t available() noexcept;

  /// Sets reader_waiting and re-checks after a fence: true if data arrived
  /// meanwhile (the caller must not sleep; call done_waiting()).
  bool prepare_sleep() noexcept;
  void done_waiting() noexcept;

  /// After consuming: true if the writer waits for room and must be woken
  /// (clears the writer's flag).
  bool take_writer_waiting() noexcept;

  std::uint64_t consumed() const noexcept { return head_; }
  bool valid() const noexcept { return data_ != nullptr; }

private:
  std::atomic<std::uint64_t>* head_ptr_ = nullptr;
  std::atomic<std::uint64_t>* tail_ptr_ = nullptr;
  std::atomic<std::uint32_t>* reader_waiting_ = nullptr;
  std::atomic<std::uint32_t>* writer_waiting_ = nullptr;
  std::byte* data_ = nullptr;
  std::uint64_t mask_ = 0;
  std::uint32_t capacity_ = 0;
  std::uint32_t record_size_ = 0;
  std::uint64_t head_ = 0;       ///< private: records consumed
  std::uint64_t tail_cache_ = 0; ///< last tail read (validated)
  bool checked_ = false;
};

/// Writes 1 to an eventfd (a wake-up). False if the eventfd is saturated or
/// not writable (never blocks when the fd is non-blocking).
bool eventfd_signal(int fd) noexcept;
/// Drains an eventfd; returns the count (0 if none was pending).
std::uint64_t eventfd_drain(int fd) noexcept;

/// Wakes the reader at the other end of a wake-up socket: sends one byte with
/// MSG_DONTWAIT | MSG_NOSIGNAL, so it never blocks and never raises SIGPIPE,
/// whatever the peer did to its end. False if the byte was not queued (the
/// peer has wake-ups pending already, or it left); either way the caller
/// goes on.
bool wake_socket_signal(int fd) noexcept;

/// Consumes pending wake-ups from `fd`, an eventfd or a wake-up socket (one
/// read of up to 256 bytes; call it after poll() reported the fd readable).
void wake_drain(int fd) noexcept;

/// Waits until `reader` has a record: spins for `spin`, then sets the waiting
/// flag and blocks in poll() on `wake_fd` (an eventfd or a wake-up socket) and
/// on every fd of `extra_fds` (for POLLIN or hang-up) for at most `timeout`
/// (negative: forever). Returns true if data is available, false on timeout
/// or when an extra fd became ready (check them).
bool wait_readable(ring_reader& reader, int wake_fd, std::chrono::microseconds spin,
                   std::chrono::milliseconds timeout, std::span<const int> extra_fds = {}) noexcept;

} // namespace kvlane::ipc
