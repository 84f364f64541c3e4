// The llamacpp backend on a real (tiny, seeded random-weight) Llama GGUF generated at test
// time: logits against llama.cpp's own single-sequence evaluation, snapshots that restore
// a slot bit for bit, rollback, slot isolation and precise errors.
#include "tests/llamacpp/llama_model.hpp"

#include "backends/llamacpp/llama_backend.hpp"

#include <llama.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>

using namespace kvlane;
using backends::llama_backend;
using backends::step_row;
using backends::token_id;

namespace {

std::unique_ptr<llama_backend> make(std::uint32_t slots = 4) {
  auto opts = test::tiny_llama_options();
  opts.slots = slots;
  auto made = llama_backend::create("tiny", opts);
  REQUIRE_MESSAGE(made.has_value(), (made ? std::string{} : made.error().message));
  return std::move(*made);
}

std::vector<token_id> prompt_of(const backends::tokenizer& tok, std::string_view text) {
  std::vector<token_id> out;
  if (auto b = tok.bos())
    out.push_back(*b);
  auto body = tok.encode(text);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

/// Prefills `tokens` into `slot` from position `from` in chunks, returns the last logits row.
std::vector<float> prefill(backends::backend& b, backends::slot_id slot, std::span<const token_id> tokens,
                           std::uint32_t from = 0) {
  backends::step_output out;
  const auto chunk = b.info().max_prefill_chunk;
  for (std::size_t at = 0; at < tokens.size(); at += chunk) {
    const auto n = std::min<std::size_t>(chunk, tokens.size() - at);
    const step_row row{slot, static_cast<std::uint32_t>(from + at), tokens.subspan(at, n)};
    auto s = b.step(std::span(&row, 1), out);
    REQUIRE_MESSAGE(s.has_value(), (s ? std::string{} : s.error().message));
  }
  auto r = out.row(0);
  return {r.begin(), r.end()};
}

token_id argmax(std::span<const float> logits) {
  return static_cast<token_id>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

/// Greedy continuation of `slot` (holding `len` tokens, last logits `logits`) for n tokens.
std::vector<token_id> greedy(backends::backend& b, backends::slot_id slot, std::uint32_t len,
                             std::vector<float> logits, std::size_t n) {
  std::vector<token_id> out;
  backends::step_output o;
  for (std::size_t i = 0; i < n; ++i) {
    const token_id t = argmax(logits);
    out.push_back(t);
    const step_row row{slot, len++, std::span(&out.back(), 1)};
    auto s = b.step(std::span(&row, 1), o);
    REQUIRE(s.has_value());
    logits.assign(o.row(0).begin(), o.row(0).end());
  }
  return out;
}

} // namespace

TEST_CASE("llamacpp: the backend reports the GGUF's geometry, its tokenizer and real KV sizes") {
  auto sut = make(3);
  const auto& i = sut->info();
  CHECK(i.kind == "llamacpp");
  CHECK(i.slots == 3);
  CHECK(i.max_context == test::tiny_llama_options().context);
  CHECK(i.vocab_size == sut->tokens().size());
  CHECK(i.vocab_size > 100000); // the Llama-3 vocabulary
  CHECK(i.caps.extent == backends::snapshot_extent::used_length);
  CHECK_FALSE(i.caps.transfer_overlaps_compute);
  CHECK(i.bytes_per_token > 0);
  CHECK(i.snapshot_bytes == sut->snapshot_size(i.max_context));
  CHECK(sut->snapshot_size(0) == 0);
  CHECK(sut->snapshot_size(10) == i.snapshot_header_bytes + 10 * i.bytes_per_token);
  CHECK_FALSE(sut->chat_template().empty());
  CHECK(sut->tokens().chat_template() == sut->chat_template());
  REQUIRE(sut->tokens().bos().has_value());
  CHECK(sut->tokens().special_token("<|eot_id|>").has_value());
  const auto stops = sut->tokens().stop_tokens();
  CHECK(std::find(stops.begin(), stops.end(), *sut->tokens().special_token("<|eot_id|>")) != stops.end());
  CHECK(sut->tokens().decode(sut->tokens().encode("Hello, world! Ünïcode ✓")) == "Hello, world! Ünïcode ✓");
}

TEST_CASE("llamacpp: a prompt's logits equal llama.cpp's own single-sequence evaluation") {
  auto sut = make();
  const auto prompt = prompt_of(sut->tokens(), "The quick brown fox jumps over the lazy dog. "
                                               "Pack my box with five dozen liquor jugs.");
  REQUIRE(prompt.size() > 10);
  // Busy neighbours in other slots must not matter.
  const auto other = prompt_of(sut->tokens(), "Something else entirely, in another slot.");
  prefill(*sut, 0, other);
  prefill(*sut, 2, other);
  const auto got = prefill(*sut, 1, prompt);

  // The reference: a plain one-sequence context on the same file, one llama_decode.
  auto mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(test::tiny_llama_options().gguf.c_str(), mp);
  REQUIRE(model != nullptr);
  auto cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_seq_max = 1;
  cp.n_threads = 2;
  cp.n_threads_batch = 2;
  llama_context* ctx = llama_init_from_model(model, cp);
  REQUIRE(ctx != nullptr);
  std::vector<llama_token> ids(prompt.begin(), prompt.end());
  auto batch = llama_batch_get_one(ids.data(), static_cast<std::int32_t>(ids.size()));
  REQUIRE(llama_decode(ctx, batch) == 0);
  const float* want = llama_get_logits_ith(ctx, -1);
  REQUIRE(want != nullptr);
  double max_diff = 0, max_abs = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    max_diff = std::max(max_diff, double(std::fabs(got[k] - want[k])));
    max_abs = std::max(max_abs, double(std::fabs(want[k])));
  }
  const auto want_top = argmax(std::span<const float>(want, got.size()));
  llama_free(ctx);
  llama_model_free(model);
  CAPTURE(max_diff);
  CAPTURE(max_abs);
  CHECK(max_abs > 0.1);                  // the logits are not flat
  CHECK(max_diff <= 1e-3 * max_abs + 1e-4); // floating-point tolerance
  CHECK(argmax(got) == want_top);
}

TEST_CASE("llamacpp: dump, overwrite and load restore a slot: the continuation is token-identical") {
  auto sut = make();
  const auto prompt = prompt_of(sut->tokens(), "Once upon a time, in a land far away, there lived");
  const auto len = static_cast<std::uint32_t>(prompt.size());
  const auto logits = prefill(*sut, 0, prompt);
  const auto want = greedy(*sut, 0, len, logits, 24);

  // Again, parked after the prompt; the slot is overwritten by another sequence meanwhile.
  auto logits2 = prefill(*sut, 0, prompt);
  CHECK(logits2 == logits);
  std::vector<std::byte> parked(sut->snapshot_size(len));
  auto dumped = sut->dump(0, len, parked);
  REQUIRE(dumped.has_value());
  CHECK(*dumped == parked.size());
  prefill(*sut, 0, prompt_of(sut->tokens(), "A different story overwrites this slot entirely now."));
  REQUIRE(sut->load(0, len, parked).has_value());
  CHECK(greedy(*sut, 0, len, logits, 24) == want);

  // Into another slot (a sequence resumes wherever a slot is free).
  REQUIRE(sut->load(3, len, parked).has_value());
  CHECK(greedy(*sut, 3, len, logits, 24) == want);
}

TEST_CASE("llamacpp: a parked snapshot whose V rows are scrambled changes the continuation") {
  // The check above can fail: restoring the wrong bytes gives other tokens.
  auto sut = make();
  const auto prompt = prompt_of(sut->tokens(), "Tell me about the history of the printing press");
  const auto len = static_cast<std::uint32_t>(prompt.size());
  const auto logits = prefill(*sut, 0, prompt);
  std::vector<std::byte> parked(sut->snapshot_size(len));
  REQUIRE(sut->dump(0, len, parked).has_value());
  const auto want = greedy(*sut, 0, len, logits, 16);
  // Scramble V rows of the last layer, in the last fifth (the same shape, other attention
  // state). The headers stay intact, and so do the last bytes: the empty streams of the
  // other slots (their cell counts of 0) follow this slot's. So the load itself succeeds.
  for (std::size_t k = parked.size() - parked.size() / 5; k < parked.size() - 64; ++k)
    parked[k] = std::byte{0x5c}; // f16 0x5c5c: 279, far outside what the model wrote
  REQUIRE(sut->load(0, len, parked).has_value());
  CHECK(greedy(*sut, 0, len, logits, 16) != want);
}

TEST_CASE("llamacpp: a rollback to a shorter cache_len continues as if the tail had never been decoded") {
  auto sut = make();
  const auto head = prompt_of(sut->tokens(), "Shared beginning of two branches,");
  const auto tail_a = sut->tokens().encode(" branch one goes north to the mountains");
  const auto tail_b = sut->tokens().encode(" branch two goes south to the sea");
  const auto h = static_cast<std::uint32_t>(head.size());

  auto full_b = head;
  full_b.insert(full_b.end(), tail_b.begin(), tail_b.end());
  const auto want_logits = prefill(*sut, 1, full_b);
  const auto want = greedy(*sut, 1, static_cast<std::uint32_t>(full_b.size()), want_logits, 16);

  prefill(*sut, 0, head);
  prefill(*sut, 0, tail_a, h);
  // Roll back to the shared head and take branch b.
  const auto got_logits = prefill(*sut, 0, tail_b, h);
  CHECK(got_logits == want_logits);
  CHECK(greedy(*sut, 0, static_cast<std::uint32_t>(full_b.size()), got_logits, 16) == want);
}

TEST_CASE("llamacpp: sequences decoded together in one step equal each decoded alone") {
  auto sut = make();
  std::vector<std::vector<token_id>> prompts{
    prompt_of(sut->tokens(), "First prompt about apples"),
    prompt_of(sut->tokens(), "Second, a much longer prompt about the orbital mechanics of moons"),
    prompt_of(sut->tokens(), "Third: short"),
  };
  std::vector<std::vector<token_id>> solo;
  for (auto& p : prompts) {
    auto l = prefill(*sut, 0, p);
    solo.push_back(greedy(*sut, 0, static_cast<std::uint32_t>(p.size()), l, 20));
  }
  // Together: prefill chunks and decodes of all three in the same steps.
  std::vector<std::vector<token_id>> got(3);
  std::vector<std::uint32_t> len(3, 0);
  std::vector<std::vector<float>> last(3);
  backends::step_output out;
  for (std::size_t step = 0; got[0].size() < 20 || got[1].size() < 20 || got[2].size() < 20; ++step) {
    std::vector<step_row> rows;
    std::vector<std::size_t> who;
    std::array<token_id, 3> next{};
    for (std::size_t s = 0; s < 3; ++s) {
      if (got[s].size() >= 20)
        continue;
      if (len[s] < prompts[s].size()) {
        const auto n = std::min<std::size_t>(5, prompts[s].size() - len[s]); // 5-token chunks
        rows.push_back({static_cast<backends::slot_id>(s + 1), len[s],
                        std::span(prompts[s]).subspan(len[s], n)});
      } else {
        next[s] = argmax(last[s]);
        got[s].push_back(next[s]);
        rows.push_back({static_cast<backends::slot_id>(s + 1), len[s], std::span(&next[s], 1)});
      }
      who.push_back(s);
    }
    REQUIRE(sut->step(rows, out).has_value());
    for (std::size_t r = 0; r < rows.size(); ++r) {
      len[who[r]] += static_cast<std::uint32_t>(rows[r].tokens.size());
      last[who[r]].assign(out.row(r).begin(), out.row(r).end());
    }
    REQUIRE(step < 400);
  }
  for (std::size_t s = 0; s < 3; ++s) {
    CAPTURE(s);
    CHECK(got[s] == solo[s]);
  }
}

TEST_CASE("llamacpp: bad steps, dumps and loads get precise errors and change no slot") {
  auto sut = make(2);
  const auto prompt = prompt_of(sut->tokens(), "Errors leave the slot as it was");
  const auto len = static_cast<std::uint32_t>(prompt.size());
  const auto logits = prefill(*sut, 0, prompt);
  backends::step_output out;
  const token_id t = 42;

  const step_row bad_slot{7, 0, std::span(&t, 1)};
  auto e = sut->step(std::span(&bad_slot, 1), out);
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().code == backends::backend_errc::invalid_argument);
  CHECK(e.error().message.find("slot 7") != std::string::npos);

