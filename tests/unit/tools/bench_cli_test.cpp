#include "tools/bench/bench_cli.hpp"
#include "tools/bench/bench_profile.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace kvlane;
using namespace kvlane::tools::bench;

namespace {

expected<bench_options, std::string> parse(std::vector<std::string_view> args) {
  return parse_args(args);
}

} // namespace

TEST_CASE("bench cli: defaults compare all six modes at load 1 with 20% interactive") {
  auto sut = parse({"--trace", "t.csv"});
  REQUIRE(sut.has_value());
  CHECK(sut->modes == std::vector<actors::scheduler_mode>(std::begin(actors::all_scheduler_modes),
                                                          std::end(actors::all_scheduler_modes)));
  CHECK(sut->devices.empty());
  CHECK(sut->slo == slo_set{});
  CHECK_FALSE(sut->slo_given);
  CHECK(sut->requests == 200);
  CHECK(sut->interactive_share == 0.2);
  CHECK_FALSE(sut->load.has_value()); // run_bench applies 1.0 to traces
  CHECK(sut->path == bench_path::inproc);
  CHECK(sut->command_line == "kvlane-bench --trace t.csv");
}

TEST_CASE("bench cli: flags are checked and conflicts named") {
  CHECK(parse({"--synthetic", "--rate", "0"}).error().find("--rate") != std::string::npos);
  CHECK(parse({"--trace", "t", "--modes", "fcfs,turbo"}).error().find("turbo")
        != std::string::npos);
  CHECK(parse({"--trace", "t", "--load", "1", "--rate-scale", "2"}).error().find("give one")
        != std::string::npos);
  CHECK(parse({"--trace", "t", "--synthetic"}).error().find("exclusive") != std::string::npos);
  CHECK(parse({}).error().find("--trace") != std::string::npos);
  CHECK(parse({"--trace", "t", "--bogus"}).error().find("'--bogus'") != std::string::npos);
  CHECK(parse({"--trace", "t", "--path", "tcp"}).error().find("--path") != std::string::npos);
  CHECK(parse({"--trace", "t", "--sweep", "0.5,x"}).error().find("'x'") != std::string::npos);
}

TEST_CASE("bench cli: the quantum sweep runs the preempting modes only") {
  auto sut = parse({"--synthetic", "--sweep-quantum"});
  REQUIRE(sut.has_value());
  CHECK(sut->modes == std::vector{actors::scheduler_mode::sync, actors::scheduler_mode::overlap,
                                  actors::scheduler_mode::free_transfer});
  auto given = parse({"--synthetic", "--sweep-quantum", "--modes", "fcfs,overlap"});
  REQUIRE(given.has_value());
  CHECK(given->modes == std::vector{actors::scheduler_mode::overlap});
}

TEST_CASE("bench cli: --path ipc and both are accepted and a missing kvlaned is unavailable (69)") {
  auto sut = parse({"--synthetic", "--path", "ipc", "--kvlaned", "/nonexistent/kvlaned"});
  REQUIRE(sut.has_value());
  CHECK(sut->path == bench_path::ipc);
  CHECK(sut->kvlaned_path == "/nonexistent/kvlaned");
  CHECK(run_bench(*sut) == 69);
  auto both = parse({"--synthetic", "--path", "both"});
  REQUIRE(both.has_value());
  CHECK(both->path == bench_path::both);
  CHECK(parse({"--synthetic", "--path", "both", "--sweep", "0.5,1"}).error().find("--path both")
        != std::string::npos);
}

TEST_CASE("bench cli: the built-in profile keeps the ARIES timing with small host snapshots") {
  auto sut = builtin_profile();
  REQUIRE(sut.has_value());
  const auto& sim = sut->models.front().backend.sim;
  CHECK(sim.slots == 16);
  CHECK(sim.max_context == 4096);
  CHECK(sim.max_prefill_chunk == 128);
  CHECK(sim.step_base_ms == 31.0);
  CHECK(sim.step_per_token_ms == 1.7);
  CHECK(sim.dump_min_ms == 30.0);
  CHECK(sim.dump_max_ms == 60.0);
  CHECK(sim.load_min_ms == 16.0);
  CHECK(sim.load_max_ms == 18.0);
  CHECK(sim.snapshot_bytes / sim.max_context == 64);
  CHECK(sut->store.max_bytes / sim.snapshot_bytes == 128); // as many snapshots as 8 GiB of 64 MiB
}

