#include "daemon/config.hpp"

#include "common/logging.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace kvlane::daemon;
using kvlane::config_error;
using kvlane::parse_byte_size;
using kvlane::actors::scheduler_mode;
using kvlane::backends::backend_errc;
using kvlane::backends::snapshot_extent;
using kvlane::backends::transfer_overlap;

namespace {

// Lines 1-3; snippets appended to it start at line 4.
constexpr std::string_view minimal = "version = 1\n"
                                     "[[model]]\n"
                                     "name = \"m\"\n";

config parse_ok(std::string_view text) {
  auto sut = parse(text, "test.toml");
  if (!sut)
    FAIL("unexpected error: " << sut.error().message);
  return *sut;
}

config_error parse_error(std::string_view text) {
  auto sut = parse(text, "test.toml");
  REQUIRE_FALSE(sut.has_value());
  return sut.error();
}

/// The error names `key` at `line`, and the message says so too.
void check_error(const config_error& e, std::string_view key, std::uint32_t line) {
  CAPTURE(e.message);
  CHECK(e.key == key);
  CHECK(e.line == line);
  CHECK(e.message.find(key) != std::string::npos);
  CHECK(e.message.find("test.toml:" + std::to_string(line) + ":") == 0);
}

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

void check_same_faults(const kvlane::backends::fault_spec& a, const kvlane::backends::fault_spec& b) {
  CHECK(a.fail_nth == b.fail_nth);
  CHECK(a.fail_rate == b.fail_rate);
  CHECK(a.code == b.code);
  CHECK(a.fail_token == b.fail_token);
}

void check_same(const config& a, const config& b) {
  CHECK(a.daemon.runtime_dir == b.daemon.runtime_dir);
  CHECK(a.daemon.worker_threads == b.daemon.worker_threads);
  CHECK(a.daemon.log_level == b.daemon.log_level);
  CHECK(a.daemon.log_levels == b.daemon.log_levels);
  CHECK(a.daemon.shutdown_timeout == b.daemon.shutdown_timeout);
  CHECK(a.daemon.shutdown_grace == b.daemon.shutdown_grace);
  CHECK(a.admin.socket_mode == b.admin.socket_mode);
  CHECK(a.admin.allow_users == b.admin.allow_users);
  CHECK(a.admin.allow_groups == b.admin.allow_groups);
  CHECK(a.metrics.listen == b.metrics.listen);
  CHECK(a.http == b.http);
  REQUIRE(a.models.size() == b.models.size());
  for (std::size_t i = 0; i < a.models.size(); ++i) {
    CAPTURE(i);
    const auto& x = a.models[i];
    const auto& y = b.models[i];
    CHECK(x.name == y.name);
    CHECK(x.backend.kind == y.backend.kind);
    CHECK(x.chat_format == y.chat_format);
    CHECK(x.store_floor_bytes == y.store_floor_bytes);
    CHECK(x.store_cap_bytes == y.store_cap_bytes);
    CHECK(x.backend.sim.slots == y.backend.sim.slots);
    CHECK(x.backend.sim.max_context == y.backend.sim.max_context);
    CHECK(x.backend.sim.max_prefill_chunk == y.backend.sim.max_prefill_chunk);
    CHECK(x.backend.sim.snapshot_bytes == y.backend.sim.snapshot_bytes);
    CHECK(x.backend.sim.extent == y.backend.sim.extent);
    CHECK(x.backend.sim.step_base_ms == y.backend.sim.step_base_ms);
    CHECK(x.backend.sim.step_per_token_ms == y.backend.sim.step_per_token_ms);
    CHECK(x.backend.sim.dump_min_ms == y.backend.sim.dump_min_ms);
    CHECK(x.backend.sim.dump_max_ms == y.backend.sim.dump_max_ms);
    CHECK(x.backend.sim.load_min_ms == y.backend.sim.load_min_ms);
    CHECK(x.backend.sim.load_max_ms == y.backend.sim.load_max_ms);
    CHECK(x.backend.sim.time_scale == y.backend.sim.time_scale);
    CHECK(x.backend.sim.overlap == y.backend.sim.overlap);
    CHECK(x.backend.sim.seed == y.backend.sim.seed);
    CHECK(x.backend.sim.eos_rate == y.backend.sim.eos_rate);
    check_same_faults(x.backend.sim.step_faults, y.backend.sim.step_faults);
    check_same_faults(x.backend.sim.dump_faults, y.backend.sim.dump_faults);
    check_same_faults(x.backend.sim.load_faults, y.backend.sim.load_faults);
  }
  CHECK(a.scheduler.mode == b.scheduler.mode);
  CHECK(a.scheduler.quantum_steps == b.scheduler.quantum_steps);
  CHECK(a.scheduler.levels == b.scheduler.levels);
  CHECK(a.scheduler.spare_slots == b.scheduler.spare_slots);
  CHECK(a.scheduler.max_step_tokens == b.scheduler.max_step_tokens);
  CHECK(a.scheduler.batch_prefill_yields == b.scheduler.batch_prefill_yields);
  CHECK(a.scheduler.aging_steps == b.scheduler.aging_steps);
  CHECK(a.scheduler.ewma_alpha == b.scheduler.ewma_alpha);
  CHECK(a.scheduler.faults == b.scheduler.faults);
  CHECK(a.scheduler.slo == b.scheduler.slo);
  CHECK(a.scheduler.refuse_over == b.scheduler.refuse_over);
  CHECK(a.reuse == b.reuse);
  CHECK(a.store == b.store);
  CHECK(a.clients.socket_mode == b.clients.socket_mode);
  CHECK(a.clients.allow_users == b.clients.allow_users);
  CHECK(a.clients.allow_groups == b.clients.allow_groups);
  CHECK(a.clients.max_clients == b.clients.max_clients);
  CHECK(a.clients.max_requests == b.clients.max_requests);
  CHECK(a.clients.max_prompt_bytes == b.clients.max_prompt_bytes);
  CHECK(a.clients.submit_ring_records == b.clients.submit_ring_records);
  CHECK(a.clients.events_ring_records == b.clients.events_ring_records);
  CHECK(a.clients.max_backlog_records == b.clients.max_backlog_records);
  CHECK(a.clients.spin_us == b.clients.spin_us);
  CHECK(a.clients.hello_timeout == b.clients.hello_timeout);
  CHECK(a.clients.max_pending == b.clients.max_pending);
  CHECK(a.clients.max_clients_per_user == b.clients.max_clients_per_user);
  CHECK(a.clients.max_requests_per_user == b.clients.max_requests_per_user);
  CHECK(a.clients.max_live_sequences == b.clients.max_live_sequences);
  CHECK(a.clients.busy_retry == b.clients.busy_retry);
  CHECK(a.sessions == b.sessions);
}

std::string temp_path(std::string_view name) {
  return (std::filesystem::temp_directory_path()
          / ("kvlane-config-test-" + std::to_string(::getpid()) + "-" + std::string(name)))
    .string();
}

} // namespace

