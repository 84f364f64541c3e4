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
