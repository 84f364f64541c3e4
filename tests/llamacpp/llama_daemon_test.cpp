// The real daemon and CLI on a GGUF: `kvlaned --gguf FILE` with every other key at its
// default serves HTTP chat and the admin CLI; `kvlane probe --verify` passes on the
// llamacpp backend and measures the overlap a CPU gives (none: one llama_context).
#include "tests/llamacpp/llama_daemon.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <regex>

using namespace std::chrono_literals;
using kvlane::child_process;
using kvlane::test::spawn;
using kvlane::test::temp_dir;
using json = nlohmann::json;

namespace {

std::string run(const std::string& path, std::vector<std::string> args, int expect = 0) {
  auto p = spawn(path, std::move(args));
  const auto rc = p.wait_exit(180s);
  CAPTURE(p.output());
  REQUIRE(rc == expect);
  return p.output();
}

} // namespace

TEST_CASE("llamacpp daemon: kvlane probe --verify passes on a GGUF and finds no overlap on a CPU") {
  temp_dir dir;
  const auto config = dir.write("kvlane.toml", kvlane::test::tiny_llama_config(dir.path() + "/run", ""));
  const auto out = run(KVLANE_CLI_PATH, {"probe", "--config", config, "--model", "tiny", "--verify",
                                         "--json"});
  const auto doc = json::parse(out.substr(out.find('{')));
  CHECK(doc["backend"] == "llamacpp");
  REQUIRE(doc.contains("verify"));
  CHECK(doc["verify"]["passed"] == true);
  for (const auto& c : doc["verify"]["checks"]) {
    CAPTURE(c.dump());
    CHECK(c["result"] != "failed");
  }
  CHECK(doc["claims_overlap"] == false);
  CHECK(doc["snapshot_bytes"].get<std::uint64_t>() > 0);
}

TEST_CASE("llamacpp daemon: kvlaned --gguf serves the file with defaults, and chat, ps and status work") {
  temp_dir dir;
  // A config with a sim model, its runtime dir and HTTP: --gguf replaces the models.
  const auto config = dir.write("kvlane.toml", fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
[[model]]
name = "replaced"
[model.sim]
slots = 2
[http]
listen = "127.0.0.1:0"
)",
                                                            dir.path() + "/run"));
  auto d = spawn(KVLANED_PATH, {"--config", config, "--gguf", KVLANE_TEST_GGUF});
  REQUIRE(d.wait_for_output("ready:", 60s));
  std::smatch m;
  const std::regex url{R"(on http://127\.0\.0\.1:(\d+))"};
  const auto log = d.output();
  REQUIRE(std::regex_search(log, m, url));
  const auto port = m[1].str();

  // The model is named after the file and the configured sim model is gone.
  const auto models = json::parse(run("/usr/bin/curl", {"-s", "http://127.0.0.1:" + port + "/v1/models"}));
  REQUIRE(models["data"].size() == 1);
  CHECK(models["data"][0]["id"] == "tiny-llama");

  const json body{{"model", "tiny-llama"},
                  {"messages", json::array({{{"role", "user"}, {"content", "Hello there"}}})},
                  {"max_tokens", 8},
                  {"temperature", 0}};
  const auto answer = json::parse(run("/usr/bin/curl", {"-s", "-H", "Content-Type: application/json",
                                                        "-d", body.dump(),
                                                        "http://127.0.0.1:" + port + "/v1/chat/completions"}));
  CAPTURE(answer.dump());
  CHECK(answer["usage"]["completion_tokens"].get<int>() > 0);
  CHECK(answer["usage"]["prompt_tokens"].get<int>() > 5); // the Llama-3 template's headers

  const auto sock = dir.path() + "/run/kvlane-admin.sock";
  const auto status = json::parse(run(KVLANE_CLI_PATH, {"status", "--json", "--socket", sock}));
  CAPTURE(status.dump());
  const auto text = status.dump();
  CHECK(text.find("llamacpp") != std::string::npos);
  CHECK(text.find("tiny-llama") != std::string::npos);
  run(KVLANE_CLI_PATH, {"ps", "--socket", sock});
  d.signal(SIGTERM);
  CHECK(d.wait_exit(30s) == 0);
}

TEST_CASE("llamacpp daemon: a missing GGUF or a bad [model.llamacpp] key stops kvlaned with the reason") {
  temp_dir dir;
  auto out = run(KVLANED_PATH, {"--gguf", dir.path() + "/nope.gguf", "--check"}, 1);
  CHECK(out.find("nope.gguf: no such file") != std::string::npos);
  const auto config = dir.write("bad.toml", R"(version = 1
[[model]]
name = "m"
backend = "llamacpp"
[model.llamacpp]
gguf = "/models/m.gguf"
kv_type = "q4"
)");
  out = run(KVLANED_PATH, {"--config", config, "--check"}, 1);
  CHECK(out.find(":7: model[0].llamacpp.kv_type") != std::string::npos);
  CHECK(out.find("\"f16\"") != std::string::npos);
}
