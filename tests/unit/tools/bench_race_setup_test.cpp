// The race's setup: its flags, both servers' configurations, the prompt text
// and the workloads it sends.
#include "tools/bench/bench_options.hpp"
#include "tools/bench/completion_request.hpp"
#include "tools/bench/http_client.hpp"
#include "tools/bench/http_driver.hpp"
#include "tools/bench/race_server_config.hpp"
#include "tools/bench/race_workloads.hpp"

#include "daemon/config.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

using namespace kvlane;
using namespace kvlane::tools::bench;

namespace {

expected<bench_options, std::string> parse(std::vector<std::string_view> args) {
  return parse_args(args);
}

std::string arg_after(const std::vector<std::string>& args, std::string_view flag) {
  auto it = std::find(args.begin(), args.end(), flag);
  REQUIRE(it != args.end());
  REQUIRE(it + 1 != args.end());
  return *(it + 1);
}

} // namespace

TEST_CASE("bench_http: --race-llama takes the shared settings and defaults the rest") {
  auto sut = parse({"--race-llama", "--gguf", "/m/x.gguf", "--llama-server", "/bin/ls",
                    "--threads", "3", "--parallel", "2", "--ctx-per-seq", "1024"});
  REQUIRE_MESSAGE(sut.has_value(), sut.error());
  CHECK(sut->race.race_llama);
  CHECK(sut->race.settings.gguf == "/m/x.gguf");
  CHECK(sut->race.settings.threads == 3);
  CHECK(sut->race.settings.threads_batch == 3); // follows --threads
  CHECK(sut->race.settings.parallel == 2);
  CHECK(sut->race.settings.ctx_per_seq == 1024);
  CHECK(sut->race.workloads == std::vector<std::string>{"decode", "prefill", "azure", "mooncake"});
  CHECK(sut->race.servers.front() == server_kind::llama_server);
  CHECK(sut->load == 1.0);
  CHECK(sut->model == "bench");
  CHECK(sut->race.output_scale == 0.25);
  CHECK(sut->race.repeats == 8);      // one-stream requests per server
  CHECK(sut->race.trace_rounds == 2); // whole trace runs per server
}

TEST_CASE("bench_http: the race's flags are refused where they do not apply") {
  CHECK_FALSE(parse({"--race-llama", "--llama-server", "/bin/ls"}));  // no --gguf
  CHECK_FALSE(parse({"--race-llama", "--gguf", "/m.gguf"}));          // no --llama-server
  CHECK_FALSE(parse({"--race-llama", "--gguf", "/m.gguf", "--llama-server", "/bin/ls", "--trace",
                     "t.csv"}));
  CHECK_FALSE(parse({"--race-llama", "--gguf", "/m.gguf", "--llama-server", "/bin/ls", "--modes",
                     "fcfs"}));
  CHECK_FALSE(parse({"--gguf", "/m.gguf", "--synthetic"}));          // needs --race-llama
  CHECK_FALSE(parse({"--path", "http", "--synthetic"}));             // no --url
  CHECK_FALSE(parse({"--path", "http", "--url", "https://x:1", "--synthetic"}));
  CHECK_FALSE(parse({"--path", "http", "--url", "http://127.0.0.1:9", "--synthetic", "--load",
                     "1"}));
  CHECK_FALSE(parse({"--race-llama", "--gguf", "/m.gguf", "--llama-server", "/bin/ls",
                     "--race-workloads", "decode,warp"}));
  CHECK_FALSE(parse({"--race-llama", "--gguf", "/m.gguf", "--llama-server", "/bin/ls",
                     "--kv-type", "q4"}));
  CHECK_FALSE(parse({"--race-llama", "--gguf", "/m.gguf", "--llama-server", "/bin/ls",
                     "--trace-rounds", "0"}));
}

