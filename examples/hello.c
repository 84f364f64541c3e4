/* Streams one answer from kvlaned to stdout (C API).
 *   kvlane-example-c ["prompt"]   (socket: $KVLANE_SOCKET or the default) */
#include <kvlane/kvlane.h>

#include <stdio.h>

int main(int argc, char** argv) {
  kvlane_client* client = NULL;
  if (kvlane_connect(NULL, "example-c", 2000, &client) != KVLANE_OK) {
    fprintf(stderr, "connect: %s\n", kvlane_last_error());
    return 1;
  }
  kvlane_request req;
  kvlane_request_init(&req);
  req.prompt = argc > 1 ? argv[1] : "Hello";
  req.max_tokens = 32;
  kvlane_stream* stream = NULL;
  kvlane_status st = kvlane_submit(client, &req, 2000, &stream);
  kvlane_chunk chunk = {0};
  while (st == KVLANE_OK && !chunk.ended) {
    st = kvlane_next(stream, 10000, &chunk);
    if (st == KVLANE_OK)
      fwrite(chunk.text, 1, chunk.text_len, stdout);
  }
  if (st != KVLANE_OK)
    fprintf(stderr, "\nerror: %s: %s\n", kvlane_status_name(st), kvlane_last_error());
  printf("\n");
  kvlane_stream_free(stream);
  kvlane_close(client);
  return st == KVLANE_OK ? 0 : 1;
}
