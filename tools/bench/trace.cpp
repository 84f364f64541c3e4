#include "tools/bench/trace.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace kvlane::tools::bench {

namespace {

bool all_digits(std::string_view s) noexcept {
  if (s.empty())
    return false;
  for (char c : s)
    if (c < '0' || c > '9')
      return false;
  return true;
}

bool parse_fixed(std::string_view s, std::size_t width, int& out) noexcept {
  if (s.size() != width || !all_digits(s))
    return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size();
}

// Digits after the decimal point as nanoseconds (extra digits are cut).
bool parse_fraction_ns(std::string_view s, std::int64_t& ns) noexcept {
  if (!all_digits(s))
    return false;
  ns = 0;
  for (std::size_t i = 0; i < 9; ++i)
    ns = ns * 10 + (i < s.size() ? s[i] - '0' : 0);
  return true;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
std::int64_t days_from_civil(int y, int m, int d) noexcept {
  y -= m <= 2;
  const int era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * static_cast<unsigned>(m + (m > 2 ? -3 : 9)) + 2) / 5
                       + static_cast<unsigned>(d) - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return static_cast<std::int64_t>(era) * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

int days_in_month(int y, int m) noexcept {
  static constexpr int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : days[m - 1];
}

bool parse_count(std::string_view s, std::uint32_t& out) noexcept {
  if (!all_digits(s))
    return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size() && out >= 1;
}

} // namespace

bool parse_timestamp(std::string_view text, std::int64_t& out_ns) noexcept {
  // Plain seconds: digits, optionally '.' and digits.
  if (!text.empty() && text.find_first_of("-: ") == std::string_view::npos) {
    auto dot = text.find('.');
    auto whole = text.substr(0, dot);
    if (whole.size() > 10 || !all_digits(whole))
      return false;
    std::int64_t sec = 0, frac = 0;
    for (char c : whole)
      sec = sec * 10 + (c - '0');
    if (dot != std::string_view::npos && !parse_fraction_ns(text.substr(dot + 1), frac))
      return false;
    out_ns = sec * 1'000'000'000 + frac;
    return true;
  }
  // YYYY-MM-DD HH:MM:SS[.fraction]
  if (text.size() < 19 || text[4] != '-' || text[7] != '-' || text[10] != ' ' || text[13] != ':'
      || text[16] != ':')
    return false;
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  if (!parse_fixed(text.substr(0, 4), 4, y) || !parse_fixed(text.substr(5, 2), 2, mo)
      || !parse_fixed(text.substr(8, 2), 2, d) || !parse_fixed(text.substr(11, 2), 2, h)
      || !parse_fixed(text.substr(14, 2), 2, mi) || !parse_fixed(text.substr(17, 2), 2, s))
    return false;
  if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 59)
    return false;
  std::int64_t frac = 0;
  if (text.size() > 19) {
    if (text[19] != '.' || !parse_fraction_ns(text.substr(20), frac))
      return false;
  }
  const std::int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s;
  out_ns = secs * 1'000'000'000 + frac;
  return true;
}

expected<std::vector<trace_request>, trace_error> parse_trace(std::string_view csv,
                                                              std::size_t max_rows,
                                                              std::string_view source) {
  auto fail = [&](std::uint32_t line, std::string what) {
    return unexpected(trace_error{line, fmt::format("{}:{}: {}", source, line, what)});
  };
  std::vector<trace_request> out;
  std::int64_t first_ns = 0, prev_ns = 0;
  std::uint32_t line_no = 0;
  std::size_t pos = 0;
  while (pos < csv.size()) {
    auto nl = csv.find('\n', pos);
    auto line = csv.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? csv.size() : nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    if (line_no == 1) {
      if (line != trace_header)
        return fail(1, fmt::format("expected the header '{}', got '{}'", trace_header, line));
      continue;
    }
    if (max_rows != 0 && out.size() >= max_rows)
      break;
    if (line.empty())
      return fail(line_no, "empty row (only the last line of the file may be empty)");

    std::string_view fields[3];
    std::size_t n = 0, start = 0;
    for (;;) {
      auto comma = line.find(',', start);
      auto f = line.substr(start, comma == std::string_view::npos ? std::string_view::npos
                                                                  : comma - start);
      if (n < 3)
        fields[n] = f;
      ++n;
      if (comma == std::string_view::npos)
        break;
      start = comma + 1;
    }
    if (n != 3)
      return fail(line_no, fmt::format("expected 3 fields ({}), got {}", trace_header, n));

    std::int64_t ns = 0;
    if (!parse_timestamp(fields[0], ns))
      return fail(line_no, fmt::format("TIMESTAMP: expected 'YYYY-MM-DD HH:MM:SS[.fraction]' or "
                                       "seconds, got '{}'",
                                       fields[0]));
    trace_request r;
    if (!parse_count(fields[1], r.prompt_tokens))
      return fail(line_no, fmt::format("ContextTokens: expected a whole number >= 1, got '{}'",
                                       fields[1]));
    if (!parse_count(fields[2], r.output_tokens))
      return fail(line_no, fmt::format("GeneratedTokens: expected a whole number >= 1, got '{}'",
                                       fields[2]));
    if (out.empty()) {
      first_ns = ns;
    } else if (ns < prev_ns) {
      return fail(line_no, fmt::format("TIMESTAMP '{}' is earlier than the previous row's; "
                                       "rows must be in arrival order",
                                       fields[0]));
    }
    prev_ns = ns;
    r.arrival_s = static_cast<double>(ns - first_ns) / 1e9;
    out.push_back(r);
  }
  if (line_no == 0)
    return fail(1, fmt::format("empty file (expected the header '{}')", trace_header));
  if (out.empty())
    return fail(line_no, "the trace has no request rows");
  return out;
}

expected<std::string, trace_error> read_trace_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return unexpected(
      trace_error{0, fmt::format("cannot read trace '{}': {}", path, std::strerror(errno))});
  std::ostringstream buf;
  buf << in.rdbuf();
  return std::move(buf).str();
}

expected<std::vector<trace_request>, trace_error> load_trace(const std::string& path,
                                                             std::size_t max_rows) {
  auto text = read_trace_file(path);
  if (!text)
    return unexpected(std::move(text.error()));
  return parse_trace(*text, max_rows, path);
}

std::size_t clamp_to_context(std::vector<trace_request>& requests, std::uint32_t max_context) {
  std::size_t clamped = 0;
  if (max_context < 2)
    return 0;
  for (auto& r : requests) {
    if (std::uint64_t{r.prompt_tokens} + r.output_tokens <= max_context)
      continue;
    r.output_tokens = std::min(r.output_tokens, max_context - 1);
    r.prompt_tokens = max_context - r.output_tokens;
    r.clamped = true;
    ++clamped;
  }
  return clamped;
}

} // namespace kvlane::tools::bench