TEST_CASE("bench_http: --path http drives one server with the workload of the usual flags") {
  auto sut = parse({"--path", "http", "--url", "http://127.0.0.1:8471", "--server", "llama-server",
                    "--synthetic", "--requests", "5"});
  REQUIRE_MESSAGE(sut.has_value(), sut.error());
  CHECK(sut->path == bench_path::http);
  CHECK(sut->race.server == server_kind::llama_server);
  CHECK(sut->model == "bench");
  CHECK(sut->race.output_scale == 1.0);
  auto w = build_flag_workload(*sut);
  REQUIRE(w.has_value());
  CHECK(w->requests.size() == 5);
  for (const auto& r : w->requests)
    CHECK(r.prompt_tokens + r.output_tokens <= 2048 - race_context_margin);
}

TEST_CASE("bench_http: URLs name a loopback host and port, nothing else") {
  auto a = parse_http_url("http://127.0.0.1:8471/");
  REQUIRE(a);
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 8471);
  auto b = parse_http_url("http://[::1]:9000");
  REQUIRE(b);
  CHECK(b->host == "::1");
  CHECK(b->port == 9000);
  auto c = parse_http_url("http://localhost");
  REQUIRE(c);
  CHECK(c->port == 80);
  CHECK_FALSE(parse_http_url("http://127.0.0.1:0"));
  CHECK_FALSE(parse_http_url("http://127.0.0.1:8471/v1"));
  CHECK_FALSE(parse_http_url("127.0.0.1:8471"));
}

TEST_CASE("bench_http: kvlaned's generated configuration is valid and matches llama-server's flags") {
  race_settings s;
  s.gguf = "/models/bench.gguf";
  s.threads = 2;
  s.threads_batch = 1;
  s.parallel = 4;
  s.ctx_per_seq = 2048;
  s.batch = 256;
  s.kv_type = "q8_0";
  s.flash_attn = "off";
  s.cache_ram_mib = 1024;
  const auto toml = kvlaned_race_toml(s, "/tmp/kvlane-race-x/run", 18080, "warn");
  CHECK(toml.find("backend = 'llamacpp'") != std::string::npos);
  CHECK(toml.find("gguf = '/models/bench.gguf'") != std::string::npos);
  CHECK(toml.find("slots = 4") != std::string::npos);
  CHECK(toml.find("context = 2048") != std::string::npos);
  CHECK(toml.find("threads_batch = 1") != std::string::npos);
  CHECK(toml.find("batch = 256") != std::string::npos);
  CHECK(toml.find("kv_type = 'q8_0'") != std::string::npos);
  CHECK(toml.find("flash_attn = 'off'") != std::string::npos);
  CHECK(toml.find("listen = '127.0.0.1:18080'") != std::string::npos);
  CHECK(toml.find("max_bytes = '1024MiB'") != std::string::npos);
  // The daemon reads it (the llamacpp table is read in every build).
  auto cfg = daemon::parse(toml, "race.toml");
  REQUIRE_MESSAGE(cfg.has_value(), cfg.error().message);
  CHECK(cfg->http.listen == "127.0.0.1:18080");
  CHECK(cfg->store.max_bytes == 1024ull << 20);
  CHECK(cfg->scheduler.max_step_tokens == 256);
  REQUIRE(cfg->models.size() == 1);
  CHECK(cfg->models.front().name == "bench");

  const auto args = llama_server_args(s, 18081);
  CHECK(arg_after(args, "-m") == "/models/bench.gguf");
  CHECK(arg_after(args, "--port") == "18081");
  CHECK(arg_after(args, "--host") == "127.0.0.1");
  CHECK(arg_after(args, "-t") == "2");
  CHECK(arg_after(args, "-tb") == "1");
  CHECK(arg_after(args, "--parallel") == "4");
  CHECK(arg_after(args, "-c") == "8192"); // 4 slots x 2048
  CHECK(arg_after(args, "-b") == "256");
  CHECK(arg_after(args, "-ub") == "256");
  CHECK(arg_after(args, "-ctk") == "q8_0");
  CHECK(arg_after(args, "-ctv") == "q8_0");
  CHECK(arg_after(args, "-fa") == "off");
  CHECK(arg_after(args, "--cache-ram") == "1024");
  CHECK(arg_after(args, "-ngl") == "0");
  CHECK(arg_after(args, "--alias") == "bench");
  CHECK(std::find(args.begin(), args.end(), "--no-kv-unified") != args.end());
  CHECK(std::find(args.begin(), args.end(), "--no-webui") != args.end());
}

