// libFuzzer target for the client protocol's decoders (built with clang:
// -fsanitize=fuzzer,address,undefined; see tests/CMakeLists.txt).
//
// The input drives, in turn: the control-message decoder on the whole input;
// the record decoder on each 256-byte window, with every decoded request fed
// to a request_tracker (duplicates, chunk order, limits); an encode/decode
// round trip of every record that decoded; and the streaming UTF-8 sanitizer
// on two pieces of the input. Any crash, sanitizer report or broken invariant
// (__builtin_trap) is a bug.
#include "daemon/request_tracker.hpp"
#include "ipc/control_codec.hpp"
#include "ipc/protocol.hpp"
#include "ipc/record_codec.hpp"
#include "ipc/utf8.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace proto = kvlane::ipc::proto;

namespace {

void check(bool ok) {
  if (!ok)
    __builtin_trap();
}

void round_trip(const proto::record& r) {
  proto::record_bytes again;
  std::visit([&](const auto& x) { proto::encode(x, again); }, r);
  auto d = proto::decode_record(again);
  check(d.has_value());
  check(d->index() == r.index());
  if (auto* t = std::get_if<proto::tokens_rec>(&r)) {
    const auto& u = std::get<proto::tokens_rec>(*d);
    check(u.tokens == t->tokens && u.text == t->text && u.daemon_time_ns == t->daemon_time_ns);
  } else if (auto* s = std::get_if<proto::submit_rec>(&r)) {
    const auto& u = std::get<proto::submit_rec>(*d);
    check(u.model == s->model && u.inline_data == s->inline_data && u.stop_tokens == s->stop_tokens
          && u.prompt_bytes == s->prompt_bytes && u.max_tokens == s->max_tokens);
  } else if (auto* e = std::get_if<proto::end_rec>(&r)) {
    check(std::get<proto::end_rec>(*d).message == e->message);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  auto c = proto::decode_control(std::span<const std::byte>{bytes, size});
  if (c) {
    if (auto* h = std::get_if<proto::hello_msg>(&*c)) {
      auto again = proto::decode_control(proto::encode(*h));
      check(again && std::get<proto::hello_msg>(*again).client_name == h->client_name);
    }
  }

  kvlane::daemon::request_tracker tracker(4, 2048);
  for (std::size_t off = 0; off < size; off += proto::record_size) {
    proto::record_bytes rec{};
    std::memcpy(rec.data(), bytes + off, std::min(proto::record_size, size - off));
    auto r = proto::decode_record(rec);
    if (!r)
      continue;
    round_trip(*r);
    if (auto* s = std::get_if<proto::submit_rec>(&*r)) {
      auto done = tracker.on_submit(*s, 1024);
      if (done && *done) {
        check((*done)->prompt.size() == s->prompt_bytes);
        tracker.finished(s->request_id);
      }
    } else if (auto* ch = std::get_if<proto::chunk_rec>(&*r)) {
      auto done = tracker.on_chunk(*ch);
      if (done && *done)
        tracker.finished(ch->request_id);
    } else if (auto* x = std::get_if<proto::cancel_rec>(&*r)) {
      tracker.on_cancel(x->request_id);
    }
    check(tracker.live_count() <= 4);
  }

  const std::string_view text{reinterpret_cast<const char*>(data), size};
  proto::utf8_stream pieces, whole;
  const auto cut = size / 2;
  // One statement per call: the operands of + are evaluated in an unspecified order.
  std::string a = pieces.feed(text.substr(0, cut));
  a += pieces.feed(text.substr(cut));
  a += pieces.flush();
  std::string b = whole.feed(text);
  b += whole.flush();
  check(a == b);
  check(proto::valid_utf8(a));
  check(proto::utf8_prefix(text, cut) <= cut);

  std::vector<proto::record_bytes> out;
  std::vector<std::uint32_t> tokens(size / 8, 7);
  proto::pack_tokens(1, 2, tokens, a, out);
  std::string joined;
  for (const auto& r : out) {
    auto d = proto::decode_record(r);
    check(d.has_value());
    joined += std::get<proto::tokens_rec>(*d).text;
  }
  check(joined == a);
  return 0;
}
