#pragma once

// The requests the IPC integration tests send, shared by the test and the
// kvlane_test_client helper so that both sides agree on what was asked.

#include <kvlane/client.hpp>

#include <string>

namespace kvlane::test {

/// Request `i` of client `c`: mixed priorities, greedy and seeded sampling,
/// short and chunked (longer than one record) prompts, text and token prompts.
inline client::request ipc_recipe(int c, int i, std::uint32_t max_tokens = 0) {
  client::request r;
  r.model = "tiny";
  r.prio = i % 3 == 0 ? client::priority::batch : client::priority::interactive;
  std::string text = "client " + std::to_string(c) + " request " + std::to_string(i) + ": ";
  if (i % 5 == 0)
    for (int k = 0; k < 4; ++k)
      text += "a longer prompt that travels in chunks " + std::to_string(k) + "; ";
  else
    text += "tell me a story";
  if (i % 7 == 3) {
    r.prompt_tokens.push_back(256); // BOS
    for (unsigned char ch : text)
      r.prompt_tokens.push_back(ch);
  } else {
    r.prompt = text;
  }
  r.sampling.max_tokens = max_tokens != 0 ? max_tokens : 8 + static_cast<std::uint32_t>((c * 7 + i * 5) % 32);
  if (i % 2 == 1) {
    r.sampling.temperature = 0.8f;
    r.sampling.top_k = 40;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = static_cast<std::uint64_t>(c) * 1000 + static_cast<std::uint64_t>(i);
  }
  return r;
}

} // namespace kvlane::test
