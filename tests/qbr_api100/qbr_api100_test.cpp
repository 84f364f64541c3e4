// The adapter built against the stand-in at the qbruntime 1.0 API level: configure-time
// detection found no batch infer and no per-slot transfer, so non-batch models work and a
// Batch model is refused with the reason.

#include "backends/qbruntime/qbr_backend.hpp"
#include "tests/support/qbr_fixture.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using namespace kvlane;

TEST_CASE("qbruntime 1.0: the build detected neither the batch infer nor per-slot transfers") {
  CHECK_FALSE(backends::qbr::has_batch_infer());
  CHECK_FALSE(backends::qbr::has_slot_transfer());
  CHECK(backends::qbr::runtime_version() == "1.0.0-fake");
}

TEST_CASE("qbruntime 1.0: a Batch model is refused naming the missing batch infer") {
  test::qbr_model_dir dir("batch = true\nslots = 4\nmax_cache_size = 128\nvocab = 300\nhidden = 10\n",
                          300, 10);
  auto sut = backends::qbr_backend::create("m", dir.options());
  REQUIRE_FALSE(sut.has_value());
  CHECK(sut.error().code == backends::backend_errc::invalid_argument);
  CHECK(sut.error().message.find("is a Batch model and this build (qbruntime 1.0.0-fake) found no "
                                 "infer taking BatchParam")
        != std::string::npos);
}

TEST_CASE("qbruntime 1.0: a model without batching decodes and restores a snapshot") {
  test::qbr_model_dir dir("batch = false\nmax_cache_size = 128\nvocab = 300\nhidden = 10\n", 300, 10);
  auto made = backends::qbr_backend::create("m", dir.options());
  REQUIRE_MESSAGE(made.has_value(), made.error().message);
  auto& sut = **made;
  CHECK(sut.info().slots == 1);
  CHECK(sut.info().caps.snapshots);

  auto greedy = [&](std::uint32_t len, backends::token_id t, int n) {
    std::vector<backends::token_id> out_tokens;
    backends::step_output out;
    for (int i = 0; i < n; ++i) {
      backends::step_row row{0, len++, std::span<const backends::token_id>(&t, 1)};
      REQUIRE(sut.step(std::span{&row, 1}, out).has_value());
      t = static_cast<backends::token_id>(
        std::max_element(out.row(0).begin(), out.row(0).end()) - out.row(0).begin());
      out_tokens.push_back(t);
    }
    return out_tokens;
  };
  const auto first = greedy(0, 42, 10);
  std::vector<std::byte> snap(sut.info().snapshot_bytes);
  REQUIRE(sut.dump(0, 10, snap).has_value());
  const auto want = greedy(10, first.back(), 10);
  greedy(0, 7, 20); // overwrite
  REQUIRE(sut.load(0, 10, snap).has_value());
  CHECK(greedy(10, first.back(), 10) == want);
}
