#pragma once

// The tiny Llama GGUF the llamacpp tests run on: written at test time by kvlane-make-gguf
// (ctest fixture "llamacpp model"), seeded random weights, the Llama-3 vocabulary and chat
// template from llama.cpp's source tree. Nothing is downloaded.

#include "backends/llamacpp_options.hpp"

#ifndef KVLANE_TEST_GGUF
#error "KVLANE_TEST_GGUF must name the generated test model"
#endif

namespace kvlane::test {

/// [model.llamacpp] for the tiny test model: 4 slots of 512 tokens, 2 threads, f16 KV.
inline backends::llamacpp_options tiny_llama_options() {
  backends::llamacpp_options o;
  o.gguf = KVLANE_TEST_GGUF;
  o.slots = 4;
  o.context = 512;
  o.threads = 2;
  o.threads_batch = 2;
  o.batch = 64;
  return o;
}

} // namespace kvlane::test
