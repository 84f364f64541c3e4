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

TEST_CASE("byte_tokenizer: BOS is <|im_start|> 256, the stop token is <|im_end|> 257, vocabulary 258") {
  const byte_tokenizer sut;
  CHECK(sut.bos() == token_id{256});
  REQUIRE(sut.stop_tokens().size() == 1);
  CHECK(sut.stop_tokens()[0] == 257);
  CHECK(sut.special_token("<|im_start|>") == token_id{256});
  CHECK(sut.special_token("<|im_end|>") == token_id{257});
  CHECK_FALSE(sut.special_token("<|endoftext|>").has_value());
  CHECK(sut.size() == 258);
}

TEST_CASE("byte_tokenizer: special tokens in the text are bytes unless parse_special is set") {
  const byte_tokenizer sut;
  const std::string text = "<|im_start|>a<|im_end|><|im_x";
  const auto plain = sut.encode(text);
  CHECK(plain.size() == text.size());
  CHECK(sut.decode(plain) == text);
  const auto parsed = sut.encode(text, true);
  std::vector<token_id> expected{256, 'a', 257};
  for (char c : std::string_view("<|im_x"))
    expected.push_back(static_cast<unsigned char>(c));
  CHECK(parsed == expected);
}

TEST_CASE("byte_tokenizer: decode skips special and out-of-vocabulary tokens") {
  const byte_tokenizer sut;
  const std::vector<token_id> tokens{256, 'o', 'k', 257, 1000, '.'};
  CHECK(sut.decode(tokens) == "ok.");
}
