#include "ipc/protocol.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <type_traits>

using namespace kvlane::ipc::proto;

namespace {

template <class T>
T decode_as(const record_bytes& b) {
  auto r = decode_record(b);
  if (!r)
    FAIL("decode failed: " << r.error().message);
  REQUIRE(std::holds_alternative<T>(*r));
  return std::get<T>(*r);
}

protocol_error decode_fails(const record_bytes& b) {
  auto r = decode_record(b);
  REQUIRE_FALSE(r.has_value());
  return r.error();
}

submit_rec sample_submit() {
  submit_rec s;
  s.request_id = 42;
  s.kind = prompt_kind::text;
  s.prio = priority::batch;
  s.stop_at_eos = false;
  s.model = "llama-3.2-1b";
  s.temperature = 0.7f;
  s.top_p = 0.9f;
  s.top_k = 40;
  s.max_tokens = 100;
  s.seed = 0x1234567890ull;
  s.stop_tokens = {1, 2, 3};
  s.prompt_bytes = 5;
  s.inline_data = "hello";
  return s;
}

template <class T>
void poke(record_bytes& b, std::size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

} // namespace

static_assert(std::is_trivially_copyable_v<record_bytes>);
static_assert(sizeof(record_bytes) == 256);

TEST_CASE("protocol: a submit record round-trips every field") {
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

TEST_CASE("protocol: fields are little-endian at their documented offsets") {
  record_bytes b;
  encode(sample_submit(), b);
  CHECK(std::to_integer<int>(b[0]) == 1);  // type submit
  CHECK(std::to_integer<int>(b[1]) == 1);  // version
  CHECK(std::to_integer<int>(b[2]) == 240); // body_len low byte
  CHECK(std::to_integer<int>(b[8]) == 42); // request id, LSB first
  CHECK(std::to_integer<int>(b[36]) == 100); // max_tokens
  CHECK(std::memcmp(b.data() + 56, "llama-3.2-1b", 12) == 0);
  CHECK(std::memcmp(b.data() + 184, "hello", 5) == 0);
}

TEST_CASE("protocol: tokens, end, error, chunk and cancel records round-trip") {
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

TEST_CASE("protocol: malformed records are rejected with a message naming the problem") {
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

TEST_CASE("protocol: a long prompt packs into a submit and ordered chunks that reassemble") {
  std::string prompt(1000, 'x');
  for (std::size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<char>('a' + i % 26);
  auto head = sample_submit();
  std::vector<record_bytes> recs;
  pack_submit(head, prompt, recs);
  CHECK(recs.size() == 1 + (1000 - 72 + 231) / 232);
  request_tracker sut(8, 1 << 20);
  auto r = sut.on_submit(decode_as<submit_rec>(recs[0]), 1 << 20);
  REQUIRE(r);
  CHECK_FALSE(r->has_value());
  CHECK(sut.live(42));
  std::optional<complete_submit> done;
  for (std::size_t i = 1; i < recs.size(); ++i) {
    auto c = sut.on_chunk(decode_as<chunk_rec>(recs[i]));
    REQUIRE(c);
    if (*c)
      done = std::move(**c);
  }
  REQUIRE(done);
  CHECK(done->prompt == prompt);
  sut.finished(42);
  CHECK_FALSE(sut.live(42));
}

TEST_CASE("protocol: the tracker rejects duplicates, disorder, overflow and excess") {
  request_tracker sut(2, 300);
  auto head = sample_submit();
  std::vector<record_bytes> recs;
  pack_submit(head, std::string(200, 'a'), recs); // submit + 1 chunk of 128
  REQUIRE(recs.size() == 2);
  REQUIRE(sut.on_submit(decode_as<submit_rec>(recs[0]), 1000));

  SUBCASE("duplicate live id") {
    auto again = sut.on_submit(decode_as<submit_rec>(recs[0]), 1000);
    REQUIRE_FALSE(again);
    CHECK(again.error().code == errc::duplicate_request);
  }
  SUBCASE("gap") {
    auto r = sut.on_chunk(chunk_rec{42, 80, "x"});
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("expected 72 (gap or out of order)") != std::string::npos);
  }
  SUBCASE("overlap") {
    auto r = sut.on_chunk(chunk_rec{42, 10, "x"});
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("(overlap)") != std::string::npos);
  }
  SUBCASE("past the announced length") {
    auto r = sut.on_chunk(chunk_rec{42, 72, std::string(129, 'b')});
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("past the announced prompt length 200") != std::string::npos);
  }
  SUBCASE("chunk for an unknown request") {
    auto r = sut.on_chunk(chunk_rec{43, 0, "x"});
    REQUIRE_FALSE(r);
  }
  SUBCASE("too many live requests") {
    auto s2 = sample_submit();
    s2.request_id = 43;
    REQUIRE(sut.on_submit(s2, 1000));
    auto s3 = sample_submit();
    s3.request_id = 44;
    auto r = sut.on_submit(s3, 1000);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == errc::too_many_requests);
  }
  SUBCASE("a prompt over the limit is a request error; its chunks are dropped") {
    std::vector<record_bytes> big;
    auto h = sample_submit();
    h.request_id = 50;
    pack_submit(h, std::string(400, 'z'), big);
    auto r = sut.on_submit(decode_as<submit_rec>(big[0]), 1000);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == errc::too_long);
    for (std::size_t i = 1; i < big.size(); ++i) {
      auto c = sut.on_chunk(decode_as<chunk_rec>(big[i]));
      REQUIRE(c);
      CHECK_FALSE(c->has_value());
    }
    CHECK_FALSE(sut.live(50));
  }
  SUBCASE("prompts being received at once are bounded per connection") {
    request_tracker t2(8, 300); // each prompt <= 300 bytes, 600 being received at once
    for (std::uint64_t id = 70; id < 73; ++id) {
      std::vector<record_bytes> recs;
      auto h = sample_submit();
      h.request_id = id;
      pack_submit(h, std::string(250, 'y'), recs);
      auto r = t2.on_submit(decode_as<submit_rec>(recs[0]), 1000);
      if (id < 72) {
        REQUIRE(r);
        continue;
      }
      REQUIRE_FALSE(r);
      CHECK(r.error().code == errc::too_long);
      CHECK(r.error().message.find("exceed 600 bytes") != std::string::npos);
    }
    CHECK(t2.on_cancel(70)); // frees its 250 bytes: another fits again
    std::vector<record_bytes> recs;
    auto h = sample_submit();
    h.request_id = 74;
    pack_submit(h, std::string(250, 'y'), recs);
    CHECK(t2.on_submit(decode_as<submit_rec>(recs[0]), 1000));
  }
  SUBCASE("cancel while assembling forgets the request") {
    CHECK(sut.on_cancel(42));
    CHECK_FALSE(sut.live(42));
  }
}

