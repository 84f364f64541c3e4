#include "tools/bench/request_clock.hpp"

#include "common/elapsed.hpp"

#include <fmt/format.h>

namespace kvlane::tools::bench {

actors::end_reason from_client(client::end_reason r) noexcept {
  switch (r) {
    case client::end_reason::length: return actors::end_reason::length;
    case client::end_reason::stop: return actors::end_reason::stop;
    case client::end_reason::cancelled:
    case client::end_reason::backlog: return actors::end_reason::cancelled;
    case client::end_reason::error: return actors::end_reason::error;
  }
  return actors::end_reason::error;
}

client::callback request_callback(std::shared_ptr<run_collector> col, std::size_t index,
                                  std::chrono::steady_clock::time_point submitted) {
  using clock = std::chrono::steady_clock;
  struct request_clock {
    clock::time_point submitted, first, last;
    std::uint64_t delivered = 0;
  };
  return [col = std::move(col), index, t = request_clock{submitted, {}, {}, 0}](
           const client::event& ev) mutable {
    const auto now = clock::now();
    if (ev.tokens && !ev.tokens->empty()) {
      if (t.delivered == 0)
        t.first = now;
      t.last = now;
      t.delivered += ev.tokens->size();
    }
    if (!ev.end && !ev.failure)
      return;
    col->end(index, now, [&](request_outcome& o, double ts) {
      if (ev.end) {
        o.reason = from_client(ev.end->reason);
        o.error = ev.end->reason == client::end_reason::backlog
                    ? "cancelled by the daemon: the bench stopped reading events"
                    : ev.end->message;
        o.generated = ev.end->generated_tokens;
        o.preemptions = ev.end->preemptions;
        if (t.delivered > 0)
          o.ttft_ms = ms_between(t.submitted, t.first) * ts;
        if (t.delivered > 1)
          o.tpot_ms = ms_between(t.first, t.last) / static_cast<double>(t.delivered - 1) * ts;
        o.e2e_ms = ms_between(t.submitted, now) * ts;
      } else {
        o.reason = actors::end_reason::error;
        o.error = fmt::format("{} ({})", ev.failure->message, client::to_string(ev.failure->code));
      }
    });
  };
}

} // namespace kvlane::tools::bench
