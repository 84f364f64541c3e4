#pragma once

// The tiny Llama GGUF the llamacpp tests run on: written at test time by kvlane-make-gguf
// (ctest fixture "llamacpp model"), seeded random weights, the Llama-3 vocabulary and chat
// template from llama.cpp's source tree. Nothing is downloaded.

#include "backends/llamacpp_options.hpp"

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <thread>

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

/// The threads this process has now (/proc/self/task).
inline std::size_t threads_of_this_process() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
    ++n;
  return n;
}

/// Polls until this process has at most `limit` threads or `timeout` passes, and returns the
/// last count. libgomp releases the workers of a team whose thread ended without joining
/// them: they exit on their own shortly after, and nothing signals it, so a count read at
/// once can still include them (it did under the sanitizers).
inline std::size_t threads_once_at_most(std::size_t limit,
                                        std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto n = threads_of_this_process();
  while (n > limit && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    n = threads_of_this_process();
  }
  return n;
}

} // namespace kvlane::test
