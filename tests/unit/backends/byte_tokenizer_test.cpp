#include "backends/byte_tokenizer.hpp"

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

using kvlane::backends::byte_tokenizer;
using kvlane::backends::token_id;

TEST_CASE("byte_tokenizer: encode maps each byte to its own token and adds no BOS") {
  const byte_tokenizer sut;
  using namespace std::literals;
  const auto tokens = sut.encode("hi \xff\0!"sv);
  CHECK(tokens == std::vector<token_id>{'h', 'i', ' ', 0xff, 0x00, '!'});
  CHECK(sut.encode("").empty());
}

TEST_CASE("byte_tokenizer: decode round-trips encode for arbitrary bytes") {
  const byte_tokenizer sut;
  std::string all;
  for (int b = 0; b < 256; ++b)
    all.push_back(static_cast<char>(b));
  CHECK(sut.decode(sut.encode(all)) == all);
}

TEST_CASE("byte_tokenizer: BOS is 256 and EOS is 257, vocabulary 258") {
  const byte_tokenizer sut;
  CHECK(sut.bos() == 256);
  CHECK(sut.eos() == 257);
  CHECK(byte_tokenizer::vocab_size == 258);
}

TEST_CASE("byte_tokenizer: decode skips special and out-of-vocabulary tokens") {
  const byte_tokenizer sut;
  const std::vector<token_id> tokens{sut.bos(), 'o', 'k', sut.eos(), 1000, '.'};
  CHECK(sut.decode(tokens) == "ok.");
}
