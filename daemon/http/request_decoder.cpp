#include "daemon/http/request_decoder.hpp"

#include "daemon/http/chat_messages.hpp"
#include "daemon/http/json_reader.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace kvlane::daemon::http {

namespace {

// Ordered: a schema's properties are generated, and tools are shown, in the client's order.
using json = nlohmann::ordered_json;
template <class T>
using result = expected<T, api_error>;
using status = expected<void, api_error>;

/// Seeds are any 64-bit integer (OpenAI allows negative ones); kept as their bits.
status read_seed(const json& v, const std::string& param, std::optional<std::uint64_t>& out) {
  if (v.is_number_unsigned())
    out = v.get<std::uint64_t>();
  else if (v.is_number_integer())
    out = static_cast<std::uint64_t>(v.get<std::int64_t>());
  else
    return unexpected(wrong_type(param, "an integer", v));
  return {};
}

status read_model(const json& v, std::string& out) {
  KVLANE_HTTP_TRY(read_string(v, "model", out, 256));
  if (out.empty())
    return unexpected(invalid("model", "'model' must not be empty"));
  return {};
}

status read_stop(const json& v, const std::string& param, std::vector<std::string>& out) {
  out.clear();
  auto one = [&](const json& e, const std::string& p) -> status {
    std::string s;
    KVLANE_HTTP_TRY(read_string(e, p, s, max_stop_bytes));
    if (s.empty())
      return unexpected(invalid(p, fmt::format("'{}' must not be empty", p)));
    out.push_back(std::move(s));
    return {};
  };
  if (v.is_string())
    return one(v, param);
  if (!v.is_array())
    return unexpected(wrong_type(param, "a string or an array of strings", v));
  if (v.size() > max_stop_strings)
    return unexpected(invalid(param, fmt::format("'{}' holds {} strings, at most {} are allowed",
                                                 param, v.size(), max_stop_strings)));
  for (std::size_t i = 0; i < v.size(); ++i)
    KVLANE_HTTP_TRY(one(v[i], fmt::format("{}[{}]", param, i)));
  return {};
}

status read_priority(const json& v, actors::priority_class& out) {
  std::string s;
  KVLANE_HTTP_TRY(read_string(v, "priority", s, 32));
  if (s == "interactive")
    out = actors::priority_class::interactive;
  else if (s == "batch")
    out = actors::priority_class::batch;
  else
    return unexpected(invalid("priority", fmt::format("'priority' must be \"interactive\" or "
                                                      "\"batch\", got \"{}\"", s)));
  return {};
}

status read_session(const json& v, std::string& out) {
  KVLANE_HTTP_TRY(read_string(v, "session", out, 64));
  for (unsigned char c : out)
    if (c < 0x20 || c == 0x7f)
      return unexpected(invalid("session", "'session' must not contain control characters"));
  return {};
}

/// `tools`, `tool_choice`, `parallel_tool_calls` (OpenAI) or `tools` (Ollama); false for
/// another key.
result<bool> read_tool_field(const std::string& k, const json& x, generation_request& r, bool ollama) {
  if (k == "tools") {
    auto tools = decode_tools(x);
    if (!tools)
      return unexpected(std::move(tools).error());
    if (tools->empty() && !ollama) // as OpenAI: an empty list is a mistake, not "no tools"
      return unexpected(invalid("tools", "'tools' must hold at least one tool"));
    r.tools.tools = std::move(*tools);
  } else if (k == "tool_choice" && !ollama) {
    auto choice = decode_tool_choice(x);
    if (!choice)
      return unexpected(std::move(choice).error());
    r.tools.choice = std::move(*choice);
    r.tools.choice_given = true;
  } else if (k == "parallel_tool_calls" && !ollama) {
    KVLANE_HTTP_TRY(read_bool(x, k, r.tools.parallel));
  } else {
    return false;
  }
  return true;
}

/// OpenAI fields shared by chat and completions. Returns false (handled = no)
/// for a key it does not know.
result<bool> read_openai_common(const std::string& k, const json& x, generation_request& r,
                                bool& stream_options_given) {
  if (k == "model")
    KVLANE_HTTP_TRY(read_model(x, r.model));
  else if (k == "max_tokens" || k == "max_completion_tokens") {
    std::uint32_t n = 0;
    KVLANE_HTTP_TRY(read_uint(x, k, n, 1, std::numeric_limits<std::uint32_t>::max()));
    r.max_tokens = n;
  } else if (k == "temperature")
    KVLANE_HTTP_TRY(read_real(x, k, r.temperature, 0.0, 2.0));
  else if (k == "top_p") {
    KVLANE_HTTP_TRY(read_real(x, k, r.top_p, 0.0, 1.0));
    if (r.top_p == 0.0f)
      return unexpected(invalid(k, "'top_p' must be greater than 0"));
  } else if (k == "top_k")
    KVLANE_HTTP_TRY(read_uint(x, k, r.top_k, 0, 1u << 30));
  else if (k == "seed")
    KVLANE_HTTP_TRY(read_seed(x, k, r.seed));
  else if (k == "stop")
    KVLANE_HTTP_TRY(read_stop(x, k, r.stop));
  else if (k == "presence_penalty")
    KVLANE_HTTP_TRY(read_real(x, k, r.presence_penalty, -2.0, 2.0));
  else if (k == "frequency_penalty")
    KVLANE_HTTP_TRY(read_real(x, k, r.frequency_penalty, -2.0, 2.0));
  else if (k == "stream")
    KVLANE_HTTP_TRY(read_bool(x, k, r.stream));
  else if (k == "stream_options") {
    if (!x.is_object())
      return unexpected(wrong_type(k, "an object", x));
    for (const auto& [sk, sv] : x.items()) {
      if (sk != "include_usage")
        return unexpected(unsupported("stream_options." + sk));
      KVLANE_HTTP_TRY(read_bool(sv, "stream_options.include_usage", r.include_usage));
    }
    stream_options_given = true;
  } else if (k == "n") {
    std::uint32_t n = 0;
    KVLANE_HTTP_TRY(read_uint(x, k, n, 1, 128));
    if (n != 1)
      return unexpected(unsupported("n", "one choice per request (n = 1)"));
  } else if (k == "user") {
    std::string ignored;
    KVLANE_HTTP_TRY(read_string(x, k, ignored, 256)); // an end-user id for abuse tracking: no use here
  } else if (k == "priority")
    KVLANE_HTTP_TRY(read_priority(x, r.priority));
  else if (k == "session")
    KVLANE_HTTP_TRY(read_session(x, r.session));
  else
    return false;
  return true;
}

status finish_openai(generation_request& r, bool stream_options_given) {
  if (r.model.empty())
    return unexpected(invalid("model", "'model' is required"));
  if (stream_options_given && !r.stream)
    return unexpected(invalid("stream_options", "'stream_options' is only allowed with stream: true"));
  return {};
}

// The fields each Ollama decoder reads, for `null` values: Ollama decodes a null
// as "not given", so a null for one of these is skipped; any other field is a 400
// naming it whatever its value, as on the OpenAI side. Keep in step with the
// readers below (a field missing here only makes its null a 400, never an ignore).
constexpr std::string_view ollama_option_fields[] = {
  "temperature", "top_p", "top_k", "seed", "num_predict", "stop", "presence_penalty",
  "frequency_penalty", "num_ctx"};
constexpr std::string_view ollama_generate_fields[] = {
  "model", "stream", "options", "keep_alive", "priority", "session", "prompt", "system", "raw",
  "images", "format"};
constexpr std::string_view ollama_chat_fields[] = {
  "model", "stream", "options", "keep_alive", "priority", "session", "messages", "format", "tools"};

template <std::size_t N>
bool is_one_of(std::string_view key, const std::string_view (&fields)[N]) {
  return std::find(std::begin(fields), std::end(fields), key) != std::end(fields);
}

/// Ollama's "options": the sampling fields kvlane implements.
status read_ollama_options(const json& v, generation_request& r) {
  if (!v.is_object())
    return unexpected(wrong_type("options", "an object", v));
  for (const auto& [k, x] : v.items()) {
    const auto p = "options." + k;
    if (x.is_null()) {
      if (!is_one_of(k, ollama_option_fields))
        return unexpected(unsupported(p));
      continue;
    }
    if (k == "temperature")
      KVLANE_HTTP_TRY(read_real(x, p, r.temperature, 0.0, 100.0));
    else if (k == "top_p") {
      KVLANE_HTTP_TRY(read_real(x, p, r.top_p, 0.0, 1.0));
      if (r.top_p == 0.0f)
        r.top_p = 1.0f; // Ollama treats 0 as "off"
    } else if (k == "top_k")
      KVLANE_HTTP_TRY(read_uint(x, p, r.top_k, 0, 1u << 30));
    else if (k == "seed")
      KVLANE_HTTP_TRY(read_seed(x, p, r.seed));
    else if (k == "num_predict") {
      if (!x.is_number_integer())
        return unexpected(wrong_type(p, "an integer", x));
      const auto n = x.get<std::int64_t>();
      if (n == -1 || n == -2)
        r.max_tokens.reset(); // until the context is full
      else if (n >= 1 && n <= std::numeric_limits<std::uint32_t>::max())
        r.max_tokens = static_cast<std::uint32_t>(n);
      else
        return unexpected(invalid(p, fmt::format("'{}' must be -1 or a positive integer, got {}", p, n)));
    } else if (k == "stop")
      KVLANE_HTTP_TRY(read_stop(x, p, r.stop));
    else if (k == "presence_penalty")
      KVLANE_HTTP_TRY(read_real(x, p, r.presence_penalty, -2.0, 2.0));
    else if (k == "frequency_penalty")
      KVLANE_HTTP_TRY(read_real(x, p, r.frequency_penalty, -2.0, 2.0));
    else if (k == "num_ctx") {
      std::uint32_t n = 0; // the model's context is fixed by its backend; any request fits it or fails
      KVLANE_HTTP_TRY(read_uint(x, p, n, 1, std::numeric_limits<std::uint32_t>::max()));
    } else
      return unexpected(unsupported(p));
  }
  return {};
}

/// Ollama fields shared by generate and chat; false for an unknown key.
result<bool> read_ollama_common(const std::string& k, const json& x, generation_request& r) {
  if (k == "model")
    KVLANE_HTTP_TRY(read_model(x, r.model));
  else if (k == "stream")
    KVLANE_HTTP_TRY(read_bool(x, k, r.stream));
  else if (k == "options")
    KVLANE_HTTP_TRY(read_ollama_options(x, r));
  else if (k == "keep_alive") {
    if (!x.is_string() && !x.is_number())
      return unexpected(wrong_type(k, "a duration string or a number", x));
    auto keep = x.is_string() ? actors::parse_keep_alive(x.get<std::string>())
                              : actors::keep_alive_seconds(x.get<double>());
    if (!keep)
      return unexpected(invalid(k, keep.error()));
    r.keep_alive = *keep;
  } else if (k == "priority")
    KVLANE_HTTP_TRY(read_priority(x, r.priority));
  else if (k == "session")
    KVLANE_HTTP_TRY(read_session(x, r.session));
  else if (k == "format") {
    auto f = decode_ollama_format(x);
    if (!f)
      return unexpected(std::move(f).error());
    r.format = std::move(*f);
  } else
    return false;
  return true;
}

generation_request ollama_defaults() {
  generation_request r;
  r.stream = true;
  r.temperature = 0.8f;
  r.top_k = 40;
  r.top_p = 0.9f;
  return r;
}

} // namespace

