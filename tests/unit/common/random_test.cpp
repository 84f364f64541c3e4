#include "common/random.hpp"

#include <doctest/doctest.h>

#include <cstdint>

using namespace kvlane;

TEST_CASE("random: splitmix64 and xoshiro256** give the reference sequences") {
  // The first outputs of the reference implementations (Vigna, prng.di.unimi.it).
  std::uint64_t state = 0;
  CHECK(splitmix64(state) == 0xe220a8397b1dcdafull);
  CHECK(splitmix64(state) == 0x6e789e6aa1b965f4ull);
  CHECK(splitmix64(state) == 0x06c45d188009454full);
  CHECK(splitmix64(state) == 0xf88bb8a8724c81ecull);

  xoshiro256_state sut{1, 2, 3, 4};
  CHECK(xoshiro256_next(sut) == 11520ull);
  CHECK(xoshiro256_next(sut) == 0ull);
  CHECK(xoshiro256_next(sut) == 1509978240ull);
  CHECK(xoshiro256_next(sut) == 1215971899390074240ull);
}

TEST_CASE("random: a xoshiro256** state is seeded by four successive splitmix64 outputs") {
  std::uint64_t state = 7;
  const auto sut = xoshiro256_seed(7);
  for (const auto word : sut)
    CHECK(word == splitmix64(state));
}

TEST_CASE("random: unit_double maps the top 53 bits onto the unit interval, 1 excluded") {
  CHECK(unit_double(0) == 0.0);
  CHECK(unit_double(~std::uint64_t{0}) < 1.0);
  CHECK(unit_double(~std::uint64_t{0}) == 1.0 - 0x1.0p-53);
  CHECK(unit_double(std::uint64_t{1} << 63) == 0.5);
  CHECK(unit_double(0x7FF) == 0.0); // the low 11 bits do not count
}
