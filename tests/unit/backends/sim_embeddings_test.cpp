// The sim's embeddings (sim_backend::embed): deterministic, unit length, of the documented
// dimension, and checked inputs.
#include "backends/sim_backend.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

using namespace kvlane::backends;

namespace {

sim_options options(std::uint64_t seed = 1) {
  sim_options o;
  o.slots = 2;
  o.max_context = 128;
  o.max_prefill_chunk = 64;
  o.snapshot_bytes = 128 * 1024;
  o.time_scale = 1e6;
  o.seed = seed;
  return o;
}

std::unique_ptr<sim_backend> make(std::uint64_t seed = 1) {
  auto made = sim_backend::create("m", options(seed));
  REQUIRE_MESSAGE(made.has_value(), (made ? std::string() : made.error().message));
  return std::move(*made);
}

std::vector<token_id> bytes_of(std::string_view text) {
  return {text.begin(), text.end()};
}

/// What embed() hands back, and on which call: `done` must have run before it returned.
kvlane::expected<embeddings, backend_error> embed(backend& b, std::vector<std::vector<token_id>> in) {
  std::optional<kvlane::expected<embeddings, backend_error>> got;
  embedding_job job;
  job.inputs = std::move(in);
  job.done = [&](kvlane::expected<embeddings, backend_error> r) { got = std::move(r); };
  b.embed(std::move(job));
  REQUIRE(got.has_value());
  return std::move(*got);
}

std::vector<float> vector_of(backend& b, std::string_view text) {
  auto r = embed(b, {bytes_of(text)});
  REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().message));
  auto row = r->row(0);
  return {row.begin(), row.end()};
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

} // namespace

TEST_CASE("sim_backend: embeddings have the documented dimension and unit length") {
  auto sut = make();
  CHECK(sut->info().caps.embedding_dimension == sim_backend::embedding_dimension);
  CHECK(sim_backend::embedding_dimension == 256);
  auto r = embed(*sut, {bytes_of("a"), bytes_of("the quick brown fox"), bytes_of(std::string(128, 'z'))});
  REQUIRE(r.has_value());
  CHECK(r->dimension == 256);
  REQUIRE(r->values.size() == 3 * 256);
  for (std::size_t i = 0; i < 3; ++i) {
    double sum = 0;
    for (const float x : r->row(i))
      sum += double(x) * x;
    CHECK(std::sqrt(sum) == doctest::Approx(1.0).epsilon(1e-6));
  }
}

TEST_CASE("sim_backend: the same text gives the same vector, in any batch and any backend of the same seed") {
  auto sut = make();
  const auto alone = vector_of(*sut, "kv caches park on the host");
  auto batch = embed(*sut, {bytes_of("something else first"), bytes_of("kv caches park on the host")});
  REQUIRE(batch.has_value());
  const auto row = batch->row(1);
  CHECK(std::vector<float>(row.begin(), row.end()) == alone);
  CHECK(vector_of(*make(), "kv caches park on the host") == alone);
  // Another seed is another model: another embedding space.
  CHECK(vector_of(*make(2), "kv caches park on the host") != alone);
}

TEST_CASE("sim_backend: different texts give different vectors, texts sharing words closer ones") {
  auto sut = make();
  const auto a = vector_of(*sut, "the cat sat on the mat");
  const auto b = vector_of(*sut, "the cat sat on the hat");
  const auto c = vector_of(*sut, "quantized tensors overflow");
  CHECK(a != b);
  CHECK(dot(a, b) < 0.999);
  CHECK(dot(a, b) > dot(a, c) + 0.3);
  // The same tokens and bigrams in another order share every hashed feature; the whole
  // sequence's component still tells them apart.
  const auto abab = vector_of(*sut, "abab");
  const auto baba = vector_of(*sut, "baba");
  CHECK(abab != baba);
  const auto x = vector_of(*sut, "xyzxz");
  const auto y = vector_of(*sut, "xzxyz"); // tokens x,x,y,z,z and bigrams xy,yz,zx,xz in both
  CHECK(x != y);
  CHECK(dot(x, y) < 0.9999);
}

TEST_CASE("sim_backend: embed refuses no input, an empty input, one over the context and a token outside the vocabulary") {
  auto sut = make();
  const auto refused = [&](std::vector<std::vector<token_id>> in) {
    auto r = embed(*sut, std::move(in));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == backend_errc::invalid_argument);
    return r.error().message;
  };
  CHECK(refused({}) == "no inputs to embed");
  CHECK(refused({bytes_of("ok"), {}}) == "input 1 holds no tokens");
  CHECK(refused({std::vector<token_id>(129, 'a')})
        == "input 0 holds 129 tokens; model 'm' embeds at most 128 (max_context)");
  CHECK(refused({{'a', 300}}) == "input 0: token 300 is outside the vocabulary of model 'm' (size 258)");
  // Exactly the context is fine.
  CHECK(embed(*sut, {std::vector<token_id>(128, 'a')}).has_value());
}

TEST_CASE("backend: a backend without the capability answers that the model cannot produce embeddings") {
  // The interface's default, which qbruntime keeps.
  class no_embeddings final : public backend {
  public:
    no_embeddings() {
      info_.kind = "npu-x";
      info_.model = "plain";
    }
    const backend_info& info() const noexcept override { return info_; }
    const tokenizer& tokens() const noexcept override { return inner_->tokens(); }
    kvlane::expected<void, backend_error> step(std::span<const step_row>, step_output&) override {
      return {};
    }
    kvlane::expected<std::size_t, backend_error> dump(slot_id, std::uint32_t, std::span<std::byte>) override {
      return std::size_t{0};
    }
    kvlane::expected<void, backend_error> load(slot_id, std::uint32_t, std::span<const std::byte>) override {
      return {};
    }

  private:
    backend_info info_;
    std::unique_ptr<sim_backend> inner_ = make();
  };
  no_embeddings sut;
  CHECK(sut.info().caps.embedding_dimension == 0);
  auto r = embed(sut, {bytes_of("hello")});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == backend_errc::invalid_argument);
  CHECK(r.error().message == "model 'plain' (backend npu-x) cannot produce embeddings");
}

TEST_CASE("backend: l2_normalize scales to unit length and refuses a zero or non-finite vector") {
  std::vector<float> v{3.0f, 4.0f};
  CHECK(l2_normalize(v));
  CHECK(v[0] == doctest::Approx(0.6));
  CHECK(v[1] == doctest::Approx(0.8));
  std::vector<float> zero{0.0f, 0.0f};
  CHECK_FALSE(l2_normalize(zero));
  std::vector<float> inf{INFINITY, 1.0f};
  CHECK_FALSE(l2_normalize(inf));
  CHECK(std::isinf(inf[0])); // unchanged
}