expected<generation_request, api_error> decode_chat_completion(std::string_view body) {
  auto doc = parse_ordered_object(body);
  if (!doc)
    return unexpected(std::move(doc).error());
  generation_request r;
  r.what = generation_request::kind::chat;
  bool has_messages = false, stream_options = false;
  for (const auto& [k, x] : doc->items()) {
    if (k == "messages") {
      KVLANE_HTTP_TRY(read_messages(x, r.messages, false));
      has_messages = true;
      continue;
    }
    if (k == "logprobs") { // chat: a boolean
      if (!x.is_null())
        KVLANE_HTTP_TRY(read_bool(x, k, r.logprobs));
      continue;
    }
    if (k == "top_logprobs") {
      if (!x.is_null())
        KVLANE_HTTP_TRY(read_uint(x, k, r.top_logprobs, 0, actors::max_top_logprobs));
      continue;
    }
    if (k == "response_format") {
      auto f = decode_response_format(x);
      if (!f)
        return unexpected(std::move(f).error());
      r.format = std::move(*f);
      continue;
    }
    if (auto tool = read_tool_field(k, x, r, false); !tool)
      return unexpected(std::move(tool).error());
    else if (*tool)
      continue;
    auto known = read_openai_common(k, x, r, stream_options);
    if (!known)
      return unexpected(std::move(known).error());
    if (!*known)
      return unexpected(unsupported(k));
  }
  KVLANE_HTTP_TRY(finish_openai(r, stream_options));
  if (r.top_logprobs > 0 && !r.logprobs)
    return unexpected(invalid("top_logprobs", "'top_logprobs' needs 'logprobs': true"));
  if (!has_messages)
    return unexpected(invalid("messages", "'messages' is required"));
  KVLANE_HTTP_TRY(check_tool_request(r.tools));
  return r;
}

