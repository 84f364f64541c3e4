#include "tools/schemabench/schema_decode.hpp"

#include "tools/bench/completion_stream.hpp"
#include "tools/bench/sse_parser.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace kvlane::tools::schemabench {

namespace {

// An incident report: the shape of an extraction request (kvlane-grammarbench uses an order
// record; a second shape here keeps the figures from resting on one schema).
constexpr std::string_view schema_text = R"({
  "type": "object",
  "properties": {
    "incident_id": {"type": "string", "format": "uuid"},
    "reported_at": {"type": "string", "format": "date-time"},
    "severity": {"enum": ["low", "medium", "high", "critical"]},
    "title": {"type": "string", "minLength": 3, "maxLength": 60},
    "service": {"enum": ["api", "billing", "auth", "storage", "search", "web"]},
    "region": {"type": "string", "pattern": "^[a-z]{2}-[a-z]{4,9}-[1-3]$"},
    "customer_impact": {"type": "boolean"},
    "affected_users": {"type": "integer", "minimum": 0, "maximum": 10000000},
    "duration_minutes": {"type": "integer", "minimum": 1, "maximum": 10080},
    "summary": {"type": "string", "maxLength": 200},
    "root_cause": {"type": ["string", "null"]},
    "detected_by": {"anyOf": [{"const": "alert"}, {"const": "customer"}, {"type": "string", "maxLength": 20}]},
    "on_call": {
      "type": "object",
      "properties": {
        "name": {"type": "string", "maxLength": 40},
        "team": {"enum": ["sre", "platform", "payments", "identity"]},
        "paged_at": {"type": "string", "format": "date-time"}
      },
      "required": ["name", "team"],
      "additionalProperties": false
    },
    "timeline": {
      "type": "array",
      "minItems": 1,
      "maxItems": 6,
      "items": {
        "type": "object",
        "properties": {
          "at": {"type": "string", "format": "date-time"},
          "event": {"type": "string", "maxLength": 80}
        },
        "required": ["at", "event"],
        "additionalProperties": false
      }
    },
    "follow_ups": {"type": "array", "items": {"type": "string", "maxLength": 50}, "maxItems": 5},
    "postmortem_due": {"type": "string", "format": "date"},
    "error_rate_percent": {"type": "number", "minimum": 0, "maximum": 100},
    "rollback": {"type": "boolean"},
    "ticket": {"type": "string", "pattern": "^INC-[0-9]{4,6}$"},
    "status": {"enum": ["open", "mitigated", "resolved"]}
  },
  "required": ["incident_id", "reported_at", "severity", "title", "service", "summary",
               "timeline", "status"],
  "additionalProperties": false
})";

} // namespace

std::string_view incident_schema() noexcept { return schema_text; }

std::string decode_body(const decode_request& r) {
  nlohmann::ordered_json j;
  j["model"] = r.model;
  j["messages"] = nlohmann::ordered_json::array({{{"role", "user"}, {"content", r.prompt}}});
  j["max_tokens"] = r.max_tokens;
  j["temperature"] = 0;
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  if (r.with_schema)
    j["response_format"] = {{"type", "json_schema"},
                            {"json_schema",
                             {{"name", "incident"},
                              {"strict", true},
                              {"schema", nlohmann::ordered_json::parse(schema_text)}}}};
  return j.dump();
}

double decode_sample::decode_tok_s() const noexcept {
  const double span = last_s - first_s;
  if (content_events < 2 || tokens < 2 || !(span > 0))
    return 0;
  return static_cast<double>(tokens - 1) / span;
}

expected<decode_sample, std::string> run_decode(bench::http_client& client, const decode_request& r,
                                                bench::http_client::clock::time_point deadline) {
  using clock = bench::http_client::clock;
  bench::http_request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = decode_body(r);
  decode_sample s;
  std::string error;
  std::string error_body;
  int status = 0;
  bench::sse_parser sse;
  const auto t0 = clock::now();
  auto on_event = [&](const bench::sse_event& e) {
    if (e.data == "[DONE]" || !error.empty())
      return;
    const auto j = nlohmann::json::parse(e.data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      error = fmt::format("an event that is not a JSON object: {}", e.data.substr(0, 200));
      return;
    }
    if (j.contains("error")) {
      error = bench::error_message_of(e.data);
      return;
    }
    if (auto u = j.find("usage"); u != j.end() && u->is_object())
      if (auto n = u->find("completion_tokens"); n != u->end() && n->is_number_unsigned())
        s.tokens = n->get<std::uint64_t>();
    auto c = j.find("choices");
    if (c == j.end() || !c->is_array() || c->empty())
      return;
    const auto& choice = c->front();
    if (auto f = choice.find("finish_reason"); f != choice.end() && f->is_string())
      s.finish_reason = f->get<std::string>();
    auto d = choice.find("delta");
    if (d == choice.end() || !d->is_object())
      return;
    auto content = d->find("content");
    if (content == d->end() || !content->is_string() || content->get_ref<const std::string&>().empty())
      return;
    const double at = std::chrono::duration<double>(clock::now() - t0).count();
    if (s.content_events++ == 0)
      s.first_s = at;
    s.last_s = at;
    s.text += content->get_ref<const std::string&>();
  };
  auto head = client.exchange(
    req, deadline, [&](const bench::http_head& h) { status = h.status; },
    [&](std::string_view bytes) {
      if (status == 200)
        sse.feed(bytes, on_event);
      else if (error_body.size() < 4096)
        error_body.append(bytes);
    });
  if (!head)
    return unexpected(std::move(head).error());
  if (status != 200)
    return unexpected(fmt::format("HTTP {}: {}", status, bench::error_message_of(error_body)));
  if (!error.empty())
    return unexpected(std::move(error));
  if (s.content_events == 0)
    return unexpected(std::string{"the stream carried no content"});
  if (s.tokens == 0)
    s.tokens = s.content_events;
  return s;
}

double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

} // namespace kvlane::tools::schemabench
