#include "tools/bench/bench_profile.hpp"
#include "tools/bench/config_toml.hpp"

#include <doctest/doctest.h>

using namespace kvlane;
using namespace kvlane::tools::bench;

TEST_CASE("bench config_toml: the written kvlane.toml parses back to the same configuration") {
  auto cfg = builtin_profile();
  REQUIRE(cfg.has_value());
  // Away from the defaults wherever a key could be written wrongly.
  cfg->daemon.runtime_dir = "/tmp/kvlane bench \"quoted\"\\dir";
  cfg->daemon.log_levels = {{"daemon", "info"}, {"ipc", "debug"}};
  cfg->daemon.shutdown_grace = std::chrono::milliseconds(1234);
  auto& m = cfg->models.front();
  m.store_floor_bytes = 1 << 20;
  m.store_cap_bytes = 3 << 20;
  m.backend.sim.extent = backends::snapshot_extent::used_length;
  m.backend.sim.overlap = backends::transfer_overlap::shared;
  m.backend.sim.time_scale = 1e6;
  m.backend.sim.eos_rate = 0.125;
  m.backend.sim.dump_faults.fail_nth = 7;
  m.backend.sim.load_faults.fail_rate = 0.01;
  m.backend.sim.load_faults.code = backends::backend_errc::device_timeout;
  m.keep = actors::keep_alive::after(std::chrono::seconds(90));
  auto second = m;
  second.name = "second";
  second.keep = actors::keep_alive::pinned();
  second.load_at_start = false;
  cfg->models.push_back(second);
  cfg->lifecycle.max_loaded = 1;
  cfg->lifecycle.load_timeout = std::chrono::milliseconds(45000);
  cfg->scheduler.mode = actors::scheduler_mode::sync;
  cfg->scheduler.ewma_alpha = 0.3;
  cfg->store.eviction = ipc::eviction_value::recency;
  cfg->store.disk = {"/var/tmp/kvlane kv", 3ull << 30, 64ull << 20};
  cfg->clients.socket_mode = 0660;
  cfg->clients.allow_users = {"alice", "1000"};
  cfg->clients.max_requests = 4096;
  cfg->admin.allow_groups = {"kvlane-admins"};
  cfg->metrics.listen = "127.0.0.1:9464";

  auto text = config_toml(*cfg);
  REQUIRE_MESSAGE(text.has_value(), (text ? std::string{} : text.error()));
  auto sut = daemon::parse(*text, "<written>");
  REQUIRE_MESSAGE(sut.has_value(), (sut ? std::string{} : sut.error().message));
  CHECK(sut->daemon == cfg->daemon);
  CHECK(sut->models == cfg->models);
  CHECK(sut->lifecycle == cfg->lifecycle);
  CHECK(sut->scheduler == cfg->scheduler);
  CHECK(sut->store == cfg->store);
  CHECK(sut->clients == cfg->clients);
  CHECK(sut->admin == cfg->admin);
  CHECK(sut->metrics == cfg->metrics);
}

TEST_CASE("bench config_toml: an integer TOML cannot hold is an error that names its key") {
  auto cfg = builtin_profile();
  REQUIRE(cfg.has_value());
  cfg->models.front().backend.sim.seed = 1ull << 63;
  auto sut = config_toml(*cfg);
  REQUIRE_FALSE(sut.has_value());
  CHECK(sut.error().find("model[0].sim.seed") != std::string::npos);
}
