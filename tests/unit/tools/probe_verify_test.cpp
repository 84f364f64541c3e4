#include "backends/sim_backend.hpp"
#include "tools/probe.hpp"

#include <doctest/doctest.h>

using namespace kvlane;
using check = tools::verify_check;

namespace {

backends::sim_options fast_sim(backends::transfer_overlap overlap) {
  backends::sim_options o;
  o.slots = 4;
  o.max_context = 256;
  o.max_prefill_chunk = 32;
  o.snapshot_bytes = 256 * 64;
  o.step_base_ms = o.step_per_token_ms = 0;
  o.dump_min_ms = o.dump_max_ms = o.load_min_ms = o.load_max_ms = 0;
  o.overlap = overlap;
  return o;
}

/// A sim whose load() always restores slot 0, whatever slot it is given.
class misrouted_load final : public backends::backend {
public:
  explicit misrouted_load(std::unique_ptr<backends::sim_backend> sim) : sim_(std::move(sim)) {}
  const backends::backend_info& info() const noexcept override { return sim_->info(); }
  const backends::tokenizer& tokens() const noexcept override { return sim_->tokens(); }
  expected<void, backends::backend_error> step(std::span<const backends::step_row> rows,
                                               backends::step_output& out) override {
    return sim_->step(rows, out);
  }
  expected<std::size_t, backends::backend_error> dump(backends::slot_id slot, std::uint32_t len,
                                                      std::span<std::byte> dst) override {
    return sim_->dump(slot, len, dst);
  }
  expected<void, backends::backend_error> load(backends::slot_id, std::uint32_t len,
                                               std::span<const std::byte> src) override {
    return sim_->load(0, len, src);
  }

private:
  std::unique_ptr<backends::sim_backend> sim_;
};

const check& find(const tools::verify_report& r, std::string_view name) {
  for (const auto& c : r.checks)
    if (c.name == name)
      return c;
  FAIL("no check named " << name);
  return r.checks.front();
}

} // namespace

TEST_CASE("probe verify: every check passes on the sim when transfers overlap compute") {
  auto sim = backends::sim_backend::create("v", fast_sim(backends::transfer_overlap::full));
  REQUIRE(sim.has_value());
  auto sut = tools::run_verify(**sim, 24);
  REQUIRE(sut.has_value());
  CHECK(sut->passed());
  CHECK(sut->greedy.size() == 24);
  CHECK_FALSE(sut->prompt.empty());
  for (auto name : {"repeatable", "round_trip", "isolation", "concurrent"}) {
    CAPTURE(name);
    CHECK(find(*sut, name).result == check::outcome::passed);
  }
  CHECK(find(*sut, "concurrent").detail.find("transfers on slot 0 meanwhile") != std::string::npos);
}

TEST_CASE("probe verify: the concurrent check is skipped when the backend serializes transfers") {
  auto sim = backends::sim_backend::create("v", fast_sim(backends::transfer_overlap::none));
  REQUIRE(sim.has_value());
  auto sut = tools::run_verify(**sim, 16);
  REQUIRE(sut.has_value());
  CHECK(sut->passed());
  CHECK(find(*sut, "concurrent").result == check::outcome::skipped);
  CHECK(find(*sut, "round_trip").result == check::outcome::passed);
}

TEST_CASE("probe verify: a load into the wrong slot fails isolation and the probe reports it") {
  auto sim = backends::sim_backend::create("v", fast_sim(backends::transfer_overlap::none));
  REQUIRE(sim.has_value());
  misrouted_load sut(std::move(*sim));
  auto r = tools::run_verify(sut, 16);
  REQUIRE(r.has_value());
  CHECK_FALSE(r->passed());
  CHECK(find(*r, "round_trip").result == check::outcome::passed); // slot 0 is right by chance
  CHECK(find(*r, "isolation").result == check::outcome::failed);
  CHECK(find(*r, "isolation").detail.find("differs at token") != std::string::npos);

  tools::probe_options po;
  po.iterations = 1;
  po.verify = true;
  po.verify_tokens = 16;
  auto report = tools::run_probe(sut, po);
  REQUIRE(report.has_value());
  const auto json = tools::format_json(*report);
  CHECK(json.find("\"verify\":{\"passed\":false") != std::string::npos);
  CHECK(json.find("{\"name\":\"isolation\",\"result\":\"failed\"") != std::string::npos);
  CHECK(json.find("\"runtime_version\":\"\"") != std::string::npos);
  CHECK(json.back() == '}');
  CHECK(tools::format_text(*report).find("verify (") != std::string::npos);
}
