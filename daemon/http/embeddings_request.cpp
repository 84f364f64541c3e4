#include "daemon/http/embeddings_request.hpp"

#include "daemon/http/request_decoder.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <limits>

namespace kvlane::daemon::http {

namespace {

using json = nlohmann::json;
using status = expected<void, api_error>;

#define KVLANE_EMBED_TRY(...)                                                                     \
  do {                                                                                            \
    if (auto status_ = (__VA_ARGS__); !status_)                                                   \
      return ::kvlane::unexpected(std::move(status_.error()));                                    \
  } while (false)

api_error wrong_type(const std::string& param, std::string_view what, const json& v) {
  return invalid(param, fmt::format("'{}' must be {}, got {}", param, what, v.type_name()));
}

status read_model(const json& v, std::string& out) {
  if (!v.is_string())
    return unexpected(wrong_type("model", "a string", v));
  const auto& s = v.get_ref<const std::string&>();
  if (s.empty())
    return unexpected(invalid("model", "'model' must not be empty"));
  if (s.size() > 256)
    return unexpected(invalid("model", "'model' is longer than 256 bytes"));
  out = s;
  return {};
}

status read_uint32(const json& v, const std::string& param, std::uint32_t& out, std::uint64_t lo,
                   std::uint64_t hi) {
  const bool in_range = v.is_number_unsigned() && v.get<std::uint64_t>() >= lo
                        && v.get<std::uint64_t>() <= hi;
  if (!in_range)
    return unexpected(invalid(param, fmt::format("'{}' must be an integer between {} and {}, got {}",
                                                 param, lo, hi, v.dump())));
  out = static_cast<std::uint32_t>(v.get<std::uint64_t>());
  return {};
}

status too_many_inputs(const std::string& param, std::size_t n) {
  return unexpected(invalid(param, fmt::format("'{}' holds {} inputs; at most {} are allowed", param,
                                               n, max_embedding_inputs)));
}

/// One input as token ids: a non-empty array of ids, counted into `total`.
status read_token_input(const json& v, const std::string& param, std::vector<backends::token_id>& out,
                        std::size_t& total) {
  if (!v.is_array())
    return unexpected(wrong_type(param, "an array of token ids", v));
  if (v.empty())
    return unexpected(invalid(param, fmt::format("'{}' must hold at least one token id", param)));
  total += v.size();
  if (total > max_embedding_tokens)
    return unexpected(invalid(param, fmt::format("the inputs hold more than {} tokens in all",
                                                 max_embedding_tokens)));
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::uint32_t t = 0;
    KVLANE_EMBED_TRY(read_uint32(v[i], fmt::format("{}[{}]", param, i), t, 0,
                                 std::numeric_limits<backends::token_id>::max()));
    out.push_back(t);
  }
  return {};
}

/// OpenAI's `input`: a string, an array of strings, an array of token ids (one input) or an
/// array of arrays of token ids.
status read_openai_input(const json& v, embedding_request& r) {
  constexpr std::string_view shapes =
    "a string, an array of strings, an array of token ids or an array of arrays of token ids";
  if (v.is_string()) {
    if (v.get_ref<const std::string&>().empty())
      return unexpected(invalid("input", "'input' must not be empty"));
    r.texts.push_back(v.get<std::string>());
    return {};
  }
  if (!v.is_array())
    return unexpected(wrong_type("input", shapes, v));
  if (v.empty())
    return unexpected(invalid("input", "'input' must hold at least one input"));
  std::size_t total = 0;
  const auto& first = v[0];
  if (first.is_number()) { // one input, as token ids
    r.token_inputs.emplace_back();
    return read_token_input(v, "input", r.token_inputs.back(), total);
  }
  if (v.size() > max_embedding_inputs)
    return too_many_inputs("input", v.size());
  r.listed = true;
  if (first.is_string()) {
    r.texts.reserve(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      const auto p = fmt::format("input[{}]", i);
      if (!v[i].is_string())
        return unexpected(wrong_type(p, "a string, as input[0] is", v[i]));
      if (v[i].get_ref<const std::string&>().empty())
        return unexpected(invalid(p, fmt::format("'{}' must not be empty", p)));
      r.texts.push_back(v[i].get<std::string>());
    }
    return {};
  }
  if (first.is_array()) {
    r.token_inputs.resize(v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      KVLANE_EMBED_TRY(read_token_input(v[i], fmt::format("input[{}]", i), r.token_inputs[i], total));
    return {};
  }
  return unexpected(wrong_type("input[0]", "a string, a token id or an array of token ids", first));
}

/// Ollama's `input`: a string or an array of strings; "" and [] are no input at all.
status read_ollama_input(const json& v, embedding_request& r) {
  if (v.is_string()) {
    if (!v.get_ref<const std::string&>().empty())
      r.texts.push_back(v.get<std::string>());
    return {};
  }
  if (!v.is_array())
    return unexpected(wrong_type("input", "a string or an array of strings", v));
  if (v.size() > max_embedding_inputs)
    return too_many_inputs("input", v.size());
  r.listed = true;
  r.texts.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto p = fmt::format("input[{}]", i);
    if (!v[i].is_string())
      return unexpected(wrong_type(p, "a string", v[i]));
    if (v[i].get_ref<const std::string&>().empty())
      return unexpected(invalid(p, fmt::format("'{}' must not be empty", p)));
    r.texts.push_back(v[i].get<std::string>());
  }
  return {};
}

/// Ollama's keep_alive: how long the model stays loaded after this request.
status read_keep_alive(const json& v, embedding_request& r) {
  if (!v.is_string() && !v.is_number())
    return unexpected(wrong_type("keep_alive", "a duration string or a number", v));
  auto keep = v.is_string() ? actors::parse_keep_alive(v.get<std::string>())
                            : actors::keep_alive_seconds(v.get<double>());
  if (!keep)
    return unexpected(invalid("keep_alive", keep.error()));
  r.keep_alive = *keep;
  return {};
}

/// Ollama's `options`: only num_ctx means something for an embedding (a shorter context to
/// cut inputs to); a null value is "not given"; any other option is a 400 naming it.
status read_ollama_options(const json& v, embedding_request& r) {
  if (!v.is_object())
    return unexpected(wrong_type("options", "an object", v));
  for (const auto& [k, x] : v.items()) {
    const auto p = "options." + k;
    if (k != "num_ctx")
      return unexpected(unsupported(p, "the only option an embedding reads is num_ctx"));
    if (x.is_null())
      continue;
    std::uint32_t n = 0;
    KVLANE_EMBED_TRY(read_uint32(x, p, n, 1, std::numeric_limits<std::uint32_t>::max()));
    r.num_ctx = n;
  }
  return {};
}

/// Fields both Ollama endpoints read; false for any other key.
expected<bool, api_error> read_ollama_common(const std::string& k, const json& x,
                                             embedding_request& r) {
  if (k == "model")
    KVLANE_EMBED_TRY(read_model(x, r.model));
  else if (k == "keep_alive")
    KVLANE_EMBED_TRY(read_keep_alive(x, r));
  else if (k == "options")
    KVLANE_EMBED_TRY(read_ollama_options(x, r));
  else
    return false;
  return true;
}

template <std::size_t N>
bool is_one_of(std::string_view key, const std::string_view (&fields)[N]) {
  return std::find(std::begin(fields), std::end(fields), key) != std::end(fields);
}

// The fields each Ollama decoder reads: Ollama decodes a null as "not given", so a null for
// one of these is skipped; a null for any other field is a 400 naming it.
constexpr std::string_view ollama_embed_fields[] = {"model", "input", "truncate", "keep_alive",
                                                    "options", "dimensions"};
constexpr std::string_view ollama_embeddings_fields[] = {"model", "prompt", "keep_alive", "options"};

} // namespace