TEST_CASE("protocol: token events split into records and keep text at UTF-8 boundaries") {
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

TEST_CASE("protocol: utf8_stream holds back split sequences and replaces invalid bytes") {
  utf8_stream sut;
  CHECK(sut.feed("a\xE2\x82") == "a");
  CHECK(sut.feed("\xAC" "b") == "\xE2\x82\xAC" "b");
  CHECK(sut.feed("\x80") == "\xEF\xBF\xBD");
  CHECK(sut.feed("\xF0\x9F") == "");
  CHECK(sut.flush() == "\xEF\xBF\xBD");
  CHECK(valid_utf8("h\xC3\xA9llo"));
  CHECK_FALSE(valid_utf8("\xED\xA0\x80")); // surrogate
  CHECK_FALSE(valid_utf8("\xC0\xAF"));     // overlong
  CHECK(utf8_prefix("a\xC3\xA9", 2) == 1);
}

TEST_CASE("protocol: control messages round-trip and bad ones are named") {
  auto hello = encode(hello_msg{"my-app"});
  auto h = decode_control(hello);
  REQUIRE(h);
  CHECK(std::get<hello_msg>(*h).client_name == "my-app");

  welcome_msg w;
  w.client_id = 3;
  w.memfd_size = 8192;
  w.submit_capacity = 8;
  w.events_offset = 4096;
  w.events_capacity = 16;
  w.spin_us = 20;
  w.max_requests = 4;
  w.max_prompt_bytes = 1000;
  w.default_model = "tiny";
  auto wd = decode_control(encode(w));
  REQUIRE(wd);
  CHECK(std::get<welcome_msg>(*wd).default_model == "tiny");
  CHECK(std::get<welcome_msg>(*wd).events_offset == 4096);

  auto f = decode_control(encode(fatal_msg{{errc::ring_corrupt, 5, "boom"}}));
  REQUIRE(f);
  CHECK(std::get<fatal_msg>(*f).request_id == 5);

  auto bad_version = hello;
  bad_version[4] = std::byte{2};
  auto v = decode_control(bad_version);
  REQUIRE_FALSE(v);
  CHECK(v.error().code == errc::version_mismatch);
  CHECK(v.error().message.find("protocol version 2") != std::string::npos);

  auto truncated = std::vector<std::byte>(hello.begin(), hello.begin() + 3);
  CHECK(decode_control(truncated).error().message.find("shorter than") != std::string::npos);
  auto garbage = std::vector<std::byte>(40, std::byte{0x5A});
  CHECK(decode_control(garbage).error().message.find("bad magic") != std::string::npos);
  auto long_body = hello;
  long_body.push_back(std::byte{0});
  CHECK(decode_control(long_body).error().message.find("body_len") != std::string::npos);
  auto bad_name = encode(hello_msg{"a\nb"});
  CHECK(decode_control(bad_name).error().message.find("printable") != std::string::npos);
}