expected<generation_request, api_error> decode_completion(std::string_view body) {
  auto doc = parse_ordered_object(body);
  if (!doc)
    return unexpected(std::move(doc).error());
  generation_request r;
  r.what = generation_request::kind::completion;
  bool has_prompt = false, stream_options = false;
  for (const auto& [k, x] : doc->items()) {
    if (k == "prompt") {
      has_prompt = true;
      if (x.is_string()) {
        r.prompt_text = x.get<std::string>();
      } else if (x.is_array() && x.size() == 1 && x[0].is_string()) {
        r.prompt_text = x[0].get<std::string>();
      } else if (x.is_array() && !x.empty() && x[0].is_number()) {
        for (std::size_t i = 0; i < x.size(); ++i) {
          backends::token_id t = 0;
          KVLANE_HTTP_TRY(read_uint(x[i], fmt::format("prompt[{}]", i), t, 0,
                                    std::numeric_limits<backends::token_id>::max()));
          r.prompt_tokens.push_back(t);
        }
      } else if (x.is_array() && !x.empty() && (x[0].is_array() || x[0].is_string())) {
        return unexpected(unsupported("prompt", "one prompt per request (a batch of prompts is not)"));
      } else {
        return unexpected(wrong_type("prompt", "a string or an array of token ids", x));
      }
      continue;
    }
    if (k == "logprobs") { // completions: how many alternatives per token
      if (!x.is_null()) {
        KVLANE_HTTP_TRY(read_uint(x, k, r.top_logprobs, 0, max_completion_logprobs));
        r.logprobs = true;
      }
      continue;
    }
    if (k == "echo" || k == "best_of" || k == "suffix") {
      const bool neutral = (k == "echo" && x.is_boolean() && !x.get<bool>())
                           || (k == "best_of" && x.is_number_integer() && x.get<std::int64_t>() == 1)
                           || (k == "suffix" && (x.is_null() || (x.is_string() && x.get<std::string>().empty())));
      if (!neutral)
        return unexpected(unsupported(k));
      continue;
    }
    auto known = read_openai_common(k, x, r, stream_options);
    if (!known)
      return unexpected(std::move(known).error());
    if (!*known)
      return unexpected(unsupported(k));
  }
  KVLANE_HTTP_TRY(finish_openai(r, stream_options));
  if (!has_prompt)
    return unexpected(invalid("prompt", "'prompt' is required"));
  if (r.prompt_text.empty() && r.prompt_tokens.empty())
    return unexpected(invalid("prompt", "'prompt' must not be empty"));
  if (!r.max_tokens)
    r.max_tokens = 16; // OpenAI's default for completions
  return r;
}