TEST_CASE("config: a minimal file yields every documented default") {
  const auto sut = parse_ok(minimal);

  CHECK(sut.daemon.runtime_dir == "");
  CHECK(sut.daemon.worker_threads == 0);
  CHECK(sut.daemon.log_level == "info");
  CHECK(sut.daemon.log_levels.empty());
  CHECK(sut.daemon.shutdown_timeout == std::chrono::milliseconds(5000));
  CHECK(sut.daemon.shutdown_grace == std::chrono::milliseconds(10000));
  CHECK(sut.admin.socket_mode == 0600);
  CHECK(sut.admin.allow_users.empty());
  CHECK(sut.admin.allow_groups.empty());
  CHECK(sut.metrics.listen == "");

  REQUIRE(sut.models.size() == 1);
  const auto& m = sut.models[0];
  CHECK(m.name == "m");
  CHECK(m.backend.kind == "sim");
  CHECK(m.chat_format == kvlane::backends::chat_format::chatml);
  CHECK(m.store_floor_bytes == 0);
  CHECK(m.store_cap_bytes == 0);
  CHECK(m.backend.sim.slots == 16);
  CHECK(m.backend.sim.max_context == 4096);
  CHECK(m.backend.sim.max_prefill_chunk == 128);
  CHECK(m.backend.sim.snapshot_bytes == 67'108'864);
  CHECK(m.backend.sim.extent == snapshot_extent::full_slot);
  CHECK(m.backend.sim.step_base_ms == 31.0);
  CHECK(m.backend.sim.step_per_token_ms == 1.7);
  CHECK(m.backend.sim.dump_min_ms == 30.0);
  CHECK(m.backend.sim.dump_max_ms == 60.0);
  CHECK(m.backend.sim.load_min_ms == 16.0);
  CHECK(m.backend.sim.load_max_ms == 18.0);
  CHECK(m.backend.sim.time_scale == 1.0);
  CHECK(m.backend.sim.overlap == transfer_overlap::full);
  CHECK(m.backend.sim.seed == 1);
  CHECK(m.backend.sim.eos_rate == 0.0);
  for (const auto* f : {&m.backend.sim.step_faults, &m.backend.sim.dump_faults, &m.backend.sim.load_faults}) {
    CHECK(f->fail_nth == 0);
    CHECK(f->fail_rate == 0.0);
    CHECK(f->code == backend_errc::device_failure);
    CHECK(f->crash_nth == 0);
  }

  CHECK(sut.scheduler.mode == scheduler_mode::overlap);
  CHECK(sut.scheduler.quantum_steps == 64);
  CHECK(sut.scheduler.levels == 4);
  CHECK(sut.scheduler.spare_slots == 0);
  CHECK(sut.scheduler.max_step_tokens == 512);
  CHECK(sut.scheduler.batch_prefill_yields);
  CHECK(sut.scheduler.aging_steps == 2048);
  CHECK(sut.scheduler.ewma_alpha == 0.2);
  CHECK(sut.scheduler.faults.step_retries == 1);
  CHECK(sut.scheduler.faults.row_recomputes == 1);
  CHECK(sut.scheduler.faults.backoff_initial_ms == 50);
  CHECK(sut.scheduler.faults.backoff_max_ms == 5000);
  CHECK(sut.scheduler.faults.give_up_steps == 12);
  CHECK(sut.scheduler.slo == kvlane::actors::slo_targets{});
  CHECK(sut.scheduler.slo.interactive.ttft_ms == 2000);
  CHECK(sut.scheduler.slo.batch.tpot_ms == 1000);
  CHECK(sut.scheduler.refuse_over == 0);
  CHECK(sut.reuse.mode == kvlane::actors::reuse_mode::store);
  CHECK(sut.reuse.scope == kvlane::actors::reuse_scope::user);
  CHECK(sut.reuse.store_share == 0.5);
  CHECK(sut.reuse.idle_ttl_s == 1800);
  CHECK(sut.reuse.min_prefix_tokens == 64);
  CHECK(sut.store.max_bytes == 8'589'934'592);
  CHECK(sut.store.warm_pool_bytes == 268'435'456);
  CHECK(sut.store.eviction == kvlane::ipc::eviction_value::cost);
  CHECK_FALSE(sut.store.prefault_warm_pool);

  CHECK(sut.clients.socket_mode == 0666);
  CHECK(sut.clients.allow_users.empty());
  CHECK(sut.clients.allow_groups.empty());
  CHECK(sut.clients.max_clients == 64);
  CHECK(sut.clients.max_requests == 256);
  CHECK(sut.clients.max_prompt_bytes == 1'048'576);
  CHECK(sut.clients.submit_ring_records == 64);
  CHECK(sut.clients.events_ring_records == 1024);
  CHECK(sut.clients.max_backlog_records == 8192);
  CHECK(sut.clients.spin_us == 20);
  CHECK(sut.clients.hello_timeout == std::chrono::milliseconds(2000));

  CHECK(sut.http.listen == "127.0.0.1:8471");
  CHECK(sut.http.api_key == "");
  CHECK(sut.http.api_key_file == "");
  CHECK(sut.http.cors_origins.empty());
  CHECK(sut.http.max_connections == 256);
  CHECK(sut.http.max_body_bytes == 4'194'304);
  CHECK(sut.http.max_header_bytes == 16'384);
  CHECK(sut.http.idle_timeout == std::chrono::milliseconds(60000));
  CHECK(sut.http.header_timeout == std::chrono::milliseconds(10000));
  CHECK(sut.http.max_connections_per_peer == 256); // = max_connections on loopback
  CHECK(sut.http.tls_cert == "");
  CHECK(sut.http.tls_key == "");
  CHECK_FALSE(sut.http.allow_plaintext);
  CHECK(sut.clients.max_pending == 64);
  CHECK(sut.clients.max_clients_per_user == 16);
  CHECK(sut.clients.max_requests_per_user == 1024);
  CHECK(sut.clients.max_live_sequences == 4096);
  CHECK(sut.clients.busy_retry == std::chrono::milliseconds(200));
  CHECK(sut.sessions.max_per_user == 16);
  CHECK(sut.sessions.max_sessions == 256);
}

TEST_CASE("config: the shipped etc/kvlane.toml parses to exactly the defaults") {
  const auto sut = load(KVLANE_SOURCE_DIR "/etc/kvlane.toml");
  if (!sut)
    FAIL(sut.error().message);

  config defaults;
  defaults.models.emplace_back().name = "llama-3.2-1b";
  check_same(*sut, defaults);
}

TEST_CASE("config: the reuse table is read into its fields and bad values name the key") {
  const auto sut = parse_ok(std::string(minimal) + R"(
[reuse]
mode = "slot"
scope = "all"
store_share = 0.25
idle_ttl_s = 0
min_prefix_tokens = 16
)");
  CHECK(sut.reuse.mode == kvlane::actors::reuse_mode::slot);
  CHECK(sut.reuse.scope == kvlane::actors::reuse_scope::all);
  CHECK(sut.reuse.store_share == 0.25);
  CHECK(sut.reuse.idle_ttl_s == 0);
  CHECK(sut.reuse.min_prefix_tokens == 16);

  const auto bad_mode = parse(std::string(minimal) + "[reuse]\nmode = \"disk\"\n", "t.toml");
  REQUIRE_FALSE(bad_mode);
  CHECK(bad_mode.error().message.find("reuse.mode") != std::string::npos);
  const auto bad_share = parse(std::string(minimal) + "[reuse]\nstore_share = 1.5\n", "t.toml");
  REQUIRE_FALSE(bad_share);
  CHECK(bad_share.error().message.find("reuse.store_share") != std::string::npos);
  const auto unknown = parse(std::string(minimal) + "[reuse]\nttl = 3\n", "t.toml");
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().message.find("reuse.ttl") != std::string::npos);
}

TEST_CASE("config: every key is read into its field") {
  const auto sut = parse_ok(R"(
version = 1
[daemon]
runtime_dir = "/run/x"
worker_threads = 3
log_level = "debug"
shutdown_timeout_ms = 250
shutdown_grace_ms = 0
[daemon.log_levels]
scheduler = "trace"
ipc = "off"

[[model]]
name = "a.b_c-1"
backend = "sim"
store_floor_bytes = "1GiB"
store_cap_bytes = "2 GiB"
[model.sim]
slots = 4
max_context = 1024
max_prefill_chunk = 1024
snapshot_bytes = "1MiB"
snapshot = "used"
step_base_ms = 2
step_per_token_ms = 0.5
dump_min_ms = 1.5
dump_max_ms = 1.5
load_min_ms = 0
load_max_ms = 3
time_scale = 100
overlap = "shared"
seed = 42
eos_rate = 0.25
[model.sim.faults.step]
fail_nth = 7
[model.sim.faults.dump]
fail_rate = 0.5
code = "device_timeout"
[model.sim.faults.load]
code = "snapshot_mismatch"

[[model]]
name = "second"
sim.overlap = "none"

[scheduler]
mode = "fcfs"
quantum_steps = 16
levels = 6
spare_slots = 0
max_step_tokens = 0
batch_prefill_yields = false
aging_steps = 100
ewma_alpha = 1
[scheduler.faults]
step_retries = 2
row_recomputes = 0
backoff_initial_ms = 10
backoff_max_ms = 100
give_up_steps = 0
[scheduler.slo]
interactive_ttft_ms = 1500
interactive_tpot_ms = 100
batch_ttft_ms = 30000
batch_tpot_ms = 500
refuse_over = 4
[store]
max_bytes = 4294967296
warm_pool_bytes = "1GiB"
prefault_warm_pool = true
eviction = "recency"
[clients]
socket_mode = 0o660
allow_users = ["alice", 1001]
allow_groups = ["kvlane"]
max_clients = 8
max_requests = 32
max_prompt_bytes = "64KiB"
submit_ring_records = 128
events_ring_records = 4096
max_backlog_records = 100
spin_us = 0
hello_timeout_ms = 500
max_pending = 7
max_clients_per_user = 3
max_requests_per_user = 40
max_live_sequences = 90
busy_retry_ms = 1500
[admin]
socket_mode = 0o660
allow_users = ["root", 1002]
allow_groups = ["adm"]
[metrics]
listen = "[::1]:9464"
)");

  CHECK(sut.daemon.runtime_dir == "/run/x");
  CHECK(sut.daemon.worker_threads == 3);
  CHECK(sut.daemon.log_level == "debug");
  CHECK(sut.daemon.log_levels == std::map<std::string, std::string>{{"ipc", "off"}, {"scheduler", "trace"}});
  CHECK(sut.daemon.shutdown_timeout == std::chrono::milliseconds(250));

  REQUIRE(sut.models.size() == 2);
  const auto& m = sut.models[0];
  CHECK(m.name == "a.b_c-1");
  CHECK(m.store_floor_bytes == 1ull << 30);
  CHECK(m.store_cap_bytes == 2ull << 30);
  CHECK(m.backend.sim.slots == 4);
  CHECK(m.backend.sim.max_context == 1024);
  CHECK(m.backend.sim.max_prefill_chunk == 1024);
  CHECK(m.backend.sim.snapshot_bytes == 1ull << 20);
  CHECK(m.backend.sim.extent == snapshot_extent::used_length);
  CHECK(m.backend.sim.step_base_ms == 2.0);
  CHECK(m.backend.sim.step_per_token_ms == 0.5);
  CHECK(m.backend.sim.dump_min_ms == 1.5);
  CHECK(m.backend.sim.dump_max_ms == 1.5);
  CHECK(m.backend.sim.load_min_ms == 0.0);
  CHECK(m.backend.sim.load_max_ms == 3.0);
  CHECK(m.backend.sim.time_scale == 100.0);
  CHECK(m.backend.sim.overlap == transfer_overlap::shared);
  CHECK(m.backend.sim.seed == 42);
  CHECK(m.backend.sim.eos_rate == 0.25);
  CHECK(m.backend.sim.step_faults.fail_nth == 7);
  CHECK(m.backend.sim.step_faults.code == backend_errc::device_failure);
  CHECK(m.backend.sim.dump_faults.fail_rate == 0.5);
  CHECK(m.backend.sim.dump_faults.code == backend_errc::device_timeout);
  CHECK(m.backend.sim.load_faults.code == backend_errc::snapshot_mismatch);
  CHECK(sut.models[1].name == "second");
  CHECK(sut.models[1].backend.sim.overlap == transfer_overlap::none);
  CHECK(sut.models[1].backend.sim.slots == 16);

  CHECK(sut.scheduler.mode == scheduler_mode::fcfs);
  CHECK(sut.scheduler.quantum_steps == 16);
  CHECK(sut.scheduler.levels == 6);
  CHECK(sut.scheduler.spare_slots == 0);
  CHECK(sut.scheduler.max_step_tokens == 0);
  CHECK_FALSE(sut.scheduler.batch_prefill_yields);
  CHECK(sut.scheduler.aging_steps == 100);
  CHECK(sut.scheduler.ewma_alpha == 1.0);
  CHECK(sut.scheduler.faults.step_retries == 2);
  CHECK(sut.scheduler.faults.row_recomputes == 0);
  CHECK(sut.scheduler.faults.backoff_initial_ms == 10);
  CHECK(sut.scheduler.faults.backoff_max_ms == 100);
  CHECK(sut.scheduler.faults.give_up_steps == 0);
  CHECK(sut.scheduler.slo.interactive.ttft_ms == 1500);
  CHECK(sut.scheduler.slo.interactive.tpot_ms == 100);
  CHECK(sut.scheduler.slo.batch.ttft_ms == 30000);
  CHECK(sut.scheduler.slo.batch.tpot_ms == 500);
  CHECK(sut.scheduler.refuse_over == 4);
  CHECK(sut.store.max_bytes == 4ull << 30);
  CHECK(sut.store.warm_pool_bytes == 1ull << 30);
  CHECK(sut.store.eviction == kvlane::ipc::eviction_value::recency);
  CHECK(sut.store.prefault_warm_pool);
  CHECK(sut.clients.socket_mode == 0660);
  CHECK(sut.clients.allow_users == std::vector<std::string>{"alice", "1001"});
  CHECK(sut.clients.allow_groups == std::vector<std::string>{"kvlane"});
  CHECK(sut.clients.max_clients == 8);
  CHECK(sut.clients.max_requests == 32);
  CHECK(sut.clients.max_prompt_bytes == 64 * 1024);
  CHECK(sut.clients.submit_ring_records == 128);
  CHECK(sut.clients.events_ring_records == 4096);
  CHECK(sut.clients.max_backlog_records == 100);
  CHECK(sut.clients.spin_us == 0);
  CHECK(sut.clients.hello_timeout == std::chrono::milliseconds(500));
  CHECK(sut.clients.max_pending == 7);
  CHECK(sut.clients.max_clients_per_user == 3);
  CHECK(sut.clients.max_requests_per_user == 40);
  CHECK(sut.clients.max_live_sequences == 90);
  CHECK(sut.clients.busy_retry == std::chrono::milliseconds(1500));
  CHECK(sut.daemon.shutdown_grace == std::chrono::milliseconds(0));
  CHECK(sut.admin.socket_mode == 0660);
  CHECK(sut.admin.allow_users == std::vector<std::string>{"root", "1002"});
  CHECK(sut.admin.allow_groups == std::vector<std::string>{"adm"});
  CHECK(sut.metrics.listen == "[::1]:9464");
}

TEST_CASE("config: a syntax error reports source, line and column") {
  const auto e = parse_error("version = 1\n[[model]]\nname = \"m\n");
  CHECK(e.key == "");
  CHECK(e.line == 3);
  CHECK(contains(e.message, "test.toml:3:"));
  CHECK(contains(e.message, "syntax error"));
}

TEST_CASE("config: a missing version is an error naming key version") {
  const auto e = parse_error("[[model]]\nname = \"m\"\n");
  check_error(e, "version", 1);
  CHECK(contains(e.message, "missing"));
}

TEST_CASE("config: a version other than 1 is an error") {
  SUBCASE("another number") {
    const auto e = parse_error("\nversion = 2\n[[model]]\nname = \"m\"\n");
    check_error(e, "version", 2);
    CHECK(contains(e.message, "unsupported config version 2"));
  }
  SUBCASE("not an integer") {
    const auto e = parse_error("version = \"1\"\n[[model]]\nname = \"m\"\n");
    check_error(e, "version", 1);
    CHECK(contains(e.message, "expected integer, got string"));
  }
}

TEST_CASE("config: an unknown top-level key is an error naming key and line") {
  const auto e = parse_error(std::string(minimal) + "[schedular]\nmode = \"fcfs\"\n");
  check_error(e, "schedular", 4);
  CHECK(contains(e.message, "unknown key 'schedular'"));
  CHECK(contains(e.message, "did you mean 'scheduler'?"));
}

TEST_CASE("config: an unknown logger in daemon.log_levels is an error naming file, line and the loggers") {
  const auto e = parse_error(std::string(minimal) + "[daemon.log_levels]\nscheduler = \"debug\"\n"
                             "schedular = \"trace\"\n");
  check_error(e, "daemon.log_levels.schedular", 6);
  CHECK(e.message
        == "test.toml:6: daemon.log_levels.schedular: unknown logger \"schedular\" (the loggers are "
           "\"daemon\", \"backend\", \"scheduler\", \"store\", \"ipc\", \"admin\", \"probe\", \"http\")");
  // Every logger the daemon creates is accepted.
  std::string all = std::string(minimal) + "[daemon.log_levels]\n";
  for (auto name : kvlane::logging::logger_names())
    all += std::string(name) + " = \"warn\"\n";
  CHECK(parse_ok(all).daemon.log_levels.size() == kvlane::logging::logger_names().size());
}

TEST_CASE("config: an unknown key in model.sim is an error naming the dotted key") {
  const auto e = parse_error(std::string(minimal) + "[model.sim]\nslots = 4\nslot = 4\n");
  check_error(e, "model[0].sim.slot", 6);
  CHECK(contains(e.message, "unknown key 'model[0].sim.slot'"));
  CHECK(contains(e.message, "did you mean 'slots'?"));
}

TEST_CASE("config: unknown keys are rejected in every table") {
  struct row {
    std::string_view snippet;
    std::string_view key;
  };
  const row rows[] = {
    {"[daemon]\nthreads = 1\n", "daemon.threads"},
    {"color = \"red\"\n", "model[0].color"},
    {"[model.sim.faults]\nstep.fail_nth = 1\nwrite = {}\n", "model[0].sim.faults.write"},
    {"[model.sim.faults.dump]\nfail_every = 1\n", "model[0].sim.faults.dump.fail_every"},
    {"[scheduler]\nquantum = 1\n", "scheduler.quantum"},
    {"[store]\nmax = 1\n", "store.max"},
    {"[clients]\nallow = []\n", "clients.allow"},
  };
  for (const auto& r : rows) {
    CAPTURE(r.snippet);
    const auto e = parse_error(std::string(minimal) + std::string(r.snippet));
    const auto lines = static_cast<std::uint32_t>(std::count(r.snippet.begin(), r.snippet.end(), '\n'));
    check_error(e, r.key, 3 + lines);
    CHECK(contains(e.message, "unknown key"));
  }
}

TEST_CASE("config: of several unknown keys the first in the file is reported") {
  const auto e = parse_error(std::string(minimal) + "[scheduler]\nzeta = 1\nalpha = 2\n");
  check_error(e, "scheduler.zeta", 5);
}

TEST_CASE("config: a wrong type is an error naming key, line, expected and actual type") {
  SUBCASE("string for an integer") {
    const auto e = parse_error(std::string(minimal) + "[model.sim]\nslots = \"16\"\n");
    check_error(e, "model[0].sim.slots", 5);
    CHECK(contains(e.message, "expected integer, got string"));
  }
  SUBCASE("float for an integer") {
    const auto e = parse_error(std::string(minimal) + "[scheduler]\nquantum_tokens = 64.0\n");
    check_error(e, "scheduler.quantum_tokens", 5);
    CHECK(contains(e.message, "expected integer, got float"));
  }
  SUBCASE("boolean for a number") {
    const auto e = parse_error(std::string(minimal) + "[model.sim]\ntime_scale = true\n");
    check_error(e, "model[0].sim.time_scale", 5);
    CHECK(contains(e.message, "expected number, got boolean"));
  }
  SUBCASE("integer for a boolean") {
    const auto e = parse_error(std::string(minimal) + "[scheduler]\nbatch_prefill_yields = 1\n");
    check_error(e, "scheduler.batch_prefill_yields", 5);
    CHECK(contains(e.message, "expected boolean, got integer"));
  }
  SUBCASE("scalar for a table") {
    const auto e = parse_error("version = 1\nstore = 5\n[[model]]\nname = \"m\"\n");
    check_error(e, "store", 2);
    CHECK(contains(e.message, "expected table, got integer"));
  }
  SUBCASE("float for a byte size") {
    const auto e = parse_error(std::string(minimal) + "[store]\nmax_bytes = 1.5e9\n");
    check_error(e, "store.max_bytes", 5);
    CHECK(contains(e.message, "got float"));
  }
  SUBCASE("table instead of an array of tables") {
    const auto e = parse_error("version = 1\n[model]\nname = \"m\"\n");
    check_error(e, "model", 2);
    CHECK(contains(e.message, "expected array of tables"));
  }
}

TEST_CASE("config: out-of-range values are errors naming key, line and the allowed range") {
  struct row {
    std::string_view snippet; // a table header, then the key in error on line 5
    std::string_view key;
    std::string_view range;
  };
  const row rows[] = {
    {"[daemon]\nworker_threads = 257\n", "daemon.worker_threads", "between 0 and 256 (got 257)"},
    {"[daemon]\nlog_level = \"verbose\"\n", "daemon.log_level", "one of \"trace\", \"debug\""},
    {"[daemon.log_levels]\nipc = \"loud\"\n", "daemon.log_levels.ipc", "one of \"trace\""},
    {"[daemon]\nshutdown_timeout_ms = 99\n", "daemon.shutdown_timeout_ms", "between 100 and 600000"},
    {"[daemon]\nshutdown_timeout_ms = 600001\n", "daemon.shutdown_timeout_ms", "between 100 and 600000"},
    {"[daemon]\nshutdown_grace_ms = -1\n", "daemon.shutdown_grace_ms", "between 0 and 3600000"},
    {"[admin]\nsocket_mode = 0o066\n", "admin.socket_mode", "owner read and write"},
    {"[metrics]\nlisten = \"0.0.0.0:9464\"\n", "metrics.listen", "loopback"},
    {"[metrics]\nlisten = \"127.0.0.1:0\"\n", "metrics.listen", "loopback"},
    {"[metrics]\nlisten = \"127.0.0.1\"\n", "metrics.listen", "loopback"},
    {"[daemon]\nruntime_dir = \"run\"\n", "daemon.runtime_dir", "absolute path"},
    {"[model.sim]\nslots = 0\n", "model[0].sim.slots", "between 1 and 1024 (got 0)"},
    {"[model.sim]\nslots = 1025\n", "model[0].sim.slots", "between 1 and 1024 (got 1025)"},
    {"[model.sim]\nmax_context = 0\n", "model[0].sim.max_context", "between 1 and 1048576"},
    {"[model.sim]\nmax_prefill_chunk = 4097\n", "model[0].sim.max_prefill_chunk", "between 1 and 4096"},
    {"[model.sim]\nsnapshot_bytes = 2048\n", "model[0].sim.snapshot_bytes", "between 4KiB and 1TiB (got 2048)"},
    {"[model.sim]\nsnapshot_bytes = \"2TiB\"\n", "model[0].sim.snapshot_bytes", "between 4KiB and 1TiB (got 2TiB)"},
    {"[model.sim]\nsnapshot_bytes = -1\n", "model[0].sim.snapshot_bytes", "between 4KiB and 1TiB (got -1)"},
    {"[model.sim]\nsnapshot = \"half\"\n", "model[0].sim.snapshot", "one of \"full\", \"used\", \"none\""},
    {"[model.sim]\nstep_base_ms = -1\n", "model[0].sim.step_base_ms", ">= 0"},
    {"[model.sim]\nload_min_ms = inf\n", "model[0].sim.load_min_ms", "finite number >= 0"},
    {"[model.sim]\ntime_scale = 0\n", "model[0].sim.time_scale", "> 0 and <= 1000000"},
    {"[model.sim]\ntime_scale = 1e7\n", "model[0].sim.time_scale", "> 0 and <= 1000000"},
    {"[model.sim]\noverlap = \"partial\"\n", "model[0].sim.overlap", "one of \"full\", \"none\", \"shared\""},
    {"[model.sim]\neos_rate = 1.5\n", "model[0].sim.eos_rate", "between 0 and 1"},
    {"[model.sim]\nseed = -1\n", "model[0].sim.seed", "between 0 and"},
    {"[model.sim.faults.step]\nfail_rate = nan\n", "model[0].sim.faults.step.fail_rate", "between 0 and 1"},
    {"[model.sim.faults.load]\nfail_nth = -1\n", "model[0].sim.faults.load.fail_nth", "between 0 and"},
    {"[scheduler]\nmode = \"fifo\"\n", "scheduler.mode", "one of \"fcfs\", \"prio-fcfs\", \"recompute\", \"sync\", \"overlap\", \"free-transfer\", \"ideal\" (got \"fifo\")"},
    {"[scheduler]\nquantum_tokens = 0\n", "scheduler.quantum_tokens", "between 1 and 1000000"},
    {"[scheduler.slo]\ninteractive_ttft_ms = 0\n", "scheduler.slo.interactive_ttft_ms", "between 1 and 86400000 (got 0)"},
    {"[scheduler.slo]\nbatch_tpot_ms = 86400001\n", "scheduler.slo.batch_tpot_ms", "between 1 and 86400000"},
    {"[scheduler.slo]\nrefuse_over = 0.5\n", "scheduler.slo.refuse_over",
     "must be 0 (never refuse) or at least 1: a request predicted to start within its TTFT "
     "objective is never refused (got 0.5)"},
    {"[scheduler.slo]\nrefuse_over = 1001\n", "scheduler.slo.refuse_over", "between 0 and 1000 (got 1001)"},
    {"[scheduler]\nspare_slots = 65\n", "scheduler.spare_slots", "between 0 and 64"},
    {"[scheduler]\nlevels = 0\n", "scheduler.levels", "between 1 and 16"},
    {"[scheduler]\nlevels = 16\nquantum_tokens = 1000000\n", "scheduler.levels",
     "at most 4294967295 (got 1000000 * 2^15 = 32768000000)"},
    {"[scheduler]\nmax_step_tokens = 1048577\n", "scheduler.max_step_tokens", "between 0 and 1048576"},
    {"[scheduler]\naging_steps = -1\n", "scheduler.aging_steps", "between 0 and 1000000000"},
    {"[scheduler]\newma_alpha = 0\n", "scheduler.ewma_alpha", "> 0 and <= 1"},
    {"[scheduler.faults]\nstep_retries = 17\n", "scheduler.faults.step_retries", "between 0 and 16"},
    {"[scheduler.faults]\nbackoff_initial_ms = 0\n", "scheduler.faults.backoff_initial_ms",
     "between 1 and 60000"},
    {"[scheduler.faults]\nbackoff_max_ms = 50\nbackoff_initial_ms = 100\n",
     "scheduler.faults.backoff_max_ms", "must be >= backoff_initial_ms (100) (got 50)"},
    {"[scheduler.faults]\nretries = 1\n", "scheduler.faults.retries", "unknown"},
    {"[model.sim.faults.step]\nfail_token = -2\n", "model[0].sim.faults.step.fail_token",
     "between -1 and 4294967295"},
    {"[store]\nmax_bytes = \"1023KiB\"\n", "store.max_bytes", "between 1MiB and 16TiB (got 1023KiB)"},
    {"[store]\nmax_bytes = \"17TiB\"\n", "store.max_bytes", "between 1MiB and 16TiB"},
    {"[store]\nwarm_pool_bytes = \"2GiB\"\nmax_bytes = \"1GiB\"\n", "store.warm_pool_bytes",
     "must be <= store.max_bytes (1GiB) (got 2GiB)"},
    {"[store]\neviction = \"lru\"\n", "store.eviction", "one of \"cost\", \"recency\" (got \"lru\")"},
    {"[clients]\nsocket_mode = 0o1777\n", "clients.socket_mode", "between 0o000 and 0o777"},
    {"[clients]\nsocket_mode = 0o066\n", "clients.socket_mode", "owner read and write"},
    {"[clients]\nallow_users = [-1]\n", "clients.allow_users[0]", "numeric id between 0 and"},
    {"[clients]\nallow_groups = [\"a b\"]\n", "clients.allow_groups[0]", "user or group name"},
    {"[clients]\nmax_clients = 0\n", "clients.max_clients", "between 1 and 4096"},
    {"[clients]\nmax_requests = 65537\n", "clients.max_requests", "between 1 and 65536"},
    {"[clients]\nmax_prompt_bytes = 100\n", "clients.max_prompt_bytes", "between 256 and 256MiB"},
    {"[clients]\nsubmit_ring_records = 100\n", "clients.submit_ring_records", "power of two (got 100)"},
    {"[clients]\nevents_ring_records = 8\n", "clients.events_ring_records", "between 16 and 1048576"},
    {"[clients]\nmax_backlog_records = 15\n", "clients.max_backlog_records", "between 16 and"},
    {"[clients]\nspin_us = 100001\n", "clients.spin_us", "between 0 and 100000"},
    {"[clients]\nhello_timeout_ms = 5\n", "clients.hello_timeout_ms", "between 10 and 60000"},
  };
  for (const auto& r : rows) {
    CAPTURE(r.snippet);
    const auto e = parse_error(std::string(minimal) + std::string(r.snippet));
    check_error(e, r.key, 5);
    CHECK(contains(e.message, r.range));
  }
}

TEST_CASE("config: clients.allow_users takes names and ids, and rejects other types") {
  const auto e = parse_error(std::string(minimal) + "[clients]\nallow_users = [true]\n");
  check_error(e, "clients.allow_users[0]", 5);
  CHECK(contains(e.message, "expected name (string) or numeric id (integer), got boolean"));
  const auto e2 = parse_error(std::string(minimal) + "[clients]\nallow_users = \"root\"\n");
  check_error(e2, "clients.allow_users", 5);
  CHECK(contains(e2.message, "expected array of names or numeric ids, got string"));
}

TEST_CASE("config: a model name outside [A-Za-z0-9._-]{1,64} is an error") {
  const std::string too_long(65, 'x');
  for (std::string_view name : {std::string_view(""), std::string_view("has space"),
                                std::string_view("slash/name"), std::string_view(too_long)}) {
    CAPTURE(name);
    const auto e = parse_error("version = 1\n[[model]]\nname = \"" + std::string(name) + "\"\n");
    check_error(e, "model[0].name", 3);
  }
  const std::string longest(64, 'x');
  CHECK(parse_ok("version = 1\n[[model]]\nname = \"" + longest + "\"\n").models[0].name == longest);
}

TEST_CASE("config: a model without a name is an error at its table") {
  const auto e = parse_error("version = 1\n[[model]]\nbackend = \"sim\"\n");
  check_error(e, "model[0].name", 2);
  CHECK(contains(e.message, "missing"));
}

TEST_CASE("config: a duplicate model name is an error at the second model") {
  const auto e = parse_error(std::string(minimal) + "[[model]]\nname = \"other\"\n[[model]]\nname = \"m\"\n");
  check_error(e, "model[2].name", 7);
  CHECK(contains(e.message, "duplicate model name \"m\""));
  CHECK(contains(e.message, "model[0] at line 3"));
}

TEST_CASE("config: a file without a model is an error naming key model") {
  SUBCASE("no model table") {
    const auto e = parse_error("version = 1\n[store]\nmax_bytes = \"1GiB\"\n");
    check_error(e, "model", 1);
    CHECK(contains(e.message, "at least one [[model]]"));
  }
  SUBCASE("an empty array") {
    const auto e = parse_error("version = 1\nmodel = []\n");
    check_error(e, "model", 2);
    CHECK(contains(e.message, "at least one [[model]]"));
  }
}

TEST_CASE("config: a malformed byte-size string is an error") {
  for (std::string_view text : {"8 GB!", "-1GiB", "1.5GiB", "64 mib", "GiB", "8  GiB", " 8GiB"}) {
    CAPTURE(text);
    const auto e = parse_error(std::string(minimal) + "[store]\nmax_bytes = \"" + std::string(text) + "\"\n");
    check_error(e, "store.max_bytes", 5);
    CHECK(contains(e.message, "expected a byte size"));
  }
}

TEST_CASE("config: a min greater than its max is an error naming the max key") {
  SUBCASE("both set") {
    const auto e = parse_error(std::string(minimal) + "[model.sim]\ndump_min_ms = 50\ndump_max_ms = 40\n");
    check_error(e, "model[0].sim.dump_max_ms", 6);
    CHECK(contains(e.message, ">= dump_min_ms (50) (got 40)"));
  }
  SUBCASE("max left at its default") {
    const auto e = parse_error(std::string(minimal) + "[model.sim]\nload_min_ms = 20\n");
    check_error(e, "model[0].sim.load_max_ms", 4);
    CHECK(contains(e.message, ">= load_min_ms (20) (got the default, 18)"));
  }
  SUBCASE("store floor above the cap") {
    const auto e = parse_error(std::string(minimal) + "store_floor_bytes = \"2GiB\"\nstore_cap_bytes = \"1GiB\"\n");
    check_error(e, "model[0].store_cap_bytes", 5);
    CHECK(contains(e.message, ">= store_floor_bytes (2GiB) (got 1GiB)"));
  }
}

TEST_CASE("config: model floors that add up to more than the store are an error") {
  const auto e = parse_error(std::string(minimal)
                             + "store_floor_bytes = \"6GiB\"\n[[model]]\nname = \"n\"\nstore_floor_bytes = \"3GiB\"\n");
  check_error(e, "model[1].store_floor_bytes", 7);
  CHECK(contains(e.message, "add up to 9GiB, more than store.max_bytes (8GiB)"));

  const auto single = parse_error(std::string(minimal) + "store_floor_bytes = \"2GiB\"\n[store]\nmax_bytes = \"1GiB\"\n");
  check_error(single, "model[0].store_floor_bytes", 4);
  CHECK(contains(single.message, "must be <= store.max_bytes (1GiB) (got 2GiB)"));
}

TEST_CASE("config: a default max_prefill_chunk above a small max_context is an error") {
  const auto e = parse_error(std::string(minimal) + "[model.sim]\nmax_context = 64\nsnapshot_bytes = 65536\n");
  check_error(e, "model[0].sim.max_prefill_chunk", 4);
  CHECK(contains(e.message, "max_context (64)"));
}

TEST_CASE("config: snapshot_bytes that is not a multiple of max_context is an error") {
  SUBCASE("set explicitly") {
    const auto e = parse_error(std::string(minimal) + "[model.sim]\nsnapshot_bytes = 1000000\n");
    check_error(e, "model[0].sim.snapshot_bytes", 5);
    CHECK(contains(e.message, "multiple of max_context (4096)"));
    CHECK(contains(e.message, "nearest valid: 999424 or 1003520"));
  }
  SUBCASE("default against a changed max_context") {
    const auto e = parse_error(std::string(minimal) + "[model.sim]\nmax_context = 3000\n");
    check_error(e, "model[0].sim.snapshot_bytes", 4);
    CHECK(contains(e.message, "the default"));
  }
}

TEST_CASE("config: an unknown backend is an error listing the known backends") {
  const auto e = parse_error(std::string(minimal) + "backend = \"tpu\"\n");
  check_error(e, "model[0].backend", 4);
  CHECK(contains(e.message, "unknown backend \"tpu\""));
  CHECK(contains(e.message, "known backends: \"sim\", \"qbruntime\""));
}

TEST_CASE("config: every scheduler mode is accepted and ideal is the former name of free-transfer") {
  for (auto [text, mode] : {std::pair{"fcfs", scheduler_mode::fcfs},
                            std::pair{"prio-fcfs", scheduler_mode::prio_fcfs},
                            std::pair{"recompute", scheduler_mode::recompute},
                            std::pair{"sync", scheduler_mode::sync},
                            std::pair{"overlap", scheduler_mode::overlap},
                            std::pair{"free-transfer", scheduler_mode::free_transfer},
                            std::pair{"ideal", scheduler_mode::free_transfer}}) {
    CAPTURE(text);
    auto sut = parse(std::string(minimal) + "[scheduler]\nmode = \"" + text + "\"\n");
    REQUIRE(sut.has_value());
    CHECK(sut->scheduler.mode == mode);
  }
}

TEST_CASE("config: quantum_tokens is accepted as the former name of quantum_steps") {
  auto sut = parse(std::string(minimal) + "[scheduler]\nquantum_tokens = 12\n");
  REQUIRE(sut.has_value());
  CHECK(sut->scheduler.quantum_steps == 12);
}

TEST_CASE("config: quantum_steps and its former name quantum_tokens together are an error") {
  const auto e = parse_error(std::string(minimal) + "[scheduler]\nquantum_steps = 8\nquantum_tokens = 8\n");
  check_error(e, "scheduler.quantum_tokens", 6);
  CHECK(contains(e.message, "set only one of them"));
}

TEST_CASE("config: an unknown fault code is an error listing the backend error names") {
  const auto e = parse_error(std::string(minimal) + "[model.sim.faults.dump]\ncode = \"on_fire\"\n");
  check_error(e, "model[0].sim.faults.dump.code", 5);
  for (std::string_view name : {"context_overflow", "out_of_memory", "snapshot_mismatch",
                                "device_timeout", "invalid_argument", "device_failure"})
    CHECK(contains(e.message, name));
}

TEST_CASE("config: an unreadable file is an error naming the path and the reason") {
  SUBCASE("missing file") {
    const auto path = temp_path("missing.toml");
    const auto sut = load(path);
    REQUIRE_FALSE(sut.has_value());
    CHECK(sut.error().line == 0);
    CHECK(contains(sut.error().message, path));
    CHECK(contains(sut.error().message, "No such file or directory"));
  }
  SUBCASE("a directory") {
    const auto sut = load(KVLANE_SOURCE_DIR "/etc");
    REQUIRE_FALSE(sut.has_value());
    CHECK(contains(sut.error().message, "Is a directory"));
  }
}

TEST_CASE("config: load names the file in value errors") {
  const auto path = temp_path("bad.toml");
  {
    std::ofstream out(path);
    out << minimal << "[scheduler]\nspare_slots = 100\n";
  }
  const auto sut = load(path);
  std::remove(path.c_str());
  REQUIRE_FALSE(sut.has_value());
  CHECK(sut.error().key == "scheduler.spare_slots");
  CHECK(sut.error().message.find(path + ":5: scheduler.spare_slots: must be between 0 and 64 (got 100)") == 0);
}

TEST_CASE("config: byte sizes accept integers and binary or decimal units") {
  CHECK(parse_byte_size("0") == 0u);
  CHECK(parse_byte_size("4096") == 4096u);
  CHECK(parse_byte_size("17B") == 17u);
  CHECK(parse_byte_size("512KiB") == 512u * 1024);
  CHECK(parse_byte_size("64MiB") == 64ull << 20);
  CHECK(parse_byte_size("8 GiB") == 8ull << 30);
  CHECK(parse_byte_size("2TiB") == 2ull << 40);
  CHECK(parse_byte_size("3kB") == 3000u);
  CHECK(parse_byte_size("3KB") == 3000u);
  CHECK(parse_byte_size("5 MB") == 5'000'000u);
  CHECK(parse_byte_size("1GB") == 1'000'000'000u);
  CHECK(parse_byte_size("2TB") == 2'000'000'000'000u);
  CHECK(parse_byte_size("18446744073709551615") == 18'446'744'073'709'551'615u);

  CHECK(parse_ok(std::string(minimal) + "[store]\nmax_bytes = \"16GiB\"\n").store.max_bytes == 16ull << 30);
  CHECK(parse_ok(std::string(minimal) + "[store]\nmax_bytes = \"2 GB\"\n").store.max_bytes == 2'000'000'000u);
}

TEST_CASE("config: byte sizes reject anything but digits and one known unit") {
  for (std::string_view text : {"", " ", "8 GB!", "-1", "-1GiB", "+1", "1.5GiB", "1e9", "8GiB ",
                                " 8GiB", "8  GiB", "8\tGiB", "8 ", "GiB", "8 gib", "8kb", "8Kib",
                                "8PiB", "8 bytes", "0x10", "18446744073709551616", "16777216TiB",
                                "18446744073709551615B0"}) {
    CAPTURE(text);
    CHECK_FALSE(parse_byte_size(text).has_value());
  }
}

TEST_CASE("config: to_string names scheduler modes as the config spells them") {
  CHECK(to_string(scheduler_mode::fcfs) == "fcfs");
  CHECK(to_string(scheduler_mode::sync) == "sync");
  CHECK(to_string(scheduler_mode::overlap) == "overlap");
  CHECK(to_string(scheduler_mode::free_transfer) == "free-transfer");
  CHECK(kvlane::backends::to_string(transfer_overlap::full) == "full");
  CHECK(kvlane::backends::to_string(transfer_overlap::none) == "none");
  CHECK(kvlane::backends::to_string(transfer_overlap::shared) == "shared");
}

TEST_CASE("config: every [http] key is read into its field") {
  const auto sut = parse_ok(std::string{minimal} + R"(chat_format = "llama3"
[http]
listen = "[::1]:9000"
api_key_file = "/etc/kvlane/api-key"
cors_origins = ["http://localhost:3000", "https://app.example"]
max_connections = 8
max_body_bytes = "64KiB"
max_header_bytes = 2048
idle_timeout_ms = 500
header_timeout_ms = 250
)");
  CHECK(sut.models[0].chat_format == kvlane::backends::chat_format::llama3);
  CHECK(sut.http.listen == "[::1]:9000");
  CHECK(sut.http.api_key_file == "/etc/kvlane/api-key");
  CHECK(sut.http.cors_origins
        == std::vector<std::string>{"http://localhost:3000", "https://app.example"});
  CHECK(sut.http.max_connections == 8);
  CHECK(sut.http.max_body_bytes == 65536);
  CHECK(sut.http.max_header_bytes == 2048);
  CHECK(sut.http.idle_timeout == std::chrono::milliseconds(500));
  CHECK(sut.http.header_timeout == std::chrono::milliseconds(250));
}

TEST_CASE("config: a non-loopback http listen without an api key is an error naming the key") {
  const auto e = parse_error(std::string{minimal} + "[http]\nlisten = \"0.0.0.0:8471\"\n");
  check_error(e, "http.api_key", 5);
  CHECK(contains(e.message, "not a loopback address"));

  const auto with_key = parse_ok(std::string{minimal}
                                 + "[http]\nlisten = \"0.0.0.0:8471\"\napi_key = \"k1\"\n"
                                   "allow_plaintext = true\n");
  CHECK(with_key.http.api_key == "k1");
  CHECK(parse_ok(std::string{minimal} + "[http]\nlisten = \"127.0.0.2:8471\"\n").http.api_key
        == "");
}

TEST_CASE("config: a non-loopback http listen without tls is an error naming allow_plaintext") {
  const auto e = parse_error(std::string{minimal}
                             + "[http]\nlisten = \"0.0.0.0:8471\"\napi_key = \"k1\"\n");
  check_error(e, "http.allow_plaintext", 5);
  CHECK(contains(e.message, "clear text"));
  CHECK(contains(e.message, "tls_cert"));

  const auto tls = parse_ok(std::string{minimal}
                            + "[http]\nlisten = \"0.0.0.0:8471\"\napi_key = \"k1\"\n"
                              "tls_cert = \"/etc/kvlane/cert.pem\"\ntls_key = \"/etc/kvlane/key.pem\"\n");
  CHECK(tls.http.tls_cert == "/etc/kvlane/cert.pem");
  CHECK(tls.http.tls_key == "/etc/kvlane/key.pem");
  CHECK_FALSE(tls.http.allow_plaintext);
  // Loopback stays plaintext by default.
  CHECK(parse_ok(std::string{minimal} + "[http]\nlisten = \"[::1]:8471\"\n").http.tls_cert == "");
}

TEST_CASE("config: tls_cert and tls_key go together, as absolute paths") {
  check_error(parse_error(std::string{minimal} + "[http]\ntls_cert = \"/c.pem\"\n"),
              "http.tls_key", 5);
  check_error(parse_error(std::string{minimal} + "[http]\ntls_key = \"/k.pem\"\n"),
              "http.tls_cert", 5);
  check_error(parse_error(std::string{minimal}
                          + "[http]\ntls_cert = \"c.pem\"\ntls_key = \"/k.pem\"\n"),
              "http.tls_cert", 5);
  check_error(parse_error(std::string{minimal} + "[http]\nallow_plaintext = \"yes\"\n"),
              "http.allow_plaintext", 5);
}

TEST_CASE("config: max_connections_per_peer defaults to 32 beyond loopback and to max_connections on "
          "loopback, where every client has one address") {
  const std::string beyond = std::string{minimal}
                             + "[http]\nlisten = \"0.0.0.0:8471\"\napi_key = \"k1\"\n"
                               "allow_plaintext = true\n";
  CHECK(parse_ok(beyond).http.max_connections_per_peer == 32);
  CHECK(parse_ok(beyond + "max_connections = 8\n").http.max_connections_per_peer == 8);
  CHECK(parse_ok(std::string{minimal} + "[http]\nlisten = \"127.0.0.1:8471\"\n")
          .http.max_connections_per_peer
        == 256);
  CHECK(parse_ok(std::string{minimal} + "[http]\nlisten = \"[::1]:8471\"\nmax_connections = 40\n")
          .http.max_connections_per_peer
        == 40);
}

TEST_CASE("config: max_connections_per_peer is 1..max_connections, its default at most max_connections") {
  CHECK(parse_ok(std::string{minimal} + "[http]\nmax_connections_per_peer = 4\n")
          .http.max_connections_per_peer
        == 4);
  CHECK(parse_ok(std::string{minimal} + "[http]\nmax_connections = 8\n").http.max_connections_per_peer
        == 8);
  const auto over = parse_error(std::string{minimal}
                                + "[http]\nmax_connections = 8\nmax_connections_per_peer = 9\n");
  check_error(over, "http.max_connections_per_peer", 6);
  CHECK(contains(over.message, "must be between 1 and 8 (got 9)"));
  check_error(parse_error(std::string{minimal} + "[http]\nmax_connections_per_peer = 0\n"),
              "http.max_connections_per_peer", 5);
}

TEST_CASE("config: bad [http] values name their key") {
  check_error(parse_error(std::string{minimal} + "[http]\nlisten = \"example.com:80\"\n"),
              "http.listen", 5);
  check_error(parse_error(std::string{minimal} + "[http]\nlisten = \"127.0.0.1:http\"\n"),
              "http.listen", 5);
  check_error(parse_error(std::string{minimal}
                          + "[http]\napi_key = \"a\"\napi_key_file = \"/k\"\n"),
              "http.api_key_file", 6);
  check_error(parse_error(std::string{minimal} + "[http]\napi_key_file = \"key\"\n"),
              "http.api_key_file", 5);
  check_error(parse_error(std::string{minimal} + "[http]\napi_key = \"a b\"\n"), "http.api_key",
              5);
  check_error(parse_error(std::string{minimal} + "[http]\ncors_origins = [\"*\"]\n"),
              "http.cors_origins[0]", 5);
  check_error(parse_error(std::string{minimal} + "[http]\nmax_connections = 0\n"),
              "http.max_connections", 5);
  check_error(parse_error(std::string{minimal} + "[http]\nmax_body_bytes = 10\n"),
              "http.max_body_bytes", 5);
  check_error(parse_error(std::string{minimal} + "[http]\nheader_timeout_ms = 5\n"),
              "http.header_timeout_ms", 5);
  check_error(parse_error(std::string{minimal} + "chat_format = \"alpaca\"\n"),
              "model[0].chat_format", 4);
}

TEST_CASE("config: parse_http_listen tells loopback from other addresses") {
  CHECK(parse_http_listen("127.0.0.1:1")->loopback);
  CHECK(parse_http_listen("localhost:8471")->host == "127.0.0.1");
  CHECK(parse_http_listen("[::1]:8471")->loopback);
  CHECK(parse_http_listen("[::1]:8471")->host == "::1");
  CHECK_FALSE(parse_http_listen("0.0.0.0:8471")->loopback);
  CHECK_FALSE(parse_http_listen("[::]:8471")->loopback);
  CHECK_FALSE(parse_http_listen("192.168.1.2:80")->loopback);
  CHECK_FALSE(parse_http_listen("::1:80").has_value());
  CHECK_FALSE(parse_http_listen("host:80").has_value());
  CHECK_FALSE(parse_http_listen("127.0.0.1:65536").has_value());
  CHECK(parse_http_listen("127.0.0.1:0")->port == 0); // any free port
}

TEST_CASE("config: [sessions] reads its caps and names a bad value") {
  const auto sut = parse_ok(std::string(minimal) + "[sessions]\nmax_per_user = 0\nmax_sessions = 9\n");
  CHECK(sut.sessions.max_per_user == 0);
  CHECK(sut.sessions.max_sessions == 9);
  const auto bad = parse_error(std::string(minimal) + "[sessions]\nmax_sessions = -1\n");
  CHECK(bad.message.find("sessions.max_sessions") != std::string::npos);
  const auto unknown = parse_error(std::string(minimal) + "[sessions]\nttl = 3\n");
  CHECK(unknown.message.find("ttl") != std::string::npos);
}
