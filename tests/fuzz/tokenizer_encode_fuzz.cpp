// libFuzzer target for the Hugging Face tokenizer's encoder (built with clang:
// -fsanitize=fuzzer,address,undefined; see tests/CMakeLists.txt), on the
// committed tiny fixture (Llama 3 split regex, NFC, ignore_merges) and the
// EXAONE-like fixture (merges as arrays, no normalizer, no ignore_merges).
//
// The input is text (any bytes). Invariants, any violation traps:
// encode without special parsing yields no added-token id and decodes back to
// the NFC form of the input (the input itself without a normalizer); with
// special parsing every id is below size(); rendering the input as a chat
// message never fails and keeps the format's special tokens countable.
#include "backends/chat_format.hpp"
#include "backends/hf_tokenizer.hpp"
#include "backends/unicode_nfc.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kb = kvlane::backends;

namespace {

void check(bool ok) {
  if (!ok)
    __builtin_trap();
}

std::unique_ptr<kb::hf_tokenizer> load(const char* name) {
  auto t = kb::hf_tokenizer::load(std::string(KVLANE_FIXTURES_DIR) + "/" + name);
  check(t.has_value());
  return std::move(*t);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto tiny = load("tiny");
  static const auto exaone = load("exaone");
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  for (const auto* tok : {tiny.get(), exaone.get()}) {
    const auto plain = tok->encode(text, false);
    for (auto id : plain)
      check(id < tok->size() && !tok->is_special(id)
            && tok->special_token(tok->decode(std::vector<kb::token_id>{id})) != id);
    const std::string expected = tok == tiny.get() ? kb::to_nfc(text) : std::string(text);
    check(tok->decode(plain) == expected);
    for (auto id : tok->encode(text, true))
      check(id < tok->size());
  }

  const std::vector<kb::chat_message> messages{{"system", "s"}, {"user", std::string(text)}};
  auto rendered = kb::render_chat(kb::chat_format::exaone, *exaone, messages, true);
  check(rendered.has_value());
  const auto end = *exaone->special_token("[|endofturn|]");
  check(std::count(rendered->begin(), rendered->end(), end) == 1);
  return 0;
}