expected<generation_request, api_error> decode_ollama_generate(std::string_view body) {
  auto doc = parse_ordered_object(body);
  if (!doc)
    return unexpected(std::move(doc).error());
  auto r = ollama_defaults();
  r.what = generation_request::kind::completion;
  r.raw_prompt = false;
  for (const auto& [k, x] : doc->items()) {
    if (x.is_null()) {
      if (!is_one_of(k, ollama_generate_fields))
        return unexpected(unsupported(k));
      continue;
    }
    if (k == "prompt") {
      KVLANE_HTTP_TRY(read_string(x, k, r.prompt_text));
    } else if (k == "system") {
      KVLANE_HTTP_TRY(read_string(x, k, r.system));
    } else if (k == "raw") {
      KVLANE_HTTP_TRY(read_bool(x, k, r.raw_prompt));
    } else if (k == "images" && x.is_array() && x.empty()) {
    } else {
      auto known = read_ollama_common(k, x, r);
      if (!known)
        return unexpected(std::move(known).error());
      if (!*known)
        return unexpected(unsupported(k));
    }
  }
  if (r.model.empty())
    return unexpected(invalid("model", "'model' is required"));
  if (r.raw_prompt && !r.system.empty())
    return unexpected(invalid("system", "'system' has no effect with raw: true"));
  return r;
}

