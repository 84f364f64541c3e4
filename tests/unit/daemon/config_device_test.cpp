// [[model]] device: which device a model runs on (docs/config.md), and each
// backend's default (backends::device_of).

#include "backends/backend_config.hpp"
#include "daemon/config.hpp"
#include "tests/unit/daemon/config_parse.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace kvlane::daemon;
using kvlane::backends::backend_config;
using kvlane::backends::device_of;

using test::minimal;
using test::parse_ok;
using test::parse_error_message;

TEST_CASE("config device: unset, a model runs on its backend's default device") {
  const auto sut = parse_ok(std::string{minimal});
  CHECK(sut.models.at(0).backend.device.empty());
  CHECK(device_of(sut.models.at(0).backend) == "sim");
}

TEST_CASE("config device: two models naming one device share it, others keep their own") {
  const auto sut = parse_ok(std::string{minimal}
                            + "device = \"aries:0/cluster0\"\n"
                              "[[model]]\nname = \"n\"\ndevice = \"aries:0/cluster0\"\n"
                              "[[model]]\nname = \"o\"\ndevice = \"npu_1.b-2\"\n");
  REQUIRE(sut.models.size() == 3);
  CHECK(device_of(sut.models[0].backend) == "aries:0/cluster0");
  CHECK(device_of(sut.models[1].backend) == "aries:0/cluster0");
  CHECK(device_of(sut.models[2].backend) == "npu_1.b-2");
}

TEST_CASE("config device: a bad device name is an error naming the key and its line") {
  CHECK(parse_error_message(std::string{minimal} + "device = \"\"\n")
        == "test.toml:4: model[0].device: must be 1 to 64 characters from A-Z a-z 0-9 . _ - : / "
           "(got \"\")");
  CHECK(parse_error_message(std::string{minimal} + "device = \"gpu 0\"\n").starts_with("test.toml:4: model[0].device: must be"));
  CHECK(parse_error_message(std::string{minimal} + "device = \"" + std::string(65, 'x') + "\"\n")
          .starts_with("test.toml:4: model[0].device: must be"));
  CHECK(parse_error_message(std::string{minimal} + "device = 0\n").starts_with("test.toml:4: model[0].device:"));
}

TEST_CASE("config device: each backend's default device") {
  backend_config sim;
  CHECK(device_of(sim) == "sim");

  backend_config qbr;
  qbr.kind = "qbruntime";
  CHECK(device_of(qbr) == "aries:0");
  qbr.qbruntime.dev_no = 3;
  CHECK(device_of(qbr) == "aries:3");

  backend_config llama;
  llama.kind = "llamacpp";
  CHECK(device_of(llama) == "cpu");
  llama.llamacpp.gpu_layers = 99;
  CHECK(device_of(llama) == "gpu:0");

  llama.device = "cpu-socket1";
  CHECK(device_of(llama) == "cpu-socket1");
}

TEST_CASE("config device: valid device names") {
  using kvlane::backends::valid_device_name;
  CHECK(valid_device_name("sim"));
  CHECK(valid_device_name("aries:0/cluster1"));
  CHECK(valid_device_name(std::string(64, 'd')));
  CHECK_FALSE(valid_device_name(""));
  CHECK_FALSE(valid_device_name(std::string(65, 'd')));
  CHECK_FALSE(valid_device_name("gpu 0"));
  CHECK_FALSE(valid_device_name("gpu\"0"));
}
