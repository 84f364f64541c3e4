// The C API: opaque handles over the C++ client; no exception crosses it.
#include "kvlane/kvlane.h"

#include "kvlane/client.hpp"

#include <exception>
#include <string>

using namespace kvlane::client;

struct kvlane_client {
  std::unique_ptr<connection> conn;
};

struct kvlane_stream {
  std::shared_ptr<stream> s;
  chunk last;
};

namespace {

thread_local std::string last_error;

kvlane_status fail(const error& e) {
  last_error = e.message;
  return static_cast<kvlane_status>(e.code);
}

template <class F>
kvlane_status guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const std::exception& x) {
    last_error = x.what();
  } catch (...) {
    last_error = "unknown exception";
  }
  return KVLANE_INTERNAL;
}

} // namespace

extern "C" {

void kvlane_request_init(kvlane_request* r) {
  if (r == nullptr)
    return;
  *r = kvlane_request{};
  r->top_p = 1.0f;
  r->max_tokens = 256;
  r->stop_at_eos = 1;
}

kvlane_status kvlane_connect(const char* socket_path, const char* client_name, int timeout_ms,
                             kvlane_client** out) {
  return guarded([&] {
    if (out == nullptr)
      return fail({errc::invalid_argument, "out is NULL"});
    *out = nullptr;
    connect_options o;
    if (socket_path != nullptr)
      o.socket_path = socket_path;
    if (client_name != nullptr)
      o.client_name = client_name;
    o.timeout = std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
    auto c = connection::connect(o);
    if (!c)
      return fail(c.error());
    *out = new kvlane_client{std::move(*c)};
    return KVLANE_OK;
  });
}

void kvlane_close(kvlane_client* c) {
  guarded([&] {
    delete c;
    return KVLANE_OK;
  });
}

kvlane_status kvlane_submit(kvlane_client* c, const kvlane_request* r, int timeout_ms,
                            kvlane_stream** out) {
  return guarded([&] {
    if (c == nullptr || r == nullptr || out == nullptr)
      return fail({errc::invalid_argument, "client, request and out must not be NULL"});
    *out = nullptr;
    request q;
    if (r->model != nullptr)
      q.model = r->model;
    if (r->session != nullptr)
      q.session = r->session;
    if (r->prompt != nullptr)
      q.prompt = r->prompt;
    else if (r->prompt_tokens != nullptr)
      q.prompt_tokens.assign(r->prompt_tokens, r->prompt_tokens + r->n_prompt_tokens);
    q.prio = r->priority == 1 ? priority::batch : priority::interactive;
    q.sampling.temperature = r->temperature;
    q.sampling.top_k = r->top_k;
    q.sampling.top_p = r->top_p;
    q.sampling.seed = r->seed;
    q.sampling.max_tokens = r->max_tokens;
    q.sampling.stop_at_eos = r->stop_at_eos != 0;
    auto s = c->conn->submit(q, std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms));
    if (!s)
      return fail(s.error());
    *out = new kvlane_stream{std::move(*s), {}};
    return KVLANE_OK;
  });
}

kvlane_status kvlane_next(kvlane_stream* s, int timeout_ms, kvlane_chunk* out) {
  return guarded([&] {
    if (s == nullptr || out == nullptr)
      return fail({errc::invalid_argument, "stream and out must not be NULL"});
    *out = kvlane_chunk{};
    auto c = s->s->next(std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms));
    if (!c)
      return fail(c.error());
    s->last = std::move(*c);
    out->tokens = s->last.tokens.data();
    out->n_tokens = s->last.tokens.size();
    out->text = s->last.text.data();
    out->text_len = s->last.text.size();
    if (s->last.end) {
      const auto& e = *s->last.end;
      out->ended = 1;
      out->reason = static_cast<kvlane_end_reason>(e.reason);
      out->prompt_tokens = e.prompt_tokens;
      out->generated_tokens = e.generated_tokens;
      out->ttft_us = static_cast<uint64_t>(e.ttft.count());
      out->tpot_us = static_cast<uint64_t>(e.tpot.count());
      out->e2e_us = static_cast<uint64_t>(e.e2e.count());
    }
    return KVLANE_OK;
  });
}

kvlane_status kvlane_cancel(kvlane_stream* s) {
  return guarded([&] {
    if (s == nullptr)
      return fail({errc::invalid_argument, "stream is NULL"});
    auto r = s->s->cancel();
    return r ? KVLANE_OK : fail(r.error());
  });
}

kvlane_status kvlane_drop_session(kvlane_client* c, const char* session, const char* model,
                                  int timeout_ms, int* existed) {
  return guarded([&] {
    if (c == nullptr || session == nullptr)
      return fail({errc::invalid_argument, "client and session must not be NULL"});
    auto r = c->conn->drop_session(session, model != nullptr ? model : "",
                                   std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms));
    if (!r)
      return fail(r.error());
    if (existed != nullptr)
      *existed = *r ? 1 : 0;
    return KVLANE_OK;
  });
}

uint64_t kvlane_stream_id(const kvlane_stream* s) {
  return s != nullptr ? s->s->id() : 0;
}

void kvlane_stream_free(kvlane_stream* s) {
  guarded([&] {
    delete s;
    return KVLANE_OK;
  });
}

const char* kvlane_status_name(kvlane_status s) {
  return to_string(static_cast<errc>(s));
}

const char* kvlane_end_reason_name(kvlane_end_reason r) {
  return to_string(static_cast<end_reason>(r));
}

const char* kvlane_last_error(void) {
  return last_error.c_str();
}

} // extern "C"
