#include "daemon/http/ollama_api.hpp"

#include "actors/engine.hpp"
#include "daemon/http/request_decoder.hpp"
#include "daemon/http/service.hpp"
#include "daemon/http/stream_format.hpp"
#include "daemon/http/tool_call_parser.hpp"
#include "daemon/model_commands.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <optional>

namespace kvlane::daemon::http::ollama {

namespace {

using json = nlohmann::json;


std::int64_t ns_of(double ms) {
  return ms > 0 && std::isfinite(ms) ? static_cast<std::int64_t>(std::llround(ms * 1e6)) : 0;
}

/// Writes one Ollama response (generate or chat, NDJSON or one object).
class writer final : public generation_writer {
public:
  /// `calls`: the tool syntax to read calls in (none: the answer is all text).
  writer(std::weak_ptr<responder> out, bool chat, bool stream, std::string model,
         backends::tool_call_syntax calls)
    : out_(std::move(out)), chat_(chat), stream_(stream), model_(std::move(model)) {
    if (calls != backends::tool_call_syntax::none)
      parser_.emplace(calls, "call_");
  }

  void on_start() override {
    if (auto out = out_.lock(); out && stream_)
      out->stream_begin("application/x-ndjson");
  }

  void on_error(const api_error& e) override {
    if (auto out = out_.lock())
      out->respond(error_response(e, dialect::ollama));
  }

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
    if (!s.error.empty()) {
      if (stream_) {
        out->stream_write(ndjson_line({{"error", s.error}}));
        out->stream_end();
      } else {
        api_error e;
        e.status = 500;
        e.message = s.error;
        out->respond(error_response(e, dialect::ollama));
      }
      return;
    }
    auto last = piece(stream_ ? std::string_view{} : std::string_view{text_}, true);
    if (!stream_ && !calls_.empty())
      last["message"]["tool_calls"] = calls_;
    last["done_reason"] = s.finish_reason;
    last["total_duration"] = ns_of(s.total_ms + s.load_ms);
    last["load_duration"] = ns_of(s.load_ms); // waiting for the model to load
    // Ollama counts the whole prompt, cached or not, and reports the cached
    // part separately (docs/http.md).
    last["prompt_eval_count"] = s.prompt_tokens;
    last["prompt_eval_cached_count"] = s.cached_tokens;
    last["prompt_eval_duration"] = ns_of(s.ttft_ms);
    last["eval_count"] = s.completion_tokens;
    last["eval_duration"] = ns_of(s.total_ms - s.ttft_ms);
    last["kvlane"] = {{"ttft_ms", s.ttft_ms}, {"preemptions", s.preemptions}};
    if (stream_) {
      out->stream_write(ndjson_line(last));
      out->stream_end();
    } else {
      auto r = json_response(to_json_text(last));
      out->respond(std::move(r));
    }
  }

private:
  void write_text(std::string_view text) {
    if (!stream_) {
      text_.append(text);
      return;
    }
    if (auto out = out_.lock())
      out->stream_write(ndjson_line(piece(text, false)));
  }

  /// The parser's events: text as text; a call, once complete, as Ollama writes it
  /// ({"function": {"name", "arguments": {...}}}), in its own line when streaming.
  void write_events() {
    for (auto& e : events_) {
      if (e.k == tool_call_event::kind::text) {
        write_text(e.text);
        continue;
      }
      if (e.k == tool_call_event::kind::begin)
        names_.push_back(e.text);
      if (e.k != tool_call_event::kind::end)
        continue;
      auto args = json::parse(e.text, nullptr, false);
      if (args.is_discarded() || !args.is_object()) // cut short or not an object: as text
        args = json{{"arguments", e.text}};
      json call{{"function", {{"index", e.index}, {"name", names_[e.index]}, {"arguments", std::move(args)}}}};
      if (!stream_) {
        calls_.push_back(std::move(call));
        continue;
      }
      auto line = piece({}, false);
      line["message"]["tool_calls"] = json::array({std::move(call)});
      if (auto out = out_.lock())
        out->stream_write(ndjson_line(line));
    }
    events_.clear();
  }

  json piece(std::string_view text, bool done) const {
    json j{{"model", model_}, {"created_at", rfc3339_now()}};
    if (chat_)
      j["message"] = {{"role", "assistant"}, {"content", std::string{text}}};
    else
      j["response"] = std::string{text};
    j["done"] = done;
    return j;
  }

