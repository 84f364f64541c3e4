#include "ipc/record_codec.hpp"

#include "ipc/utf8.hpp"
#include "tests/unit/ipc/sample_records.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <type_traits>

using namespace kvlane::ipc::proto;
using kvlane::test::decode_as;
using kvlane::test::sample_submit;

namespace {

protocol_error decode_fails(const record_bytes& b) {
  auto r = decode_record(b);
  REQUIRE_FALSE(r.has_value());
  return r.error();
}

template <class T>
void poke(record_bytes& b, std::size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

} // namespace

static_assert(std::is_trivially_copyable_v<record_bytes>);
static_assert(sizeof(record_bytes) == 256);

TEST_CASE("record_codec: a submit record round-trips every field") {
  record_bytes b;
  encode(sample_submit(), b);
  const auto sut = decode_as<submit_rec>(b);
  CHECK(sut.request_id == 42);
  CHECK(sut.kind == prompt_kind::text);
  CHECK(sut.prio == priority::batch);
  CHECK_FALSE(sut.stop_at_eos);
  CHECK(sut.model == "llama-3.2-1b");
  CHECK(sut.temperature == 0.7f);
  CHECK(sut.top_p == 0.9f);
  CHECK(sut.top_k == 40);
  CHECK(sut.max_tokens == 100);
  CHECK(sut.seed == 0x1234567890ull);
  CHECK(sut.stop_tokens == std::vector<std::uint32_t>{1, 2, 3});
  CHECK(sut.prompt_bytes == 5);
  CHECK(sut.inline_data == "hello");
}

TEST_CASE("record_codec: fields are little-endian at their documented offsets") {
  record_bytes b;
  encode(sample_submit(), b);
  CHECK(std::to_integer<int>(b[0]) == 1);  // type submit
  CHECK(std::to_integer<int>(b[1]) == 3);  // version
  CHECK(std::to_integer<int>(b[2]) == 240); // body_len low byte
  CHECK(std::to_integer<int>(b[8]) == 42); // request id, LSB first
  CHECK(std::to_integer<int>(b[36]) == 100); // max_tokens
  CHECK(std::memcmp(b.data() + 56, "llama-3.2-1b", 12) == 0);
  CHECK(std::memcmp(b.data() + 184, "hello", 5) == 0);
}

TEST_CASE("record_codec: tokens, end, error, chunk and cancel records round-trip") {
  record_bytes b;
  encode(tokens_rec{7, 99, {65, 66}, "AB"}, b);
  auto t = decode_as<tokens_rec>(b);
  CHECK(t.request_id == 7);
  CHECK(t.daemon_time_ns == 99);
  CHECK(t.tokens == std::vector<std::uint32_t>{65, 66});
  CHECK(t.text == "AB");

  end_rec e;
  e.request_id = 7;
  e.reason = end_reason::backlog;
  e.prompt_tokens = 3;
  e.generated_tokens = 4;
  e.preemptions = 1;
  e.ttft_us = 10;
  e.tpot_us = 20;
  e.e2e_us = 30;
  e.message = "bye";
  encode(e, b);
  auto e2 = decode_as<end_rec>(b);
  CHECK(e2.reason == end_reason::backlog);
  CHECK(e2.generated_tokens == 4);
  CHECK(e2.e2e_us == 30);
  CHECK(e2.message == "bye");

  encode(error_rec{9, errc::unknown_model, "no model 'x'"}, b);
  auto x = decode_as<error_rec>(b);
  CHECK(x.code == errc::unknown_model);
  CHECK(x.message == "no model 'x'");

  encode(chunk_rec{9, 72, "more"}, b);
  auto c = decode_as<chunk_rec>(b);
  CHECK(c.offset == 72);
  CHECK(c.data == "more");

  encode(cancel_rec{9}, b);
  CHECK(decode_as<cancel_rec>(b).request_id == 9);
}

TEST_CASE("record_codec: malformed records are rejected with a message naming the problem") {
  record_bytes b;
  SUBCASE("unknown type") {
    encode(sample_submit(), b);
    b[0] = std::byte{0x7F};
    CHECK(decode_fails(b).message.find("unknown record type 127") != std::string::npos);
  }
  SUBCASE("wrong version") {
    encode(sample_submit(), b);
    b[1] = std::byte{9};
    auto e = decode_fails(b);
    CHECK(e.code == errc::version_mismatch);
    CHECK(e.message.find("record version 9") != std::string::npos);
  }
  SUBCASE("request id 0") {
    auto s = sample_submit();
    s.request_id = 0;
    encode(s, b);
    CHECK(decode_fails(b).message.find("request id 0 is reserved") != std::string::npos);
  }
  SUBCASE("temperature not finite") {
    encode(sample_submit(), b);
    poke(b, 24, std::numeric_limits<float>::quiet_NaN());
    CHECK(decode_fails(b).message.find("temperature") != std::string::npos);
  }
  SUBCASE("top_p out of range") {
    encode(sample_submit(), b);
    poke(b, 28, 1.5f);
    CHECK(decode_fails(b).message.find("top_p") != std::string::npos);
  }
  SUBCASE("max_tokens 0") {
    encode(sample_submit(), b);
    poke<std::uint32_t>(b, 36, 0);
    CHECK(decode_fails(b).message.find("max_tokens 0") != std::string::npos);
  }
  SUBCASE("too many stop tokens") {
    encode(sample_submit(), b);
    b[20] = std::byte{17};
    CHECK(decode_fails(b).message.find("17 stop tokens") != std::string::npos);
  }
  SUBCASE("model name with a bad character") {
    encode(sample_submit(), b);
    b[56] = std::byte{'/'};
    CHECK(decode_fails(b).message.find("model name") != std::string::npos);
  }
  SUBCASE("inline length larger than the prompt") {
    encode(sample_submit(), b);
    poke<std::uint32_t>(b, 52, 6);
    CHECK(decode_fails(b).message.find("inline length 6") != std::string::npos);
  }
  SUBCASE("token prompt not a multiple of 4") {
    auto s = sample_submit();
    s.kind = prompt_kind::tokens;
    s.prompt_bytes = 6;
    s.inline_data = "abcdef";
    encode(s, b);
    CHECK(decode_fails(b).message.find("multiple of 4") != std::string::npos);
  }
  SUBCASE("reserved header bytes") {
    encode(cancel_rec{3}, b);
    b[5] = std::byte{1};
    CHECK(decode_fails(b).message.find("reserved") != std::string::npos);
  }
  SUBCASE("chunk length disagreeing with body_len") {
    encode(chunk_rec{3, 0, "abc"}, b);
    poke<std::uint32_t>(b, 20, 200);
    CHECK(decode_fails(b).message.find("chunk length 200") != std::string::npos);
  }
  SUBCASE("invalid UTF-8 in event text") {
    encode(tokens_rec{7, 0, {1}, "ok"}, b);
    b[36] = std::byte{0xC0};
    CHECK(decode_fails(b).message.find("UTF-8") != std::string::npos);
  }
}

TEST_CASE("record_codec: token events split into records and keep text at UTF-8 boundaries") {
  std::vector<std::uint32_t> tokens(100, 7);
  std::string text;
  for (int i = 0; i < 100; ++i)
    text += "\xC3\xA9"; // é, 2 bytes
  std::vector<record_bytes> recs;
  const auto n = pack_tokens(5, 1, tokens, text, recs);
  CHECK(n == recs.size());
  std::vector<std::uint32_t> all;
  std::string all_text;
  for (auto& r : recs) {
    auto t = decode_as<tokens_rec>(r);
    CHECK(valid_utf8(t.text));
    all.insert(all.end(), t.tokens.begin(), t.tokens.end());
    all_text += t.text;
  }
  CHECK(all == tokens);
  CHECK(all_text == text);
}

TEST_CASE("record_codec: a submit's session name travels at the head of the inline area") {
  auto s = sample_submit();
  s.session = "chat.2026_a-1";
  record_bytes b;
  encode(s, b);
  CHECK(std::to_integer<int>(b[21]) == 13); // session name length
  CHECK(std::memcmp(b.data() + 184, "chat.2026_a-1", 13) == 0);
  CHECK(std::memcmp(b.data() + 184 + 13, "hello", 5) == 0);
  const auto sut = decode_as<submit_rec>(b);
  CHECK(sut.session == "chat.2026_a-1");
  CHECK(sut.inline_data == "hello");
  CHECK(sut.model == "llama-3.2-1b");

  s.session.clear();
  encode(s, b);
  CHECK(decode_as<submit_rec>(b).session.empty()); // stateless, as before
}

TEST_CASE("record_codec: a session name leaves less inline room and pack_submit fills it") {
  submit_rec head = sample_submit();
  head.session = std::string(64, 's');
  const std::string prompt(100, 'p');
  std::vector<record_bytes> out;
  pack_submit(head, prompt, out);
  REQUIRE(out.size() == 2); // 8 bytes inline (72 - 64), 92 in one chunk
  const auto first = decode_as<submit_rec>(out[0]);
  CHECK(first.session == head.session);
  CHECK(first.inline_data == std::string(submit_inline_room(64), 'p'));
  const auto chunk = decode_as<chunk_rec>(out[1]);
  CHECK(chunk.offset == 8);
  CHECK(chunk.data.size() == 92);
}

TEST_CASE("record_codec: bad session names and lengths are rejected with a precise message") {
  auto s = sample_submit();
  s.session = "ok";
  record_bytes good;
  encode(s, good);

  SUBCASE("a character outside [A-Za-z0-9._-]") {
    auto b = good;
    b[184] = std::byte{'/'};
    CHECK(decode_fails(b).message.find("session name is not 1..64 characters") !=
          std::string::npos);
  }
  SUBCASE("a length over 64") {
    auto b = good;
    poke<std::uint8_t>(b, 21, 65);
    CHECK(decode_fails(b).message.find("session name length 65 exceeds 64") != std::string::npos);
  }
  SUBCASE("the inline prompt overflows the room the session leaves") {
    auto b = good;
    poke<std::uint32_t>(b, 52, 71); // 72 - 2 = 70 bytes of room
    poke<std::uint32_t>(b, 48, 100);
    CHECK(decode_fails(b).message.find("inline length 71 exceeds 70 bytes") != std::string::npos);
  }
  SUBCASE("bytes after the inline prompt") {
    auto b = good;
    b[255] = std::byte{1};
    CHECK(decode_fails(b).message.find("after the inline prompt are not zero") !=
          std::string::npos);
  }
}
