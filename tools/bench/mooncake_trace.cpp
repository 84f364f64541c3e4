#include "tools/bench/mooncake_trace.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <optional>

namespace kvlane::tools::bench {

namespace {

using json = nlohmann::json;

constexpr std::string_view fields[] = {"timestamp", "input_length", "output_length", "hash_ids"};

// A whole number in [min, max], or nullopt (floats, negatives, strings, ...).
std::optional<std::uint64_t> whole(const json& v, std::uint64_t min, std::uint64_t max) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
    return std::nullopt;
  const auto x = v.get<std::uint64_t>();
  if (x < min || x > max)
    return std::nullopt;
  return x;
}

std::string shown(const json& v) {
  auto s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

} // namespace

expected<std::vector<mooncake_request>, trace_error>
parse_mooncake(std::string_view jsonl, std::size_t max_rows, std::string_view source,
               std::uint32_t block_tokens) {
  auto fail = [&](std::uint32_t line, std::string what) {
    return unexpected(trace_error{line, fmt::format("{}:{}: {}", source, line, what)});
  };
  if (block_tokens == 0)
    return unexpected(trace_error{0, "the block size must be at least 1 token"});
  constexpr std::uint64_t u32_max = std::numeric_limits<std::uint32_t>::max();
  std::vector<mooncake_request> out;
  std::uint64_t first_ms = 0, prev_ms = 0;
  std::uint32_t line_no = 0;
  std::size_t pos = 0;
  while (pos < jsonl.size()) {
    if (max_rows != 0 && out.size() >= max_rows)
      break;
    auto nl = jsonl.find('\n', pos);
    auto line = jsonl.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? jsonl.size() : nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    if (line.empty())
      return fail(line_no, "empty line (only the last line of the file may be empty)");

    json obj;
    try {
      obj = json::parse(line);
    } catch (const json::parse_error& e) {
      return fail(line_no, fmt::format("not valid JSON (at byte {} of the line)", e.byte));
    }
    if (!obj.is_object())
      return fail(line_no, fmt::format("expected a JSON object with {}, got {}",
                                       fmt::join(fields, ", "), shown(obj)));
    for (auto& [key, value] : obj.items())
      if (std::find(std::begin(fields), std::end(fields), key) == std::end(fields))
        return fail(line_no, fmt::format("unknown field '{}' (expected {})", key,
                                         fmt::join(fields, ", ")));
    for (auto f : fields)
      if (!obj.contains(f))
        return fail(line_no, fmt::format("{}: missing", f));

    mooncake_request r;
    const auto ts = whole(obj["timestamp"], 0, std::numeric_limits<std::int64_t>::max() / 1000);
    if (!ts)
      return fail(line_no, fmt::format("timestamp: expected a whole number of ms >= 0, got {}",
                                       shown(obj["timestamp"])));
    const auto in = whole(obj["input_length"], 1, u32_max);
    if (!in)
      return fail(line_no, fmt::format("input_length: expected a whole number of tokens >= 1, "
                                       "got {}",
                                       shown(obj["input_length"])));
    const auto outlen = whole(obj["output_length"], 1, u32_max);
    if (!outlen)
      return fail(line_no, fmt::format("output_length: expected a whole number of tokens >= 1, "
                                       "got {}",
                                       shown(obj["output_length"])));
    const auto& ids = obj["hash_ids"];
    if (!ids.is_array())
      return fail(line_no, fmt::format("hash_ids: expected an array of block ids, got {}",
                                       shown(ids)));
    const std::uint64_t blocks = (*in + block_tokens - 1) / block_tokens;
    if (ids.size() != blocks)
      return fail(line_no, fmt::format("hash_ids: input_length {} needs {} block id{} of {} "
                                       "tokens, got {}",
                                       *in, blocks, blocks == 1 ? "" : "s", block_tokens,
                                       ids.size()));
    r.hash_ids.reserve(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      auto id = whole(ids[i], 0, std::numeric_limits<std::uint64_t>::max());
      if (!id)
        return fail(line_no, fmt::format("hash_ids[{}]: expected a whole number >= 0, got {}", i,
                                         shown(ids[i])));
      r.hash_ids.push_back(*id);
    }
    if (out.empty()) {
      first_ms = *ts;
    } else if (*ts < prev_ms) {
      return fail(line_no, fmt::format("timestamp: {} is earlier than the previous line's {}; "
                                       "lines must be in arrival order",
                                       *ts, prev_ms));
    }
    prev_ms = *ts;
    r.arrival_s = static_cast<double>(*ts - first_ms) / 1000.0;
    r.input_length = static_cast<std::uint32_t>(*in);
    r.output_length = static_cast<std::uint32_t>(*outlen);
    out.push_back(std::move(r));
  }
  if (out.empty())
    return fail(line_no == 0 ? 1 : line_no, "the trace has no request lines");
  return out;
}

expected<std::vector<mooncake_request>, trace_error> load_mooncake(const std::string& path,
                                                                   std::size_t max_rows) {
  auto text = read_trace_file(path);
  if (!text)
    return unexpected(std::move(text.error()));
  return parse_mooncake(*text, max_rows, path);
}

} // namespace kvlane::tools::bench
