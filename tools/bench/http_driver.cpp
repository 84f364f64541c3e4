#include "tools/bench/http_driver.hpp"

#include "tools/bench/completion_stream.hpp"
#include "tools/bench/run_collector.hpp"
#include "tools/bench/sse_parser.hpp"

#include "common/elapsed.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <thread>
#include <unordered_set>

namespace kvlane::tools::bench {

namespace {

using clock = std::chrono::steady_clock;

/// One request, start to end, on the calling thread.
struct exchange_result {
  http_figures fig;
  actors::end_reason reason = actors::end_reason::error;
  std::optional<clock::time_point> first_text, last_text;
  clock::time_point end;
};

exchange_result exchange_one(http_client& client, const http_request& req,
                             clock::time_point deadline) {
  exchange_result out;
  completion_stream stream;
  sse_parser sse;
  std::string error_body;
  int status = 0;
  auto head = client.exchange(
    req, deadline, [&](const http_head& h) { status = h.status; },
    [&](std::string_view bytes) {
      if (status != 200) {
        if (error_body.size() < 4096)
          error_body.append(bytes.substr(0, 4096 - error_body.size()));
        return;
      }
      sse.feed(bytes, [&](const sse_event& ev) {
        if (stream.on_data(ev.data) == completion_event::text) {
          const auto now = clock::now();
          if (!out.first_text)
            out.first_text = now;
          out.last_text = now;
        }
      });
    });
  out.end = clock::now();
  auto& fig = out.fig;
  const auto& f = stream.figures();
  fig.status = head ? head->status : status;
  fig.output_tokens = f.output_tokens();
  fig.text_events = f.text_events;
  fig.prompt_tokens = f.prompt_tokens;
  fig.prefilled_tokens = f.prefilled_tokens();
  fig.reused_tokens = f.reused_tokens();
  fig.finish_reason = f.finish_reason;
  if (!head) {
    fig.error = status != 0 ? fmt::format("HTTP {}: {}", status, head.error()) : head.error();
    return out;
  }
  if (head->status != 200) {
    fig.error = error_message_of(error_body);
    if (fig.error.empty())
      fig.error = head->reason.empty() ? "(empty body)" : head->reason;
    return out;
  }
  if (!f.error.empty()) {
    fig.error = f.error;
    return out;
  }
  if (!f.done) {
    fig.error = "the stream ended without [DONE]";
    return out;
  }
  out.reason = f.finish_reason == "stop" ? actors::end_reason::stop : actors::end_reason::length;
  return out;
}

} // namespace

std::vector<bool> later_turns(std::span<const trace_request> requests) {
  std::vector<bool> out(requests.size(), false);
  std::unordered_set<std::uint64_t> seen;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (!r.prompt)
      continue;
    const auto key = (std::uint64_t{r.model} << 32) | r.conversation;
    out[i] = !seen.insert(key).second;
  }
  return out;
}

void append_run(http_run_result& into, http_run_result part) {
  const double offset_s = into.wall_s;
  for (auto& o : part.requests) {
    o.index = static_cast<std::uint32_t>(into.requests.size());
    o.arrival_s += offset_s;
    o.end_s += offset_s;
    into.requests.push_back(std::move(o));
  }
  for (auto& h : part.http)
    into.http.push_back(std::move(h));
  into.wall_s += part.wall_s;
  into.max_submit_lag_ms = std::max(into.max_submit_lag_ms, part.max_submit_lag_ms);
  into.timed_out = into.timed_out || part.timed_out;
}

std::string request_prompt(const trace_request& r, std::uint32_t index) {
  return prompt_text(prompt_of(r, index));
}

