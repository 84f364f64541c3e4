#pragma once

// A bench run_result made by hand, for report tests: four requests that all
// completed (100 prompt and 50 output tokens each), TTFT ttft_scale x 100,
// 200, 300, 400 ms, over 10 simulated seconds (wall 1,000 ms at time_scale 10).

#include "tools/bench/bench_runner.hpp"

namespace kvlane::test {

inline tools::bench::run_result four_request_run(double ttft_scale = 1.0) {
  tools::bench::run_result r;
  r.time_scale = 10;
  r.wall_ms = 1000;
  for (std::uint32_t i = 0; i < 4; ++i) {
    tools::bench::request_outcome o;
    o.index = i;
    o.prompt_tokens = 100;
    o.output_tokens = o.generated = 50;
    o.submitted = o.ended = true;
    o.reason = actors::end_reason::length;
    o.ttft_ms = ttft_scale * 100 * (i + 1);
    r.requests.push_back(o);
  }
  return r;
}

} // namespace kvlane::test