  const step_row gap{0, len + 5, std::span(&t, 1)};
  e = sut->step(std::span(&gap, 1), out);
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().message.find("holds") != std::string::npos);

  const step_row overflow{1, sut->info().max_context, std::span(&t, 1)};
  e = sut->step(std::span(&overflow, 1), out);
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().code == backends::backend_errc::context_overflow);

  const token_id outside = sut->info().vocab_size + 3;
  const step_row bad_token{1, 0, std::span(&outside, 1)};
  e = sut->step(std::span(&bad_token, 1), out);
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().message.find("vocabulary") != std::string::npos);

  std::vector<std::byte> small(sut->snapshot_size(len) - 1);
  auto d = sut->dump(0, len, small);
  REQUIRE_FALSE(d.has_value());
  CHECK(d.error().code == backends::backend_errc::snapshot_mismatch);
  auto l = sut->load(1, len, small);
  REQUIRE_FALSE(l.has_value());
  CHECK(l.error().code == backends::backend_errc::snapshot_mismatch);

  // A snapshot of other length than claimed: refused, and the slot is left empty.
  std::vector<std::byte> parked(sut->snapshot_size(len));
  REQUIRE(sut->dump(0, len, parked).has_value());
  l = sut->load(1, len - 1, std::span(parked).first(sut->snapshot_size(len - 1)));
  REQUIRE_FALSE(l.has_value());
  CHECK(l.error().code == backends::backend_errc::snapshot_mismatch);

  // Slot 0 went through all of it untouched.
  auto again = greedy(*sut, 0, len, logits, 8);
  prefill(*sut, 1, prompt);
  CHECK(greedy(*sut, 1, len, logits, 8) == again);
}

