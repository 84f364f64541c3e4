#include "backends/qbruntime/safetensors.hpp"
#include "tests/support/qbr_fixture.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

using namespace kvlane::backends::safetensors;

namespace {

std::vector<std::byte> file_of(const std::string& header, std::size_t data_bytes) {
  std::vector<std::byte> f(8 + header.size() + data_bytes);
  std::uint64_t len = header.size();
  std::memcpy(f.data(), &len, 8);
  std::memcpy(f.data() + 8, header.data(), header.size());
  return f;
}

std::string parse_error(const std::string& header, std::size_t data_bytes) {
  auto r = parse_header(file_of(header, data_bytes));
  REQUIRE_FALSE(r.has_value());
  return r.error();
}

} // namespace

TEST_CASE("safetensors: parse_header reads names, dtypes, shapes and byte ranges") {
  auto sut = parse_header(file_of(
    R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
    R"("b":{"dtype":"I64","shape":[],"data_offsets":[12,20]}})",
    20));
  REQUIRE(sut.has_value());
  REQUIRE(sut->size() == 2);
  CHECK((*sut)[0].name == "a");
  CHECK((*sut)[0].dtype == "BF16");
  CHECK((*sut)[0].shape == std::vector<std::uint64_t>{2, 3});
  CHECK((*sut)[0].begin == 0);
  CHECK((*sut)[0].end == 12);
  CHECK((*sut)[1].shape.empty());
  CHECK((*sut)[1].end - (*sut)[1].begin == 8);
}

TEST_CASE("safetensors: malformed headers are errors naming what is wrong") {
  CHECK(parse_header(std::vector<std::byte>(7)).error().find("shorter than the 8-byte header length")
        != std::string::npos);
  auto huge = file_of("{}", 0);
  huge[7] = std::byte{1};
  CHECK(parse_header(huge).error().find("exceeds the file") != std::string::npos);
  CHECK(parse_error("{\"a\":", 0).find("not valid JSON") != std::string::npos);
  CHECK(parse_error("[1]", 0).find("not a JSON object") != std::string::npos);
  CHECK(parse_error(R"({"a":1})", 0).find("tensor \"a\": not an object") != std::string::npos);
  CHECK(parse_error(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4).find("missing string \"dtype\"")
        != std::string::npos);
  CHECK(parse_error(R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", 4)
          .find("unknown dtype \"Q4\"") != std::string::npos);
  CHECK(parse_error(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4)
          .find("not a non-negative integer") != std::string::npos);
  CHECK(parse_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4)
          .find("missing \"data_offsets\"") != std::string::npos);
  CHECK(parse_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", 4)
          .find("data_offsets [0, 8] outside the 4 data bytes") != std::string::npos);
  CHECK(parse_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4)
          .find("holds 4 bytes, its dtype and shape need 8") != std::string::npos);
  CHECK(parse_error(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4)
          .find("shape overflows") != std::string::npos);
}

TEST_CASE("safetensors: half and bfloat16 convert exactly, subnormals and specials included") {
  CHECK(half_to_float(0x3C00) == 1.0f);
  CHECK(half_to_float(0xC000) == -2.0f);
  CHECK(half_to_float(0x7BFF) == 65504.0f);
  CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half_to_float(0x03FF) == std::ldexp(1023.0f, -24));
  CHECK(std::signbit(half_to_float(0x8000)));
  CHECK(half_to_float(0x7C00) == std::numeric_limits<float>::infinity());
  CHECK(std::isnan(half_to_float(0x7E00)));
  CHECK(bf16_to_float(0x3F80) == 1.0f);
  CHECK(bf16_to_float(0xC2F7) == -123.5f);
  CHECK(std::isnan(bf16_to_float(0x7FC0)));
}

TEST_CASE("safetensors: the embedding table is found by shape or name and read in every dtype") {
  using kvlane::test::emb_dtype;
  const auto dir = std::filesystem::temp_directory_path() / ("kvlane-st-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (auto type : {emb_dtype::bf16, emb_dtype::f16, emb_dtype::f32}) {
    const auto file = dir / "model.safetensors";
    kvlane::test::write_embedding(file, 50, 10, type);
    auto sut = embedding_table::open(file.string(), "", 10);
    REQUIRE_MESSAGE(sut.has_value(), sut.error());
    CHECK(sut->name() == "model.embed_tokens.weight");
    CHECK(sut->rows() == 50);
    CHECK(sut->hidden() == 10);
    std::vector<float> row(10);
    for (std::uint32_t id : {0u, 1u, 17u, 49u}) {
      sut->lookup(id, row);
      for (std::uint32_t c = 0; c < 10; ++c)
        CHECK(row[c] == fake_qbr::embedding_value(id, c));
    }
    auto named = embedding_table::open(file.string(), "model.embed_tokens.weight", 0);
    CHECK(named.has_value());
  }
  const auto file = (dir / "model.safetensors").string();
  auto err = [&](std::string_view tensor, std::uint32_t hidden) {
    auto r = embedding_table::open(file, tensor, hidden);
    REQUIRE_FALSE(r.has_value());
    return r.error();
  };
  CHECK(err("nope", 10).find("no tensor named \"nope\"") != std::string::npos);
  CHECK(err("model.norm.weight", 0).find("is F32 of rank 1") != std::string::npos);
  CHECK(err("", 7).find("no 2-D float tensor of width 7; set embedding_tensor") != std::string::npos);
  CHECK(err("", 0).find("several 2-D tensors") != std::string::npos);
  CHECK(embedding_table::open((dir / "absent").string(), "", 0).error().find("No such file")
        != std::string::npos);
  std::filesystem::remove_all(dir);
}
