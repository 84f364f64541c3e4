#pragma once

// kvlane::tools::bench — json_writer: builds an indented JSON document.
//
// Problem it solves: the benchmark's report is a JSON file other tools read;
// the project carries no JSON library, and the writer only has to produce
// (never parse). Non-finite numbers are written as null. Misuse (a value
// where a key is due) is a programming error and asserts.
//
// Threading: a value; one thread at a time.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::bench {

class json_writer {
public:
  json_writer& begin_object();
  json_writer& end_object();
  json_writer& begin_array();
  json_writer& end_array();
  json_writer& key(std::string_view k);

  json_writer& value(double x);
  json_writer& value(std::uint64_t x);
  json_writer& value(std::int64_t x);
  json_writer& value(std::uint32_t x) { return value(std::uint64_t{x}); }
  json_writer& value(int x) { return value(std::int64_t{x}); }
  json_writer& value(bool x);
  json_writer& value(std::string_view s);
  json_writer& value(const char* s) { return value(std::string_view{s}); }
  json_writer& null();

  template <class T>
  json_writer& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  /// The document; complete once every object and array is closed.
  const std::string& str() const noexcept { return out_; }

private:
  void before_value();
  void newline();
  json_writer& close(char bracket);

  std::string out_;
  std::vector<bool> has_items_; ///< per open container
  bool after_key_ = false;
};

/// `s` as a quoted JSON string.
std::string json_quote(std::string_view s);

/// A finite number in a short form (up to 4 decimals, trailing zeros cut); "null" otherwise.
std::string json_number(double x);

} // namespace kvlane::tools::bench