TEST_CASE("llamacpp: creating a backend leaves no decode threads behind, only the thread that steps "
          "keeps its workers") {
  // docs/backends.md "Threads": a thread that decodes keeps (threads - 1) OpenMP workers while
  // it lives; a second such team throttles libgomp's barriers. The thread that creates the
  // backend lives on (as the daemon's does), so its count shows whether create left a team.
  auto opts = test::tiny_llama_options();
  REQUIRE(opts.threads == 2);
  std::size_t before = 0;
  std::size_t after_create = 0;
  std::size_t after_step = 0;
  std::string failure;
  std::thread creator([&] {
    before = test::threads_of_this_process();
    auto made = llama_backend::create("tiny", opts);
    if (!made) {
      failure = made.error().message;
      return;
    }
    // The calibration thread's OpenMP workers are released when it ends and exit on their own
    // (libgomp does not join them), so their exit is polled for; nothing signals it. Without
    // the fix they live as long as this thread and the count never comes down.
    after_create = test::threads_once_at_most(before);
    const std::array<token_id, 1> t{token_id{1}};
    const step_row row{0, 0, t};
    backends::step_output out;
    if (auto s = (*made)->step(std::span(&row, 1), out); !s) {
      failure = s.error().message;
      return;
    }
    after_step = test::threads_of_this_process();
  });
  creator.join();
  REQUIRE_MESSAGE(failure.empty(), failure);
  CHECK(after_create <= before);
  CHECK(after_step == after_create + 1);
}
