#include "tools/bench/http_parser.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace kvlane::tools::bench {

namespace {

constexpr std::size_t max_head_bytes = 64 * 1024;
constexpr std::size_t max_line_bytes = 8 * 1024;

bool iequals(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x))
                  == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

/// Whether the comma list `value` holds `token` (case-insensitive).
bool list_has(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const auto comma = value.find(',');
    if (iequals(trim(value.substr(0, comma)), token))
      return true;
    if (comma == std::string_view::npos)
      break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

} // namespace

std::optional<std::string_view> http_head::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (iequals(n, name))
      return std::string_view{v};
  return std::nullopt;
}

bool http_head::keep_alive() const {
  if (body == http_body_kind::until_close)
    return false;
  const auto connection = header("Connection");
  if (minor_version == 0)
    return connection && list_has(*connection, "keep-alive");
  return !connection || !list_has(*connection, "close");
}

expected<void, std::string> http_response_parser::parse_head(std::string_view text) {
  // Status line: HTTP/1.x SP 3DIGIT SP reason
  const auto eol = text.find('\n');
  const auto status_line = trim(text.substr(0, eol));
  if (status_line.size() < 12 || status_line.substr(0, 7) != "HTTP/1."
      || !std::isdigit(static_cast<unsigned char>(status_line[7])) || status_line[8] != ' ')
    return unexpected(fmt::format("malformed status line '{}'", status_line.substr(0, 80)));
  head_.minor_version = status_line[7] - '0';
  int status = 0;
  const auto code = status_line.substr(9, 3);
  auto [p, ec] = std::from_chars(code.data(), code.data() + code.size(), status);
  if (ec != std::errc{} || p != code.data() + code.size() || status < 100 || status > 999)
    return unexpected(fmt::format("malformed status code in '{}'", status_line.substr(0, 80)));
  head_.status = status;
  head_.reason = std::string{trim(status_line.substr(std::min<std::size_t>(12, status_line.size())))};
  std::string_view rest = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
  while (!rest.empty()) {
    const auto e = rest.find('\n');
    auto line = rest.substr(0, e);
    rest = e == std::string_view::npos ? std::string_view{} : rest.substr(e + 1);
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    if (line.empty())
      break;
    const auto colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return unexpected(fmt::format("malformed header line '{}'", line.substr(0, 80)));
    head_.headers.emplace_back(std::string{line.substr(0, colon)},
                               std::string{trim(line.substr(colon + 1))});
  }
  if (head_only_ || head_.status < 200 || head_.status == 204 || head_.status == 304) {
    head_.body = http_body_kind::none;
  } else if (auto te = head_.header("Transfer-Encoding"); te && list_has(*te, "chunked")) {
    head_.body = http_body_kind::chunked;
  } else if (auto cl = head_.header("Content-Length")) {
    std::uint64_t n = 0;
    auto [q, ec2] = std::from_chars(cl->data(), cl->data() + cl->size(), n);
    if (cl->empty() || ec2 != std::errc{} || q != cl->data() + cl->size())
      return unexpected(fmt::format("malformed Content-Length '{}'", *cl));
    head_.body = http_body_kind::length;
    head_.content_length = n;
  } else {
    head_.body = http_body_kind::until_close;
  }
  return {};
}

void http_response_parser::begin_body() {
  switch (head_.body) {
    case http_body_kind::none: state_ = state::done; break;
    case http_body_kind::length:
      remaining_ = head_.content_length;
      state_ = remaining_ == 0 ? state::done : state::body;
      break;
    case http_body_kind::chunked: state_ = state::chunk_size; break;
    case http_body_kind::until_close: state_ = state::body; break;
  }
}