TEST_CASE("bench cli: modes by name, ideal as the former name of free-transfer") {
  auto sut = parse({"--trace", "t", "--modes", "prio-fcfs,recompute,ideal,free-transfer"});
  REQUIRE(sut.has_value());
  CHECK(sut->modes == std::vector{actors::scheduler_mode::prio_fcfs,
                                  actors::scheduler_mode::recompute,
                                  actors::scheduler_mode::free_transfer});
}

TEST_CASE("bench cli: devices side by side and per-class SLOs") {
  auto sut = parse({"--trace", "t", "--devices", "none,shared,full,none", "--slo-interactive",
                    "500,50", "--slo-batch", "20000,200"});
  REQUIRE(sut.has_value());
  using backends::transfer_overlap;
  CHECK(sut->devices
        == std::vector{transfer_overlap::none, transfer_overlap::shared, transfer_overlap::full});
  CHECK(sut->slo.interactive == slo_bound{500, 50});
  CHECK(sut->slo.batch == slo_bound{20000, 200});
  CHECK(sut->slo_given);
  CHECK(parse({"--trace", "t", "--devices", "none,fast"}).error().find("'fast'")
        != std::string::npos);
  CHECK(parse({"--trace", "t", "--slo-batch", "10"}).error().find("--slo-batch")
        != std::string::npos);
  CHECK(parse({"--synthetic", "--devices", "none", "--sweep-quantum"}).error().find("exclusive")
        != std::string::npos);
}

TEST_CASE("bench cli: conversation trace flags and the reuse comparison") {
  auto sut = parse({"--trace", "m.jsonl", "--input-scale", "0.125", "--sample-conversations",
                    "0.1", "--users", "one", "--reuse", "off,slot,store"});
  REQUIRE(sut.has_value());
  CHECK(is_mooncake_trace(sut->trace_path));
  CHECK_FALSE(is_mooncake_trace("t.csv"));
  CHECK(sut->input_scale == 0.125);
  CHECK(sut->sample_conversations == 0.1);
  CHECK(sut->users == trace_users::one);
  REQUIRE(sut->reuse.size() == 3);
  CHECK(sut->reuse[2].name == "store");
  // --reuse runs in one mode: overlap unless --modes names another.
  CHECK(sut->modes == std::vector<actors::scheduler_mode>{actors::scheduler_mode::overlap});
  auto sync = parse({"--trace", "m.jsonl", "--reuse", "store", "--modes", "sync"});
  REQUIRE(sync.has_value());
  CHECK(sync->modes == std::vector<actors::scheduler_mode>{actors::scheduler_mode::sync});

  CHECK(sut->causal_turns); // the default
  auto open = parse({"--trace", "m.jsonl", "--turns", "open"});
  REQUIRE(open.has_value());
  CHECK_FALSE(open->causal_turns);
  CHECK(parse({"--trace", "m.jsonl", "--turns", "later"}).error().find("causal or open")
        != std::string::npos);
  CHECK(parse({"--trace", "t.csv", "--turns", "causal"}).error().find(".jsonl")
        != std::string::npos);
  CHECK(parse({"--trace", "t.csv", "--sample-conversations", "0.1"}).error().find(".jsonl")
        != std::string::npos);
  CHECK(parse({"--trace", "m.jsonl", "--sample-conversations", "0"}).error().find("(0, 1]")
        != std::string::npos);
  CHECK(parse({"--trace", "m.jsonl", "--input-scale", "-1"}).error().find("--input-scale")
        != std::string::npos);
  CHECK(parse({"--trace", "m.jsonl", "--users", "many"}).error().find("--users")
        != std::string::npos);
  CHECK(parse({"--trace", "m.jsonl", "--reuse", "off,all"}).error().find("'all'")
        != std::string::npos);
  CHECK(parse({"--trace", "m.jsonl", "--reuse", "store", "--path", "ipc"}).error().find("in process")
        != std::string::npos);
  CHECK(parse({"--trace", "m.jsonl", "--reuse", "store", "--modes", "sync,overlap"})
          .error()
          .find("single mode")
        != std::string::npos);
  CHECK(parse({"--trace", "m.jsonl", "--reuse", "store", "--sweep", "1,2"}).error().find("--sweep")
        != std::string::npos);
}