expected<http_run_result, std::string> run_http(const http_run_options& opts,
                                                std::span<const trace_request> requests) {
  if (opts.model.empty())
    return unexpected(std::string{"no model name to ask the server for"});
  auto progress = [&](std::string_view line) {
    if (opts.progress)
      opts.progress(opts.label.empty() ? std::string{line} : opts.label + ": " + std::string{line});
  };
  http_run_result result;
  result.requests.resize(requests.size());
  result.http.resize(requests.size());
  const auto reusable = later_turns(requests);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto& o = result.requests[i];
    const auto& r = requests[i];
    o.index = static_cast<std::uint32_t>(i);
    o.interactive = r.interactive;
    o.prompt_tokens = r.prompt_tokens;
    o.output_tokens = r.output_tokens;
    o.arrival_s = r.arrival_s;
    result.http[i].reusable = reusable[i];
    if (r.prompt)
      result.http[i].conversation = r.conversation;
  }
  auto bound = opts.timeout;
  if (bound.count() == 0) {
    const double span_ms = requests.empty() ? 0 : requests.back().arrival_s * 1000.0;
    bound = std::chrono::milliseconds(120000 + static_cast<std::int64_t>(4 * span_ms));
  }

  http_client client{opts.endpoint};
  auto col = std::make_shared<run_collector>();
  col->outcomes = &result.requests;
  col->time_scale = 1.0;
  const auto start = clock::now();
  const auto deadline = start + bound;
  col->start = start;
  col->last_end = start;
  col->gate = std::make_shared<turn_gate>(requests, start, 1.0);
  auto* http = &result.http;

  std::vector<std::thread> threads;
  threads.reserve(requests.size());
  std::size_t submitted = 0;
  while (const auto next = col->gate->next(deadline)) {
    const std::size_t i = next->index;
    const auto& r = requests[i];
    result.max_submit_lag_ms =
      std::max(result.max_submit_lag_ms, ms_between(next->due, clock::now()));
    completion_request cr;
    cr.model = opts.model;
    cr.prompt = request_prompt(r, static_cast<std::uint32_t>(i));
    cr.max_tokens = r.output_tokens;
    cr.interactive = r.interactive;
    http_request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = completion_body(opts.kind, cr);
    col->sent(i, r, *next, {});
    ++submitted;
    threads.emplace_back([&client, col, http, i, deadline, req = std::move(req)] {
      const auto sent_at = clock::now();
      auto x = exchange_one(client, req, deadline);
      col->end(i, x.end, [&](request_outcome& o, double) {
        o.reason = x.reason;
        o.error = x.fig.error;
        o.generated = static_cast<std::uint32_t>(
          std::min<std::uint64_t>(x.fig.output_tokens, std::numeric_limits<std::uint32_t>::max()));
        if (x.first_text)
          o.ttft_ms = ms_between(sent_at, *x.first_text);
        if (x.first_text && x.fig.output_tokens > 1)
          o.tpot_ms = ms_between(*x.first_text, *x.last_text)
                      / static_cast<double>(x.fig.output_tokens - 1);
        o.e2e_ms = ms_between(sent_at, x.end);
        auto& h = (*http)[i];
        x.fig.reusable = h.reusable;
        x.fig.conversation = h.conversation;
        h = std::move(x.fig);
      });
    });
  }
  note_unsent(result.requests);
  progress(fmt::format("{} of {} requests sent, waiting for the ends", submitted, requests.size()));
  {
    std::unique_lock lock{col->mutex};
    auto next_line = clock::now() + std::chrono::seconds(30);
    for (;;) {
      if (col->cv.wait_until(lock, std::min(next_line, deadline + std::chrono::seconds(5)),
                             [&] { return col->ended >= submitted; }))
        break;
      if (clock::now() >= deadline + std::chrono::seconds(5)) {
        result.timed_out = true;
        break;
      }
      if (clock::now() >= next_line) {
        next_line += std::chrono::seconds(30);
        const auto ended = col->ended;
        lock.unlock();
        progress(fmt::format("{} of {} ended after {:.0f} s", ended, submitted,
                             std::chrono::duration<double>(clock::now() - start).count()));
        lock.lock();
      }
    }
  }
  for (auto& t : threads)
    t.join(); // each ends by the deadline: its socket waits are bounded by it
  {
    std::lock_guard lock{col->mutex};
    result.wall_s = std::chrono::duration<double>(col->last_end - start).count();
    col->outcomes = nullptr;
  }
  return result;
}

} // namespace kvlane::tools::bench
