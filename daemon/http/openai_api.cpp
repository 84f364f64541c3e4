#include "daemon/http/openai_api.hpp"

#include "actors/engine.hpp"
#include "daemon/http/request_decoder.hpp"
#include "daemon/http/service.hpp"
#include "daemon/http/stream_format.hpp"
#include "daemon/http/tool_call_parser.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <random>

namespace kvlane::daemon::http::openai {

namespace {

using json = nlohmann::json;

json usage_of(const generation_summary& s) {
  return {{"prompt_tokens", s.prompt_tokens},
          {"completion_tokens", s.completion_tokens},
          {"total_tokens", s.prompt_tokens + s.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", s.cached_tokens}}}};
}

json bytes_of(const std::string& text) {
  json out = json::array();
  for (const unsigned char c : text)
    out.push_back(c);
  return out;
}

/// Chat's per-token entry: {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}.
json chat_logprob(const scored_token& t) {
  json top = json::array();
  for (const auto& c : t.top)
    top.push_back({{"token", c.text}, {"logprob", c.logprob}, {"bytes", bytes_of(c.text)}});
  return {{"token", t.chosen.text},
          {"logprob", t.chosen.logprob},
          {"bytes", bytes_of(t.chosen.text)},
          {"top_logprobs", std::move(top)}};
}

/// Code points in `text` (invalid bytes count one each, as the JSON output
/// replaces each with U+FFFD).
std::size_t code_points(std::string_view text) {
  std::size_t n = 0;
  for (const unsigned char c : text)
    n += (c & 0xC0) != 0x80;
  return n;
}

/// Legacy completions' shape: parallel arrays, alternatives as a map.
/// `offset` is the text_offset of the first token and advances past them all.
json completion_logprobs(const std::vector<scored_token>& tokens, std::size_t& offset) {
  json out{{"tokens", json::array()},
           {"token_logprobs", json::array()},
           {"top_logprobs", json::array()},
           {"text_offset", json::array()}};
  for (const auto& t : tokens) {
    out["tokens"].push_back(t.chosen.text);
    out["token_logprobs"].push_back(t.chosen.logprob);
    json top = json::object();
    for (const auto& c : t.top)
      if (!top.contains(c.text)) // two ids with the same text: the likelier one
        top[c.text] = c.logprob;
    if (!top.contains(t.chosen.text)) // OpenAI: the sampled token is always listed
      top[t.chosen.text] = t.chosen.logprob;
    out["top_logprobs"].push_back(std::move(top));
    out["text_offset"].push_back(offset);
    offset += code_points(t.chosen.text);
  }
  return out;
}

json timings_of(const generation_summary& s) {
  return {{"ttft_ms", s.ttft_ms}, {"total_ms", s.total_ms}, {"preemptions", s.preemptions}};
}

/// Writes one OpenAI response (chat or text completion, streamed or not).
class writer final : public generation_writer {
public:
  /// `calls`: the tool syntax to read calls in (none: the answer is all text).
  writer(std::weak_ptr<responder> out, bool chat, bool stream, bool include_usage, bool logprobs,
         std::string id, std::string model, backends::tool_call_syntax calls)
    : out_(std::move(out)),
      chat_(chat),
      stream_(stream),
      include_usage_(include_usage),
      logprobs_(logprobs),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(unix_now()) {
    if (calls != backends::tool_call_syntax::none)
      parser_.emplace(calls, fmt::format("call_{:016x}_", random_bits()));
  }

  /// A stream's head and first chunk (chat: the assistant role).
  void on_start() override {
    auto out = out_.lock();
    if (!out || !stream_)
      return;
    out->stream_begin("text/event-stream");
    if (chat_)
      out->stream_write(sse_event(chunk({{"role", "assistant"}, {"content", ""}}, nullptr)));
  }

  void on_error(const api_error& e) override {
    if (auto out = out_.lock())
      out->respond(error_response(e, dialect::openai));
  }

  void on_scored_token(const scored_token& t) override { scored_.push_back(t); }

  void on_text(std::string_view text) override {
    if (parser_) {
      parser_->feed(text, events_);
      write_events();
      return;
    }
    write_text(text);
  }

  void on_finish(const generation_summary& s) override {
    if (parser_) {
      parser_->finish(events_);
      write_events();
    }
    auto out = out_.lock();
    if (!out)
      return;
    // A call ends the answer as a stop would: say so. Cut short, it stays "length".
    const std::string finish_reason =
      !calls_.empty() && s.finish_reason == "stop" ? "tool_calls" : s.finish_reason;
    if (!stream_) {
      if (!s.error.empty()) {
        api_error e;
        e.status = 500;
        e.type = "server_error";
        e.code = "generation_failed";
        e.message = s.error;
        out->respond(error_response(e, dialect::openai));
        return;
      }
      json choice{{"index", 0}, {"logprobs", take_logprobs()}, {"finish_reason", finish_reason}};
      if (chat_) {
        choice["message"] = {{"role", "assistant"},
                             {"content", calls_.empty() || !text_.empty() ? json(text_) : json(nullptr)}};
        if (!calls_.empty())
          choice["message"]["tool_calls"] = calls_;
      } else
        choice["text"] = text_;
      json body{{"id", id_},
                {"object", chat_ ? "chat.completion" : "text_completion"},
                {"created", created_},
                {"model", model_},
                {"choices", json::array({std::move(choice)})},
                {"usage", usage_of(s)},
                {"kvlane", timings_of(s)}};
      out->respond(json_response(to_json_text(body)));
      return;
    }
    if (!s.error.empty()) {
      api_error e;
      e.status = 500;
      e.type = "server_error";
      e.code = "generation_failed";
      e.message = s.error;
      out->stream_write("data: " + render(e, dialect::openai) + "\n\n");
    } else {
      auto last = chat_ ? chunk(json::object(), finish_reason) : chunk_text("", finish_reason);
      last["kvlane"] = timings_of(s);
      out->stream_write(sse_event(last));
      if (include_usage_) {
        auto u = base(chat_ ? "chat.completion.chunk" : "text_completion");
        u["choices"] = json::array();
        u["usage"] = usage_of(s);
        out->stream_write(sse_event(u));
      }
    }
    out->stream_write(sse_done());
    out->stream_end();
  }

private:
  static std::uint64_t random_bits() {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return rng();
  }

  void write_text(std::string_view text) {
    if (!stream_) {
      text_.append(text);
      return;
    }
    if (auto out = out_.lock())
      out->stream_write(
        sse_event(chat_ ? chunk({{"content", std::string{text}}}, nullptr) : chunk_text(text, nullptr)));
  }

  /// The parser's events: text as text; calls into tool_calls (a stream: the call's id and
  /// name when it opens, then its arguments as they come, in OpenAI's delta shape).
  void write_events() {
    for (auto& e : events_) {
      switch (e.k) {
      case tool_call_event::kind::text:
        write_text(e.text);
        break;
      case tool_call_event::kind::begin:
        calls_.push_back({{"id", e.id},
                          {"type", "function"},
                          {"function", {{"name", e.text}, {"arguments", ""}}}});
        write_call({{"index", e.index},
                    {"id", e.id},
                    {"type", "function"},
                    {"function", {{"name", e.text}, {"arguments", ""}}}});
        break;
      case tool_call_event::kind::arguments:
        calls_[e.index]["function"]["arguments"] =
          calls_[e.index]["function"]["arguments"].get<std::string>() + e.text;
        write_call({{"index", e.index}, {"function", {{"arguments", e.text}}}});
        break;
      case tool_call_event::kind::end:
        break;
      }
    }
    events_.clear();
  }

  void write_call(json delta) {
    if (!stream_)
      return;
    if (auto out = out_.lock())
      out->stream_write(sse_event(chunk({{"tool_calls", json::array({std::move(delta)})}}, nullptr)));
  }

  json base(std::string_view object) const {
    json j{{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
    if (include_usage_)
      j["usage"] = nullptr;
    return j;
  }

  json chunk(json delta, json finish) {
    auto j = base("chat.completion.chunk");
    j["choices"] = json::array({{{"index", 0},
                                 {"delta", std::move(delta)},
                                 {"logprobs", take_logprobs()},
                                 {"finish_reason", std::move(finish)}}});
    return j;
  }

  json chunk_text(std::string_view text, json finish) {
    auto j = base("text_completion");
    j["choices"] = json::array({{{"index", 0},
                                 {"text", std::string{text}},
                                 {"logprobs", take_logprobs()},
                                 {"finish_reason", std::move(finish)}}});
    return j;
  }

  /// The logprobs of the tokens scored since the last call, in the
  /// endpoint's shape; null when the request did not ask or (a stream's
  /// role and final chunks) no token is pending.
  json take_logprobs() {
    if (!logprobs_ || (stream_ && scored_.empty()))
      return nullptr;
    json out;
    if (chat_) {
      json content = json::array();
      for (const auto& t : scored_)
        content.push_back(chat_logprob(t));
      out = {{"content", std::move(content)}, {"refusal", nullptr}};
    } else {
      out = completion_logprobs(scored_, text_offset_);
    }
    scored_.clear();
    return out;
  }

  std::weak_ptr<responder> out_;
  const bool chat_, stream_, include_usage_, logprobs_;
  const std::string id_, model_;
  const std::int64_t created_;
  std::string text_;
  std::vector<scored_token> scored_; ///< not yet written
  std::size_t text_offset_ = 0;      ///< completions: code points before scored_.front()
  std::optional<tool_call_parser> parser_; ///< when the answer may hold tool calls
  std::vector<tool_call_event> events_;    ///< the parser's, not yet written
  json calls_ = json::array();             ///< the answer's tool_calls in OpenAI's shape
};

/// The writer of the answer to a decoded request, or nullptr once the error is answered.
std::unique_ptr<generation_writer> writer_for(service& svc,
                                              expected<generation_request, api_error>& req,
                                              const std::shared_ptr<responder>& out) {
  if (!req) {
    out->respond(error_response(req.error(), dialect::openai));
    return nullptr;
  }
  const bool chat = req->what == generation_request::kind::chat;
  auto id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", svc.next_request++);
  return std::make_unique<writer>(out, chat, req->stream, req->include_usage, req->logprobs,
                                  std::move(id), req->model, answer_call_syntax(svc, *req));
}

std::shared_ptr<generation> run(service& svc, std::string_view body, generation::decoder decode,
                                const identity& who, const std::shared_ptr<responder>& out) {
  return serve(svc, body, decode, who, out, dialect::openai, writer_for);
}

/// A configured model; max_context only while it is loaded (its backend knows it).
json model_object(const service& svc, const std::string& name) {
  json j{{"id", name},
         {"object", "model"},
         {"created", std::chrono::duration_cast<std::chrono::seconds>(svc.started.time_since_epoch()).count()},
         {"owned_by", "kvlane"}};
  if (const auto m = svc.engine->find_model(name))
    j["max_context"] = m->info.max_context;
  return j;
}

} // namespace

std::shared_ptr<generation> chat_completions(service& svc, std::string_view body,
                                             const identity& who,
                                             const std::shared_ptr<responder>& out) {
  return run(svc, body, &decode_chat_completion, who, out);
}

std::shared_ptr<generation> completions(service& svc, std::string_view body, const identity& who,
                                        const std::shared_ptr<responder>& out) {
  return run(svc, body, &decode_completion, who, out);
}

void list_models(service& svc, responder& out) {
  json data = json::array();
  for (const auto& m : svc.models) // every configured model can be loaded
    data.push_back(model_object(svc, m.name));
  out.respond(json_response(to_json_text({{"object", "list"}, {"data", std::move(data)}})));
}

void retrieve_model(service& svc, std::string_view id, responder& out) {
  if (!svc.engine->is_configured(id)) {
    auto e = invalid("model", fmt::format("the model '{}' does not exist", id), "model_not_found");
    e.status = 404;
    out.respond(error_response(e, dialect::openai));
    return;
  }
  out.respond(json_response(to_json_text(model_object(svc, std::string{id}))));
}

} // namespace kvlane::daemon::http::openai
