// kvlaned serves a request through the qbruntime backend, built against the stand-in SDK
// (KVLANE_QBRUNTIME=fake), and the answer equals the same model decoded in-process.
#include "backends/qbruntime/qbr_backend.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/qbr_fixture.hpp"

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <algorithm>
#include <csignal>

using namespace std::chrono_literals;
using kvlane::test::child_process;
using kvlane::test::temp_dir;

namespace {

constexpr std::string_view mxq = "batch = true\nslots = 4\nmax_cache_size = 512\nmax_width = 128\n"
                                 "vocab = 300\nhidden = 12\nlayers = 4\nseed = 11\n";

/// Greedy text for `prompt` (with the tokenizer's BOS first, as the engine sends it).
std::string greedy_text(const kvlane::backends::qbruntime_options& o, std::string_view prompt,
                        std::size_t n) {
  auto made = kvlane::backends::qbr_backend::create("ref", o);
  REQUIRE_MESSAGE(made.has_value(), made.error().message);
  auto& b = **made;
  std::vector<kvlane::backends::token_id> tokens{b.tokens().bos()};
  for (auto t : b.tokens().encode(prompt))
    tokens.push_back(t);
  std::vector<kvlane::backends::token_id> out;
  kvlane::backends::step_output logits;
  std::uint32_t len = 0;
  std::span<const kvlane::backends::token_id> next(tokens);
  while (out.size() < n) {
    kvlane::backends::step_row row{0, len, next};
    REQUIRE(b.step(std::span{&row, 1}, logits).has_value());
    len += static_cast<std::uint32_t>(next.size());
    const auto row0 = logits.row(0);
    out.push_back(static_cast<kvlane::backends::token_id>(
      std::max_element(row0.begin(), row0.end()) - row0.begin()));
    next = std::span<const kvlane::backends::token_id>(&out.back(), 1);
  }
  return b.tokens().decode(out);
}

} // namespace

TEST_CASE("qbruntime serve: kvlaned answers through the qbruntime backend on the stand-in SDK") {
  kvlane::test::qbr_model_dir model(std::string(mxq), 300, 12);
  temp_dir dir;
  auto cfg = dir.write("kvlane.toml", fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}/run"
worker_threads = 2

[[model]]
name = "npu"
backend = "qbruntime"
[model.qbruntime]
model_dir = "{}"

[store]
max_bytes = "64MiB"
)",
                                                    dir.path(), model.dir.string()));
  child_process daemon{KVLANED_PATH, {"--config", cfg}};
  REQUIRE(daemon.wait_for_output("ready: 1 model(s)", 20s));
  CHECK(daemon.output().find("model 'npu' loaded on backend 'qbruntime': 4 slots, max context 512")
        != std::string::npos);

  const std::string prompt = "Hello from the NPU";
  child_process run{KVLANE_CLI_PATH, {"run", "--socket", dir.path() + "/run/kvlane.sock", "--model",
                                      "npu", "--max-tokens", "24", prompt}};
  auto rc = run.wait_exit(20s);
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  const auto want = greedy_text(model.options(), prompt, 24);
  CHECK(want.size() == 24);
  CHECK(run.output() == want + "\n");

  daemon.signal(SIGTERM);
  auto exit = daemon.wait_exit(20s);
  REQUIRE(exit.has_value());
  CHECK(*exit == 0);
}
