#include "ipc/store_index.hpp"

#include <doctest/doctest.h>

#include <cstring>

using namespace kvlane::ipc;

namespace {

constexpr std::uint64_t gran = 64 * 1024;

index_record record(std::uint64_t offset, std::uint64_t length, std::uint32_t tokens) {
  index_record r;
  r.offset = offset;
  r.length = length;
  r.size = (length + gran - 1) / gran * gran;
  r.checksum = 0x1234 + offset;
  r.seed = 0x99;
  r.cache_len = tokens;
  r.label.model = "m";
  r.label.fingerprint = kv_fingerprint{1, 2, 3, "sim", "chatml"};
  r.label.owner = 1000;
  r.label.user = 1000;
  r.label.session = "chat-1";
  for (std::uint32_t t = 0; t < tokens; ++t)
    r.label.tokens.push_back(t * 7);
  return r;
}

index_contents sample() {
  index_contents c;
  c.arena_bytes = 16 * gran;
  c.arena_inode = 4242;
  c.granularity = gran;
  c.records.push_back(record(0, 100000, 40));
  c.records.push_back(record(4 * gran, gran, 17));
  return c;
}

std::string error_of(std::span<const std::byte> bytes) {
  auto r = decode_index(bytes);
  REQUIRE_FALSE(r);
  return r.error().message;
}

} // namespace

TEST_CASE("store_index: an index reads back exactly as written") {
  const auto c = sample();
  const auto bytes = encode_index(c);
  auto sut = decode_index(bytes);
  REQUIRE(sut);
  CHECK(sut->arena_bytes == c.arena_bytes);
  CHECK(sut->arena_inode == 4242);
  CHECK(sut->granularity == gran);
  REQUIRE(sut->records.size() == 2);
  const auto& r = sut->records[1];
  CHECK(r.offset == 4 * gran);
  CHECK(r.length == gran);
  CHECK(r.size == gran);
  CHECK(r.checksum == c.records[1].checksum);
  CHECK(r.seed == 0x99);
  CHECK(r.cache_len == 17);
  CHECK(r.label.model == "m");
  CHECK(r.label.fingerprint == c.records[1].label.fingerprint);
  CHECK(r.label.session == "chat-1");
  CHECK(r.label.tokens == c.records[1].label.tokens);
}

TEST_CASE("store_index: any flipped byte, a truncation or trailing bytes make the index corrupt") {
  const auto good = encode_index(sample());
  for (std::size_t at = 0; at < good.size(); ++at) {
    if (at >= 12 && at < 16)
      continue; // the state word: tested below
    auto bad = good;
    bad[at] ^= std::byte{0x01};
    auto r = decode_index(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == index_errc::corrupt);
  }
  for (const std::size_t len : {std::size_t{10}, std::size_t{71}, good.size() - 1}) {
    auto r = decode_index(std::span(good).first(len));
    REQUIRE_FALSE(r);
    CHECK(r.error().code == index_errc::corrupt);
  }
  auto longer = good;
  longer.push_back(std::byte{0});
  CHECK(error_of(longer).find("body is") != std::string::npos);
}

TEST_CASE("store_index: an open index (a writer that did not stop cleanly) and an empty file are "
          "refused with their own codes") {
  auto bytes = encode_index(sample());
  const std::uint32_t open = 1;
  std::memcpy(bytes.data() + 12, &open, sizeof open);
  auto r = decode_index(bytes);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == index_errc::unclean);
  r = decode_index({});
  REQUIRE_FALSE(r);
  CHECK(r.error().code == index_errc::empty);
}

TEST_CASE("store_index: records that overlap, leave the arena or miscount their tokens are "
          "corrupt even with valid checksums") {
  auto c = sample();
  c.records[1].offset = gran; // inside record 0's two granules
  CHECK(error_of(encode_index(c)).find("overlap") != std::string::npos);
  c = sample();
  c.records[1].offset = 16 * gran;
  CHECK(error_of(encode_index(c)).find("outside the arena") != std::string::npos);
  c = sample();
  c.records[1].offset = 100;
  CHECK(error_of(encode_index(c)).find("granularity") != std::string::npos);
  c = sample();
  c.records[0].label.tokens.pop_back();
  CHECK(error_of(encode_index(c)).find("tokens for a KV of 40") != std::string::npos);
}

TEST_CASE("store_index: the file is written closed, and mark_open makes it unclean in place") {
  auto sut = index_file::create();
  REQUIRE(sut);
  auto bytes = sut->read();
  REQUIRE(bytes);
  CHECK(decode_index(*bytes).error().code == index_errc::empty);
  REQUIRE(sut->mark_open()); // an empty file stays empty
  REQUIRE(sut->write(sample()));
  bytes = sut->read();
  REQUIRE(bytes);
  auto read = decode_index(*bytes);
  REQUIRE(read);
  CHECK(read->records.size() == 2);
  REQUIRE(sut->mark_open());
  bytes = sut->read();
  REQUIRE(bytes);
  CHECK(decode_index(*bytes).error().code == index_errc::unclean);
  // A rewrite with fewer records shrinks the file.
  auto one = sample();
  one.records.pop_back();
  REQUIRE(sut->write(one));
  bytes = sut->read();
  REQUIRE(bytes);
  read = decode_index(*bytes);
  REQUIRE(read);
  CHECK(read->records.size() == 1);
}
