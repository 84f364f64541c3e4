/* kvlane.h — the C API of the kvlane client library (link -lkvlane, or
 * pkg-config kvlane). A thin layer over the C++ API (kvlane/client.hpp):
 * opaque handles, status codes, no exceptions across the boundary.
 *
 *   kvlane_client* c;
 *   if (kvlane_connect(NULL, "my-app", 2000, &c) != KVLANE_OK) {
 *     fprintf(stderr, "%s\n", kvlane_last_error()); return 1;
 *   }
 *   kvlane_request r; kvlane_request_init(&r); r.prompt = "Hello";
 *   kvlane_stream* s; kvlane_submit(c, &r, 2000, &s);
 *   kvlane_chunk ch;
 *   while (kvlane_next(s, 10000, &ch) == KVLANE_OK) {
 *     fwrite(ch.text, 1, ch.text_len, stdout);
 *     if (ch.ended) break;
 *   }
 *   kvlane_stream_free(s); kvlane_close(c);
 *
 * Threading: handles may be used from any thread. kvlane_last_error() is per
 * thread: the message of the last failed call on this thread.
 */
#ifndef KVLANE_KVLANE_H
#define KVLANE_KVLANE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Same values as kvlane::client::errc. */
typedef enum kvlane_status {
  KVLANE_OK = 0,
  KVLANE_DAEMON_NOT_RUNNING = 1,
  KVLANE_PERMISSION_DENIED = 2,
  KVLANE_NOT_ALLOWED = 3,
  KVLANE_VERSION_MISMATCH = 4,
  KVLANE_TIMEOUT = 5,
  KVLANE_CONNECTION_LOST = 6,
  KVLANE_PROTOCOL_ERROR = 7,
  KVLANE_INVALID_ARGUMENT = 8,
  KVLANE_UNKNOWN_MODEL = 9,
  KVLANE_INVALID_REQUEST = 10,
  KVLANE_TOO_LONG = 11,
  KVLANE_TOO_MANY_REQUESTS = 12,
  KVLANE_SERVER_BUSY = 13,
  KVLANE_SHUTTING_DOWN = 14,
  KVLANE_INTERNAL = 15,
  KVLANE_MODEL_FAILED = 16,
  KVLANE_BUSY = 17,
  KVLANE_SESSION_BUSY = 18
} kvlane_status;

typedef enum kvlane_end_reason {
  KVLANE_END_LENGTH = 0,
  KVLANE_END_STOP = 1,
  KVLANE_END_CANCELLED = 2,
  KVLANE_END_ERROR = 3,
  KVLANE_END_BACKLOG = 4
} kvlane_end_reason;

typedef struct kvlane_client kvlane_client;
typedef struct kvlane_stream kvlane_stream;

typedef struct kvlane_request {
  const char* model;      /* NULL or "": the daemon's default model */
  const char* prompt;     /* UTF-8, NUL-terminated ... */
  const uint32_t* prompt_tokens; /* ... or token ids (when prompt is NULL) */
  size_t n_prompt_tokens;
  int priority;           /* 0 interactive, 1 batch */
  float temperature;
  uint32_t top_k;
  float top_p;
  uint64_t seed;
  uint32_t max_tokens;
  int stop_at_eos;        /* non-zero: stop at the model's end-of-sequence token */
  const char* session;    /* NULL or "": stateless; else a conversation name, 1..64 of
                             [A-Za-z0-9._-]: the daemon keeps the history and prepends it
                             (see kvlane::client::request::session) */
} kvlane_request;

/* Valid until the next kvlane_next() on the same stream or its free. */
typedef struct kvlane_chunk {
  const uint32_t* tokens;
  size_t n_tokens;
  const char* text;       /* UTF-8, not NUL-terminated */
  size_t text_len;
  int ended;              /* non-zero: the fields below are set */
  kvlane_end_reason reason;
  uint32_t prompt_tokens;
  uint32_t generated_tokens;
  uint64_t ttft_us, tpot_us, e2e_us;
} kvlane_chunk;

/* Defaults: greedy, 256 tokens, interactive, stop at EOS. */
void kvlane_request_init(kvlane_request* r);

/* socket_path NULL: the default (see kvlane::client::default_socket_path). */
kvlane_status kvlane_connect(const char* socket_path, const char* client_name, int timeout_ms,
                             kvlane_client** out);
void kvlane_close(kvlane_client* c);

kvlane_status kvlane_submit(kvlane_client* c, const kvlane_request* r, int timeout_ms,
                            kvlane_stream** out);
/* KVLANE_OK with a chunk (tokens, text and maybe the end); KVLANE_TIMEOUT; or
 * the request's failure (e.g. KVLANE_UNKNOWN_MODEL, KVLANE_CONNECTION_LOST). */
kvlane_status kvlane_next(kvlane_stream* s, int timeout_ms, kvlane_chunk* out);
kvlane_status kvlane_cancel(kvlane_stream* s);
/* Forgets this user's session `session` of `model` (NULL or "": the default
 * model) on the daemon. *existed (may be NULL) says whether there was one. */
kvlane_status kvlane_drop_session(kvlane_client* c, const char* session, const char* model,
                                  int timeout_ms, int* existed);
uint64_t kvlane_stream_id(const kvlane_stream* s);
/* Cancels the request if it has not ended. */
void kvlane_stream_free(kvlane_stream* s);

const char* kvlane_status_name(kvlane_status s);
const char* kvlane_end_reason_name(kvlane_end_reason r);
const char* kvlane_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* KVLANE_KVLANE_H */