TEST_CASE("bench cli: the store split runs two models under one store reuse policy") {
  auto sut = parse({"--trace", "m.jsonl", "--store-split", "shared,static", "--burst-s", "120"});
  REQUIRE(sut.has_value());
  CHECK(sut->store_splits == std::vector<store_split>{store_split::shared, store_split::static_halves});
  CHECK(sut->burst_s == 120);
  REQUIRE(sut->reuse.size() == 1); // the store policy unless --reuse names another store policy
  CHECK(sut->reuse.front().name == "store");
  CHECK(sut->modes == std::vector<actors::scheduler_mode>{actors::scheduler_mode::overlap});
  auto lru = parse({"--trace", "m.jsonl", "--store-split", "static", "--reuse", "store-recency"});
  REQUIRE(lru.has_value());
  CHECK(lru->reuse.front().name == "store-recency");
  CHECK(parse({"--trace", "m.jsonl", "--store-split", "shared"})->burst_s == 300);

  CHECK(parse({"--trace", "t.csv", "--store-split", "shared"}).error().find(".jsonl")
        != std::string::npos);
  CHECK(parse({"--trace", "m.jsonl", "--store-split", "elastic"}).error().find("'elastic'")
        != std::string::npos);
  CHECK(parse({"--trace", "m.jsonl", "--store-split", "shared", "--reuse", "off,store"})
          .error()
          .find("--reuse store")
        != std::string::npos);
  CHECK(parse({"--trace", "m.jsonl", "--store-split", "shared", "--reuse", "slot"})
          .error()
          .find("--reuse store")
        != std::string::npos);
  CHECK(parse({"--trace", "m.jsonl", "--store-split", "shared", "--path", "both"})
          .error()
          .find("--store-split runs in process only")
        != std::string::npos);
  CHECK(parse({"--trace", "m.jsonl", "--burst-s", "60"}).error().find("--store-split")
        != std::string::npos);
  CHECK(parse({"--trace", "m.jsonl", "--store-split", "shared", "--burst-s", "0"})
          .error()
          .find("--burst-s")
        != std::string::npos);
}

TEST_CASE("bench cli: snapshot, store and warm pool sizes override the profile") {
  auto sut = parse({"--trace", "m.jsonl", "--reuse", "store", "--snapshot-bytes", "1MiB",
                    "--store-bytes", "64MiB", "--warm-pool-bytes", "64MiB", "--time-scale", "4"});
  REQUIRE(sut.has_value());
  CHECK(sut->snapshot_bytes == 1ull << 20);
  CHECK(sut->store_bytes == 64ull << 20);
  CHECK(sut->warm_pool_bytes == 64ull << 20);
  auto setup = load_setup(*sut);
  REQUIRE(setup.has_value());
  CHECK(setup->model().backend.sim.snapshot_bytes == 1ull << 20);
  CHECK(setup->info.snapshot_bytes == 1ull << 20);
  CHECK(setup->cfg.store.max_bytes == 64ull << 20);
  CHECK(setup->cfg.store.warm_pool_bytes == 64ull << 20);
  CHECK(setup->time_scale == 4);

  CHECK(parse({"--trace", "m.jsonl", "--store-bytes", "4 gib"}).error().find("--store-bytes")
        != std::string::npos);
  CHECK(parse({"--trace", "m.jsonl", "--snapshot-bytes"}).error().find("--snapshot-bytes")
        != std::string::npos);
  // Checked as the configuration would be: a pool larger than the store, a
  // store below 1 MiB, a snapshot size the sim refuses.
  auto pool = parse({"--trace", "m.jsonl", "--store-bytes", "16MiB", "--warm-pool-bytes", "32MiB"});
  REQUIRE(pool.has_value());
  CHECK(load_setup(*pool).error().message.find("--warm-pool-bytes") != std::string::npos);
  auto tiny = parse({"--trace", "m.jsonl", "--store-bytes", "4KiB"});
  REQUIRE(tiny.has_value());
  CHECK(load_setup(*tiny).error().exit_code == exit_code::usage);
  auto odd = parse({"--trace", "m.jsonl", "--snapshot-bytes", "1000000"});
  REQUIRE(odd.has_value());
  CHECK(load_setup(*odd).error().exit_code == exit_code::config);
}