TEST_CASE("bench_http: an own kvlane.toml keeps its models and gets the race's listener and runtime dir") {
  const std::string own = "version = 1\n[daemon]\nruntime_dir = '/run/x'\n[http]\nlisten = "
                          "'127.0.0.1:8471'\n[metrics]\nlisten = '127.0.0.1:9464'\n[[model]]\n"
                          "name = 'sim-1'\nbackend = 'sim'\n";
  auto sut = adapt_kvlane_config(own, "own.toml", "/tmp/r/run", 19000);
  REQUIRE(sut.has_value());
  auto cfg = daemon::parse(*sut, "adapted.toml");
  REQUIRE_MESSAGE(cfg.has_value(), cfg.error().message);
  CHECK(cfg->daemon.runtime_dir == "/tmp/r/run");
  CHECK(cfg->http.listen == "127.0.0.1:19000");
  CHECK(cfg->metrics.listen.empty());
  CHECK(cfg->models.front().name == "sim-1");
  auto bad = adapt_kvlane_config("version = = 1", "bad.toml", "/tmp/r/run", 19000);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().find("bad.toml:1") != std::string::npos);
}

TEST_CASE("bench_http: prompt text is one word per workload token and keeps shared prefixes") {
  const std::vector<backends::token_id> a{'a', 'b', ' ', 'z'};
  CHECK(prompt_text(a) == " the of they you");
  std::vector<backends::token_id> longer = a;
  longer.push_back('c');
  const auto ta = prompt_text(a), tb = prompt_text(longer);
  CHECK(tb.substr(0, ta.size()) == ta);
  CHECK(prompt_word(1000) == prompt_word('b')); // 1000 mod 27 = 1, as 'b'
  // 27 distinct words: different tokens never write the same text.
  std::vector<std::string_view> words;
  for (char c = 'a'; c <= 'z'; ++c)
    words.push_back(prompt_word(c));
  words.push_back(prompt_word(' '));
  std::sort(words.begin(), words.end());
  CHECK(std::adjacent_find(words.begin(), words.end()) == words.end());
}

TEST_CASE("bench_http: each server gets its own dialect of the same completion request") {
  completion_request r;
  r.model = "bench";
  r.prompt = " the of";
  r.max_tokens = 7;
  r.interactive = false;
  const auto kv = nlohmann::json::parse(completion_body(server_kind::kvlane, r));
  CHECK(kv["model"] == "bench");
  CHECK(kv["prompt"] == " the of");
  CHECK(kv["max_tokens"] == 7);
  CHECK(kv["temperature"] == 0);
  CHECK(kv["stream"] == true);
  CHECK(kv["stream_options"]["include_usage"] == true);
  CHECK(kv["priority"] == "batch");
  CHECK_FALSE(kv.contains("ignore_eos")); // kvlaned refuses fields it does not implement
  const auto ll = nlohmann::json::parse(completion_body(server_kind::llama_server, r));
  CHECK(ll["ignore_eos"] == true);
  CHECK(ll["max_tokens"] == 7);
  CHECK_FALSE(ll.contains("priority"));
}

