// The disk tier through the snapshot store: write-back on the disk lane,
// evictions that keep the disk copy, reading back before a load, damaged
// files, a restart from disk alone, and the byte budget.

#include "actors/disk_lane.hpp"

#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

using namespace kvlane;
using namespace kvlane::ipc;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kib = 1024;
constexpr std::uint64_t snapshot_bytes = 256 * kib;
const kv_fingerprint loaded{11, 22, 33, "sim", "chatml"};

/// A store of `slots` snapshots of snapshot_bytes, model 0 named "m".
std::shared_ptr<snapshot_store> make_store(int slots, kv_fingerprint fp = loaded) {
  auto arena = memfd_arena::create("disk-lane-test", slots * snapshot_bytes);
  REQUIRE(arena);
  store_options o;
  o.granularity = 64 * kib;
  auto store = snapshot_store::create(std::move(*arena), o);
  REQUIRE(store);
  REQUIRE((*store)->register_model(0, 0, 0));
  REQUIRE((*store)->set_fingerprint(0, "m", std::move(fp)));
  return std::shared_ptr<snapshot_store>(std::move(*store));
}

actors::store_disk_config disk_in(const std::string& dir, std::uint64_t max = 64 << 20) {
  actors::store_disk_config c;
  c.dir = dir;
  c.max_bytes = max;
  c.write_bytes_per_s = 1ull << 40; // the bound is not what these tests are about
  return c;
}

std::shared_ptr<actors::disk_lane> lane_on(snapshot_store& store,
                                           const actors::store_disk_config& c) {
  auto lane = actors::disk_lane::start(c, store, {"m"});
  REQUIRE(lane);
  return *lane;
}

/// A sealed retained snapshot whose bytes are all `fill` (written back at once).
snapshot_handle put_retained(snapshot_store& store, unsigned char fill,
                             std::vector<evicted_snapshot>* evicted = nullptr) {
  snapshot_meta meta;
  meta.model_index = 0;
  meta.cache_len = 32;
  meta.generation = 1;
  meta.sequence_id = fill;
  meta.retained = true;
  auto label = std::make_shared<snapshot_label>();
  label->fingerprint = loaded;
  label->user = 1000;
  for (std::uint32_t t = 0; t < 32; ++t)
    label->tokens.push_back(fill * 100 + t);
  auto r = store.reserve(meta, snapshot_bytes, std::move(label));
  REQUIRE(r);
  if (evicted != nullptr)
    *evicted = r->evicted;
  std::memset(r->bytes.data(), fill, r->bytes.size());
  REQUIRE(store.seal(r->handle));
  return r->handle;
}

/// What a load does: pin, verify (reads a disk-only snapshot back), read.
expected<std::vector<std::byte>, store_error> load(snapshot_store& store, snapshot_handle h) {
  if (auto p = store.pin(h); !p)
    return unexpected(p.error());
  auto v = store.verify(h);
  std::vector<std::byte> out;
  if (v) {
    auto bytes = store.read(h);
    REQUIRE(bytes);
    out.assign(bytes->begin(), bytes->end());
  }
  (void)store.unpin(h);
  if (!v)
    return unexpected(v.error());
  return out;
}

std::size_t kv_files(const std::string& dir) {
  std::size_t n = 0;
  for (const auto& f : fs::directory_iterator(dir))
    n += f.path().extension() == ".kv";
  return n;
}

/// The tier of `h`, "stale" when the store no longer knows it.
std::string_view tier_of(const snapshot_store& store, snapshot_handle h) {
  const auto t = store.tier(h);
  return t ? to_string(*t) : std::string_view("stale");
}

std::uint64_t discarded(const snapshot_store& store, discard_reason r) {
  return store.stats().discarded[static_cast<std::size_t>(r)];
}

/// Flips one byte of the KV (not the header) of the only file whose bytes are `fill`.
void damage_file_of(const std::string& dir, unsigned char fill) {
  for (const auto& f : fs::directory_iterator(dir)) {
    if (f.path().extension() != ".kv")
      continue;
    std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(-1, std::ios::end);
    const char last = static_cast<char>(io.get());
    if (static_cast<unsigned char>(last) != fill)
      continue;
    io.seekp(-100, std::ios::end);
    io.put(static_cast<char>(fill ^ 0xff));
    return;
  }
  FAIL("no file of fill ", int(fill));
}

} // namespace

TEST_CASE("disk_lane: a sealed retained snapshot is written back; evicted from memory it stays "
          "usable from disk and is read back intact") {
  kvlane::test::temp_dir dir;
  auto store = make_store(2);
  auto lane = lane_on(*store, disk_in(dir.path()));
  const auto a = put_retained(*store, 1);
  REQUIRE(lane->wait_idle(10s));
  CHECK(tier_of(*store, a) == "both");
  CHECK(kv_files(dir.path()) == 1);

  // Two more fill the 2-snapshot store: `a` leaves memory but not the disk,
  // so its owner is not told it was evicted.
  put_retained(*store, 2);
  std::vector<evicted_snapshot> evicted;
  put_retained(*store, 3, &evicted);
  CHECK(evicted.empty());
  CHECK(tier_of(*store, a) == "disk");
  CHECK(store->stats().disk_demotions == 1);

  // Reading it back evicts the coldest one in memory (also on disk by now).
  REQUIRE(lane->wait_idle(10s));
  auto bytes = load(*store, a);
  REQUIRE(bytes);
  CHECK(*bytes == std::vector<std::byte>(snapshot_bytes, std::byte{1}));
  CHECK(tier_of(*store, a) == "both");
  CHECK(store->stats().disk_fetches == 1);
  lane->stop(10s);
}

