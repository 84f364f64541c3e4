#include "tools/bench/json_writer.hpp"

#include <fmt/format.h>

#include <cassert>
#include <cmath>

namespace kvlane::tools::bench {

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else
          out += c;
    }
  }
  out += '"';
  return out;
}

std::string json_number(double x) {
  if (!std::isfinite(x))
    return "null";
  if (x != 0 && (std::fabs(x) < 1e-4 || std::fabs(x) >= 1e15))
    return fmt::format("{:.6g}", x);
  auto s = fmt::format("{:.4f}", x);
  while (s.back() == '0')
    s.pop_back();
  if (s.back() == '.')
    s.pop_back();
  if (s == "-0")
    s = "0";
  return s;
}

void json_writer::newline() {
  out_ += '\n';
  out_.append(2 * has_items_.size(), ' ');
}

void json_writer::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_items_.empty()) {
    if (has_items_.back())
      out_ += ',';
    has_items_.back() = true;
    newline();
  }
}

json_writer& json_writer::begin_object() {
  before_value();
  out_ += '{';
  has_items_.push_back(false);
  return *this;
}

json_writer& json_writer::close(char bracket) {
  assert(!has_items_.empty() && !after_key_);
  const bool items = has_items_.back();
  has_items_.pop_back();
  if (items)
    newline();
  out_ += bracket;
  return *this;
}

json_writer& json_writer::end_object() {
  return close('}');
}

json_writer& json_writer::begin_array() {
  before_value();
  out_ += '[';
  has_items_.push_back(false);
  return *this;
}

json_writer& json_writer::end_array() {
  return close(']');
}

json_writer& json_writer::key(std::string_view k) {
  assert(!has_items_.empty() && !after_key_);
  before_value();
  out_ += json_quote(k);
  out_ += ": ";
  after_key_ = true;
  return *this;
}

json_writer& json_writer::value(double x) {
  before_value();
  out_ += json_number(x);
  return *this;
}

json_writer& json_writer::value(std::uint64_t x) {
  before_value();
  out_ += fmt::format("{}", x);
  return *this;
}

json_writer& json_writer::value(std::int64_t x) {
  before_value();
  out_ += fmt::format("{}", x);
  return *this;
}

json_writer& json_writer::value(bool x) {
  before_value();
  out_ += x ? "true" : "false";
  return *this;
}

json_writer& json_writer::value(std::string_view s) {
  before_value();
  out_ += json_quote(s);
  return *this;
}

json_writer& json_writer::null() {
  before_value();
  out_ += "null";
  return *this;
}

} // namespace kvlane::tools::bench
