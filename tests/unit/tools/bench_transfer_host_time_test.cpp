#include "tools/bench/transfer_host_time.hpp"

#include <doctest/doctest.h>

#include <cmath>

using namespace kvlane;
using namespace kvlane::tools::bench;

namespace {

backends::sim_options sim_at(double time_scale) {
  backends::sim_options sim;
  sim.snapshot_bytes = 64ull << 20;
  sim.dump_min_ms = 30;
  sim.dump_max_ms = 60;
  sim.load_min_ms = 16;
  sim.load_max_ms = 18;
  sim.time_scale = time_scale;
  return sim;
}

} // namespace

TEST_CASE("bench transfer host time: measured lane time against the sim's expected time, in wall ms") {
  actors::scheduler_stats st;
  st.dumps = 10;
  st.loads = 30;
  st.dump_ms_total = 10 * 40.0; // 40 wall ms per dump
  st.load_ms_total = 30 * 20.0; // 20 wall ms per load
  ipc::store_stats store;
  store.host.commit = {4, 4'000'000};    // 4 ms over the run
  store.host.seal = {10, 70'000'000};    // 7 ms per dump
  store.host.verify = {30, 240'000'000}; // 8 ms per load
  store.host.punch = {0, 0};
  store.host.committed_on_demand_bytes = 256ull << 20;
  store.pool_target_bytes = 4ull << 30;
  store.peak_used_bytes = 3ull << 30;
  const auto sut = measure_transfer_host_time(st, sim_at(4), store, 3ull << 30);
  CHECK(sut.dump_ms == doctest::Approx(40));
  CHECK(sut.load_ms == doctest::Approx(20));
  CHECK(sut.dump_modeled_ms == doctest::Approx(45.0 / 4)); // (30 + 60) / 2 at 4x
  CHECK(sut.load_modeled_ms == doctest::Approx(17.0 / 4));
  CHECK(sut.transfer_ms == doctest::Approx(1000.0 / 40));
  CHECK(sut.transfer_modeled_ms == doctest::Approx((10 * 11.25 + 30 * 4.25) / 40));
  CHECK(sut.beyond_model_ms == doctest::Approx(sut.transfer_ms - sut.transfer_modeled_ms));
  CHECK(sut.commit_ms == doctest::Approx(0.4));
  CHECK(sut.seal_ms == doctest::Approx(7));
  CHECK(sut.verify_ms == doctest::Approx(8));
  CHECK(sut.punch_ms == doctest::Approx(0));
  CHECK(sut.committed_on_demand_bytes == 256ull << 20);
  CHECK(sut.pool_target_bytes == 4ull << 30);
  CHECK(sut.peak_committed_bytes == 3ull << 30);

  const auto text = format_transfer_host_time(
    std::vector<std::pair<std::string, transfer_host_time>>{{"store", sut}});
  CHECK(text.find("beyond the model") != std::string::npos);
  CHECK(text.find("40.00/20.00") != std::string::npos);
}

TEST_CASE("bench transfer host time: no transfers and used-length snapshots leave figures unknown") {
  const auto none = measure_transfer_host_time({}, sim_at(25), {}, 0);
  CHECK(std::isnan(none.transfer_ms));
  CHECK(std::isnan(none.beyond_model_ms));
  CHECK(none.dump_modeled_ms == doctest::Approx(45.0 / 25));

  auto sim = sim_at(25);
  sim.extent = backends::snapshot_extent::used_length;
  actors::scheduler_stats st;
  st.dumps = 1;
  st.dump_ms_total = 3;
  const auto used = measure_transfer_host_time(st, sim, {}, 0);
  CHECK(used.dump_ms == doctest::Approx(3));
  CHECK(std::isnan(used.dump_modeled_ms));
  CHECK(std::isnan(used.beyond_model_ms));
}
