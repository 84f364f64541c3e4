// kvlane status and metrics for models sharing a device (docs/admin.md).
#include "daemon/admin_commands.hpp"
#include "tests/unit/actors/engine_fixture.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace kvlane;
using namespace std::chrono_literals;
using json = nlohmann::json;

TEST_CASE("admin: status and metrics name each model's device and count its lanes' waits for it") {
  auto cfg = test::small_config(actors::scheduler_mode::overlap);
  auto other = cfg.models.front();
  other.name = "other";
  cfg.models.push_back(other);                     // both on the sim's default device
  auto apart = cfg.models.front();
  apart.name = "apart";
  apart.backend.device = "npu1";
  cfg.models.push_back(apart);
  test::engine_fixture f{cfg};
  daemon::metrics registry{{"tiny", "other", "apart"}};
  daemon::admin_services services;
  services.engine = f.engine.get();
  services.registry = &registry;
  services.version = "test";
  services.mode = "overlap";

  // The two models on one device stream at once; "apart" too, on its own.
  std::vector<std::shared_ptr<actors::token_stream>> streams;
  for (const char* model : {"tiny", "other", "apart", "tiny", "other"}) {
    actors::submit_request r;
    r.model = model;
    r.client = "alice";
    r.prompt_tokens = {97, 98, 99};
    r.sampling.max_tokens = 200;
    auto s = f.engine->submit(r);
    REQUIRE(s.has_value());
    streams.push_back(*s);
  }
  for (auto& s : streams)
    REQUIRE(s->collect(30s).has_value());

  const auto status = json::parse(daemon::handle_admin_request(R"({"cmd":"status"})", services));
  REQUIRE(status["models"].size() == 3);
  std::map<std::string, json> device;
  for (const auto& m : status["models"])
    device[m["name"].get<std::string>()] = m["device"];
  CHECK(device["tiny"]["name"] == "sim");
  CHECK(device["other"]["name"] == "sim");
  CHECK(device["apart"]["name"] == "npu1");
  for (const auto& [name, d] : device) {
    CHECK(d["state"] == "healthy"); // the failure figures are still there
    CHECK(d["compute_wait_s"].get<double>() >= 0);
    CHECK(d["transfer_wait_s"].get<double>() >= 0);
  }
  // Streaming at once, the two on one device found each other stepping; the model
  // alone on its device never waits for it.
  CHECK(device["tiny"]["compute_waits"].get<std::uint64_t>()
          + device["other"]["compute_waits"].get<std::uint64_t>()
        > 0);
  CHECK(device["apart"]["compute_waits"] == 0);
  CHECK(device["apart"]["compute_wait_s"] == 0);

  const auto text = daemon::render_metrics(services);
  CHECK(text.find("kvlane_model_device_info{model=\"tiny\",device=\"sim\"} 1") != std::string::npos);
  CHECK(text.find("kvlane_model_device_info{model=\"apart\",device=\"npu1\"} 1")
        != std::string::npos);
  CHECK(text.find("kvlane_device_wait_seconds_total{model=\"other\",lane=\"transfer\"} ")
        != std::string::npos);
  CHECK(text.find("kvlane_device_wait_seconds_total{model=\"apart\",lane=\"compute\"} 0\n")
        != std::string::npos);
}
