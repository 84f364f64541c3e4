#include "ipc/snapshot_store.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

using namespace kvlane::ipc;

namespace {

constexpr std::uint64_t kib = 1024;
constexpr std::uint64_t mib = 1024 * kib;

store_options options_of(std::uint64_t limit, std::uint64_t granularity = 64 * kib) {
  store_options o;
  o.limit_bytes = limit;
  o.granularity = granularity;
  return o;
}

std::unique_ptr<snapshot_store> make_store(std::uint64_t arena_bytes, std::uint64_t limit = 0,
                                           std::uint64_t granularity = 64 * kib) {
  auto arena = memfd_arena::create("kvlane-test-store", arena_bytes);
  REQUIRE(arena);
  auto store = snapshot_store::create(std::move(*arena), options_of(limit, granularity));
  REQUIRE(store);
  return std::move(*store);
}

snapshot_meta meta_for(std::uint32_t model, std::uint64_t sequence, std::uint8_t priority = 0,
                       std::uint64_t generation = 1) {
  snapshot_meta m;
  m.model_identity = 0xabcdef00 + model;
  m.model_index = model;
  m.cache_len = 100;
  m.generation = generation;
  m.sequence_id = sequence;
  m.priority = priority;
  return m;
}

// Reserves, fills with `fill` and seals: a parked snapshot.
snapshot_handle park(snapshot_store& store, const snapshot_meta& meta, std::uint64_t bytes,
                     std::byte fill = std::byte{0x11},
                     std::vector<evicted_snapshot>* evicted = nullptr) {
  auto r = store.reserve(meta, bytes);
  REQUIRE(r);
  std::memset(r->bytes.data(), static_cast<int>(fill), r->bytes.size());
  REQUIRE(store.seal(r->handle));
  if (evicted != nullptr)
    *evicted = r->evicted;
  else
    CHECK(r->evicted.empty());
  return r->handle;
}

std::unique_ptr<snapshot_store> make_pooled_store(std::uint64_t arena_bytes, std::uint64_t limit,
                                                  std::uint64_t pool, bool prefault = false) {
  auto arena = memfd_arena::create("kvlane-test-store", arena_bytes);
  REQUIRE(arena);
  store_options options;
  options.limit_bytes = limit;
  options.warm_pool_bytes = pool;
  options.prefault_warm_pool = prefault;
  auto store = snapshot_store::create(std::move(*arena), options);
  REQUIRE(store);
  return std::move(*store);
}

// What a lane does for a dump: reserve, commit, write, seal.
reservation dump(snapshot_store& store, const snapshot_meta& meta, std::uint64_t bytes,
                 std::byte fill) {
  auto r = store.reserve(meta, bytes);
  REQUIRE(r);
  REQUIRE(store.commit(r->handle));
  std::memset(r->bytes.data(), static_cast<int>(fill), r->bytes.size());
  REQUIRE(store.seal(r->handle));
  return std::move(*r);
}

std::uint64_t model_used(const snapshot_store& store, std::uint32_t model) {
  for (const auto& m : store.stats().models)
    if (m.model_index == model)
      return m.used_bytes;
  FAIL("model not registered");
  return 0;
}

} // namespace

