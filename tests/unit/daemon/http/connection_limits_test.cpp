#include "daemon/http/connection_limits.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace kvlane::daemon::http;
using verdict = connection_limits::verdict;
namespace ip = boost::asio::ip;

namespace {

const auto a = ip::make_address("192.168.1.10");
const auto b = ip::make_address("192.168.1.11");

} // namespace

TEST_CASE("connection_limits: a peer gets max_per_peer places, then refusals, others still get theirs") {
  auto sut = std::make_shared<connection_limits>(8, 2);
  std::vector<connection_limits::admission> held;
  held.push_back(sut->admit(a));
  held.push_back(sut->admit(a));
  CHECK(held[0].what == verdict::admit);
  CHECK(held[1].what == verdict::admit);
  auto over = sut->admit(a);
  CHECK(over.what == verdict::refuse);
  CHECK(sut->open() == 2); // a refusal is not an open connection
  CHECK(sut->open_from(a) == 2);
  CHECK(sut->admit(b).what == verdict::admit);
  held.pop_back(); // one of a's closes: its place is free again
  CHECK(sut->open_from(a) == 1);
  CHECK(sut->admit(a).what == verdict::admit);
}

TEST_CASE("connection_limits: past max_total every peer is closed at accept, and places come back") {
  auto sut = std::make_shared<connection_limits>(3, 3);
  std::vector<connection_limits::admission> held;
  for (const auto& peer : {a, a, b})
    held.push_back(sut->admit(peer));
  CHECK(sut->open() == 3);
  CHECK(sut->admit(ip::make_address("10.0.0.1")).what == verdict::close);
  CHECK(sut->admit(a).what == verdict::close); // over the total before its own cap
  held.clear();
  CHECK(sut->open() == 0);
  CHECK(sut->open_from(a) == 0);
  CHECK(sut->admit(ip::make_address("10.0.0.1")).what == verdict::admit);
}

TEST_CASE("connection_limits: refusals in flight are bounded; past the bound an over-cap peer is closed") {
  auto sut = std::make_shared<connection_limits>(8, 1);
  auto place = sut->admit(a);
  std::vector<connection_limits::admission> refusals;
  for (std::uint32_t i = 0; i < connection_limits::max_refusals_in_flight; ++i) {
    refusals.push_back(sut->admit(a));
    REQUIRE(refusals.back().what == verdict::refuse);
  }
  CHECK(sut->admit(a).what == verdict::close);
  refusals.pop_back(); // one refusal answered and closed
  CHECK(sut->admit(a).what == verdict::refuse);
}

TEST_CASE("connection_limits: an IPv4 client on an IPv6 listener counts under its IPv4 address") {
  CHECK(connection_limits::peer_key(ip::make_address("::ffff:192.168.1.10")) == "192.168.1.10");
  CHECK(connection_limits::peer_key(ip::make_address("2001:db8::1")) == "2001:db8::1");
  auto sut = std::make_shared<connection_limits>(8, 1);
  auto place = sut->admit(a);
  CHECK(sut->admit(ip::make_address("::ffff:192.168.1.10")).what == verdict::refuse);
}

TEST_CASE("connection_limits: a moved ticket releases its place once") {
  auto sut = std::make_shared<connection_limits>(8, 2);
  auto first = sut->admit(a);
  connection_limits::ticket moved = std::move(first.place);
  CHECK(sut->open() == 1);
  {
    connection_limits::ticket again = std::move(moved);
    CHECK(sut->open() == 1);
  }
  CHECK(sut->open() == 0);
}
