#include "tools/bench/completion_stream.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace kvlane::tools::bench {

namespace {

using json = nlohmann::json;

std::optional<std::uint64_t> count_at(const json& j, std::string_view key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number())
    return std::nullopt;
  if (it->is_number_unsigned())
    return it->get<std::uint64_t>();
  if (it->is_number_integer())
    return it->get<std::int64_t>() >= 0 ? std::optional<std::uint64_t>(it->get<std::int64_t>())
                                         : std::nullopt;
  const double d = it->get<double>();
  return d >= 0 ? std::optional<std::uint64_t>(static_cast<std::uint64_t>(d + 0.5)) : std::nullopt;
}

/// Cuts `s` to at most `max_bytes` without splitting a UTF-8 character and
/// shows control characters (newlines of a JSON body) as spaces.
std::string clean(std::string_view s, std::size_t max_bytes) {
  if (s.size() > max_bytes) {
    std::size_t n = max_bytes;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80)
      --n;
    s = s.substr(0, n);
  }
  std::string out{s};
  for (auto& c : out)
    if (static_cast<unsigned char>(c) < 0x20)
      c = ' ';
  return out;
}

/// The message of an `error` value: {"message": ...}, a string, or its JSON.
std::string message_of(const json& e) {
  if (e.is_string())
    return e.get<std::string>();
  if (e.is_object())
    if (auto m = e.find("message"); m != e.end() && m->is_string())
      return m->get<std::string>();
  return e.dump(-1, ' ', false, json::error_handler_t::replace);
}

} // namespace

std::uint64_t completion_figures::output_tokens() const noexcept {
  if (completion_tokens)
    return *completion_tokens;
  if (timings_predicted_n)
    return *timings_predicted_n;
  return text_events;
}

std::optional<std::uint64_t> completion_figures::reused_tokens() const noexcept {
  return cached_tokens ? cached_tokens : timings_cache_n;
}

std::optional<std::uint64_t> completion_figures::prefilled_tokens() const noexcept {
  if (timings_prompt_n)
    return timings_prompt_n;
  if (prompt_tokens)
    return *prompt_tokens - std::min(*prompt_tokens, reused_tokens().value_or(0));
  return std::nullopt;
}

completion_event completion_stream::on_data(std::string_view data) {
  if (data == "[DONE]") {
    f_.done = true;
    return completion_event::done;
  }
  ++f_.events;
  const auto j = json::parse(data.begin(), data.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    if (f_.error.empty())
      f_.error = "malformed stream event: " + clean(data, 160);
    return completion_event::error;
  }
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    if (f_.error.empty())
      f_.error = clean(message_of(*e), 200);
    return completion_event::error;
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    if (auto v = count_at(*u, "prompt_tokens"))
      f_.prompt_tokens = v;
    if (auto v = count_at(*u, "completion_tokens"))
      f_.completion_tokens = v;
    if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object())
      if (auto v = count_at(*d, "cached_tokens"))
        f_.cached_tokens = v;
  }
  if (auto t = j.find("timings"); t != j.end() && t->is_object()) {
    if (auto v = count_at(*t, "prompt_n"))
      f_.timings_prompt_n = v;
    if (auto v = count_at(*t, "cache_n"))
      f_.timings_cache_n = v;
    if (auto v = count_at(*t, "predicted_n"))
      f_.timings_predicted_n = v;
  }
  bool text = false;
  if (auto c = j.find("choices"); c != j.end() && c->is_array())
    for (const auto& choice : *c) {
      if (!choice.is_object())
        continue;
      std::size_t bytes = 0;
      if (auto t = choice.find("text"); t != choice.end() && t->is_string())
        bytes = t->get_ref<const std::string&>().size();
      else if (auto d = choice.find("delta"); d != choice.end() && d->is_object())
        if (auto ct = d->find("content"); ct != d->end() && ct->is_string())
          bytes = ct->get_ref<const std::string&>().size();
      if (bytes > 0) {
        text = true;
        f_.text_bytes += bytes;
      }
      if (auto fr = choice.find("finish_reason"); fr != choice.end() && fr->is_string())
        f_.finish_reason = fr->get<std::string>();
    }
  if (text) {
    ++f_.text_events;
    return completion_event::text;
  }
  return completion_event::other;
}

std::string error_message_of(std::string_view body, std::size_t max_bytes) {
  const auto j = json::parse(body.begin(), body.end(), nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    if (auto e = j.find("error"); e != j.end() && !e->is_null())
      return clean(message_of(*e), max_bytes);
    if (auto m = j.find("message"); m != j.end() && m->is_string())
      return clean(m->get<std::string>(), max_bytes);
  }
  return clean(body, max_bytes);
}

} // namespace kvlane::tools::bench