expected<embedding_request, api_error> decode_openai_embeddings(std::string_view body) {
  auto doc = parse_json_object(body);
  if (!doc)
    return unexpected(std::move(doc).error());
  embedding_request r;
  r.api = embedding_api::openai;
  bool has_input = false;
  for (const auto& [k, x] : doc->items()) {
    if (k == "model") {
      KVLANE_EMBED_TRY(read_model(x, r.model));
    } else if (k == "input") {
      KVLANE_EMBED_TRY(read_openai_input(x, r));
      has_input = true;
    } else if (k == "encoding_format") {
      if (x.is_null())
        continue;
      if (!x.is_string())
        return unexpected(wrong_type(k, "a string", x));
      const auto& f = x.get_ref<const std::string&>();
      if (f != "float" && f != "base64")
        return unexpected(invalid(k, fmt::format("'encoding_format' must be \"float\" or "
                                                 "\"base64\", got \"{}\"",
                                                 f.substr(0, 64))));
      r.base64 = f == "base64";
    } else if (k == "dimensions") {
      if (x.is_null())
        continue;
      std::uint32_t n = 0;
      KVLANE_EMBED_TRY(read_uint32(x, k, n, 1, 1u << 20));
      r.dimensions = n;
    } else if (k == "user") {
      if (!x.is_string() && !x.is_null())
        return unexpected(wrong_type(k, "a string", x)); // an end-user id for abuse tracking: no use here
    } else {
      return unexpected(unsupported(k));
    }
  }
  if (r.model.empty())
    return unexpected(invalid("model", "'model' is required"));
  if (!has_input)
    return unexpected(invalid("input", "'input' is required"));
  return r;
}

