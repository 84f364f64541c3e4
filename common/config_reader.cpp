#include "common/config_reader.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace kvlane {

namespace config_reader {

std::uint32_t line_of(const toml::node& n) {
  return n.source().begin.line;
}

std::string_view type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::none: return "nothing";
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
  }
  return "unknown";
}

std::string quoted(std::string_view s) {
  return fmt::format("{:?}", s);
}

/// "64MiB" when the value is a whole number of a binary unit, else plain bytes.
std::string format_bytes(std::uint64_t v) {
  constexpr std::pair<std::uint64_t, std::string_view> units[] = {
    {tib, "TiB"}, {1ull << 30, "GiB"}, {mib, "MiB"}, {kib, "KiB"}};
  for (const auto& [size, name] : units)
    if (v != 0 && v % size == 0)
      return fmt::format("{}{}", v / size, name);
  return fmt::format("{}", v);
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

/// Rejects keys of `s` that are not in `known`; reports the first by line.
status check_keys(const reporter& r, const section& s, std::span<const std::string_view> known) {
  const toml::key* first = nullptr;
  std::uint32_t first_line = 0;
  for (auto&& [k, v] : s.table) {
    if (std::find(known.begin(), known.end(), k.str()) != known.end())
      continue;
    const std::uint32_t line = k.source().begin.line != 0 ? k.source().begin.line : line_of(v);
    if (first == nullptr || line < first_line) {
      first = &k;
      first_line = line;
    }
  }
  if (first == nullptr)
    return {};
  auto key = s.key(first->str());
  auto body = fmt::format("unknown key '{}'", key);
  const auto best = std::min_element(known.begin(), known.end(), [&](auto a, auto b) {
    return edit_distance(first->str(), a) < edit_distance(first->str(), b);
  });
  if (best != known.end() && edit_distance(first->str(), *best) <= 2)
    body += fmt::format(" (did you mean '{}'?)", *best);
  return unexpected(r.error(std::move(key), first_line, body));
}

/// The sub-table `name` of `s`, or nullptr when absent.
expected<const toml::table*, config_error> find_table(const reporter& r, const section& s,
                                                      std::string_view name) {
  const auto* n = s.find(name);
  if (n == nullptr)
    return static_cast<const toml::table*>(nullptr);
  if (!n->is_table())
    return unexpected(r.wrong_type(s.key(name), *n, "table"));
  return n->as_table();
}

/// Reads a float; integers are accepted too (`time_scale = 100`).
status read_real(const reporter& r, const section& s, std::string_view name, double& out,
                 real_range range) {
  const auto* n = s.find(name);
  if (n == nullptr)
    return {};
  double x = 0.0;
  if (const auto* f = n->as_floating_point())
    x = f->get();
  else if (const auto* i = n->as_integer())
    x = static_cast<double>(i->get());
  else
    return unexpected(r.wrong_type(s.key(name), *n, "number"));
  if (!range.contains(x))
    return unexpected(r.bad_value(s.key(name), line_of(*n),
                                  fmt::format("must be {} (got {})", range.describe(), x)));
  out = x;
  return {};
}

status read_string(const reporter& r, const section& s, std::string_view name, std::string& out) {
  const auto* n = s.find(name);
  if (n == nullptr)
    return {};
  const auto* v = n->as_string();
  if (v == nullptr)
    return unexpected(r.wrong_type(s.key(name), *n, "string"));
  out = v->get();
  return {};
}

status read_bool(const reporter& r, const section& s, std::string_view name, bool& out) {
  const auto* n = s.find(name);
  if (n == nullptr)
    return {};
  const auto* v = n->as_boolean();
  if (v == nullptr)
    return unexpected(r.wrong_type(s.key(name), *n, "boolean"));
  out = v->get();
  return {};
}

/// Reads a byte size: a non-negative integer or a string such as "64MiB".
status read_bytes(const reporter& r, const section& s, std::string_view name, std::uint64_t& out,
                  std::uint64_t lo, std::uint64_t hi) {
  const auto* n = s.find(name);
  if (n == nullptr)
    return {};
  std::uint64_t x = 0;
  bool written_as_string = false;
  if (const auto* i = n->as_integer()) {
    if (i->get() < 0)
      return unexpected(r.bad_value(
        s.key(name), line_of(*n),
        fmt::format("must be between {} and {} (got {})", format_bytes(lo), format_bytes(hi), i->get())));
    x = static_cast<std::uint64_t>(i->get());
  } else if (const auto* str = n->as_string()) {
    const auto parsed = parse_byte_size(str->get());
    if (!parsed)
      return unexpected(r.bad_value(
        s.key(name), line_of(*n),
        fmt::format("expected a byte size such as \"64MiB\", \"8 GiB\", \"1GB\" or an integer "
                    "(got {})",
                    quoted(str->get()))));
    x = *parsed;
    written_as_string = true;
  } else {
    return unexpected(r.wrong_type(s.key(name), *n, "integer or byte-size string"));
  }
  if (x < lo || x > hi)
    return unexpected(r.bad_value(s.key(name), line_of(*n),
                                  fmt::format("must be between {} and {} (got {})",
                                              format_bytes(lo), format_bytes(hi),
                                              written_as_string ? format_bytes(x) : std::to_string(x))));
  out = x;
  return {};
}

} // namespace config_reader

std::optional<std::uint64_t> parse_byte_size(std::string_view text) noexcept {
  constexpr std::pair<std::string_view, std::uint64_t> units[] = {
    {"B", 1},
    {"KiB", config_reader::kib},           {"MiB", config_reader::mib},       {"GiB", 1ull << 30},   {"TiB", config_reader::tib},
    {"kB", 1'000},          {"KB", 1'000},      {"MB", 1'000'000},     {"GB", 1'000'000'000},
    {"TB", 1'000'000'000'000},
  };
  constexpr auto max = std::numeric_limits<std::uint64_t>::max();

  std::size_t i = 0;
  std::uint64_t n = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const auto digit = static_cast<std::uint64_t>(text[i] - '0');
    if (n > (max - digit) / 10)
      return std::nullopt;
    n = n * 10 + digit;
  }
  if (i == 0)
    return std::nullopt;
  auto unit = text.substr(i);
  if (unit.empty())
    return n;
  if (unit.front() == ' ')
    unit.remove_prefix(1);
  for (const auto& [name, factor] : units) {
    if (unit == name) {
      if (n > max / factor)
        return std::nullopt;
      return n * factor;
    }
  }
  return std::nullopt;
}

} // namespace kvlane
