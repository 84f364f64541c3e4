#include "ipc/disk_format.hpp"

#include <doctest/doctest.h>

#include <cstring>

using namespace kvlane::ipc;

namespace {

disk_entry sample_entry(std::uint64_t id, std::uint32_t tokens = 40) {
  disk_entry e;
  e.id = id;
  e.length = 3 * 65536 + 17;
  e.checksum = 0x1234'5678'9abc'def0ull + id;
  e.seed = 0x0fed'cba9'8765'4321ull;
  e.cache_len = tokens;
  e.label.model = "tiny";
  e.label.fingerprint = kv_fingerprint{11, 22, 33, "sim 1", "chatml"};
  e.label.owner = 1000;
  e.label.user = 1000;
  e.label.session = "chat-7";
  for (std::uint32_t t = 0; t < tokens; ++t)
    e.label.tokens.push_back(100 + t);
  return e;
}

std::vector<std::byte> concat(std::initializer_list<std::vector<std::byte>> parts) {
  std::vector<std::byte> out;
  for (const auto& p : parts)
    out.insert(out.end(), p.begin(), p.end());
  return out;
}

} // namespace

TEST_CASE("disk_format: a file header decodes back to the entry it was made of") {
  const auto e = sample_entry(7);
  const auto header = encode_disk_header(e);
  const auto size = disk_header_size(std::span(header).first(disk_header_prefix_bytes));
  REQUIRE(size);
  CHECK(*size == header.size());
  const auto sut = decode_disk_header(header);
  REQUIRE(sut);
  CHECK(*sut == e);
  CHECK_FALSE(disk_entry_mismatch(*sut, e));
}

TEST_CASE("disk_format: any flipped byte of a header makes it fail to decode") {
  const auto header = encode_disk_header(sample_entry(7));
  for (std::size_t i = 0; i < header.size(); ++i) {
    auto bad = header;
    bad[i] ^= std::byte{0x01};
    CAPTURE(i);
    // A flip in the size field makes the header not whole; anywhere else
    // the magic, the version or the checksum fails.
    CHECK_FALSE(decode_disk_header(bad));
  }
}

TEST_CASE("disk_format: a truncated header never decodes") {
  const auto header = encode_disk_header(sample_entry(7));
  for (std::size_t n = 0; n < header.size(); ++n) {
    CAPTURE(n);
    CHECK_FALSE(decode_disk_header(std::span(header).first(n)));
  }
}

TEST_CASE("disk_format: a header of another fingerprint, tokens or id is told apart from the "
          "journal's entry") {
  const auto want = sample_entry(7);
  auto other = want;
  other.label.fingerprint.tokenizer = 23;
  CHECK(disk_entry_mismatch(other, want)->find("tokenizer_changed") != std::string::npos);
  other = want;
  other.label.fingerprint.model_file = 12;
  CHECK(disk_entry_mismatch(other, want)->find("model_changed") != std::string::npos);
  other = want;
  other.label.tokens.back() += 1;
  CHECK(disk_entry_mismatch(other, want));
  other = want;
  other.id = 8;
  CHECK(disk_entry_mismatch(other, want));
  other = want;
  other.checksum ^= 1;
  CHECK(disk_entry_mismatch(other, want));
}

TEST_CASE("disk_format: a header whose token count differs from its KV length is refused") {
  auto e = sample_entry(7);
  e.cache_len = 41;
  CHECK_FALSE(decode_disk_header(encode_disk_header(e)));
}

TEST_CASE("disk_format: the journal replays adds and removes in order") {
  const auto bytes = concat({encode_journal_header(), encode_journal_add(sample_entry(1)),
                             encode_journal_add(sample_entry(2)), encode_journal_remove(1),
                             encode_journal_add(sample_entry(3))});
  const auto sut = replay_journal(bytes);
  CHECK_FALSE(sut.header_bad);
  CHECK(sut.records == 4);
  CHECK(sut.torn_bytes == 0);
  CHECK(sut.valid_bytes == bytes.size());
  REQUIRE(sut.entries.size() == 2);
  CHECK(sut.entries.at(2) == sample_entry(2));
  CHECK(sut.entries.at(3) == sample_entry(3));
}

TEST_CASE("disk_format: a journal cut anywhere keeps exactly the whole records before the cut") {
  const auto head = encode_journal_header();
  const auto a = encode_journal_add(sample_entry(1));
  const auto b = encode_journal_add(sample_entry(2));
  const auto bytes = concat({head, a, b});
  for (std::size_t n = head.size(); n <= bytes.size(); ++n) {
    CAPTURE(n);
    const auto sut = replay_journal(std::span(bytes).first(n));
    const std::size_t whole = n >= head.size() + a.size() + b.size() ? 2
                              : n >= head.size() + a.size()          ? 1
                                                                     : 0;
    CHECK(sut.entries.size() == whole);
    CHECK(sut.valid_bytes + sut.torn_bytes == n);
    CHECK(sut.valid_bytes
          == head.size() + (whole >= 1 ? a.size() : 0) + (whole == 2 ? b.size() : 0));
  }
}

TEST_CASE("disk_format: a flipped byte in a journal record stops the replay there") {
  const auto head = encode_journal_header();
  const auto a = encode_journal_add(sample_entry(1));
  const auto b = encode_journal_add(sample_entry(2));
  const auto c = encode_journal_add(sample_entry(3));
  const auto bytes = concat({head, a, b, c});
  for (std::size_t i = head.size() + a.size(); i < head.size() + a.size() + b.size(); ++i) {
    auto bad = bytes;
    bad[i] ^= std::byte{0x40};
    CAPTURE(i);
    const auto sut = replay_journal(bad);
    // Record b is refused, and c after it is never reached: only a stands.
    REQUIRE(sut.entries.size() <= 1);
    CHECK(sut.entries.contains(1));
    CHECK(sut.valid_bytes == head.size() + a.size());
  }
}

TEST_CASE("disk_format: a journal without its header trusts nothing") {
  auto bytes = concat({encode_journal_header(), encode_journal_add(sample_entry(1))});
  bytes[0] = std::byte{'X'};
  const auto sut = replay_journal(bytes);
  CHECK(sut.header_bad);
  CHECK(sut.entries.empty());
  CHECK(replay_journal({}).entries.empty());
  CHECK_FALSE(replay_journal({}).header_bad);
}

TEST_CASE("disk_format: file names are the id in 16 hex digits") {
  CHECK(disk_file_name(0xa3) == "00000000000000a3.kv");
}