TEST_CASE("bench_http: the decode and prefill workloads are one stream of distinct prompts") {
  auto o = parse({"--race-llama", "--gguf", "/m.gguf", "--llama-server", "/bin/ls", "--repeats",
                  "3", "--ctx-per-seq", "512", "--decode-tokens", "100"});
  REQUIRE(o);
  auto decode = build_race_workload(*o, "decode");
  REQUIRE(decode);
  REQUIRE(decode->requests.size() == 3);
  CHECK_FALSE(decode->trace);
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& r = decode->requests[i];
    CHECK(r.output_tokens == 100);
    CHECK(r.prompt_tokens == 32);
    CHECK(r.previous_turn == static_cast<std::int32_t>(i) - 1); // one after another
  }
  CHECK(request_prompt(decode->requests[0], 0) != request_prompt(decode->requests[1], 1));
  auto prefill = build_race_workload(*o, "prefill");
  REQUIRE(prefill);
  CHECK(prefill->requests.front().prompt_tokens == 512 - race_context_margin - 1);
  CHECK(prefill->requests.front().output_tokens == 1);
  // No request of either is a later turn: nothing can be reused.
  for (bool b : later_turns(prefill->requests))
    CHECK_FALSE(b);
}

TEST_CASE("bench_http: later turns of a conversation are the reusable ones") {
  std::vector<trace_request> reqs(4);
  auto prompt = std::make_shared<std::vector<backends::token_id>>(10, 'a');
  for (auto& r : reqs)
    r.prompt = prompt;
  reqs[0].conversation = 0;
  reqs[1].conversation = 1;
  reqs[2].conversation = 0;
  reqs[3].conversation = 1;
  const auto sut = later_turns(reqs);
  CHECK(sut == std::vector<bool>{false, false, true, true});
  reqs[2].prompt = nullptr; // no prompt of its own (a synthetic prompt): never reusable
  CHECK(later_turns(reqs)[2] == false);
}

TEST_CASE("bench_http: trace arrivals are scaled to the load against the calibrated capacity") {
  race_workload w;
  w.trace = true;
  for (int i = 0; i < 10; ++i) {
    trace_request r;
    r.arrival_s = i;
    r.prompt_tokens = 100;
    r.output_tokens = 50;
    w.requests.push_back(r);
  }
  race_calibration c{50, 500, "llama-server"};
  const auto wm = calibrated_work_model(c, 4, 512);
  CHECK(wm.step_per_token_ms == doctest::Approx(2.0));
  CHECK(wm.step_base_ms == doctest::Approx(18.0)); // 20 ms a decode step, 2 of them per token
  CHECK(wm.decode_batch == 4);
  scale_race_arrivals(w, c, 1.0, std::nullopt, 4, 512);
  CHECK(w.offered_load == doctest::Approx(1.0));
  CHECK(w.arrival_scale > 0);
  race_workload fixed = w;
  scale_race_arrivals(fixed, std::nullopt, std::nullopt, 2.0, 4, 512);
  CHECK(fixed.arrival_scale == doctest::Approx(0.5));
  CHECK(fixed.requests.back().arrival_s == doctest::Approx(w.requests.back().arrival_s * 0.5));
}

TEST_CASE("bench_http: the trace workloads fit a slot and mark the interactive share") {
  const std::string path = std::string{KVLANE_SOURCE_DIR} + "/../shared/traces/azure-llm-2023-conv.csv";
  if (!std::ifstream{path}) {
    MESSAGE("no shared traces beside the checkout: skipped");
    return;
  }
  auto o = parse({"--race-llama", "--gguf", "/m.gguf", "--llama-server", "/bin/ls",
                  "--ctx-per-seq", "1024", "--azure-trace", path.c_str(), "--azure-requests", "50"});
  REQUIRE(o);
  auto sut = build_race_workload(*o, "azure");
  REQUIRE(sut);
  CHECK(sut->trace);
  CHECK(sut->requests.size() == 50);
  for (const auto& r : sut->requests)
    CHECK(r.prompt_tokens + r.output_tokens <= 1024 - race_context_margin);
  CHECK(sut->interactive > 0);
  CHECK(sut->interactive < 50);
}
