#include "daemon/request_tracker.hpp"

#include "tests/unit/ipc/sample_records.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

using namespace kvlane::ipc::proto;
using kvlane::daemon::complete_submit;
using kvlane::daemon::request_tracker;
using kvlane::test::decode_as;
using kvlane::test::sample_submit;

TEST_CASE("request_tracker: a long prompt packs into a submit and ordered chunks that reassemble") {
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

TEST_CASE("request_tracker: the tracker rejects duplicates, disorder, overflow and excess") {
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
