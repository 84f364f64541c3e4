#include "tools/grammarbench/gguf_vocab.hpp"

#include "backends/llamacpp/gguf_tokenizer.hpp"

#include <llama.h>

#include <cstdio>

namespace kvlane::tools {

expected<gguf_vocab, std::string> load_gguf_vocab(const std::string& path) {
  llama_log_set([](ggml_log_level level, const char* text, void*) {
    if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
  }, nullptr);
  llama_backend_init();
  auto p = llama_model_default_params();
  p.vocab_only = true;
  llama_model* model = llama_model_load_from_file(path.c_str(), p);
  if (model == nullptr) return unexpected(std::string{"cannot load the vocabulary of "} + path);
  gguf_vocab out;
  {
    backends::gguf_tokenizer tok{llama_model_get_vocab(model), std::string{}};
    out.tokens.reserve(tok.size());
    for (std::uint32_t id = 0; id < tok.size(); ++id) {
      const backends::token_id t = static_cast<backends::token_id>(id);
      out.tokens.push_back(tok.decode({&t, 1}));
    }
    for (backends::token_id t : tok.stop_tokens()) out.end_tokens.push_back(static_cast<std::uint32_t>(t));
  }
  llama_model_free(model);
  return out;
}

} // namespace kvlane::tools
