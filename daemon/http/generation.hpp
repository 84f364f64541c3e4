#pragma once

// kvlane::daemon::http::generation — one engine sequence driven for an HTTP request.
//
// Problem it solves: the engine delivers token ids on CAF worker threads; an
// HTTP response needs UTF-8 text, stop strings matched across token boundaries,
// usage counts and timings, and a cancel when the client goes away. A
// generation owns that path: its body is decoded and its prompt rendered and
// tokenized on the render pool (never on the HTTP thread: a large prompt takes
// seconds), and it is submitted back on the HTTP thread; then its sink posts
// every batch of tokens to the HTTP thread, where the text is decoded, passed
// through the stop matcher and handed to a generation_writer (the API- and
// mode-specific framing). A matched stop string ends the sequence as a stop
// token would (engine::stop): it counts as finished, and the KV of the text the
// client received stays for the conversation's next turn.
//
// Ownership and threading: created and used on the HTTP thread only; the
// connection holds it while the request runs and calls abandon() if the client
// disconnects (before its prompt is rendered: nothing is submitted). The pool's
// jobs and the sink hold weak references, so a generation that is gone simply
// drops late results and tokens. The writer is called on the HTTP thread.

#include "actors/messages.hpp"
#include "actors/model_registry.hpp"
#include "common/expected.hpp"
#include "daemon/http/errors.hpp"
#include "daemon/http/request_decoder.hpp"
#include "daemon/http/responder.hpp"
#include "daemon/http/stop_matcher.hpp"
#include "ipc/utf8.hpp"

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kvlane::backends {
class backend;
} // namespace kvlane::backends

namespace kvlane::daemon::http {

struct identity;
struct service;

struct generation_summary {
  std::string finish_reason; ///< "stop" | "length" | "cancelled" | "error"
  std::string error;         ///< finish_reason "error": what failed
  std::uint32_t prompt_tokens = 0;
  std::uint32_t completion_tokens = 0;
  double ttft_ms = 0;  ///< submit to the first token
  double total_ms = 0; ///< submit to the end
  std::uint32_t preemptions = 0;
  std::uint32_t cached_tokens = 0; ///< prompt tokens served from retained KV, not prefilled
  double load_ms = 0; ///< how long the request waited for its model to load (0: it was loaded)
};

/// One candidate token as the client sees it.
struct token_choice {
  std::string text;   ///< the token's bytes (may be part of a UTF-8 character)
  float logprob = 0;  ///< natural log of its probability (actors::log_probabilities)
};

/// A generated token's log probability and its most likely alternatives.
struct scored_token {
  token_choice chosen;
  std::vector<token_choice> top; ///< most likely first; empty with top_logprobs 0
};

class generation_writer {
public:
  virtual ~generation_writer() = default;
  /// The prompt rendered and the engine took the request: the response
  /// begins (a stream sends its head). Before any call but on_error.
  virtual void on_start() {}
  /// The request failed before the engine took it (a prompt that does not
  /// render or is over the context, draining, ...): answer with `e`. Nothing
  /// else is called.
  virtual void on_error(const api_error& e) = 0;
  /// Only when the request asked for logprobs: once per generated token, in
  /// order, before the text that token produced (stop-string and UTF-8
  /// hold-back may delay that text to a later on_text, or the finish). Every
  /// token counted in completion_tokens is reported, up to the one that
  /// completed a stop string.
  virtual void on_scored_token(const scored_token& /*t*/) {}
  /// Text in order (never empty), after stop-string hold-back.
  virtual void on_text(std::string_view text) = 0;
  virtual void on_finish(const generation_summary& s) = 0;
};

class generation : public std::enable_shared_from_this<generation> {
public:
  /// One endpoint's body decoder (request_decoder).
  using decoder = expected<generation_request, api_error> (*)(std::string_view body);
  /// The API's part, on the HTTP thread once the body is decoded: the writer
  /// of the answer, or nullptr when it answered the request itself (a body
  /// that does not decode, an Ollama load request): nothing else happens then.
  using preparer =
    std::function<std::unique_ptr<generation_writer>(expected<generation_request, api_error>&)>;

