#include "daemon/request_tracker.hpp"

#include "ipc/utf8.hpp"

#include <algorithm>
#include <cstring>

namespace kvlane::daemon {

namespace proto = ipc::proto;

namespace {

std::string num(std::uint64_t v) {
  return std::to_string(v);
}

unexpected<proto::protocol_error> bad(std::string msg, proto::errc code = proto::errc::bad_message) {
  return unexpected(proto::protocol_error{code, std::move(msg)});
}

} // namespace

request_tracker::result request_tracker::on_submit(proto::submit_rec r, std::uint32_t limit) {
  const auto id = r.request_id;
  const auto what = [id] { return "submit (request " + num(id) + ")"; };
  if (live_.count(id))
    return bad(what() + ": request id is already live on this connection", proto::errc::duplicate_request);
  if (live_.size() >= max_requests_)
    return bad(what() + ": more than " + num(max_requests_) + " live requests",
               proto::errc::too_many_requests);
  pending p{std::move(r), {}, 0, false};
  p.data = std::move(p.head.inline_data);
  p.head.inline_data.clear();
  p.received = p.data.size();
  const auto cap = std::min(limit, max_prompt_bytes_);
  const auto total = p.head.prompt_bytes;
  const bool chunked = p.received < total;
  // Prompts being assembled hold memory: bound them per connection too.
  const std::uint64_t assembly_cap = 2ull * max_prompt_bytes_;
  const bool too_big = total > cap;
  if (too_big || (chunked && assembling_bytes_ + total > assembly_cap)) {
    // A request-level error: the connection stays, the chunks that follow are
    // checked for order and dropped.
    if (chunked) {
      p.discard = true;
      p.data.clear();
      live_[id] = true;
      assembling_.emplace(id, std::move(p));
    }
    if (too_big)
      return bad(what() + ": prompt of " + num(total) + " bytes exceeds the limit of " +
                   num(cap) + " bytes",
                 proto::errc::too_long);
    return bad(what() + ": prompt of " + num(total) + " bytes would make the prompts being "
                 "received on this connection exceed " + num(assembly_cap) + " bytes",
               proto::errc::too_long);
  }
  if (p.received == p.head.prompt_bytes) {
    live_[id] = false;
    return finish(id, std::move(p));
  }
  live_[id] = true;
  assembling_bytes_ += total;
  p.data.reserve(std::min<std::size_t>(total, 64 * 1024)); // grows as chunks really arrive
  assembling_.emplace(id, std::move(p));
  return std::optional<complete_submit>{};
}

request_tracker::result request_tracker::on_chunk(proto::chunk_rec c) {
  const auto id = c.request_id;
  const auto what = [id] { return "submit_chunk (request " + num(id) + ")"; };
  auto it = assembling_.find(id);
  if (it == assembling_.end())
    return bad(what() + ": no submit of this request is waiting for chunks");
  auto& p = it->second;
  if (c.offset != p.received)
    return bad(what() + ": chunk at offset " + num(c.offset) + ", expected " + num(p.received) +
               (c.offset < p.received ? " (overlap)" : " (gap or out of order)"));
  if (std::size_t{c.offset} + c.data.size() > p.head.prompt_bytes)
    return bad(what() + ": chunk ends at " + num(std::size_t{c.offset} + c.data.size()) +
               ", past the announced prompt length " + num(p.head.prompt_bytes));
  p.received += c.data.size();
  if (!p.discard)
    p.data += c.data;
  if (p.received < p.head.prompt_bytes)
    return std::optional<complete_submit>{};
  auto done = std::move(p);
  assembling_.erase(it);
  if (!done.discard)
    assembling_bytes_ -= done.head.prompt_bytes;
  if (done.discard) {
    live_.erase(id);
    return std::optional<complete_submit>{};
  }
  live_[id] = false;
  return finish(id, std::move(done));
}

request_tracker::result request_tracker::finish(std::uint64_t id, pending p) {
  complete_submit out;
  out.head = std::move(p.head);
  out.prompt = std::move(p.data);
  if (out.head.kind == proto::prompt_kind::text) {
    if (!proto::valid_utf8(out.prompt)) {
      live_.erase(id);
      return bad("submit (request " + num(id) + "): the prompt text is not valid UTF-8");
    }
  } else {
    out.tokens.resize(out.prompt.size() / 4);
    std::memcpy(out.tokens.data(), out.prompt.data(), out.tokens.size() * 4);
  }
  return std::optional<complete_submit>{std::move(out)};
}

bool request_tracker::on_cancel(std::uint64_t request_id) {
  auto it = assembling_.find(request_id);
  if (it == assembling_.end())
    return false;
  if (!it->second.discard)
    assembling_bytes_ -= it->second.head.prompt_bytes;
  assembling_.erase(it);
  live_.erase(request_id);
  return true;
}

} // namespace kvlane::daemon
