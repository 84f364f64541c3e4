#include "ipc/control_codec.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace kvlane::ipc::proto;

TEST_CASE("control_codec: control messages round-trip and bad ones are named") {
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
  bad_version[4] = std::byte{1};
  auto v = decode_control(bad_version);
  REQUIRE_FALSE(v);
  CHECK(v.error().code == errc::version_mismatch);
  CHECK(v.error().message.find("protocol version 1") != std::string::npos);

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

TEST_CASE("control_codec: session_drop and session_dropped round-trip and bad names are named") {
  auto d = decode_control(encode(session_drop_msg{"tiny", "chat-1"}));
  REQUIRE(d);
  CHECK(std::get<session_drop_msg>(*d).model == "tiny");
  CHECK(std::get<session_drop_msg>(*d).session == "chat-1");
  auto default_model = decode_control(encode(session_drop_msg{"", "chat-1"}));
  REQUIRE(default_model);
  CHECK(std::get<session_drop_msg>(*default_model).model.empty());

  for (bool existed : {true, false}) {
    auto r = decode_control(encode(session_dropped_msg{existed}));
    REQUIRE(r);
    CHECK(std::get<session_dropped_msg>(*r).existed == existed);
  }

  auto empty_name = decode_control(encode(session_drop_msg{"tiny", ""}));
  REQUIRE_FALSE(empty_name);
  CHECK(empty_name.error().message.find("session name is not 1..64") != std::string::npos);
  auto bad_name = decode_control(encode(session_drop_msg{"tiny", "a b"}));
  REQUIRE_FALSE(bad_name);
  CHECK(bad_name.error().message.find("session name is not 1..64") != std::string::npos);
  auto bytes = encode(session_drop_msg{"tiny", "chat"});
  bytes[13] = std::byte{5}; // session name length 5, but 4 bytes follow the model name
  CHECK(decode_control(bytes).error().message.find("name lengths 4 + 5 do not match the body") !=
        std::string::npos);
  auto flag = encode(session_dropped_msg{true});
  flag[12] = std::byte{2};
  CHECK(decode_control(flag).error().message.find("neither 0 nor 1") != std::string::npos);
}
