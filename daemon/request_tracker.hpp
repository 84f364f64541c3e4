#pragma once

// kvlane::daemon::request_tracker — one client connection's requests, as the
// daemon sees them: the rules that span records, which the record decoder
// (ipc/record_codec.hpp) cannot check on one record alone.
//
// A plain single-threaded value with no I/O: the connection's session
// (daemon/client_session.hpp) owns one and feeds it every decoded submit,
// submit_chunk and cancel; the protocol fuzzer drives it with arbitrary
// records (tests/fuzz/protocol_fuzz.cpp).

#include "common/expected.hpp"
#include "ipc/protocol.hpp"
#include "ipc/record_codec.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvlane::daemon {

/// A submit whose prompt has fully arrived.
struct complete_submit {
  ipc::proto::submit_rec head;       ///< inline_data cleared
  std::string prompt;                ///< text (validated UTF-8) or little-endian tokens
  std::vector<std::uint32_t> tokens; ///< decoded when head.kind == tokens
};

/// Tracks one connection's requests: rejects duplicate live ids, chunks out of
/// order, overlapping or past the announced length, prompts over the limit,
/// more than 2 * max_prompt_bytes of prompts being received at once, and more
/// live requests than allowed. A request is live from its submit until
/// finished() (the daemon calls it when the stream's end was queued) or until
/// it is cancelled while its prompt is still arriving.
class request_tracker {
public:
  /// The complete request once its whole prompt is in, nothing while chunks
  /// are still due, or the error.
  using result = expected<std::optional<complete_submit>, ipc::proto::protocol_error>;


  request_tracker(std::uint32_t max_requests, std::uint32_t max_prompt_bytes)
    : max_requests_(max_requests), max_prompt_bytes_(max_prompt_bytes) {}

  /// `limit` bounds this request's prompt bytes (e.g. 4 * max_context for
  /// token prompts); the tracker also applies max_prompt_bytes. Returns the
  /// complete request when the prompt fit inline. Errors with code too_long
  /// concern only this request (its remaining chunks are checked and dropped);
  /// every other error is a protocol violation.
  result on_submit(ipc::proto::submit_rec r, std::uint32_t limit);
  result on_chunk(ipc::proto::chunk_rec c);
  /// True when the request was still assembling (now forgotten): nothing was
  /// submitted, so the caller only reports the end.
  bool on_cancel(std::uint64_t request_id);
  void finished(std::uint64_t request_id) { live_.erase(request_id); }
  bool live(std::uint64_t request_id) const { return live_.count(request_id) != 0; }
  std::size_t live_count() const noexcept { return live_.size(); }

private:
  struct pending {
    ipc::proto::submit_rec head;
    std::string data;
    std::size_t received = 0;
    bool discard = false; ///< over the limit: chunks are checked, then dropped
  };
  result finish(std::uint64_t id, pending p);

  std::uint32_t max_requests_;
  std::uint32_t max_prompt_bytes_;
  std::unordered_map<std::uint64_t, bool> live_; ///< id -> still assembling
  std::unordered_map<std::uint64_t, pending> assembling_;
  std::uint64_t assembling_bytes_ = 0; ///< announced bytes of the prompts being received
};

} // namespace kvlane::daemon
