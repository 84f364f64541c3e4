#include "ipc/spsc_ring.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstring>
#include <sys/eventfd.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace kvlane::ipc;
using namespace std::chrono_literals;

namespace {

struct fixture {
  explicit fixture(std::uint32_t capacity) : geo{64, capacity, 64} {
    memory.resize(ring_bytes(capacity, 64) + 128);
    ring_init(memory.data(), geo);
  }
  std::vector<std::byte> memory;
  ring_geometry geo;

  std::atomic<std::uint64_t>& head() {
    return *reinterpret_cast<std::atomic<std::uint64_t>*>(memory.data() + geo.offset + ring_layout::head);
  }
  std::atomic<std::uint64_t>& tail() {
    return *reinterpret_cast<std::atomic<std::uint64_t>*>(memory.data() + geo.offset + ring_layout::tail);
  }
};

std::array<std::byte, 64> rec(std::uint64_t v) {
  std::array<std::byte, 64> r{};
  std::memcpy(r.data(), &v, sizeof v);
  return r;
}

std::uint64_t val(const std::array<std::byte, 64>& r) {
  std::uint64_t v;
  std::memcpy(&v, r.data(), sizeof v);
  return v;
}

} // namespace

static_assert(ring_layout::tail - ring_layout::head >= 64, "head and tail on separate cache lines");
static_assert(ring_layout::data % 64 == 0);

TEST_CASE("spsc_ring: records come out in order, the ring fills and wraps") {
  fixture f(4);
  ring_writer w(f.memory.data(), f.geo, true);
  ring_reader sut(f.memory.data(), f.geo, true);
  std::array<std::byte, 64> out{};
  CHECK(sut.try_pop(out) == ring_status::empty);
  for (std::uint64_t round = 0; round < 3; ++round) {
    for (std::uint64_t i = 0; i < 4; ++i)
      REQUIRE(w.try_push(rec(round * 10 + i)) == ring_status::ok);
    CHECK(w.try_push(rec(99)) == ring_status::full);
    CHECK(w.free_slots() == 0);
    for (std::uint64_t i = 0; i < 4; ++i) {
      REQUIRE(sut.try_pop(out) == ring_status::ok);
      CHECK(val(out) == round * 10 + i);
    }
    CHECK(sut.try_pop(out) == ring_status::empty);
  }
}

TEST_CASE("spsc_ring: a checked reader reports impossible tail indices as corrupt") {
  fixture f(8);
  ring_reader sut(f.memory.data(), f.geo, true);
  std::array<std::byte, 64> out{};
  f.tail().store(9); // more than a ring ahead
  CHECK(sut.try_pop(out) == ring_status::corrupt);
  f.tail().store(~0ull); // "behind" the head after wrap-around arithmetic
  CHECK(sut.available() == -1);
  f.tail().store(2);
  CHECK(sut.try_pop(out) == ring_status::ok);
  f.tail().store(0); // going backwards (noticed once the known records are read)
  CHECK(sut.try_pop(out) == ring_status::ok);
  CHECK(sut.try_pop(out) == ring_status::corrupt);
}

TEST_CASE("spsc_ring: a checked writer reports impossible head indices as corrupt") {
  fixture f(4);
  ring_writer sut(f.memory.data(), f.geo, true);
  for (int i = 0; i < 4; ++i)
    REQUIRE(sut.try_push(rec(1)) == ring_status::ok);
  f.head().store(100); // the reader claims to be ahead of the writer
  CHECK(sut.try_push(rec(1)) == ring_status::corrupt);
  CHECK(sut.free_slots() == 0);
}

TEST_CASE("spsc_ring: geometry outside the mapping is invalid") {
  CHECK(valid_geometry({0, 8, 256}, ring_bytes(8, 256)));
  CHECK_FALSE(valid_geometry({0, 8, 256}, ring_bytes(8, 256) - 1));
  CHECK_FALSE(valid_geometry({0, 6, 256}, 1 << 20));   // not a power of two
  CHECK_FALSE(valid_geometry({32, 8, 256}, 1 << 20));  // misaligned
  CHECK_FALSE(valid_geometry({~0ull - 10, 8, 256}, 1 << 20));
}

TEST_CASE("spsc_ring: two threads move a million records in order, waking a sleeping reader") {
  fixture f(64);
  const int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  REQUIRE(efd >= 0);
  constexpr std::uint64_t n = 1'000'000;
  std::thread producer{[&] {
    ring_writer w(f.memory.data(), f.geo, false);
    for (std::uint64_t i = 0; i < n; ++i) {
      while (w.try_push(rec(i)) != ring_status::ok)
        std::this_thread::yield();
      if (w.reader_sleeping())
        eventfd_signal(efd);
      if (i % 100'000 == 0)
        std::this_thread::sleep_for(2ms); // let the reader fall asleep
    }
  }};
  ring_reader sut(f.memory.data(), f.geo, true);
  std::array<std::byte, 64> out{};
  std::uint64_t expect = 0;
  while (expect < n) {
    REQUIRE(wait_readable(sut, efd, 20us, 5s));
    while (sut.try_pop(out) == ring_status::ok) {
      REQUIRE(val(out) == expect);
      ++expect;
    }
  }
  producer.join();
  ::close(efd);
}
