#include "tools/bench/completion_request.hpp"

#include <nlohmann/json.hpp>

#include <array>

namespace kvlane::tools::bench {

namespace {

// 27 words, each one token of the Llama 3 BPE vocabulary with its leading
// space (ids 279 " the" .. 814 " they"): 'a'..'z' then ' '.
constexpr std::array<std::string_view, 27> words{
  " the", " of",   " and", " to",  " in",  " is",  " it",   " that", " for",
  " on",  " with", " as",  " was", " at",  " by",  " be",   " this", " from",
  " or",  " have", " an",  " are", " not", " but", " we",   " you",  " they"};

} // namespace

std::string_view to_string(server_kind k) noexcept {
  return k == server_kind::kvlane ? "kvlane" : "llama-server";
}

std::optional<server_kind> parse_server_kind(std::string_view s) noexcept {
  if (s == "kvlane" || s == "kvlaned")
    return server_kind::kvlane;
  if (s == "llama-server" || s == "llama.cpp")
    return server_kind::llama_server;
  return std::nullopt;
}

std::string_view prompt_word(backends::token_id token) noexcept {
  if (token >= 'a' && token <= 'z')
    return words[static_cast<std::size_t>(token - 'a')];
  if (token == ' ')
    return words[26];
  const auto t = static_cast<std::uint64_t>(static_cast<std::uint32_t>(token));
  return words[t % words.size()];
}

std::string prompt_text(std::span<const backends::token_id> tokens) {
  std::string out;
  out.reserve(tokens.size() * 4);
  for (auto t : tokens)
    out.append(prompt_word(t));
  return out;
}

std::string completion_body(server_kind kind, const completion_request& r) {
  nlohmann::ordered_json j;
  j["model"] = r.model;
  j["prompt"] = r.prompt;
  j["max_tokens"] = r.max_tokens;
  j["temperature"] = 0;
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  if (kind == server_kind::llama_server) {
    j["ignore_eos"] = true;
    j["cache_prompt"] = true;
  } else {
    j["priority"] = r.interactive ? "interactive" : "batch";
  }
  return j.dump();
}

} // namespace kvlane::tools::bench
