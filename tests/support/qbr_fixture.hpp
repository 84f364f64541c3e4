#pragma once

// A model directory for the stand-in qbruntime: a TOML "model.mxq" and a model.safetensors
// whose embedding rows encode their ids (tests/fake_qbruntime/include/fake_qbruntime/
// embedding_code.hpp). Removed with the fixture.

#include "backends/qbruntime_options.hpp"
#include "tests/fake_qbruntime/include/fake_qbruntime/embedding_code.hpp"

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvlane::test {

enum class emb_dtype { f32, f16, bf16 };

/// float -> IEEE half for values exact in half (the fixture's codes are).
inline std::uint16_t float_to_half(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const int exp = static_cast<int>((x >> 23) & 0xFF) - 127 + 15;
  const std::uint32_t mant = x & 0x7FFFFFu;
  if ((x & 0x7FFFFFFFu) == 0)
    return static_cast<std::uint16_t>(sign);
  return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13));
}

/// Writes a safetensors file with the embedding table `name` ([vocab, hidden]) and, beside
/// it, a 1-D norm and a 2-D tensor of another width (so that picking by shape is tested).
inline void write_embedding(const std::filesystem::path& file, std::uint32_t vocab,
                            std::uint32_t hidden, emb_dtype type,
                            const std::string& name = "model.embed_tokens.weight") {
  std::string data;
  for (std::uint32_t id = 0; id < vocab; ++id) {
    for (std::uint32_t c = 0; c < hidden; ++c) {
      const float v = fake_qbr::embedding_value(id, c);
      if (type == emb_dtype::f32) {
        data.append(reinterpret_cast<const char*>(&v), 4);
      } else {
        const std::uint16_t h = type == emb_dtype::f16
                                  ? float_to_half(v)
                                  : static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v) >> 16);
        data.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
  }
  const std::size_t emb_bytes = data.size();
  data.append(std::string(hidden * 4, '\0'));   // model.norm.weight, F32 [hidden]
  data.append(std::string(3 * 5 * 4, '\0'));    // lm_head.extra, F32 [3, 5]
  const char* dt = type == emb_dtype::f32 ? "F32" : type == emb_dtype::f16 ? "F16" : "BF16";
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"},\"" + name + "\":{\"dtype\":\"" + dt
                       + "\",\"shape\":[" + std::to_string(vocab) + "," + std::to_string(hidden)
                       + "],\"data_offsets\":[0," + std::to_string(emb_bytes) + "]},"
                       + "\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":["
                       + std::to_string(hidden) + "],\"data_offsets\":[" + std::to_string(emb_bytes)
                       + "," + std::to_string(emb_bytes + hidden * 4) + "]},"
                       + "\"lm_head.extra\":{\"dtype\":\"F32\",\"shape\":[3,5],\"data_offsets\":["
                       + std::to_string(emb_bytes + hidden * 4) + ","
                       + std::to_string(emb_bytes + hidden * 4 + 60) + "]}}";
  std::ofstream out(file, std::ios::binary);
  std::uint64_t len = header.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << header << data;
}

struct qbr_model_dir {
  std::filesystem::path dir;

  /// `mxq` is the stand-in's model file (TOML); `vocab`/`hidden` must match it.
  qbr_model_dir(const std::string& mxq, std::uint32_t vocab, std::uint32_t hidden,
                emb_dtype type = emb_dtype::bf16) {
    std::string templ = (std::filesystem::temp_directory_path() / "kvlane-qbr-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr)
      throw std::runtime_error("mkdtemp failed");
    dir = templ;
    std::ofstream(dir / "model.mxq") << mxq;
    write_embedding(dir / "model.safetensors", vocab, hidden, type);
  }
  ~qbr_model_dir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  qbr_model_dir(const qbr_model_dir&) = delete;
  qbr_model_dir& operator=(const qbr_model_dir&) = delete;

  backends::qbruntime_options options() const {
    backends::qbruntime_options o;
    o.model_dir = dir.string();
    o.tokenizer = "bytes"; // the tests drive ids; a real model dir holds tokenizer.json
    return o;
  }
};

} // namespace kvlane::test
