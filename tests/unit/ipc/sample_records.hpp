#pragma once

// Records shared by the protocol's unit tests (record codec, request tracker).

#include "ipc/record_codec.hpp"

#include <doctest/doctest.h>

#include <variant>

namespace kvlane::test {

/// Decodes `b`, failing the test unless it is a valid record of type T.
template <class T>
T decode_as(const ipc::proto::record_bytes& b) {
  auto r = ipc::proto::decode_record(b);
  if (!r)
    FAIL("decode failed: " << r.error().message);
  REQUIRE(std::holds_alternative<T>(*r));
  return std::get<T>(*r);
}

/// A submit with every field away from its default: request 42, prompt "hello".
inline ipc::proto::submit_rec sample_submit() {
  ipc::proto::submit_rec s;
  s.request_id = 42;
  s.kind = ipc::proto::prompt_kind::text;
  s.prio = ipc::proto::priority::batch;
  s.stop_at_eos = false;
  s.model = "llama-3.2-1b";
  s.temperature = 0.7f;
  s.top_p = 0.9f;
  s.top_k = 40;
  s.max_tokens = 100;
  s.seed = 0x1234567890ull;
  s.stop_tokens = {1, 2, 3};
  s.prompt_bytes = 5;
  s.inline_data = "hello";
  return s;
}

} // namespace kvlane::test
