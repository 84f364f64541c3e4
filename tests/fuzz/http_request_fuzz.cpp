// libFuzzer target for the HTTP API's request decoder (built with clang:
// -fsanitize=fuzzer,address,undefined; see tests/CMakeLists.txt).
//
// The first byte picks the decoder (0xF0 and up: the embedding endpoints'); the rest is the
// request body. Every
// decoder must return a value or an api_error with a 4xx status and a
// message, and an accepted request must satisfy the decoder's own limits.
// Stop strings from accepted requests also drive the stop matcher over the
// body split at every 7th byte. Any crash, sanitizer report or broken
// invariant (__builtin_trap) is a bug.
#include "daemon/http/embeddings_request.hpp"
#include "daemon/http/request_decoder.hpp"
#include "daemon/http/stop_matcher.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace http = kvlane::daemon::http;

namespace {

void check(bool ok) {
  if (!ok)
    __builtin_trap();
}

template <class T>
void check_error_or(const kvlane::expected<T, http::api_error>& r) {
  if (!r) {
    check(r.error().status >= 400 && r.error().status < 500);
    check(!r.error().message.empty());
  }
}

void check_generation(const kvlane::expected<http::generation_request, http::api_error>& r,
                      std::string_view body) {
  check_error_or(r);
  if (!r)
    return;
  check(!r->model.empty());
  check(r->stop.size() <= http::max_stop_strings);
  check(r->top_p > 0.0f && r->top_p <= 1.0f);
  check(r->presence_penalty >= -2.0f && r->presence_penalty <= 2.0f);
  check(r->frequency_penalty >= -2.0f && r->frequency_penalty <= 2.0f);
  check(!r->max_tokens || *r->max_tokens >= 1);
  for (const auto& m : r->messages) {
    check(m.role == "system" || m.role == "user" || m.role == "assistant" || m.role == "tool");
    check(m.tool_calls.empty() || m.role == "assistant");
    for (const auto& c : m.tool_calls)
      check(!c.name.empty() && !c.arguments.empty());
  }
  check(r->tools.tools.size() <= http::max_tools);
  bool named_found = r->tools.choice.m != http::tool_choice::mode::named;
  for (const auto& t : r->tools.tools) {
    check(!t.name.empty() && t.name.size() <= http::max_tool_name);
    check(!t.parameters.empty());
    named_found = named_found || t.name == r->tools.choice.name;
  }
  check(named_found);
  // The output constraint: built, or a 400 (a schema keyword kvlane does not support).
  const auto constraint =
    http::build_constraint(r->format, r->tools, kvlane::backends::chat_format::chatml, r->model);
  check_error_or(constraint);
  http::stop_matcher sut{r->stop};
  std::string released;
  for (std::size_t i = 0; i < body.size(); i += 7) {
    auto piece = sut.feed(body.substr(i, 7));
    released += piece.text;
    if (piece.stopped)
      break;
  }
  released += sut.flush();
  check(released.size() <= body.size());
  check(body.substr(0, released.size()) == released); // a prefix, never altered text
}

void check_embedding(const kvlane::expected<http::embedding_request, http::api_error>& r) {
  check_error_or(r);
  if (!r)
    return;
  check(!r->model.empty());
  check(r->texts.empty() || r->token_inputs.empty());
  check(r->texts.size() <= http::max_embedding_inputs);
  check(r->token_inputs.size() <= http::max_embedding_inputs);
  std::size_t tokens = 0;
  for (const auto& t : r->token_inputs) {
    check(!t.empty());
    tokens += t.size();
  }
  check(tokens <= http::max_embedding_tokens);
  for (const auto& t : r->texts)
    check(!t.empty());
  check(!r->dimensions || *r->dimensions >= 1);
  check(!r->num_ctx || *r->num_ctx >= 1);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0)
    return 0;
  const std::string_view body{reinterpret_cast<const char*>(data) + 1, size - 1};
  if (data[0] >= 0xF0) { // the embedding endpoints (below it, the first seeds' choices stay)
    switch ((data[0] - 0xF0) % 3) {
      case 0: check_embedding(http::decode_openai_embeddings(body)); break;
      case 1: check_embedding(http::decode_ollama_embed(body)); break;
      case 2: check_embedding(http::decode_ollama_embeddings(body)); break;
    }
    return 0;
  }
  switch (data[0] % 7) {
    case 0: check_generation(http::decode_chat_completion(body), body); break;
    case 1: check_generation(http::decode_completion(body), body); break;
    case 2: check_generation(http::decode_ollama_generate(body), body); break;
    case 3: check_generation(http::decode_ollama_chat(body), body); break;
    case 4: check_error_or(http::decode_tokenize(body)); break;
    case 5: check_error_or(http::decode_detokenize(body)); break;
    case 6: check_error_or(http::decode_model_name(body)); break;
  }
  return 0;
}
