// The KV fingerprint of a real GGUF model: a changed weights file between two
// runs gives another fingerprint, so KV kept from the first run is never used
// (the store refuses it at claim and counts model_changed).

#include "actors/model_fingerprint.hpp"
#include "backends/factory.hpp"
#include "ipc/snapshot_store.hpp"
#include "tests/llamacpp/llama_model.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>

using namespace kvlane;

namespace {

ipc::kv_fingerprint fingerprint_of_file(const std::string& gguf, const std::string& cache) {
  actors::model_config m;
  m.name = "llama";
  m.backend.kind = "llamacpp";
  m.backend.llamacpp = test::tiny_llama_options();
  m.backend.llamacpp.gguf = gguf;
  m.backend.llamacpp.slots = 1;
  m.chat_format = backends::chat_format::automatic;
  auto b = backends::make_backend(m.name, m.backend);
  REQUIRE(b.has_value());
  const auto t0 = std::chrono::steady_clock::now();
  auto fp = actors::fingerprint_of(m, **b, cache);
  const auto t1 = std::chrono::steady_clock::now();
  (void)actors::tokenizer_hash((*b)->tokens());
  const auto t2 = std::chrono::steady_clock::now();
  MESSAGE(fmt::format("fingerprint of a {:.0f} MiB GGUF ({} tokens): {:.1f} ms; the "
                      "tokenizer hash alone {:.1f} ms",
                      std::filesystem::file_size(gguf) / 1048576.0, (*b)->tokens().size(),
                      std::chrono::duration<double, std::milli>(t1 - t0).count(),
                      std::chrono::duration<double, std::milli>(t2 - t1).count()));
  REQUIRE(fp.has_value());
  return *fp;
}

} // namespace

TEST_CASE("llamacpp fingerprint: a GGUF rewritten between two runs changes the model's "
          "fingerprint, and the store refuses the first run's KV under it") {
  test::temp_dir dir;
  const auto gguf = dir.path() + "/model.gguf";
  const auto cache = dir.path() + "/cache";
  std::filesystem::copy_file(KVLANE_TEST_GGUF, gguf);
  const auto first = fingerprint_of_file(gguf, cache);
  CHECK(first.backend.starts_with("llamacpp"));
  CHECK(first.chat_format.starts_with("auto:"));
  CHECK(fingerprint_of_file(gguf, cache) == first);

  // One byte of the last tensor's data changes (other weights, same size and vocabulary).
  {
    std::fstream f(gguf, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-2, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-2, std::ios::end);
    f.put(static_cast<char>(c ^ 0x01));
  }
  const auto second = fingerprint_of_file(gguf, cache);
  CHECK(second.tokenizer == first.tokenizer);
  CHECK(second.kv_layout == first.kv_layout);
  CHECK(ipc::fingerprint_mismatch(first, second) == ipc::discard_reason::model_changed);

  // KV recorded under the first run's fingerprint is not taken under the second.
  auto arena = ipc::memfd_arena::create("kvlane-test-llama-fp", 1 << 20);
  REQUIRE(arena);
  auto store = ipc::snapshot_store::create(std::move(*arena));
  REQUIRE(store);
  auto& s = **store;
  REQUIRE(s.register_model(0, 0, 0));
  ipc::index_contents index;
  {
    REQUIRE(s.set_fingerprint(0, "llama", first));
    ipc::snapshot_meta meta;
    meta.retained = true;
    meta.cache_len = 16;
    auto label = std::make_shared<ipc::snapshot_label>();
    label->fingerprint = first;
    label->tokens.assign(16, 1);
    auto r = s.reserve(meta, 4096, label);
    REQUIRE(r);
    REQUIRE(s.seal(r->handle));
    auto written = s.snapshot_index();
    REQUIRE(written);
    index = *written;
    REQUIRE(s.free(r->handle));
  }
  REQUIRE(s.recover(index));
  REQUIRE(s.set_fingerprint(0, "llama", second));
  CHECK(s.claim(0, "llama") == 0);
  CHECK(s.stats().discarded[static_cast<std::size_t>(ipc::discard_reason::model_changed)] == 1);
}
