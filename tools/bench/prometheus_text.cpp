#include "tools/bench/prometheus_text.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>

namespace kvlane::tools::bench {

namespace {

struct sample {
  std::string_view name;
  std::map<std::string, std::string, std::less<>> labels;
  double value = 0;
};

bool name_char(char c, bool first) {
  return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
         || (!first && c >= '0' && c <= '9');
}

void skip_blanks(std::string_view& s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
}

std::string_view take_name(std::string_view& s) {
  std::size_t n = 0;
  while (n < s.size() && name_char(s[n], n == 0))
    ++n;
  auto out = s.substr(0, n);
  s.remove_prefix(n);
  return out;
}

/// `"value"` with \\, \" and \n escapes; nullopt if unterminated or badly escaped.
std::optional<std::string> take_quoted(std::string_view& s) {
  if (s.empty() || s.front() != '"')
    return std::nullopt;
  s.remove_prefix(1);
  std::string out;
  while (!s.empty()) {
    const char c = s.front();
    s.remove_prefix(1);
    if (c == '"')
      return out;
    if (c != '\\') {
      out += c;
      continue;
    }
    if (s.empty())
      return std::nullopt;
    const char e = s.front();
    s.remove_prefix(1);
    if (e == 'n')
      out += '\n';
    else if (e == '\\' || e == '"')
      out += e;
    else
      return std::nullopt;
  }
  return std::nullopt;
}

/// One sample line: `name{label="value",...} value [timestamp]`.
std::optional<sample> parse_line(std::string_view line) {
  sample out;
  skip_blanks(line);
  out.name = take_name(line);
  if (out.name.empty())
    return std::nullopt;
  if (!line.empty() && line.front() == '{') {
    line.remove_prefix(1);
    for (;;) {
      skip_blanks(line);
      if (!line.empty() && line.front() == '}') {
        line.remove_prefix(1);
        break;
      }
      const auto key = take_name(line);
      skip_blanks(line);
      if (key.empty() || line.empty() || line.front() != '=')
        return std::nullopt;
      line.remove_prefix(1);
      skip_blanks(line);
      auto value = take_quoted(line);
      if (!value)
        return std::nullopt;
      out.labels.emplace(std::string{key}, std::move(*value));
      skip_blanks(line);
      if (!line.empty() && line.front() == ',')
        line.remove_prefix(1);
      else if (line.empty() || line.front() != '}')
        return std::nullopt;
    }
  }
  skip_blanks(line);
  const auto end = std::min(line.find_first_of(" \t"), line.size());
  const std::string number{line.substr(0, end)};
  char* stop = nullptr;
  out.value = std::strtod(number.c_str(), &stop);
  if (number.empty() || stop != number.c_str() + number.size())
    return std::nullopt;
  return out;
}

} // namespace

std::optional<double> find_sample(std::string_view text, std::string_view name,
                                  const std::vector<metric_label>& labels) {
  while (!text.empty()) {
    const auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    if (line.empty() || line.front() == '#')
      continue;
    auto s = parse_line(line);
    if (!s || s->name != name)
      continue;
    const bool match = std::all_of(labels.begin(), labels.end(), [&](const metric_label& l) {
      auto it = s->labels.find(l.first);
      return it != s->labels.end() && it->second == l.second;
    });
    if (match)
      return s->value;
  }
  return std::nullopt;
}

} // namespace kvlane::tools::bench
