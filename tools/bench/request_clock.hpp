#pragma once

// kvlane::tools::bench — request_clock: times one request driven through the
// client library as its events arrive.
//
// Problem it solves: every driver that sends requests to a kvlaned child
// (ipc_driver, restart_driver) must time them the same way, in this process:
// TTFT from the submit to the first token that arrives, TPOT over the tokens
// after it, end to end at the end event, all scaled to simulated ms; and must
// read the end the same way (a backlog cancel is the bench's own fault, a
// failure without an end is an error). One callback does it for both and
// records through the run's collector.
//
// Threading: the callback runs on its connection's reader thread only, so its
// clock needs no lock; it records under the collector's lock.

#include "tools/bench/run_collector.hpp"

#include <kvlane/client.hpp>

#include <chrono>
#include <cstddef>
#include <memory>

namespace kvlane::tools::bench {

/// The scheduler's end reason for the client library's.
actors::end_reason from_client(client::end_reason r) noexcept;

/// The callback of request `index` (an index into `col`'s outcomes), submitted
/// at `submitted`: times its tokens and records its end through `col`.
client::callback request_callback(std::shared_ptr<run_collector> col, std::size_t index,
                                  std::chrono::steady_clock::time_point submitted);

} // namespace kvlane::tools::bench
