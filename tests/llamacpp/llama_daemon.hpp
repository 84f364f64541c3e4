#pragma once

// A real kvlaned serving the tiny test GGUF (tests/llamacpp/llama_model.hpp): its config,
// its start (waiting for "ready:") and the HTTP port it logs.

#include "tests/support/child_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <string_view>

namespace kvlane::test {

/// A llamacpp model of the tests: its name, GGUF and tokens per slot.
struct llama_test_model {
  std::string_view name = "tiny";
  std::string_view gguf = KVLANE_TEST_GGUF;
  std::uint32_t context = 512;
};

/// A daemon config serving `m` (2 slots, 2 threads, batch 64), then `extra` TOML, with HTTP at
/// `listen` ("127.0.0.1:0" picks a free port; "" = off) and `http_extra` lines in [http].
inline std::string llama_model_config(const std::string& run_dir, const llama_test_model& m,
                                      std::string_view listen, std::string_view extra = {},
                                      std::string_view http_extra = {}) {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
worker_threads = 2
[[model]]
name = "{}"
backend = "llamacpp"
[model.llamacpp]
gguf = "{}"
slots = 2
context = {}
threads = 2
batch = 64
{}
[http]
listen = "{}"
{}
)",
                     run_dir, m.name, m.gguf, m.context, extra, listen, http_extra);
}

/// The same for model "tiny" (tests/llamacpp/llama_model.hpp's GGUF, 512 tokens per slot).
inline std::string tiny_llama_config(const std::string& run_dir, std::string_view listen,
                                     std::string_view extra = {}) {
  return llama_model_config(run_dir, {}, listen, extra);
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