expected<void, std::string> http_response_parser::feed(std::string_view data,
                                                        const body_sink& sink) {
  std::size_t i = 0;
  auto deliver = [&](std::string_view bytes) {
    body_bytes_ += bytes.size();
    if (sink && !bytes.empty())
      sink(bytes);
  };
  // Appends input up to and including the next '\n' to line_; true once a
  // whole line is in line_ (without its line break).
  auto take_line = [&]() -> expected<bool, std::string> {
    const auto nl = data.find('\n', i);
    const auto end = nl == std::string_view::npos ? data.size() : nl;
    line_.append(data.substr(i, end - i));
    i = nl == std::string_view::npos ? data.size() : nl + 1;
    if (line_.size() > max_line_bytes)
      return unexpected(std::string{"a chunk-size or trailer line over 8 KiB"});
    if (nl == std::string_view::npos)
      return false;
    if (!line_.empty() && line_.back() == '\r')
      line_.pop_back();
    return true;
  };
  while (i < data.size() && state_ != state::done) {
    switch (state_) {
      case state::head: {
        const auto old = line_.size();
        line_.append(data.substr(i));
        const auto from = old >= 3 ? old - 3 : 0;
        auto crlf = line_.find("\r\n\r\n", from);
        auto lf = line_.find("\n\n", from);
        std::size_t end = std::string::npos;
        if (crlf != std::string::npos)
          end = crlf + 4;
        if (lf != std::string::npos && (end == std::string::npos || lf + 2 < end))
          end = lf + 2;
        if (end == std::string::npos) {
          if (line_.size() > max_head_bytes)
            return unexpected(std::string{"response head over 64 KiB"});
          i = data.size();
          break;
        }
        i += end - old;
        const std::string text = std::move(line_);
        line_.clear();
        if (auto ok = parse_head(std::string_view{text}.substr(0, end)); !ok)
          return ok;
        if (head_.status >= 100 && head_.status < 200 && head_.status != 101) {
          head_ = http_head{}; // an interim response: the real one follows
          break;
        }
        begin_body();
        break;
      }
      case state::body: {
        const auto avail = data.size() - i;
        const auto n = head_.body == http_body_kind::until_close
                         ? avail
                         : static_cast<std::size_t>(std::min<std::uint64_t>(avail, remaining_));
        deliver(data.substr(i, n));
        i += n;
        if (head_.body == http_body_kind::length) {
          remaining_ -= n;
          if (remaining_ == 0)
            state_ = state::done;
        }
        break;
      }
      case state::chunk_size: {
        auto whole = take_line();
        if (!whole)
          return unexpected(std::move(whole).error());
        if (!*whole)
          break;
        auto size_text = trim(std::string_view{line_}.substr(0, line_.find(';')));
        std::uint64_t size = 0;
        auto [p, ec] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
        if (size_text.empty() || ec != std::errc{} || p != size_text.data() + size_text.size())
          return unexpected(fmt::format("malformed chunk size '{}'", line_.substr(0, 40)));
        line_.clear();
        remaining_ = size;
        state_ = size == 0 ? state::trailers : state::chunk_data;
        break;
      }
      case state::chunk_data: {
        const auto n =
          static_cast<std::size_t>(std::min<std::uint64_t>(data.size() - i, remaining_));
        deliver(data.substr(i, n));
        i += n;
        remaining_ -= n;
        if (remaining_ == 0)
          state_ = state::chunk_end;
        break;
      }
      case state::chunk_end: {
        auto whole = take_line();
        if (!whole)
          return unexpected(std::move(whole).error());
        if (!*whole)
          break;
        if (!line_.empty())
          return unexpected(std::string{"chunk data longer than its size"});
        state_ = state::chunk_size;
        break;
      }
      case state::trailers: {
        auto whole = take_line();
        if (!whole)
          return unexpected(std::move(whole).error());
        if (!*whole)
          break;
        const bool last = line_.empty();
        line_.clear();
        if (last)
          state_ = state::done;
        break;
      }
      case state::done: break;
    }
  }
  consumed_ = i;
  return {};
}

expected<void, std::string> http_response_parser::finish() {
  if (state_ == state::done)
    return {};
  if (state_ == state::body && head_.body == http_body_kind::until_close) {
    state_ = state::done;
    return {};
  }
  if (state_ == state::head)
    return unexpected(line_.empty() ? std::string{"connection closed before a response"}
                                    : std::string{"connection closed inside the response head"});
  return unexpected(fmt::format("connection closed inside the body after {} bytes", body_bytes_));
}

} // namespace kvlane::tools::bench