  /// Starts a request and returns at once. Nothing heavy runs on the HTTP
  /// thread: the body is decoded on the render pool and handed to `prepare`;
  /// then the model is resolved, the request admitted as `who` (its own limit
  /// and [clients] max_live_sequences), its prompt rendered (chat template or
  /// plain text) and tokenized on the render pool, and submitted as `who`.
  /// Error now: the render queue is full (503 `overloaded`; the caller
  /// answers). Later errors reach the writer's on_error(): unknown model
  /// (404), over an admission limit (429, Retry-After), the render queue full,
  /// a prompt that does not render (400), a prompt or max_tokens over the
  /// context (400 naming the limit), draining (503), anything the engine
  /// rejects (400).
  static expected<std::shared_ptr<generation>, api_error>
  start(service& svc, std::string body, decoder decode, const identity& who, preparer prepare);

  ~generation();
  generation(const generation&) = delete;
  generation& operator=(const generation&) = delete;

  /// The client went away: cancel the sequence (or submit nothing if its
  /// prompt is still rendering); the writer sees nothing more.
  void abandon();
  bool finished() const noexcept { return finished_; }
  actors::seq_id id() const noexcept { return seq_; }
  std::uint32_t prompt_tokens() const noexcept { return prompt_tokens_; }
  const std::string& model() const noexcept { return model_; }

  // HTTP thread, from the sink's posts.
  /// `logprobs` holds one entry per token when the request asked for them.
  void on_tokens(const std::vector<backends::token_id>& tokens,
                 const std::vector<actors::token_logprobs>& logprobs);
  void on_end(const actors::stream_end& end);

  struct decode_job; ///< one body on the render pool (generation.cpp)
  struct render_job; ///< one prompt on the render pool (generation.cpp)

private:
  explicit generation(service& svc);
  /// HTTP thread: the decoded body; the API's writer, then begin().
  void on_decoded(decode_job& job);
  /// HTTP thread: waits for the model to be loaded (loading it), then begin().
  void with_model(generation_request req, const identity& who);
  /// HTTP thread: admits, queues the render on the leased model.
  void begin(generation_request req, const identity& who, actors::lease_ptr lease);
  /// HTTP thread: the render job's result; submits the prompt, or fails.
  void on_rendered(render_job& job);
  void fail(const api_error& e);
  void emit(std::string text);
  scored_token score(const actors::token_logprobs& lp) const;
  void cancel_sequence();

  service& svc_;
  preparer prepare_; ///< until the body is decoded
  std::string model_;
  std::shared_ptr<backends::backend> backend_;
  /// Holds the model loaded from begin() until the engine has the request
  /// (the sequence then holds its own).
  actors::lease_ptr lease_;
  double load_ms_ = 0; ///< waited for the model to load
  std::unique_ptr<generation_writer> writer_;
  /// Shared with the render job: set when the client goes away, so a job
  /// still queued is skipped.
  std::shared_ptr<std::atomic<bool>> gone_ = std::make_shared<std::atomic<bool>>(false);
  ipc::proto::utf8_stream utf8_;
  stop_matcher stops_{{}};
  actors::seq_id seq_ = 0;
  std::uint32_t prompt_tokens_ = 0;
  std::uint32_t completion_tokens_ = 0;
  // What the client received, for the KV kept at a stop string: bytes of text
  // fed to the stop matcher and released to the client, the leading tokens
  // whose text was released in full, and where (in fed bytes) the text of
  // each later token ends (few: those the matcher or the UTF-8 decoder hold).
  std::uint64_t fed_bytes_ = 0;
  std::uint64_t emitted_bytes_ = 0;
  std::uint32_t released_tokens_ = 0;
  std::deque<std::uint64_t> held_token_ends_;
  bool stop_matched_ = false;
  bool end_sent_ = false; ///< a cancel or a stop went to the engine
  bool abandoned_ = false;
  bool finished_ = false;
};

/// The tool syntax a request's answer writes calls in (its model's chat format, or the one its
/// own template teaches, backends::tool_syntax_of): none when it offers no tools, with
/// tool_choice none (the answer is content), or for an unknown model (which fails anyway).
backends::tool_call_syntax answer_call_syntax(const service& svc, const generation_request& req);

/// An API's writer for a decoded request, built on the HTTP thread (or nullptr when it answered
/// the request itself); see generation::preparer.
using writer_factory = std::unique_ptr<generation_writer> (*)(
  service& svc, expected<generation_request, api_error>& req, const std::shared_ptr<responder>& out);

/// generation::start for an endpoint answering on `out`: the writer comes from `make` while
/// `out` is still open; an error of start itself is answered in `d`'s shape. Returns the
/// running generation, or nullptr when it was answered.
std::shared_ptr<generation> serve(service& svc, std::string_view body, generation::decoder decode,
                                  const identity& who, const std::shared_ptr<responder>& out,
                                  dialect d, writer_factory make);

} // namespace kvlane::daemon::http
