#pragma once

// kvlane::daemon::http JSON field readers — the checks every request decoder applies to an
// untrusted body: nesting bounded before parsing, each field's type and range, errors that
// name the field ("messages[1].role") and say what was expected and what came.
//
// Bodies are parsed as nlohmann::ordered_json: a schema's properties keep the client's order
// (generated output follows it) and tools are shown to the model as the client wrote them.
// Pure functions; safe from any thread.

#include "common/expected.hpp"
#include "daemon/http/errors.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace kvlane::daemon::http {

using field_status = expected<void, api_error>;

/// Returns the error of a failed field_status (or expected) expression from the caller.
#define KVLANE_HTTP_TRY(...)                                                                      \
  do {                                                                                            \
    if (auto status_ = (__VA_ARGS__); !status_)                                                   \
      return ::kvlane::unexpected(std::move(status_.error()));                                    \
  } while (false)

/// `body` as a JSON object, its nesting bounded by max_json_depth (request_decoder.hpp); else
/// 400 invalid_json.
expected<nlohmann::ordered_json, api_error> parse_ordered_object(std::string_view body);

/// 400: "'<param>' must be <expected>, got <type>".
api_error wrong_type(const std::string& param, std::string_view expected, const nlohmann::ordered_json& v);

field_status read_string(const nlohmann::ordered_json& v, const std::string& param, std::string& out,
                         std::size_t max_bytes = std::numeric_limits<std::size_t>::max());
field_status read_bool(const nlohmann::ordered_json& v, const std::string& param, bool& out);
/// A finite number in [lo, hi].
field_status read_real(const nlohmann::ordered_json& v, const std::string& param, float& out, double lo,
                       double hi);

/// An integer in [lo, hi].
template <class T>
field_status read_uint(const nlohmann::ordered_json& v, const std::string& param, T& out, std::uint64_t lo,
                 std::uint64_t hi) {
  if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0))
    return unexpected(invalid(param, fmt::format("'{}' must be an integer between {} and {}, got {}",
                                                 param, lo, hi, v.dump())));
  const auto x = v.get<std::uint64_t>();
  if (x < lo || x > hi)
    return unexpected(invalid(param, fmt::format("'{}' must be an integer between {} and {}, got {}",
                                                 param, lo, hi, x)));
  out = static_cast<T>(x);
  return {};
}

} // namespace kvlane::daemon::http