TEST_CASE("disk_lane: a damaged or truncated file never loads: it is dropped, deleted and "
          "counted") {
  kvlane::test::temp_dir dir;
  auto store = make_store(1);
  auto lane = lane_on(*store, disk_in(dir.path()));
  const auto a = put_retained(*store, 1);
  REQUIRE(lane->wait_idle(10s));
  put_retained(*store, 2); // `a` is on disk only now
  REQUIRE(lane->wait_idle(10s));
  REQUIRE(tier_of(*store, a) == "disk");
  SUBCASE("a flipped byte of KV") { damage_file_of(dir.path(), 1); }
  SUBCASE("a truncated file") {
    for (const auto& f : fs::directory_iterator(dir.path()))
      if (f.path().extension() == ".kv" && fs::file_size(f.path()) > 0) {
        std::ifstream in(f.path(), std::ios::binary);
        in.seekg(-1, std::ios::end);
        if (in.get() == 1)
          fs::resize_file(f.path(), fs::file_size(f.path()) - 4096);
      }
  }
  auto r = load(*store, a);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == store_errc::corrupt);
  CHECK(discarded(*store, discard_reason::disk_corrupt) == 1);
  CHECK(tier_of(*store, a) == "stale");
  REQUIRE(lane->wait_idle(10s));
  CHECK(kv_files(dir.path()) == 1); // only the other snapshot's
  lane->stop(10s);
}

TEST_CASE("disk_lane: no room to read a snapshot back is not damage: it stays on disk for later") {
  kvlane::test::temp_dir dir;
  auto store = make_store(1);
  auto lane = lane_on(*store, disk_in(dir.path()));
  const auto a = put_retained(*store, 1);
  REQUIRE(lane->wait_idle(10s));
  const auto b = put_retained(*store, 2); // `a` goes to disk only
  REQUIRE(tier_of(*store, a) == "disk");
  REQUIRE(store->pin(b)); // the only room is held by a load of `b`
  auto r = load(*store, a);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == store_errc::full);
  CHECK(tier_of(*store, a) == "disk");
  CHECK(discarded(*store, discard_reason::disk_corrupt) == 0);
  REQUIRE(store->unpin(b));
  REQUIRE(lane->wait_idle(10s));
  CHECK(kv_files(dir.path()) == 2);
  auto again = load(*store, a);
  REQUIRE(again);
  CHECK(*again == std::vector<std::byte>(snapshot_bytes, std::byte{1}));
  lane->stop(10s);
}

TEST_CASE("disk_lane: after a restart without the arena, the disk's entries are claimed under an "
          "equal fingerprint and load lazily") {
  kvlane::test::temp_dir dir;
  {
    auto store = make_store(4);
    auto lane = lane_on(*store, disk_in(dir.path()));
    for (unsigned char f = 1; f <= 3; ++f)
      put_retained(*store, f);
    lane->stop(10s);
  }
  auto store = make_store(4);
  auto lane = lane_on(*store, disk_in(dir.path()));
  CHECK(store->stats().snapshots == 0); // nothing is read at start
  CHECK(store->claim(0, "m") == 3);
  auto restored = store->take_restored(0);
  REQUIRE(restored.size() == 3);
  CHECK(store->stats().used_bytes == 0);
  for (const auto& r : restored) {
    CHECK(tier_of(*store, r.handle) == "disk");
    const auto fill = static_cast<unsigned char>(r.label->tokens[0] / 100);
    auto bytes = load(*store, r.handle);
    REQUIRE(bytes);
    CHECK(*bytes == std::vector<std::byte>(snapshot_bytes, std::byte{fill}));
    CHECK(tier_of(*store, r.handle) == "both");
  }
  CHECK(store->stats().disk_fetches == 3);
  lane->stop(10s);
}

TEST_CASE("disk_lane: entries of another fingerprint are never claimed; they are deleted and "
          "counted") {
  kvlane::test::temp_dir dir;
  {
    auto store = make_store(4);
    auto lane = lane_on(*store, disk_in(dir.path()));
    put_retained(*store, 1);
    put_retained(*store, 2);
    lane->stop(10s);
  }
  auto changed = loaded;
  changed.tokenizer = 77;
  auto store = make_store(4, changed);
  auto lane = lane_on(*store, disk_in(dir.path()));
  CHECK(store->claim(0, "m") == 0);
  CHECK(store->take_restored(0).empty());
  CHECK(discarded(*store, discard_reason::tokenizer_changed) == 2);
  REQUIRE(lane->wait_idle(10s));
  CHECK(kv_files(dir.path()) == 0);
  lane->stop(10s);
}

