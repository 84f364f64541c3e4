#include "ipc/snapshot_store.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

#include <unistd.h>

using namespace kvlane::ipc;

namespace {

constexpr std::uint64_t kib = 1024;
const kv_fingerprint loaded{11, 22, 33, "sim", "chatml"};

std::unique_ptr<snapshot_store> store_on(memfd_arena arena) {
  store_options o;
  o.granularity = 64 * kib;
  auto store = snapshot_store::create(std::move(arena), o);
  REQUIRE(store);
  REQUIRE((*store)->register_model(0, 0, 0));
  REQUIRE((*store)->set_fingerprint(0, "m", loaded));
  return std::move(*store);
}

/// A sealed retained snapshot of `tokens` tokens whose bytes are all `fill`.
snapshot_handle put_retained(snapshot_store& store, std::uint32_t tokens, unsigned char fill) {
  snapshot_meta meta;
  meta.model_index = 0;
  meta.cache_len = tokens;
  meta.generation = 1;
  meta.sequence_id = fill;
  meta.retained = true;
  auto label = std::make_shared<snapshot_label>();
  label->fingerprint = loaded;
  label->user = 1000;
  label->owner = 1000;
  label->session.assign(1, 's'); // not = "s": GCC 12 -Wrestrict false positive
  for (std::uint32_t t = 0; t < tokens; ++t)
    label->tokens.push_back(fill + t);
  auto r = store.reserve(meta, 100 * kib, std::move(label));
  REQUIRE(r);
  std::memset(r->bytes.data(), fill, r->bytes.size());
  REQUIRE(store.seal(r->handle));
  return r->handle;
}

/// What a restart leaves: the arena and the closed index, as systemd keeps
/// them (duplicates of the first daemon's descriptors).
struct kept {
  int arena = -1;
  int index = -1;
};

kept stop(std::unique_ptr<snapshot_store> store) {
  auto index = index_file::create();
  REQUIRE(index);
  store->attach_index(std::move(*index));
  REQUIRE(store->persist());
  kept k{::dup(store->fd()), ::dup(store->index_fd())};
  store.reset();
  return k;
}

std::unique_ptr<snapshot_store> start(kept k, recovery_result* recovered = nullptr) {
  auto arena = memfd_arena::adopt(k.arena);
  REQUIRE(arena);
  auto index = index_file::adopt(k.index);
  REQUIRE(index);
  auto bytes = index->read();
  REQUIRE(bytes);
  auto contents = decode_index(*bytes);
  REQUIRE(contents);
  auto store = store_on(std::move(*arena));
  auto r = store->recover(*contents);
  REQUIRE(r);
  if (recovered != nullptr)
    *recovered = *r;
  return store;
}

} // namespace

TEST_CASE("snapshot_store: retained snapshots come back after a restart on the same arena, bytes "
          "untouched, parked ones and free pages do not") {
  auto first = store_on(*memfd_arena::create("kvlane-test-restart", 1024 * kib));
  const auto a = put_retained(*first, 40, 0xA1);
  put_retained(*first, 20, 0xB2);
  snapshot_meta parked;
  parked.model_index = 0;
  parked.cache_len = 5;
  auto p = first->reserve(parked, 64 * kib);
  REQUIRE(p);
  std::memset(p->bytes.data(), 0xCC, p->bytes.size());
  REQUIRE(first->seal(p->handle));
  REQUIRE(first->free(a)); // freed before the stop: not in the index
  const auto k = stop(std::move(first));

  recovery_result recovered;
  auto sut = start(k, &recovered);
  CHECK(recovered.records == 1);
  CHECK(recovered.bytes == 128 * kib);
  CHECK(sut->stats().used_bytes == 0); // pending until claimed
  CHECK(sut->claim(0, "m") == 1);
  const auto restored = sut->take_restored(0);
  REQUIRE(restored.size() == 1);
  CHECK(sut->take_restored(0).empty());
  const auto h = restored[0].handle;
  CHECK(restored[0].cache_len == 20);
  CHECK(restored[0].label->tokens.size() == 20);
  CHECK(restored[0].label->tokens[0] == 0xB2);
  CHECK(restored[0].label->session == "s");
  REQUIRE(sut->verify(h, 1));
  auto bytes = sut->read(h);
  REQUIRE(bytes);
  CHECK(bytes->size() == 100 * kib);
  CHECK(std::all_of(bytes->begin(), bytes->end(), [](std::byte b) { return b == std::byte{0xB2}; }));
  const auto s = sut->stats();
  CHECK(s.used_bytes == 128 * kib);
  CHECK(s.retained_bytes == 128 * kib);
  CHECK(s.restored_snapshots == 1);
  // The parked snapshot's and the freed one's pages went back to the OS: what
  // stays committed is the bytes the restored one's writer wrote.
  CHECK(s.committed_bytes == 100 * kib);
  // It is an ordinary retained snapshot from here: it survives the next restart too.
  auto again = start(stop(std::move(sut)));
  CHECK(again->claim(0, "m") == 1);
}

