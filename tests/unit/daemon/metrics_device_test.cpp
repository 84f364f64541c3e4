// The metrics of models sharing a device: which device each runs on and how
// long each lane waited for it.

#include "daemon/metrics.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace kvlane;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

} // namespace

TEST_CASE("metrics: each loaded model's device and its lanes' waits for it") {
  daemon::metrics sut{{"a", "b"}};
  actors::scheduler_stats a, b;
  a.model = "a";
  b.model = "b";
  const std::vector<daemon::device_wait> waits{{"a", "sim", "compute", 1.5},
                                               {"a", "sim", "transfer", 0},
                                               {"b", "sim", "compute", 0.25},
                                               {"b", "sim", "transfer", 0.125}};
  const auto text = sut.render({a, b}, {}, 0, waits);
  CHECK(has_line(text, "# TYPE kvlane_device_wait_seconds_total counter"));
  CHECK(has_line(text, "kvlane_device_wait_seconds_total{model=\"a\",lane=\"compute\"} 1.500000"));
  CHECK(has_line(text, "kvlane_device_wait_seconds_total{model=\"a\",lane=\"transfer\"} 0"));
  CHECK(has_line(text, "kvlane_device_wait_seconds_total{model=\"b\",lane=\"compute\"} 0.250000"));
  CHECK(has_line(text, "kvlane_device_wait_seconds_total{model=\"b\",lane=\"transfer\"} 0.125000"));
  CHECK(has_line(text, "# TYPE kvlane_model_device_info gauge"));
  CHECK(has_line(text, "kvlane_model_device_info{model=\"a\",device=\"sim\"} 1"));
  CHECK(has_line(text, "kvlane_model_device_info{model=\"b\",device=\"sim\"} 1"));
}

TEST_CASE("metrics: device_waits_of lists a loaded model's two lanes with its device") {
  auto m = std::make_shared<actors::model_entry>();
  m->name = "a";
  m->compute_heartbeat = std::make_shared<actors::lane_heartbeat>();
  m->transfer_heartbeat = std::make_shared<actors::lane_heartbeat>();
  m->device = std::make_shared<actors::shared_device>("aries:1");
  m->compute_heartbeat->device_wait.wait_ns = 2'000'000'000;
  m->transfer_heartbeat->device_wait.wait_ns = 500'000'000;
  const auto sut = daemon::device_waits_of({m});
  REQUIRE(sut.size() == 2);
  CHECK(sut[0].model == "a");
  CHECK(sut[0].device == "aries:1");
  CHECK(sut[0].lane == "compute");
  CHECK(sut[0].seconds == doctest::Approx(2.0));
  CHECK(sut[1].lane == "transfer");
  CHECK(sut[1].seconds == doctest::Approx(0.5));
}