namespace {

/// An Ollama embedding body: `own` reads the endpoint's own fields (true if it
/// knew the key), the common ones (model, keep_alive, options) are read here,
/// null stands for absent only for a field the endpoint has.
template <class Own>
expected<embedding_request, api_error> decode_ollama_object(std::string_view body, embedding_api api,
                                                            const auto& fields, Own own) {
  auto doc = parse_json_object(body);
  if (!doc)
    return unexpected(std::move(doc).error());
  embedding_request r;
  r.api = api;
  for (const auto& [k, x] : doc->items()) {
    if (x.is_null()) {
      if (!is_one_of(k, fields))
        return unexpected(unsupported(k));
      continue;
    }
    auto known = own(k, x, r);
    if (known && !*known)
      known = read_ollama_common(k, x, r);
    if (!known)
      return unexpected(std::move(known).error());
    if (!*known)
      return unexpected(unsupported(k));
  }
  if (r.model.empty())
    return unexpected(invalid("model", "'model' is required"));
  return r;
}

} // namespace

expected<embedding_request, api_error> decode_ollama_embed(std::string_view body) {
  return decode_ollama_object(
    body, embedding_api::ollama, ollama_embed_fields,
    [](const std::string& k, const json& x, embedding_request& r) -> expected<bool, api_error> {
      if (k == "input") {
        KVLANE_EMBED_TRY(read_ollama_input(x, r));
      } else if (k == "truncate") {
        if (!x.is_boolean())
          return unexpected(wrong_type(k, "a boolean", x));
        r.truncate = x.get<bool>();
      } else if (k == "dimensions") {
        std::uint32_t n = 0;
        KVLANE_EMBED_TRY(read_uint32(x, k, n, 1, 1u << 20));
        r.dimensions = n;
      } else {
        return false;
      }
      return true;
    });
}

expected<embedding_request, api_error> decode_ollama_embeddings(std::string_view body) {
  return decode_ollama_object(
    body, embedding_api::ollama_legacy, ollama_embeddings_fields,
    [](const std::string& k, const json& x, embedding_request& r) -> expected<bool, api_error> {
      if (k != "prompt")
        return false;
      if (!x.is_string())
        return unexpected(wrong_type(k, "a string", x));
      if (!x.get_ref<const std::string&>().empty())
        r.texts.push_back(x.get<std::string>());
      return true;
    });
}

} // namespace kvlane::daemon::http

#undef KVLANE_EMBED_TRY
