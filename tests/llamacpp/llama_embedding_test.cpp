// The llamacpp backend's embeddings on the tiny GGUF: equal to llama.cpp's own mean-pooled
// embedding of the same text (one context with embeddings on and mean pooling, computed here
// with the llama API), different for different texts, made on one worker that ends when idle,
// while the compute lane keeps stepping; and served by kvlaned over HTTP.
#include "tests/integration/http_fixture.hpp"
#include "tests/llamacpp/llama_model.hpp"

#include "backends/llamacpp/llama_backend.hpp"

#include <llama.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <future>
#include <string>
#include <thread>

using namespace kvlane;
using backends::llama_backend;
using backends::token_id;

namespace {

using result = expected<backends::embeddings, backends::backend_error>;

std::unique_ptr<llama_backend> make() {
  auto made = llama_backend::create("tiny", test::tiny_llama_options());
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

/// Starts embedding `inputs`; the future holds the answer (`done` runs on the worker).
std::future<result> embed_async(backends::backend& b, std::vector<std::vector<token_id>> inputs,
                                std::function<bool()> cancelled = {}) {
  auto promise = std::make_shared<std::promise<result>>();
  auto future = promise->get_future();
  backends::embedding_job job;
  job.inputs = std::move(inputs);
  job.cancelled = std::move(cancelled);
  job.done = [promise](result r) { promise->set_value(std::move(r)); };
  b.embed(std::move(job));
  return future;
}

backends::embeddings embed(backends::backend& b, std::vector<std::vector<token_id>> inputs) {
  auto f = embed_async(b, std::move(inputs));
  REQUIRE(f.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  auto r = f.get();
  REQUIRE_MESSAGE(r.has_value(), (r ? std::string{} : r.error().message));
  return std::move(*r);
}

/// llama.cpp's own embedding of `text`: tokenized with BOS by llama_tokenize, one decode in
/// a context with embeddings on and mean pooling, the pooled vector L2-normalised.
std::vector<float> reference(std::string_view text, std::vector<llama_token>& tokens) {
  auto mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(test::tiny_llama_options().gguf.c_str(), mp);
  REQUIRE(model != nullptr);
  const llama_vocab* vocab = llama_model_get_vocab(model);
  tokens.assign(text.size() + 8, 0);
  const auto n = llama_tokenize(vocab, text.data(), static_cast<std::int32_t>(text.size()),
                                tokens.data(), static_cast<std::int32_t>(tokens.size()),
                                /*add_special=*/true, /*parse_special=*/false);
  REQUIRE(n > 0);
  tokens.resize(static_cast<std::size_t>(n));
  auto cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_ubatch = 512; // the whole text in one micro-batch: llama.cpp pools per micro-batch
  cp.n_seq_max = 1;
  cp.n_threads = 2;
  cp.n_threads_batch = 2;
  cp.embeddings = true;
  cp.pooling_type = LLAMA_POOLING_TYPE_MEAN;
  llama_context* ctx = llama_init_from_model(model, cp);
  REQUIRE(ctx != nullptr);
  REQUIRE(llama_decode(ctx, llama_batch_get_one(tokens.data(), n)) == 0);
  const float* pooled = llama_get_embeddings_seq(ctx, 0);
  REQUIRE(pooled != nullptr);
  std::vector<float> out(pooled, pooled + llama_model_n_embd(model));
  llama_free(ctx);
  llama_model_free(model);
  REQUIRE(backends::l2_normalize(out));
  return out;
}

double max_diff(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d;
}

const std::string short_text = "The quick brown fox jumps over the lazy dog.";
const std::string other_text = "Pack my box with five dozen liquor jugs, said the sphinx.";
// Over the embedding batch of 64 tokens: the vector is pooled across several decodes.
const std::string long_text =
  "Once upon a time, in a land far away, there lived a lighthouse keeper who counted the ships "
  "that passed each night and wrote their names in a book. The book grew thick with names of "
  "schooners, trawlers and ferries, and when the keeper grew old he gave it to the harbour "
  "library, where children still read it on rainy afternoons, tracing the names with their "
  "fingers and wondering where each ship had gone.";

} // namespace

TEST_CASE("llamacpp: an embedding equals llama.cpp's own mean-pooled embedding of the text within 1e-4") {
  auto sut = make();
  CHECK(sut->info().caps.embedding_dimension == 64); // the tiny model's n_embd
  const auto got = embed(*sut, {prompt_of(sut->tokens(), short_text), prompt_of(sut->tokens(), other_text),
                                prompt_of(sut->tokens(), long_text)});
  REQUIRE(got.dimension == 64);
  REQUIRE(got.values.size() == 3 * 64);
  for (const auto& [i, text] : {std::pair{0, short_text}, std::pair{1, other_text}, std::pair{2, long_text}}) {
    CAPTURE(i);
    std::vector<llama_token> ids;
    const auto want = reference(text, ids);
    CHECK(std::vector<token_id>(ids.begin(), ids.end()) == prompt_of(sut->tokens(), text));
    const auto diff = max_diff(got.row(static_cast<std::size_t>(i)), want);
    CAPTURE(diff);
    CHECK(diff <= 1e-4);
  }
  CHECK(prompt_of(sut->tokens(), long_text).size() > 64);
  // Different texts, different vectors (unit length, so a difference of 0.01 is far from noise).
  CHECK(max_diff(got.row(0), got.row(1)) > 1e-2);
  // The same text again: the same vector.
  const auto again = embed(*sut, {prompt_of(sut->tokens(), other_text)});
  CHECK(max_diff(again.row(0), got.row(1)) == 0.0);
}

TEST_CASE("llamacpp: embeddings run on one worker, started by the first job and gone when idle") {
  // An earlier case's released OpenMP workers may still be exiting: count once they are gone.
  const auto before_create = test::threads_once_at_most(1);
  auto sut = make();
  CHECK_FALSE(sut->embedder().worker_running()); // serving-only use starts nothing
  // create's calibration thread has ended; its released workers exit on their own.
  CHECK(test::threads_once_at_most(before_create) == before_create);
  sut->embedder().set_idle_exit(std::chrono::milliseconds(200));
  const auto input = prompt_of(sut->tokens(), short_text);
  auto first = embed_async(*sut, {input});
  auto second = embed_async(*sut, {input, input});
  REQUIRE(first.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  REQUIRE(second.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  CHECK(first.get().has_value());
  CHECK(second.get().has_value());
  CHECK(sut->embedder().batches() == 3); // one per input: each fits one batch
  REQUIRE(sut->embedder().wait_until_idle(std::chrono::seconds(10)));
  // The worker and its OpenMP team leave: the process is back to its threads of before.
  CHECK(test::threads_once_at_most(before_create) == before_create);
  // The next job starts a worker again.
  CHECK(embed(*sut, {input}).dimension == 64);
  CHECK(sut->embedder().worker_running());
}

TEST_CASE("llamacpp: the compute lane keeps stepping while embeddings run, and both give their solo results") {
  auto sut = make();
  const auto prompt = prompt_of(sut->tokens(), "Tell me about the lighthouse keeper and the ships.");
  const auto inputs = std::vector<std::vector<token_id>>(6, prompt_of(sut->tokens(), long_text));
  const auto batches_per_input = (inputs[0].size() + 63) / 64;
  REQUIRE(batches_per_input >= 2);
  const auto solo_embedding = embed(*sut, inputs);

  const auto decode = [&](backends::slot_id slot) {
    backends::step_output out;
    const backends::step_row row{slot, 0, prompt};
    REQUIRE(sut->step(std::span(&row, 1), out).has_value());
    std::vector<token_id> tokens;
    auto len = static_cast<std::uint32_t>(prompt.size());
    for (int i = 0; i < 40; ++i) {
      const auto r = out.row(0);
      tokens.push_back(static_cast<token_id>(std::max_element(r.begin(), r.end()) - r.begin()));
      const backends::step_row next{slot, len++, std::span(&tokens.back(), 1)};
      REQUIRE(sut->step(std::span(&next, 1), out).has_value());
    }
    return tokens;
  };
  const auto solo_tokens = decode(0);

  // Together: the embedding job on its worker while this thread steps slot 1.
  const auto batches_before = sut->embedder().batches();
  auto pending = embed_async(*sut, inputs);
  const auto tokens = decode(1);
  REQUIRE(pending.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  auto together = pending.get();
  REQUIRE(together.has_value());
  CHECK(sut->embedder().batches() - batches_before == 6 * batches_per_input);
  CHECK(together->values == solo_embedding.values);
  CHECK(tokens == solo_tokens);
}

TEST_CASE("llamacpp: a cancelled embedding job ends early, and bad inputs are refused at once") {
  auto sut = make();
  std::atomic<bool> gone{true};
  auto cancelled = embed_async(*sut, {prompt_of(sut->tokens(), long_text)}, [&] { return gone.load(); });
  REQUIRE(cancelled.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  auto r = cancelled.get();
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message == "cancelled");
  CHECK(sut->embedder().batches() == 0);

  auto bad = embed_async(*sut, {std::vector<token_id>(513, 1)});
  REQUIRE(bad.wait_for(std::chrono::seconds(0)) == std::future_status::ready); // on this thread
  auto e = bad.get();
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().code == backends::backend_errc::invalid_argument);
  CHECK(e.error().message == "input 0 holds 513 tokens; model 'tiny' embeds at most 512 (max_context)");
}

TEST_CASE("llamacpp: device_turns: a waiting embedding batch holds the device before the compute lane's next step") {
  std::mutex device;
  backends::device_turns sut{device};
  std::unique_lock step(device); // the compute lane is in a step
  std::atomic<bool> done{false};
  std::thread embedder([&] {
    auto held = sut.take();
    while (!done.load())
      std::this_thread::yield(); // one embedding batch
  });
  while (!sut.waiting()) // the embedder has asked for the device (no event to wait on)
    std::this_thread::yield();
  step.unlock();
  // With a plain mutex the lane could lock again at once; here it first lets the batch in.
  sut.before_step();
  CHECK_FALSE(device.try_lock());
  done = true;
  embedder.join();
  sut.before_step(); // nobody waits: returns at once
  CHECK(device.try_lock());
  device.unlock();
}

namespace {

std::string llama_http_config(const std::string& run_dir) {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
worker_threads = 2
[[model]]
name = "tiny"
backend = "llamacpp"
[model.llamacpp]
gguf = "{}"
slots = 2
context = 512
threads = 2
batch = 64
[http]
listen = "127.0.0.1:0"
api_key = "{}"
)",
                     run_dir, KVLANE_TEST_GGUF, test::http::api_key);
}

} // namespace

TEST_CASE("llamacpp: kvlaned serves the backend's embeddings on /v1/embeddings and /api/embed") {
  test::http::http_fixture d{llama_http_config};
  auto r = d.post_json("/v1/embeddings", {{"model", "tiny"}, {"input", {short_text, long_text}}});
  REQUIRE(r["data"].size() == 2);
  const auto got = r["data"][1]["embedding"].get<std::vector<float>>();
  CHECK(got.size() == 64);
  auto sut = make();
  const auto want = embed(*sut, {prompt_of(sut->tokens(), long_text)});
  CHECK(max_diff(got, want.row(0)) <= 1e-6); // the same computation (floats written exactly)
  CHECK(r["usage"]["prompt_tokens"]
        == prompt_of(sut->tokens(), short_text).size() + prompt_of(sut->tokens(), long_text).size());
  auto ollama = d.post_json("/api/embed", {{"model", "tiny"}, {"input", long_text}});
  CHECK(ollama["embeddings"][0].get<std::vector<float>>() == got);
}