  std::weak_ptr<responder> out_;
  const bool chat_, stream_;
  const std::string model_;
  std::string text_;
  std::optional<tool_call_parser> parser_; ///< when the answer may hold tool calls
  std::vector<tool_call_event> events_;    ///< the parser's, not yet written
  std::vector<std::string> names_;         ///< each call's function
  json calls_ = json::array();             ///< not streaming: the answer's tool_calls
};

/// The writer of the answer to a decoded request, or nullptr once it is answered (an error,
/// a load request).
std::unique_ptr<generation_writer> writer_for(service& svc,
                                              expected<generation_request, api_error>& req,
                                              const std::shared_ptr<responder>& out) {
  if (!req) {
    out->respond(error_response(req.error(), dialect::ollama));
    return nullptr;
  }
  const bool chat = req->what == generation_request::kind::chat;
  // An empty request is how Ollama clients load a model (it is loaded by now): answer at
  // once, done_reason "load"; with keep_alive 0 it unloads the model instead, "unload".
  if (req->empty()) {
    const auto& k = req->keep_alive;
    const bool unload = k && !k->is_pinned() && k->idle().count() == 0;
    // (Unloading needs nothing more: the request's lease, taken with keep_alive 0,
    // unloads the model as it goes.)
    json j{{"model", req->model}, {"created_at", rfc3339_now()}};
    if (chat)
      j["message"] = {{"role", "assistant"}, {"content", ""}};
    else
      j["response"] = "";
    j["done"] = true;
    j["done_reason"] = unload ? "unload" : "load";
    out->respond(json_response(to_json_text(j)));
    return nullptr;
  }
  return std::make_unique<writer>(out, chat, req->stream, req->model, answer_call_syntax(svc, *req));
}

std::shared_ptr<generation> run(service& svc, std::string_view body, generation::decoder decode,
                                const identity& who, const std::shared_ptr<responder>& out) {
  return serve(svc, body, decode, who, out, dialect::ollama, writer_for);
}

json details() {
  return {{"parent_model", ""},
          {"format", ""},
          {"family", ""},
          {"families", nullptr},
          {"parameter_size", ""},
          {"quantization_level", ""}};
}

json model_json(std::string_view name) {
  return {{"name", name},
          {"model", name},
          {"modified_at", rfc3339_now()},
          {"size", 0},
          {"digest", ""},
          {"details", details()}};
}

} // namespace

std::shared_ptr<generation> generate(service& svc, std::string_view body, const identity& who,
                                     const std::shared_ptr<responder>& out) {
  return run(svc, body, &decode_ollama_generate, who, out);
}

std::shared_ptr<generation> chat(service& svc, std::string_view body, const identity& who,
                                 const std::shared_ptr<responder>& out) {
  return run(svc, body, &decode_ollama_chat, who, out);
}

void version(responder& out) {
  out.respond(json_response(to_json_text({{"version", KVLANE_VERSION}})));
}

void tags(service& svc, responder& out) {
  json models = json::array(); // every configured model can be loaded
  for (const auto& m : svc.models)
    models.push_back(model_json(m.name));
  out.respond(json_response(to_json_text({{"models", std::move(models)}})));
}

void ps(service& svc, responder& out) {
  json models = json::array();
  for (const auto& m : svc.engine->model_statuses()) {
    if (!m.entry || m.state != actors::residency::loaded)
      continue;
    auto j = model_json(m.name);
    j["size"] = resident_bytes(*m.entry);
    // Pinned (or in use with a pin): Ollama shows a date far in the future.
    j["expires_at"] = m.expires_at ? rfc3339(*m.expires_at) : std::string{"2318-01-01T00:00:00Z"};
    j["size_vram"] = resident_bytes(*m.entry);
    j["context_length"] = m.entry->info.max_context;
    models.push_back(std::move(j));
  }
  out.respond(json_response(to_json_text({{"models", std::move(models)}})));
}

void show(service& svc, std::string_view body, responder& out) {
  auto name = decode_model_name(body);
  if (!name) {
    out.respond(error_response(name.error(), dialect::ollama));
    return;
  }
  const auto m = svc.find_model(*name); // null while it is not loaded: no figures then
  const auto* mc = svc.find_model_config(*name);
  if (mc == nullptr) {
    auto e = invalid("model", fmt::format("model '{}' not found", *name), "model_not_found");
    e.status = 404;
    out.respond(error_response(e, dialect::ollama));
    return;
  }
  json j{{"modelfile", ""},
         {"parameters", ""},
         {"template", std::string{backends::to_string(mc->chat_format)}},
         {"details", details()},
         {"model_info", m ? json{{"general.context_length", m->info.max_context},
                                 {"general.vocab_size", m->info.vocab_size}}
                          : json::object()},
         {"capabilities", m && m->info.caps.embedding_dimension > 0
                            ? json::array({"completion", "embedding"})
                            : json::array({"completion"})}};
  out.respond(json_response(to_json_text(j)));
}

} // namespace kvlane::daemon::http::ollama
