#pragma once

// A real kvlaned serving the tiny test GGUF (tests/llamacpp/llama_model.hpp): its config,
// its start (waiting for "ready:") and the HTTP port it logs.

#include "tests/support/child_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <memory>
#include <regex>
#include <string>
#include <string_view>

namespace kvlane::test {

/// The daemon's config: model "tiny" (2 slots of 512 tokens, 2 threads) with HTTP at `listen`
/// ("127.0.0.1:0" picks a free port; "" = off), then `extra` TOML.
inline std::string tiny_llama_config(const std::string& run_dir, std::string_view listen,
                                     std::string_view extra = {}) {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
worker_threads = 2
[[model]]
name = "tiny"
backend = "llamacpp"
[model.llamacpp]
gguf = "{}"
slots = 2
context = 512
threads = 2
batch = 64
{}
[http]
listen = "{}"
)",
                     run_dir, KVLANE_TEST_GGUF, extra, listen);
}

/// kvlaned on `config`, started and ready.
struct llama_daemon {
  temp_dir dir;
  std::string run_dir = dir.path() + "/run";
  std::unique_ptr<child_process> proc;
  std::uint16_t port = 0; ///< HTTP, when listening

  explicit llama_daemon(std::string_view listen = "127.0.0.1:0", std::string_view extra = {}) {
    const auto config = dir.write("kvlane.toml", tiny_llama_config(run_dir, listen, extra));
    proc = std::make_unique<child_process>(spawn(KVLANED_PATH, {"--config", config}));
    REQUIRE(proc->wait_for_output("ready:", std::chrono::seconds(60)));
    if (listen.empty())
      return;
    std::smatch m;
    const std::regex url{R"(on http://127\.0\.0\.1:(\d+))"};
    const auto out = proc->output();
    REQUIRE(std::regex_search(out, m, url));
    port = static_cast<std::uint16_t>(std::stoi(m[1]));
  }
};

} // namespace kvlane::test