TEST_CASE("snapshot_store: committed memory rises with written snapshots and falls back after "
          "they are freed") {
  auto sut = make_store(1024 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  CHECK(sut->stats().committed_bytes == 0);

  std::vector<snapshot_handle> live;
  for (std::uint64_t i = 0; i < 3; ++i)
    live.push_back(park(*sut, meta_for(0, i), 8 * mib));
  live.push_back(park(*sut, meta_for(0, 3), 3 * mib + 12345));

  const auto full = sut->stats();
  const std::uint64_t written = 27 * mib + 12345;
  CHECK(full.arena_bytes == 1024 * mib);
  CHECK(full.used_bytes == 27 * mib + 64 * kib);
  CHECK(full.snapshots == 4);
  CHECK(full.committed_bytes >= written);
  CHECK(full.committed_bytes <= written + 1 * mib);

  for (const auto h : live)
    REQUIRE(sut->free(h));
  const auto empty = sut->stats();
  CHECK(empty.used_bytes == 0);
  CHECK(empty.snapshots == 0);
  CHECK(empty.committed_bytes <= 64 * kib);
  CHECK(empty.largest_free_bytes == 1024 * mib);
}

TEST_CASE("snapshot_store: a sealed snapshot verifies and reads back what was written") {
  auto sut = make_store(64 * mib);
  REQUIRE(sut->register_model(2, 0, 0));
  const auto meta = meta_for(2, 42, 3, 7);

  auto r = sut->reserve(meta, 100 * kib + 3);
  REQUIRE(r);
  CHECK(r->bytes.size() == 100 * kib + 3);
  for (std::size_t i = 0; i < r->bytes.size(); ++i)
    r->bytes[i] = static_cast<std::byte>(i * 31);
  CHECK(sut->read(r->handle).error().code == store_errc::invalid_argument); // not sealed yet
  REQUIRE(sut->seal(r->handle));
  CHECK(sut->seal(r->handle).error().code == store_errc::invalid_argument);

  CHECK(sut->verify(r->handle));
  CHECK(sut->verify(r->handle, 7));
  auto bytes = sut->read(r->handle);
  REQUIRE(bytes);
  CHECK(bytes->data() == r->bytes.data()); // no copy: the caller dumped straight into the store
  CHECK(std::equal(bytes->begin(), bytes->end(), r->bytes.begin(), r->bytes.end()));
  auto m = sut->meta(r->handle);
  REQUIRE(m);
  CHECK(m->sequence_id == 42);
  CHECK(m->generation == 7);
  CHECK(m->priority == 3);
}

TEST_CASE("snapshot_store: a flipped byte or a wrong generation makes verify report corrupt") {
  auto sut = make_store(64 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  auto r = sut->reserve(meta_for(0, 1, 0, 5), 1 * mib + 1);
  REQUIRE(r);
  std::memset(r->bytes.data(), 0x33, r->bytes.size());
  REQUIRE(sut->seal(r->handle));

  for (const std::size_t at : {std::size_t{0}, std::size_t{4097}, std::size_t{1 * mib}}) {
    CAPTURE(at);
    r->bytes[at] ^= std::byte{0x01};
    auto v = sut->verify(r->handle);
    REQUIRE_FALSE(v);
    CHECK(v.error().code == store_errc::corrupt);
    r->bytes[at] ^= std::byte{0x01};
    CHECK(sut->verify(r->handle));
  }

  auto v = sut->verify(r->handle, 6);
  REQUIRE_FALSE(v);
  CHECK(v.error().code == store_errc::corrupt);
}

TEST_CASE("snapshot_store: a handle is stale after free, also once its slot is reused") {
  auto sut = make_store(64 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  const auto old = park(*sut, meta_for(0, 1), 1 * mib);
  REQUIRE(sut->free(old));

  CHECK(sut->free(old).error().code == store_errc::stale);
  CHECK(sut->read(old).error().code == store_errc::stale);
  CHECK(sut->meta(old).error().code == store_errc::stale);
  CHECK(sut->verify(old).error().code == store_errc::stale);
  CHECK(sut->pin(old).error().code == store_errc::stale);
  CHECK(sut->unpin(old).error().code == store_errc::stale);
  CHECK(sut->seal(old).error().code == store_errc::stale);
  CHECK(sut->read(snapshot_handle{}).error().code == store_errc::stale);
  CHECK(sut->read(snapshot_handle{999, 1}).error().code == store_errc::stale);

  const auto reused = park(*sut, meta_for(0, 2), 1 * mib);
  CHECK(reused.index == old.index);
  CHECK_FALSE(reused == old);
  CHECK(sut->read(old).error().code == store_errc::stale);
  CHECK(sut->read(reused));
}

TEST_CASE("snapshot_store: a full store evicts the lowest-priority parked snapshot first and "
          "reports it") {
  auto sut = make_store(64 * mib, 8 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  const auto p3 = park(*sut, meta_for(0, 3, 3), 2 * mib);
  const auto p1 = park(*sut, meta_for(0, 1, 1), 2 * mib);
  const auto p2 = park(*sut, meta_for(0, 2, 2), 2 * mib);
  const auto p5 = park(*sut, meta_for(0, 5, 5), 2 * mib);

  auto r = sut->reserve(meta_for(0, 4, 4), 2 * mib);
  REQUIRE(r);
  REQUIRE(r->evicted.size() == 1);
  CHECK(r->evicted[0].handle == p1);
  CHECK(r->evicted[0].meta.sequence_id == 1);
  CHECK(r->evicted[0].bytes == 2 * mib);
  CHECK(sut->read(p1).error().code == store_errc::stale);
  for (const auto h : {p2, p3, p5})
    CHECK(sut->verify(h));
  const auto s = sut->stats();
  CHECK(s.used_bytes == 8 * mib);
  CHECK(s.evictions == 1);
  CHECK(s.evicted_bytes == 2 * mib);
}

TEST_CASE("snapshot_store: among equal priorities retained snapshots go first, then the least "
          "recently used") {
  auto sut = make_store(64 * mib, 6 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  const auto older = park(*sut, meta_for(0, 1, 2), 2 * mib);
  const auto newer = park(*sut, meta_for(0, 2, 2), 2 * mib);
  auto kept = meta_for(0, 3, 2);
  kept.retained = true;
  const auto retained = park(*sut, kept, 2 * mib);

  std::vector<evicted_snapshot> evicted;
  park(*sut, meta_for(0, 4, 2), 2 * mib, std::byte{1}, &evicted);
  REQUIRE(evicted.size() == 1);
  CHECK(evicted[0].handle == retained);

  // Pinning counts as use: the older one is now the most recently used.
  REQUIRE(sut->pin(older));
  REQUIRE(sut->unpin(older));
  park(*sut, meta_for(0, 5, 2), 2 * mib, std::byte{1}, &evicted);
  REQUIRE(evicted.size() == 1);
  CHECK(evicted[0].handle == newer);
}

TEST_CASE("snapshot_store: a retained snapshot never evicts a parked one, a parked one evicts "
          "retained first whatever their priority") {
  auto sut = make_store(64 * mib, 6 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  const auto parked = park(*sut, meta_for(0, 1, 0), 2 * mib);
  auto keep = meta_for(0, 2, 9);
  keep.retained = true;
  const auto retained = park(*sut, keep, 2 * mib);
  park(*sut, meta_for(0, 3, 0), 2 * mib);

  auto more = meta_for(0, 4, 9);
  more.retained = true;
  std::vector<evicted_snapshot> evicted;
  park(*sut, more, 2 * mib, std::byte{1}, &evicted); // may only displace the retained one
  REQUIRE(evicted.size() == 1);
  CHECK(evicted[0].handle == retained);
  CHECK(evicted[0].reason == evict_reason::pressure);

  // Now only parked snapshots besides the new retained one: fill with parked.
  const auto newest_retained = sut->stats().retained_snapshots;
  CHECK(newest_retained == 1);
  park(*sut, meta_for(0, 5, 0), 2 * mib, std::byte{1}, &evicted);
  REQUIRE(evicted.size() == 1);
  CHECK(evicted[0].meta.retained);
  CHECK(sut->verify(parked));

  auto last = meta_for(0, 6, 9);
  last.retained = true;
  const auto before = sut->stats();
  auto r = sut->reserve(last, 2 * mib);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == store_errc::full);
  const auto after = sut->stats();
  CHECK(after.evictions == before.evictions);
  CHECK(after.parked_evictions == 0);
  CHECK(after.retained_evictions == 2);
}

TEST_CASE("snapshot_store: cost value evicts a short context before a long one of the same size, "
          "recency evicts the older") {
  for (const auto value : {eviction_value::cost, eviction_value::recency}) {
    CAPTURE(to_string(value));
    auto arena = memfd_arena::create("kvlane-test-store", 64 * mib);
    REQUIRE(arena);
    auto options = options_of(4 * mib);
    options.value = value;
    auto made = snapshot_store::create(std::move(*arena), options);
    REQUIRE(made);
    auto& sut = **made;
    REQUIRE(sut.register_model(0, 0, 0));
    auto long_meta = meta_for(0, 1);
    long_meta.cache_len = 4000;
    const auto long_context = park(sut, long_meta, 2 * mib);
    auto short_meta = meta_for(0, 2);
    short_meta.cache_len = 10;
    const auto short_context = park(sut, short_meta, 2 * mib);

    std::vector<evicted_snapshot> evicted;
    park(sut, meta_for(0, 3), 2 * mib, std::byte{1}, &evicted);
    REQUIRE(evicted.size() == 1);
    CHECK(evicted[0].handle == (value == eviction_value::cost ? short_context : long_context));
    CHECK(sut.stats().parked_evictions == 1);
  }
}

TEST_CASE("snapshot_store: cost value ages: an untouched long context finally goes") {
  auto sut = make_store(64 * mib, 4 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  auto long_meta = meta_for(0, 1);
  long_meta.cache_len = 400;
  const auto long_context = park(*sut, long_meta, 2 * mib);
  auto short_meta = meta_for(0, 2);
  short_meta.cache_len = 10;
  park(*sut, short_meta, 2 * mib);
  // Each new short context evicts the previous short one and raises the
  // class's inflation by its credit, until the long one is the cheapest.
  int rounds = 0;
  std::vector<evicted_snapshot> evicted;
  for (; rounds < 1000; ++rounds) {
    short_meta.sequence_id = 100 + static_cast<std::uint64_t>(rounds);
    park(*sut, short_meta, 2 * mib, std::byte{1}, &evicted);
    REQUIRE(evicted.size() == 1);
    if (evicted[0].handle == long_context)
      break;
  }
  CHECK(rounds > 1);
  CHECK(rounds < 1000);
}

TEST_CASE("snapshot_store: the retained share bounds retained bytes and evicts for it by value") {
  auto arena = memfd_arena::create("kvlane-test-store", 64 * mib);
  REQUIRE(arena);
  auto options = options_of(16 * mib);
  options.retained_limit_bytes = 4 * mib;
  auto made = snapshot_store::create(std::move(*arena), options);
  REQUIRE(made);
  auto& sut = **made;
  REQUIRE(sut.register_model(0, 0, 0));
  auto retained_meta = [](std::uint64_t sequence) {
    auto m = meta_for(0, sequence);
    m.retained = true;
    return m;
  };
  const auto a = park(sut, retained_meta(1), 2 * mib);
  const auto b = park(sut, retained_meta(2), 2 * mib);
  // Reusing a (pin, read, unpin) keeps it and makes it the more valuable.
  REQUIRE(sut.pin(a));
  REQUIRE(sut.read(a));
  REQUIRE(sut.unpin(a));
  CHECK(sut.verify(a));

  std::vector<evicted_snapshot> evicted;
  park(sut, retained_meta(3), 2 * mib, std::byte{1}, &evicted);
  REQUIRE(evicted.size() == 1);
  CHECK(evicted[0].handle == b);
  CHECK(evicted[0].reason == evict_reason::retained_share);
  // Parked snapshots are not bound by the share.
  for (std::uint64_t i = 10; i < 14; ++i)
    park(sut, meta_for(0, i), 2 * mib);
  auto s = sut.stats();
  CHECK(s.retained_bytes == 4 * mib);
  CHECK(s.retained_limit_bytes == 4 * mib);
  CHECK(s.retained_share_evictions == 1);
  CHECK(s.used_bytes == 12 * mib);

  // A lower share takes effect at the next retained reservation.
  sut.set_retained_limit(2 * mib);
  park(sut, retained_meta(4), 2 * mib, std::byte{1}, &evicted);
  CHECK(evicted.size() == 2);
  s = sut.stats();
  CHECK(s.retained_bytes == 2 * mib);
  CHECK(s.retained_share_evictions == 3);
  auto too_big = sut.reserve(retained_meta(5), 3 * mib);
  REQUIRE_FALSE(too_big);
  CHECK(too_big.error().code == store_errc::too_large);
  // A share of 0 keeps no retained snapshot at all.
  sut.set_retained_limit(0);
  auto none = sut.reserve(retained_meta(6), 64 * kib);
  REQUIRE_FALSE(none);
  CHECK(none.error().code == store_errc::too_large);
}

TEST_CASE("snapshot_store: pinned and unsealed snapshots are never evicted, full when nothing "
          "can go") {
  auto sut = make_store(64 * mib, 8 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  const auto a = park(*sut, meta_for(0, 1, 0), 2 * mib);
  const auto b = park(*sut, meta_for(0, 2, 0), 2 * mib);
  const auto c = park(*sut, meta_for(0, 3, 9), 2 * mib);
  auto writing = sut->reserve(meta_for(0, 4, 0), 2 * mib);
  REQUIRE(writing);
  REQUIRE(sut->pin(a));
  REQUIRE(sut->pin(b));

  auto r = sut->reserve(meta_for(0, 5, 0), 2 * mib);
  REQUIRE(r);
  REQUIRE(r->evicted.size() == 1);
  CHECK(r->evicted[0].handle == c); // the only sealed, unpinned one, despite its priority

  const auto before = sut->stats();
  auto refused = sut->reserve(meta_for(0, 6, 0), 2 * mib);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == store_errc::full);
  const auto after = sut->stats();
  CHECK(after.used_bytes == before.used_bytes);
  CHECK(after.evictions == before.evictions);
  CHECK(after.used_bytes <= after.limit_bytes);

  REQUIRE(sut->unpin(b));
  auto r2 = sut->reserve(meta_for(0, 6, 0), 2 * mib);
  REQUIRE(r2);
  REQUIRE(r2->evicted.size() == 1);
  CHECK(r2->evicted[0].handle == b);
  CHECK(sut->verify(a));
}

TEST_CASE("snapshot_store: freeing a pinned snapshot makes the handle stale but keeps the bytes "
          "until the last unpin") {
  auto sut = make_store(64 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  const auto h = park(*sut, meta_for(0, 1), 4 * mib, std::byte{0x77});
  REQUIRE(sut->pin(h));
  REQUIRE(sut->pin(h));
  auto bytes = sut->read(h);
  REQUIRE(bytes);

  REQUIRE(sut->free(h));
  CHECK(sut->read(h).error().code == store_errc::stale);
  CHECK(sut->free(h).error().code == store_errc::stale);
  CHECK(sut->stats().used_bytes == 4 * mib); // still held by the pins
  REQUIRE(sut->unpin(h));
  CHECK((*bytes)[4 * mib - 1] == std::byte{0x77});
  REQUIRE(sut->unpin(h));
  CHECK(sut->unpin(h).error().code == store_errc::stale);
  const auto s = sut->stats();
  CHECK(s.used_bytes == 0);
  CHECK(s.snapshots == 0);
  CHECK(s.committed_bytes <= 64 * kib);
}

TEST_CASE("snapshot_store: a model at its cap evicts its own snapshots, not another model's") {
  auto sut = make_store(64 * mib, 16 * mib);
  REQUIRE(sut->register_model(0, 0, 4 * mib));
  REQUIRE(sut->register_model(1, 0, 0));
  const auto b1 = park(*sut, meta_for(1, 1, 0), 2 * mib);
  const auto b2 = park(*sut, meta_for(1, 2, 0), 2 * mib);
  const auto a1 = park(*sut, meta_for(0, 1, 8), 2 * mib);
  const auto a2 = park(*sut, meta_for(0, 2, 9), 2 * mib);

  std::vector<evicted_snapshot> evicted;
  park(*sut, meta_for(0, 3, 9), 2 * mib, std::byte{1}, &evicted);
  REQUIRE(evicted.size() == 1);
  CHECK(evicted[0].handle == a1); // B's snapshots are cheaper but evicting them would not help
  CHECK(model_used(*sut, 0) == 4 * mib);
  CHECK(model_used(*sut, 1) == 4 * mib);
  for (const auto h : {b1, b2, a2})
    CHECK(sut->verify(h));

  auto too_big = sut->reserve(meta_for(0, 4), 4 * mib + 1);
  REQUIRE_FALSE(too_big);
  CHECK(too_big.error().code == store_errc::too_large);
}

TEST_CASE("snapshot_store: evictions are counted per model and class, and add up to the totals") {
  // 8 MiB limit, two models without floors or caps: whoever reserves evicts the cheapest.
  auto sut = make_store(64 * mib, 8 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  REQUIRE(sut->register_model(1, 0, 0));
  auto retained = [](std::uint32_t model, std::uint64_t sequence) {
    auto m = meta_for(model, sequence);
    m.retained = true;
    return m;
  };
  park(*sut, retained(0, 1), 2 * mib); // model 0, retained
  park(*sut, meta_for(0, 2), 2 * mib); // model 0, parked
  park(*sut, retained(1, 3), 2 * mib); // model 1, retained
  park(*sut, meta_for(1, 4), 2 * mib); // model 1, parked
  // Three more of model 1: the two retained snapshots go first (least
  // valuable class), then a parked one.
  std::vector<evicted_snapshot> evicted;
  for (std::uint64_t i = 5; i < 8; ++i) {
    std::vector<evicted_snapshot> now;
    park(*sut, meta_for(1, i, 200), 2 * mib, std::byte{1}, &now);
    evicted.insert(evicted.end(), now.begin(), now.end());
  }
  REQUIRE(evicted.size() == 3);
  const auto s = sut->stats();
  CHECK(s.retained_evictions == 2);
  CHECK(s.parked_evictions == 1);
  std::uint64_t retained_sum = 0, parked_sum = 0;
  for (const auto& m : s.models) {
    CHECK(m.retained_evictions == 1); // one retained snapshot of each model
    retained_sum += m.retained_evictions;
    parked_sum += m.parked_evictions;
  }
  CHECK(retained_sum == s.retained_evictions);
  CHECK(parked_sum == s.parked_evictions);
  std::uint64_t parked_of_evicted_models = 0;
  for (const auto& e : evicted)
    parked_of_evicted_models += !e.meta.retained;
  CHECK(parked_of_evicted_models == 1);
}

TEST_CASE("snapshot_store: another model's floor is protected from eviction and kept free for it") {
  auto sut = make_store(64 * mib, 8 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  REQUIRE(sut->register_model(1, 4 * mib, 0));

  // Model 0 alone may only use limit - floor(1): the floor stays available.
  const auto a1 = park(*sut, meta_for(0, 1, 5), 2 * mib);
  const auto a2 = park(*sut, meta_for(0, 2, 6), 2 * mib);
  std::vector<evicted_snapshot> evicted;
  const auto a3 = park(*sut, meta_for(0, 3, 7), 2 * mib, std::byte{1}, &evicted);
  REQUIRE(evicted.size() == 1);
  CHECK(evicted[0].handle == a1);
  CHECK(model_used(*sut, 0) == 4 * mib);

  // Model 1 gets its floor without evicting anything.
  const auto b1 = park(*sut, meta_for(1, 1, 0), 2 * mib);
  const auto b2 = park(*sut, meta_for(1, 2, 0), 2 * mib);

  // Model 0 is now full; B's snapshots have lower priority but sit at B's floor.
  park(*sut, meta_for(0, 4, 9), 2 * mib, std::byte{1}, &evicted);
  REQUIRE(evicted.size() == 1);
  CHECK(evicted[0].handle == a2);
  CHECK(model_used(*sut, 1) == 4 * mib);
  CHECK(sut->verify(b1));
  CHECK(sut->verify(b2));
  CHECK(sut->verify(a3));

  auto too_big = sut->reserve(meta_for(0, 5), 4 * mib + 1);
  REQUIRE_FALSE(too_big);
  CHECK(too_big.error().code == store_errc::too_large);
}

TEST_CASE("snapshot_store: freed neighbours coalesce so a large snapshot fits again") {
  auto sut = make_store(16 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  std::vector<snapshot_handle> handles;
  for (std::uint64_t i = 0; i < 16; ++i) {
    auto r = sut->reserve(meta_for(0, i), 1 * mib);
    REQUIRE(r);
    handles.push_back(r->handle); // left unsealed: not evictable
  }
  for (std::size_t i = 1; i < 16; i += 2)
    REQUIRE(sut->free(handles[i]));
  CHECK(sut->stats().used_bytes == 8 * mib);
  CHECK(sut->stats().largest_free_bytes == 1 * mib);
  // 8 MiB are free but scattered, and nothing is evictable.
  auto scattered = sut->reserve(meta_for(0, 100), 2 * mib);
  REQUIRE_FALSE(scattered);
  CHECK(scattered.error().code == store_errc::full);

  for (const std::size_t i : {6u, 2u, 10u, 0u, 14u, 4u, 12u, 8u})
    REQUIRE(sut->free(handles[i]));
  CHECK(sut->stats().largest_free_bytes == 16 * mib);
  auto whole = sut->reserve(meta_for(0, 101), 16 * mib);
  REQUIRE(whole);
  CHECK(whole->evicted.empty());
}

TEST_CASE("snapshot_store: eviction for a contiguous run keeps only the victims it needs") {
  auto sut = make_store(8 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  std::vector<snapshot_handle> h;
  const std::uint8_t priority[8] = {1, 2, 9, 9, 9, 9, 9, 0};
  for (std::uint64_t i = 0; i < 8; ++i)
    h.push_back(park(*sut, meta_for(0, i, priority[i]), 1 * mib));

  // The cheapest victim (at the end) frees bytes but no 2 MiB run; the next
  // two make a run, after which the first is not needed any more.
  auto r = sut->reserve(meta_for(0, 100, 5), 2 * mib);
  REQUIRE(r);
  REQUIRE(r->evicted.size() == 2);
  CHECK(r->evicted[0].handle == h[0]);
  CHECK(r->evicted[1].handle == h[1]);
  CHECK(sut->verify(h[7]));
  CHECK(sut->stats().used_bytes == 8 * mib);
}

TEST_CASE("snapshot_store: a limit below the arena size bounds used bytes, not placement") {
  auto sut = make_store(16 * mib, 8 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  std::vector<snapshot_handle> h;
  for (std::uint64_t i = 0; i < 8; ++i)
    h.push_back(park(*sut, meta_for(0, i, static_cast<std::uint8_t>(8 - i)), 1 * mib));
  auto r = sut->reserve(meta_for(0, 100, 5), 1 * mib);
  REQUIRE(r);
  REQUIRE(r->evicted.size() == 1);
  CHECK(r->evicted[0].handle == h[7]);
  CHECK(sut->stats().used_bytes == 8 * mib);
}

TEST_CASE("snapshot_store: rejects bad arguments with precise errors") {
  auto arena = memfd_arena::create("kvlane-test-store", 16 * mib);
  REQUIRE(arena);
  auto bad_granularity = snapshot_store::create(std::move(*arena), options_of(0, 3 * kib));
  REQUIRE_FALSE(bad_granularity);
  CHECK(bad_granularity.error().code == store_errc::invalid_argument);
  auto arena2 = memfd_arena::create("kvlane-test-store", 16 * mib);
  REQUIRE(arena2);
  auto bad_limit = snapshot_store::create(std::move(*arena2), options_of(32 * mib));
  REQUIRE_FALSE(bad_limit);
  CHECK(bad_limit.error().code == store_errc::invalid_argument);

  auto sut = make_store(16 * mib);
  CHECK(sut->register_model(0, 2 * mib, 1 * mib).error().code == store_errc::invalid_argument);
  REQUIRE(sut->register_model(0, 10 * mib, 0));
  CHECK(sut->register_model(1, 7 * mib, 0).error().code == store_errc::invalid_argument);
  REQUIRE(sut->register_model(1, 6 * mib, 0));

  CHECK(sut->reserve(meta_for(0, 1), 0).error().code == store_errc::invalid_argument);
  CHECK(sut->reserve(meta_for(7, 1), 1 * mib).error().code == store_errc::invalid_argument);
  CHECK(sut->reserve(meta_for(0, 1), 17 * mib).error().code == store_errc::too_large);
  CHECK(sut->reserve(meta_for(1, 1), 7 * mib).error().code == store_errc::too_large);

  auto r = sut->reserve(meta_for(0, 1), 1 * mib);
  REQUIRE(r);
  CHECK(sut->pin(r->handle).error().code == store_errc::invalid_argument);
  CHECK(sut->verify(r->handle).error().code == store_errc::invalid_argument);
  REQUIRE(sut->seal(r->handle));
  CHECK(sut->unpin(r->handle).error().code == store_errc::invalid_argument);
}

TEST_CASE("snapshot_store: randomized reserve, seal, pin and free keep every invariant") {
  auto sut = make_store(16 * mib, 12 * mib);
  const std::uint64_t floor[3] = {2 * mib, 2 * mib, 0};
  const std::uint64_t cap[3] = {8 * mib, 0, 4 * mib};
  for (std::uint32_t m = 0; m < 3; ++m)
    REQUIRE(sut->register_model(m, floor[m], cap[m]));

  struct live {
    std::span<std::byte> bytes;
    std::uint64_t charged = 0;
    std::uint32_t model = 0;
    std::uint64_t marker = 0;
    bool sealed = false;
    bool retained = false;
    std::uint32_t pins = 0;
  };
  std::map<std::pair<std::uint32_t, std::uint32_t>, live> expected;
  const auto key = [](snapshot_handle h) { return std::make_pair(h.index, h.generation); };
  const auto handle_of = [](const auto& k) { return snapshot_handle{k.first, k.second}; };

  std::mt19937_64 rng(20240601);
  const auto pick = [&](auto pred) -> std::optional<snapshot_handle> {
    std::vector<snapshot_handle> ok;
    for (const auto& [k, v] : expected)
      if (pred(v))
        ok.push_back(handle_of(k));
    if (ok.empty())
      return std::nullopt;
    return ok[rng() % ok.size()];
  };

  std::uint64_t evictions = 0;
  std::uint64_t next_marker = 1;
  for (int step = 0; step < 3000; ++step) {
    CAPTURE(step);
    const auto op = rng() % 100;
    if (op < 45) {
      const auto model = static_cast<std::uint32_t>(rng() % 3);
      const std::uint64_t bytes = 1 + rng() % (768 * kib);
      auto meta = meta_for(model, next_marker, static_cast<std::uint8_t>(rng() % 4));
      meta.retained = rng() % 5 == 0;
      const auto before = sut->stats();
      auto r = sut->reserve(meta, bytes);
      if (!r) {
        const auto code = r.error().code;
        CHECK((code == store_errc::full || code == store_errc::too_large));
        CHECK(sut->stats().evictions == before.evictions);
        continue;
      }
      for (const auto& e : r->evicted) {
        const auto it = expected.find(key(e.handle));
        REQUIRE(it != expected.end());
        CHECK(it->second.sealed);
        CHECK(it->second.pins == 0);
        if (meta.retained)
          CHECK(it->second.retained); // a retained snapshot never displaces a parked one
        CHECK(e.bytes == it->second.charged);
        expected.erase(it);
        ++evictions;
      }
      for (std::uint32_t m = 0; m < 3; ++m) {
        if (m == model)
          continue;
        // Evicting never took another model below its floor.
        std::uint64_t used_before = 0;
        for (const auto& u : before.models)
          if (u.model_index == m)
            used_before = u.used_bytes;
        std::uint64_t used_now = 0;
        for (const auto& [k, v] : expected)
          if (v.model == m)
            used_now += v.charged;
        if (used_now < used_before)
          CHECK(used_now >= floor[m]);
      }
      live l;
      l.bytes = r->bytes;
      l.charged = (bytes + 64 * kib - 1) / (64 * kib) * (64 * kib);
      l.model = model;
      l.retained = meta.retained;
      l.marker = next_marker++;
      const std::size_t n = std::min<std::size_t>(8, bytes);
      std::memcpy(l.bytes.data(), &l.marker, n);
      std::memcpy(l.bytes.data() + bytes - n, &l.marker, n);
      expected.emplace(key(r->handle), l);
    } else if (op < 60) {
      if (auto h = pick([](const live& v) { return !v.sealed; })) {
        REQUIRE(sut->seal(*h));
        expected[key(*h)].sealed = true;
      }
    } else if (op < 75) {
      if (auto h = pick([](const live&) { return true; })) {
        auto& v = expected[key(*h)];
        for (; v.pins > 0; --v.pins)
          REQUIRE(sut->unpin(*h));
        REQUIRE(sut->free(*h));
        expected.erase(key(*h));
      }
    } else if (op < 85) {
      if (auto h = pick([](const live& v) { return v.sealed && v.pins < 2; })) {
        REQUIRE(sut->pin(*h));
        ++expected[key(*h)].pins;
      }
    } else if (op < 95) {
      if (auto h = pick([](const live& v) { return v.pins > 0; })) {
        REQUIRE(sut->unpin(*h));
        --expected[key(*h)].pins;
      }
    } else {
      if (auto h = pick([](const live& v) { return v.sealed; }))
        CHECK(sut->verify(*h));
    }

    const auto s = sut->stats();
    std::uint64_t used = 0;
    std::uint64_t retained = 0;
    std::uint64_t per_model[3] = {0, 0, 0};
    std::vector<std::pair<const std::byte*, std::uint64_t>> extents;
    for (const auto& [k, v] : expected) {
      used += v.charged;
      retained += v.retained ? v.charged : 0;
      per_model[v.model] += v.charged;
      extents.emplace_back(v.bytes.data(), v.charged);
    }
    REQUIRE(s.used_bytes == used);
    REQUIRE(s.retained_bytes == retained);
    REQUIRE(s.used_bytes <= s.limit_bytes);
    REQUIRE(s.snapshots == expected.size());
    REQUIRE(s.evictions == evictions);
    REQUIRE(s.parked_evictions + s.retained_evictions == evictions);
    for (const auto& u : s.models) {
      CHECK(u.used_bytes == per_model[u.model_index]);
      if (u.cap_bytes != 0)
        CHECK(u.used_bytes <= u.cap_bytes);
    }
    std::sort(extents.begin(), extents.end());
    for (std::size_t i = 1; i < extents.size(); ++i)
      REQUIRE(extents[i - 1].first + extents[i - 1].second <= extents[i].first);
  }
  CHECK(evictions > 0);

  // No snapshot's bytes were overwritten by another's.
  for (const auto& [k, v] : expected) {
    const std::size_t n = std::min<std::size_t>(8, v.bytes.size());
    CHECK(std::memcmp(v.bytes.data(), &v.marker, n) == 0);
    CHECK(std::memcmp(v.bytes.data() + v.bytes.size() - n, &v.marker, n) == 0);
    if (v.sealed)
      CHECK(sut->verify(handle_of(k)));
  }
  for (const auto& [k, v] : expected)
    REQUIRE(sut->free(handle_of(k)));
  for (const auto& [k, v] : expected)
    for (std::uint32_t p = 0; p < v.pins; ++p)
      REQUIRE(sut->unpin(handle_of(k)));
  const auto s = sut->stats();
  CHECK(s.used_bytes == 0);
  CHECK(s.snapshots == 0);
  CHECK(s.committed_bytes == 0);
  CHECK(s.largest_free_bytes == s.arena_bytes);
}

TEST_CASE("snapshot_store: concurrent owners reserve, seal, verify and free without interfering") {
  auto sut = make_store(16 * mib, 4 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  std::atomic<int> failures{0};
  const auto worker = [&](std::uint32_t id) {
    std::mt19937_64 rng(id);
    for (int i = 0; i < 300; ++i) {
      const std::uint64_t bytes = 64 * kib + rng() % (192 * kib);
      const auto fill = static_cast<std::byte>(id * 16 + i % 16);
      auto r = sut->reserve(meta_for(0, id * 1000 + i, static_cast<std::uint8_t>(rng() % 3)), bytes);
      if (!r) {
        if (r.error().code != store_errc::full)
          ++failures;
        continue;
      }
      std::memset(r->bytes.data(), static_cast<int>(fill), bytes);
      if (!sut->seal(r->handle)) {
        ++failures;
        continue;
      }
      if (!sut->pin(r->handle))
        continue; // evicted by the other thread meanwhile: allowed
      auto data = sut->read(r->handle);
      if (!data || !sut->verify(r->handle)
          || std::any_of(data->begin(), data->end(), [&](std::byte b) { return b != fill; }))
        ++failures;
      if (!sut->unpin(r->handle))
        ++failures;
      if (i % 2 == 0) {
        // Unpinned, it may have been evicted by the other thread already: a
        // stale handle is the only error free() may report.
        auto freed = sut->free(r->handle);
        if (!freed && freed.error().code != store_errc::stale)
          ++failures;
      }
    }
  };
  std::thread t1(worker, 1);
  std::thread t2(worker, 2);
  t1.join();
  t2.join();
  CHECK(failures.load() == 0);
  CHECK(sut->stats().used_bytes <= 4 * mib);
}

TEST_CASE("snapshot_store: freed bytes stay committed up to the warm pool target and the rest "
          "goes back to the OS") {
  auto sut = make_pooled_store(1024 * mib, 0, 8 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  std::vector<snapshot_handle> live;
  for (std::uint64_t i = 0; i < 4; ++i)
    live.push_back(dump(*sut, meta_for(0, i), 4 * mib, std::byte{0x21}).handle);
  CHECK(sut->stats().committed_bytes == 16 * mib);

  for (const auto h : live)
    REQUIRE(sut->free(h));
  const auto s = sut->stats();
  CHECK(s.pool_target_bytes == 8 * mib);
  CHECK(s.pool_bytes == 8 * mib);
  CHECK(s.committed_bytes == 8 * mib);
  CHECK(s.host.punched_bytes == 8 * mib);
  CHECK(s.used_bytes == 0);
  CHECK(s.largest_free_bytes == 1024 * mib);
}

TEST_CASE("snapshot_store: a prefaulted pool is committed at creation and the first dumps fault "
          "nothing in") {
  auto sut = make_pooled_store(1024 * mib, 0, 16 * mib, true);
  REQUIRE(sut->register_model(0, 0, 0));
  auto s = sut->stats();
  CHECK(s.pool_bytes == 16 * mib);
  CHECK(s.committed_bytes == 16 * mib);
  CHECK(s.used_bytes == 0);

  std::vector<snapshot_handle> parked;
  for (std::uint64_t i = 0; i < 2; ++i)
    parked.push_back(dump(*sut, meta_for(0, i), 8 * mib, std::byte{0x10}).handle);
  s = sut->stats();
  CHECK(s.host.committed_on_demand_bytes == 0);
  CHECK(s.pool_bytes == 0);
  CHECK(s.committed_bytes == 16 * mib);
  // Past the pool, pages fault in on demand as without a prefault.
  parked.push_back(dump(*sut, meta_for(0, 2), 8 * mib, std::byte{0x11}).handle);
  CHECK(sut->stats().host.committed_on_demand_bytes == 8 * mib);
  for (const auto h : parked)
    REQUIRE(sut->free(h));
  s = sut->stats();
  CHECK(s.pool_bytes == 16 * mib);
  CHECK(s.committed_bytes == 16 * mib);
}

TEST_CASE("snapshot_store: committed memory is the live snapshots plus the warm pool, through "
          "frees and evictions") {
  // Limit 24 MiB, pool 6 MiB: reservations of 1..5 MiB churn with evictions.
  auto sut = make_pooled_store(64 * mib, 24 * mib, 6 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  std::mt19937_64 rng(77);
  std::vector<snapshot_handle> live;
  std::uint64_t evictions = 0;
  for (int i = 0; i < 200; ++i) {
    if (!live.empty() && rng() % 3 == 0) {
      const std::size_t k = rng() % live.size();
      (void)sut->free(live[k]); // may be stale: evicted meanwhile
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      const std::uint64_t bytes = (1 + rng() % 5) * mib;
      auto r = dump(*sut, meta_for(0, static_cast<std::uint64_t>(i)), bytes, std::byte{0x42});
      evictions += r.evicted.size();
      live.push_back(r.handle);
    }
    const auto s = sut->stats();
    REQUIRE(s.pool_bytes <= s.pool_target_bytes);
    REQUIRE(s.committed_bytes == s.used_bytes + s.pool_bytes);
  }
  CHECK(evictions > 0);
  for (const auto h : live)
    (void)sut->free(h);
  const auto s = sut->stats();
  CHECK(s.used_bytes == 0);
  CHECK(s.pool_bytes == 6 * mib);
  CHECK(s.committed_bytes == 6 * mib);
}

TEST_CASE("snapshot_store: while the pool is under its target, dumps reuse warm pages and frees "
          "punch nothing") {
  auto sut = make_pooled_store(1024 * mib, 0, 16 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  // Warm-up: two parked snapshots fault their pages in once.
  std::vector<snapshot_handle> parked;
  for (std::uint64_t i = 0; i < 2; ++i)
    parked.push_back(dump(*sut, meta_for(0, i), 8 * mib, std::byte{0x10}).handle);
  const auto warm = sut->stats();
  CHECK(warm.host.committed_on_demand_bytes == 16 * mib);

  // Steady state: park one, load and free the oldest.
  for (std::uint64_t i = 2; i < 30; ++i) {
    const auto r = dump(*sut, meta_for(0, i), 8 * mib, static_cast<std::byte>(i));
    parked.push_back(r.handle);
    REQUIRE(sut->pin(parked.front()));
    REQUIRE(sut->verify(parked.front()));
    REQUIRE(sut->unpin(parked.front()));
    REQUIRE(sut->free(parked.front()));
    parked.erase(parked.begin());
  }
  const auto s = sut->stats();
  CHECK(s.host.punch.count == 0);
  CHECK(s.host.punched_bytes == 0);
  // The third snapshot faulted its pages in; after that every dump landed on warm pages.
  CHECK(s.host.committed_on_demand_bytes == 24 * mib);
  CHECK(s.committed_bytes == 24 * mib);
  CHECK(s.host.seal.count == 30);
  CHECK(s.host.verify.count == 28);
}

TEST_CASE("snapshot_store: a byte changed after seal in an extent reused from the warm pool is "
          "reported corrupt by verify") {
  auto sut = make_pooled_store(64 * mib, 0, 8 * mib);
  REQUIRE(sut->register_model(0, 0, 0));
  const auto first = dump(*sut, meta_for(0, 1), 4 * mib, std::byte{0x55});
  REQUIRE(sut->free(first.handle));
  REQUIRE(sut->stats().pool_bytes == 4 * mib);

  const auto second = dump(*sut, meta_for(0, 2), 4 * mib, std::byte{0x66});
  CHECK(second.bytes.data() == first.bytes.data()); // the warm extent was reused
  REQUIRE(sut->pin(second.handle));
  CHECK(sut->verify(second.handle));
  second.bytes[3 * mib + 17] ^= std::byte{0x80};
  auto v = sut->verify(second.handle);
  REQUIRE_FALSE(v);
  CHECK(v.error().code == store_errc::corrupt);
  REQUIRE(sut->unpin(second.handle));
}

TEST_CASE("snapshot_store: commit is for reservations being written") {
  auto sut = make_pooled_store(64 * mib, 0, 0);
  REQUIRE(sut->register_model(0, 0, 0));
  const auto r = dump(*sut, meta_for(0, 1), 1 * mib, std::byte{0x01});
  auto c = sut->commit(r.handle);
  REQUIRE_FALSE(c);
  CHECK(c.error().code == store_errc::invalid_argument);
  REQUIRE(sut->free(r.handle));
  CHECK(sut->commit(r.handle).error().code == store_errc::stale);
}
