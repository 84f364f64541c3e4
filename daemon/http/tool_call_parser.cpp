#include "daemon/http/tool_call_parser.hpp"

#include "daemon/http/tool_grammar.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace kvlane::daemon::http {

namespace {

using event = tool_call_event;

bool is_space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

bool all_space(std::string_view s) noexcept {
  return std::all_of(s.begin(), s.end(), is_space);
}

/// The length of the longest suffix of `text` that is a proper prefix of `marker`.
std::size_t partial_suffix(std::string_view text, std::string_view marker) noexcept {
  for (std::size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n))
      return n;
  return 0;
}

/// A call's header read so far: need more text, not a call in the fast shape, or read.
enum class header { need, mismatch, ok };

/// The JSON string at `s[i]` (a '"'): its value and the index past it.
header read_string(std::string_view s, std::size_t& i, std::string& value) {
  if (i >= s.size())
    return header::need;
  if (s[i] != '"')
    return header::mismatch;
  std::size_t j = i + 1;
  for (bool esc = false; j < s.size(); ++j) {
    if (esc)
      esc = false;
    else if (s[j] == '\\')
      esc = true;
    else if (s[j] == '"')
      break;
  }
  if (j >= s.size())
    return header::need;
  const auto parsed = nlohmann::json::parse(s.substr(i, j + 1 - i), nullptr, false);
  if (parsed.is_discarded() || !parsed.is_string())
    return header::mismatch;
  value = parsed.get<std::string>();
  i = j + 1;
  return header::ok;
}

/// `{"name": "<name>", "arguments": ` (or "parameters") with any spacing, from `s[i]`; on ok, `i`
/// is the first byte of the arguments' value.
header read_header(std::string_view s, std::size_t& i, std::string& name) {
  const auto ws = [&] {
    while (i < s.size() && is_space(s[i]))
      ++i;
  };
  const auto expect = [&](char c) {
    ws();
    if (i >= s.size())
      return header::need;
    if (s[i] != c)
      return header::mismatch;
    ++i;
    return header::ok;
  };
  std::string key;
  if (auto h = expect('{'); h != header::ok)
    return h;
  ws();
  if (auto h = read_string(s, i, key); h != header::ok)
    return h;
  if (key != "name")
    return header::mismatch;
  if (auto h = expect(':'); h != header::ok)
    return h;
  ws();
  if (auto h = read_string(s, i, name); h != header::ok)
    return h;
  if (auto h = expect(','); h != header::ok)
    return h;
  ws();
  if (auto h = read_string(s, i, key); h != header::ok)
    return h;
  if (key != "arguments" && key != "parameters")
    return header::mismatch;
  if (auto h = expect(':'); h != header::ok)
    return h;
  ws();
  return i < s.size() ? header::ok : header::need;
}

/// A header that has not resolved within this many bytes is read whole instead.
constexpr std::size_t max_header = 4096;

} // namespace

tool_call_parser::tool_call_parser(backends::tool_call_syntax syntax, std::string id_prefix)
  : syntax_(syntax), trigger_(tool_call_trigger(syntax)), id_prefix_(std::move(id_prefix)) {}

void tool_call_parser::feed(std::string_view text, std::vector<tool_call_event>& out) {
  if (trigger_.empty()) { // no tool syntax: all text
    if (!text.empty())
      out.push_back({event::kind::text, 0, {}, std::string{text}});
    return;
  }
  buf_.append(text);
  step(out);
}

void tool_call_parser::step(std::vector<tool_call_event>& out) {
  for (bool more = true; more;) {
    switch (mode_) {
    case mode::text: more = step_text(out); break;
    case mode::head: more = step_head(out); break;
    case mode::arguments: more = step_arguments(out); break;
    case mode::whole: more = step_whole(out); break;
    case mode::tail: more = step_tail(out); break;
    }
  }
}

bool tool_call_parser::step_text(std::vector<tool_call_event>& out) {
  if (buf_.empty())
    return false;
  const auto at = buf_.find(trigger_);
  if (at == std::string::npos) {
    const auto free = buf_.size() - partial_suffix(buf_, trigger_);
    if (after_call_) {
      const auto first = buf_.find_first_not_of(" \t\r\n");
      if (first == std::string::npos || first >= free)
        return false; // only whitespace (and maybe an opening's start) since the call
      after_call_ = false;
    }
    if (free > 0) {
      out.push_back({event::kind::text, 0, {}, buf_.substr(0, free)});
      buf_.erase(0, free);
    }
    return false;
  }
  if (at > 0 && !(after_call_ && all_space(std::string_view{buf_}.substr(0, at))))
    out.push_back({event::kind::text, 0, {}, buf_.substr(0, at)});
  after_call_ = false;
  if (syntax_ == backends::tool_call_syntax::llama3) { // the trigger is the call's JSON start
    buf_.erase(0, at);
    raw_.clear();
  } else {
    buf_.erase(0, at + trigger_.size());
    raw_ = trigger_;
  }
  mode_ = mode::head;
  return true;
}

bool tool_call_parser::step_head(std::vector<tool_call_event>& out) {
  std::size_t i = 0;
  std::string name;
  const auto h = read_header(buf_, i, name);
  if (h == header::need && buf_.size() < max_header)
    return false;
  if (h != header::ok) {
    mode_ = mode::whole;
    scan_ = std::string::npos;
    return true;
  }
  buf_.erase(0, i);
  begin_call(std::move(name), out);
  depth_ = 0;
  in_string_ = escaped_ = started_ = scalar_ = false;
  mode_ = mode::arguments;
  return true;
}

