#include "ipc/memfd_arena.hpp"

#include "common/align.hpp"

#include <doctest/doctest.h>

#include <cstring>

#include <fcntl.h>

using namespace kvlane::ipc;

namespace {

constexpr std::uint64_t mib = 1024 * 1024;

std::uint64_t committed(const memfd_arena& arena) {
  auto c = arena.committed_bytes();
  REQUIRE(c);
  return *c;
}

} // namespace

TEST_CASE("memfd_arena: committed bytes follow written pages and fall back after release") {
  auto created = memfd_arena::create("kvlane-test-arena", 1024 * mib);
  REQUIRE(created);
  auto& sut = *created;
  CHECK(sut.size() == 1024 * mib);
  CHECK(committed(sut) == 0);

  auto span = sut.bytes(16 * mib, 8 * mib);
  std::memset(span.data(), 0x5a, span.size());
  CHECK(committed(sut) >= 8 * mib);
  CHECK(committed(sut) < 9 * mib);

  REQUIRE(sut.release(16 * mib, 4 * mib));
  CHECK(committed(sut) >= 4 * mib);
  CHECK(committed(sut) < 5 * mib);
  CHECK(span[0] == std::byte{0}); // a punched page reads as zero
  CHECK(span[4 * mib] == std::byte{0x5a});

  REQUIRE(sut.release(16 * mib, 8 * mib));
  CHECK(committed(sut) == 0);
}

TEST_CASE("memfd_arena: size is rounded up to the page and the fd is close-on-exec") {
  auto sut = memfd_arena::create("kvlane-test-arena", kvlane::page_size() + 1);
  REQUIRE(sut);
  CHECK(sut->size() == 2 * kvlane::page_size());
  CHECK(sut->fd() >= 0);
  CHECK((::fcntl(sut->fd(), F_GETFD) & FD_CLOEXEC) != 0);
}

TEST_CASE("memfd_arena: rejects a zero size and unaligned or out-of-range releases") {
  auto empty = memfd_arena::create("kvlane-test-arena", 0);
  REQUIRE_FALSE(empty);
  CHECK(empty.error().code == store_errc::invalid_argument);

  auto sut = memfd_arena::create("kvlane-test-arena", 4 * mib);
  REQUIRE(sut);
  const auto page = kvlane::page_size();
  CHECK(sut->release(1, page).error().code == store_errc::invalid_argument);
  CHECK(sut->release(0, page + 1).error().code == store_errc::invalid_argument);
  CHECK(sut->release(4 * mib, page).error().code == store_errc::invalid_argument);
  CHECK(sut->release(4 * mib, 0));
}

TEST_CASE("memfd_arena: moving hands the fd and the mapping over") {
  auto created = memfd_arena::create("kvlane-test-arena", 4 * mib);
  REQUIRE(created);
  const int fd = created->fd();
  std::byte* base = created->data();
  base[0] = std::byte{7};

  memfd_arena sut = std::move(*created);
  CHECK(sut.fd() == fd);
  CHECK(sut.data() == base);
  CHECK(sut.size() == 4 * mib);
  CHECK(sut.bytes(0, 1)[0] == std::byte{7});
  // The moved-from arena owns nothing: destroying it must not close or unmap.
  CHECK(created->fd() == -1);
  CHECK(created->data() == nullptr);
}

TEST_CASE("memfd_arena: to_string names every error code") {
  CHECK(to_string(store_errc::full) == "full");
  CHECK(to_string(store_errc::too_large) == "too_large");
  CHECK(to_string(store_errc::stale) == "stale");
  CHECK(to_string(store_errc::corrupt) == "corrupt");
  CHECK(to_string(store_errc::invalid_argument) == "invalid_argument");
  CHECK(to_string(store_errc::system) == "system");
}