TEST_CASE("snapshot_store: a recovered snapshot is claimed only under an equal fingerprint; others "
          "are freed and counted by the field that differs") {
  auto first = store_on(*memfd_arena::create("kvlane-test-restart", 1024 * kib));
  put_retained(*first, 20, 0x11);
  auto sut = start(stop(std::move(first)));
  auto changed = loaded;
  changed.tokenizer ^= 1;
  REQUIRE(sut->set_fingerprint(0, "m", changed));
  CHECK(sut->claim(0, "m") == 0);
  CHECK(sut->take_restored(0).empty());
  auto s = sut->stats();
  CHECK(s.discarded[static_cast<std::size_t>(discard_reason::tokenizer_changed)] == 1);
  CHECK(s.used_bytes == 0);
  CHECK(s.largest_free_bytes == s.arena_bytes);

  first = store_on(*memfd_arena::create("kvlane-test-restart", 1024 * kib));
  put_retained(*first, 20, 0x11);
  sut = start(stop(std::move(first)));
  changed = loaded;
  changed.model_file ^= 1;
  REQUIRE(sut->set_fingerprint(0, "m", changed));
  CHECK(sut->claim(0, "m") == 0);
  CHECK(sut->stats().discarded[static_cast<std::size_t>(discard_reason::model_changed)] == 1);
}

TEST_CASE("snapshot_store: snapshots of a model no longer configured are dropped as unknown_model") {
  auto first = store_on(*memfd_arena::create("kvlane-test-restart", 1024 * kib));
  put_retained(*first, 20, 0x11);
  put_retained(*first, 30, 0x22);
  auto sut = start(stop(std::move(first)));
  CHECK(sut->claim(0, "another") == 0);
  CHECK(sut->discard_unclaimed() == 2);
  const auto s = sut->stats();
  CHECK(s.discarded[static_cast<std::size_t>(discard_reason::unknown_model)] == 2);
  CHECK(s.largest_free_bytes == s.arena_bytes);
}

TEST_CASE("snapshot_store: an index of another arena is refused and nothing is taken") {
  auto first = store_on(*memfd_arena::create("kvlane-test-restart", 1024 * kib));
  put_retained(*first, 20, 0x11);
  auto contents = first->snapshot_index();
  REQUIRE(contents);
  auto other = store_on(*memfd_arena::create("kvlane-test-restart-other", 1024 * kib));
  auto r = other->recover(*contents);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("another arena") != std::string::npos);
  CHECK(other->stats().discarded[static_cast<std::size_t>(discard_reason::arena_changed)] == 1);
  CHECK(other->claim(0, "m") == 0);
}

TEST_CASE("snapshot_store: a recovered snapshot whose bytes changed while no daemon ran fails "
          "verify") {
  auto first = store_on(*memfd_arena::create("kvlane-test-restart", 1024 * kib));
  put_retained(*first, 20, 0x11);
  auto sut = start(stop(std::move(first)));
  REQUIRE(sut->claim(0, "m") == 1);
  const auto h = sut->take_restored(0).at(0).handle;
  auto bytes = sut->read(h);
  REQUIRE(bytes);
  const_cast<std::byte&>((*bytes)[5000]) ^= std::byte{1};
  auto r = sut->verify(h, 1);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == store_errc::corrupt);
}