expected<generation_request, api_error> decode_ollama_chat(std::string_view body) {
  auto doc = parse_ordered_object(body);
  if (!doc)
    return unexpected(std::move(doc).error());
  auto r = ollama_defaults();
  r.what = generation_request::kind::chat;
  for (const auto& [k, x] : doc->items()) {
    if (x.is_null()) {
      if (!is_one_of(k, ollama_chat_fields))
        return unexpected(unsupported(k));
      continue;
    }
    if (k == "messages") {
      KVLANE_HTTP_TRY(read_messages(x, r.messages, true));
      continue;
    }
    if (auto tool = read_tool_field(k, x, r, true); !tool)
      return unexpected(std::move(tool).error());
    else if (*tool)
      continue;
    auto known = read_ollama_common(k, x, r);
    if (!known)
      return unexpected(std::move(known).error());
    if (!*known)
      return unexpected(unsupported(k));
  }
  if (r.model.empty())
    return unexpected(invalid("model", "'model' is required"));
  return r;
}

expected<tokenize_request, api_error> decode_tokenize(std::string_view body) {
  auto doc = parse_ordered_object(body);
  if (!doc)
    return unexpected(std::move(doc).error());
  tokenize_request r;
  bool has_content = false;
  for (const auto& [k, x] : doc->items()) {
    if (k == "content") {
      KVLANE_HTTP_TRY(read_string(x, k, r.content));
      has_content = true;
    } else if (k == "add_special") {
      KVLANE_HTTP_TRY(read_bool(x, k, r.add_special));
    } else if (k == "model") {
      KVLANE_HTTP_TRY(read_model(x, r.model));
    } else {
      return unexpected(unsupported(k));
    }
  }
  if (!has_content)
    return unexpected(invalid("content", "'content' is required"));
  return r;
}

expected<detokenize_request, api_error> decode_detokenize(std::string_view body) {
  auto doc = parse_ordered_object(body);
  if (!doc)
    return unexpected(std::move(doc).error());
  detokenize_request r;
  bool has_tokens = false;
  for (const auto& [k, x] : doc->items()) {
    if (k == "tokens") {
      if (!x.is_array())
        return unexpected(wrong_type("tokens", "an array of token ids", x));
      for (std::size_t i = 0; i < x.size(); ++i) {
        backends::token_id t = 0;
        KVLANE_HTTP_TRY(read_uint(x[i], fmt::format("tokens[{}]", i), t, 0,
                                  std::numeric_limits<backends::token_id>::max()));
        r.tokens.push_back(t);
      }
      has_tokens = true;
    } else if (k == "model") {
      KVLANE_HTTP_TRY(read_model(x, r.model));
    } else {
      return unexpected(unsupported(k));
    }
  }
  if (!has_tokens)
    return unexpected(invalid("tokens", "'tokens' is required"));
  return r;
}

expected<nlohmann::json, api_error> parse_json_object(std::string_view body) {
  auto doc = parse_ordered_object(body);
  if (!doc)
    return unexpected(std::move(doc).error());
  return nlohmann::json(std::move(*doc));
}

expected<std::string, api_error> decode_model_name(std::string_view body) {
  auto doc = parse_ordered_object(body);
  if (!doc)
    return unexpected(std::move(doc).error());
  std::string model;
  for (const auto& [k, x] : doc->items()) {
    if (k == "model" || k == "name")
      KVLANE_HTTP_TRY(read_model(x, model));
    else if (k != "verbose")
      return unexpected(unsupported(k));
  }
  if (model.empty())
    return unexpected(invalid("model", "'model' is required"));
  return model;
}

} // namespace kvlane::daemon::http