TEST_CASE("disk_lane: entries of a model no longer configured are deleted at start") {
  kvlane::test::temp_dir dir;
  {
    auto store = make_store(4);
    auto lane = lane_on(*store, disk_in(dir.path()));
    put_retained(*store, 1);
    lane->stop(10s);
  }
  auto store = make_store(4);
  auto lane = actors::disk_lane::start(disk_in(dir.path()), *store, {"other"});
  REQUIRE(lane);
  CHECK(discarded(*store, discard_reason::unknown_model) == 1);
  CHECK(kv_files(dir.path()) == 0);
  (*lane)->stop(10s);
}

TEST_CASE("disk_lane: freeing a snapshot deletes its disk copy (both tiers)") {
  kvlane::test::temp_dir dir;
  auto store = make_store(2);
  auto lane = lane_on(*store, disk_in(dir.path()));
  const auto a = put_retained(*store, 1);
  const auto b = put_retained(*store, 2);
  REQUIRE(lane->wait_idle(10s));
  CHECK(kv_files(dir.path()) == 2);
  put_retained(*store, 3); // `a` goes to disk only
  REQUIRE(tier_of(*store, a) == "disk");
  REQUIRE(store->free(a));
  REQUIRE(store->free(b));
  REQUIRE(lane->wait_idle(10s));
  CHECK(kv_files(dir.path()) == 1);
  CHECK(lane->figures().deleted == 2);
  lane->stop(10s);
}

TEST_CASE("disk_lane: max_bytes bounds the files; the least recently used go first, and a "
          "snapshot on disk only goes with its file") {
  kvlane::test::temp_dir dir;
  auto store = make_store(1);
  disk_entry probe;
  probe.length = snapshot_bytes;
  probe.cache_len = 32;
  probe.label.fingerprint = loaded;
  probe.label.model.assign(1, 'm'); // not = "m": GCC 12 -Wrestrict false positive
  probe.label.user = 1000;
  probe.label.tokens.resize(32);
  const auto file = disk_tier::file_bytes(probe);
  auto lane = lane_on(*store, disk_in(dir.path(), 2 * file));
  std::vector<snapshot_handle> h;
  for (unsigned char f = 1; f <= 3; ++f) {
    h.push_back(put_retained(*store, f));
    REQUIRE(lane->wait_idle(10s));
  }
  // Two files fit: the first snapshot's was dropped for the third, and as it
  // was on disk only (the 1-snapshot store holds the newest), it is gone.
  CHECK(kv_files(dir.path()) == 2);
  CHECK(lane->tier().used_bytes() <= 2 * file);
  CHECK(lane->figures().evicted == 1);
  CHECK(tier_of(*store, h[0]) == "stale");
  CHECK(tier_of(*store, h[1]) == "disk");
  CHECK(tier_of(*store, h[2]) == "both");
  lane->stop(10s);
}

TEST_CASE("disk_lane: a snapshot that comes back through the fd store and from disk is one "
          "entry, in both tiers; one the disk did not have yet is written back") {
  kvlane::test::temp_dir dir;
  int arena_fd = -1;
  int index_fd = -1;
  {
    auto store = make_store(4);
    auto lane = lane_on(*store, disk_in(dir.path()));
    put_retained(*store, 1);
    put_retained(*store, 2);
    lane->stop(10s);         // both written; the lane is detached from the store
    put_retained(*store, 3); // sealed with no disk tier attached: memory only
    auto index = index_file::create();
    REQUIRE(index);
    store->attach_index(std::move(*index));
    REQUIRE(store->persist());
    arena_fd = ::dup(store->fd());
    index_fd = ::dup(store->index_fd());
  }
  auto arena = memfd_arena::adopt(arena_fd);
  REQUIRE(arena);
  auto index = index_file::adopt(index_fd);
  REQUIRE(index);
  auto bytes = index->read();
  REQUIRE(bytes);
  auto contents = decode_index(*bytes);
  REQUIRE(contents);
  store_options o;
  o.granularity = 64 * kib;
  auto created = snapshot_store::create(std::move(*arena), o);
  REQUIRE(created);
  std::shared_ptr<snapshot_store> store(std::move(*created));
  REQUIRE(store->register_model(0, 0, 0));
  REQUIRE(store->set_fingerprint(0, "m", loaded));
  REQUIRE(store->recover(*contents));
  auto lane = lane_on(*store, disk_in(dir.path()));
  CHECK(store->claim(0, "m") == 3);
  const auto restored = store->take_restored(0);
  REQUIRE(restored.size() == 3);
  REQUIRE(lane->wait_idle(10s));
  for (const auto& r : restored)
    CHECK(tier_of(*store, r.handle) == "both"); // 1 and 2 linked, 3 written back now
  CHECK(kv_files(dir.path()) == 3);
  CHECK(store->stats().disk_fetches == 0); // nothing read: the arena had the bytes
  lane->stop(10s);
}