bool tool_call_parser::closes(char c) noexcept {
  if (in_string_) {
    if (escaped_)
      escaped_ = false;
    else if (c == '\\')
      escaped_ = true;
    else if (c == '"')
      in_string_ = false;
    return false;
  }
  if (c == '"')
    in_string_ = true;
  else if (c == '{' || c == '[')
    ++depth_;
  else if ((c == '}' || c == ']') && --depth_ == 0)
    return true;
  return false;
}

bool tool_call_parser::step_arguments(std::vector<tool_call_event>& out) {
  std::size_t i = 0;
  bool done = false;
  while (i < buf_.size() && !done) {
    const char c = buf_[i];
    if (!started_) {
      started_ = true;
      scalar_ = c != '{' && c != '[' && c != '"';
    }
    if (scalar_) { // not an object: a number, literal, or junk; ends at a delimiter
      if (is_space(c) || c == ',' || c == '}' || c == ']') {
        done = true;
        break;
      }
      ++i;
      continue;
    }
    const bool was_string = in_string_;
    done = closes(c) || (depth_ == 0 && was_string && !in_string_);
    ++i;
  }
  if (i > 0) {
    auto piece = buf_.substr(0, i);
    buf_.erase(0, i);
    args_ += piece;
    out.push_back({event::kind::arguments, calls_ - 1, {}, std::move(piece)});
  }
  if (!done)
    return false;
  out.push_back({event::kind::end, calls_ - 1, {}, args_});
  mode_ = mode::tail;
  envelope_open_ = true;
  depth_ = 1;
  in_string_ = escaped_ = false;
  return true;
}

bool tool_call_parser::step_whole(std::vector<tool_call_event>& out) {
  if (scan_ == std::string::npos) {
    const auto first = buf_.find_first_not_of(" \t\r\n");
    if (first == std::string::npos)
      return false;
    if (buf_[first] != '{') {
      give_back(0, out);
      return true;
    }
    scan_ = first;
    depth_ = 0;
    in_string_ = escaped_ = false;
  }
  const auto start = buf_.find('{');
  for (; scan_ < buf_.size(); ++scan_) {
    if (!closes(buf_[scan_]))
      continue;
    const auto end = scan_ + 1;
    const auto doc = nlohmann::ordered_json::parse(std::string_view{buf_}.substr(start, end - start),
                                                   nullptr, false);
    const nlohmann::ordered_json* args = nullptr;
    if (doc.is_object() && doc.contains("name") && doc["name"].is_string()) {
      if (doc.contains("arguments"))
        args = &doc["arguments"];
      else if (doc.contains("parameters"))
        args = &doc["parameters"];
    }
    if (args == nullptr) {
      give_back(end, out);
      return true;
    }
    begin_call(doc["name"].get<std::string>(), out);
    args_ = args->is_string() ? args->get<std::string>() : args->dump();
    out.push_back({event::kind::arguments, calls_ - 1, {}, args_});
    out.push_back({event::kind::end, calls_ - 1, {}, args_});
    buf_.erase(0, end);
    mode_ = mode::tail;
    envelope_open_ = false;
    return true;
  }
  return false;
}

bool tool_call_parser::step_tail(std::vector<tool_call_event>& out) {
  (void)out;
  std::size_t i = 0;
  if (envelope_open_) { // the rest of the call's object (normally just its '}')
    for (; i < buf_.size() && envelope_open_; ++i)
      envelope_open_ = !closes(buf_[i]);
    buf_.erase(0, i);
    if (envelope_open_)
      return false;
    i = 0;
  }
  if (syntax_ == backends::tool_call_syntax::hermes) {
    static constexpr std::string_view close = "</tool_call>";
    while (i < buf_.size() && is_space(buf_[i]))
      ++i;
    const auto rest = std::string_view{buf_}.substr(i);
    if (rest.size() < close.size() && close.starts_with(rest))
      return false; // maybe the closing tag, or only whitespace so far
    if (rest.starts_with(close))
      buf_.erase(0, i + close.size());
  }
  mode_ = mode::text;
  after_call_ = true;
  return true;
}

void tool_call_parser::begin_call(std::string name, std::vector<tool_call_event>& out) {
  out.push_back({event::kind::begin, calls_, id_prefix_ + std::to_string(calls_), std::move(name)});
  ++calls_;
  args_.clear();
  raw_.clear();
}

void tool_call_parser::give_back(std::size_t n, std::vector<tool_call_event>& out) {
  if (syntax_ == backends::tool_call_syntax::llama3)
    n = std::max(n, trigger_.size()); // the opening is in buf_: never find it there again
  n = std::min(n, buf_.size());
  auto text = raw_ + buf_.substr(0, n);
  buf_.erase(0, n);
  raw_.clear();
  if (!text.empty())
    out.push_back({event::kind::text, 0, {}, std::move(text)});
  mode_ = mode::text;
}

void tool_call_parser::finish(std::vector<tool_call_event>& out) {
  switch (mode_) {
  case mode::text:
    if (!buf_.empty() && !(after_call_ && all_space(buf_)))
      out.push_back({event::kind::text, 0, {}, buf_});
    break;
  case mode::head:
    break; // a call cut short before its name was known: not text, and no call either
  case mode::whole: // not a call in the expected shape, and never closed: text
    give_back(buf_.size(), out);
    if (!buf_.empty())
      out.push_back({event::kind::text, 0, {}, buf_});
    break;
  case mode::arguments: // cut short: the call ends with what it has
    out.push_back({event::kind::end, calls_ - 1, {}, args_});
    break;
  case mode::tail:
    break;
  }
  buf_.clear();
  mode_ = mode::text;
}

} // namespace kvlane::daemon::http
