#include "ipc/disk_journal.hpp"
#include "ipc/disk_tier.hpp"

#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

using namespace kvlane::ipc;
namespace fs = std::filesystem;

namespace {

disk_entry entry_of(std::uint64_t id, std::uint64_t length, std::uint32_t tokens = 20) {
  disk_entry e;
  e.id = id;
  e.length = length;
  e.checksum = id * 31;
  e.seed = 5;
  e.cache_len = tokens;
  e.label.model = "tiny";
  e.label.fingerprint = kv_fingerprint{1, 2, 3, "sim", "chatml"};
  e.label.tokens.resize(tokens);
  std::iota(e.label.tokens.begin(), e.label.tokens.end(), static_cast<std::uint32_t>(id));
  return e;
}

std::vector<std::byte> bytes_of(std::size_t n, unsigned char fill) {
  return std::vector<std::byte>(n, std::byte{fill});
}

const auto unpaced = [](std::size_t) { return true; };

} // namespace

TEST_CASE("disk_journal: entries added and removed come back at the next open") {
  kvlane::test::temp_dir dir;
  const fs::path path = fs::path(dir.path()) / "journal";
  {
    journal_replay replay;
    auto sut = disk_journal::open(path, replay);
    REQUIRE(sut);
    CHECK(replay.entries.empty());
    REQUIRE(sut->add(entry_of(1, 100)));
    REQUIRE(sut->add(entry_of(2, 100)));
    REQUIRE(sut->remove(1));
  }
  journal_replay replay;
  auto sut = disk_journal::open(path, replay);
  REQUIRE(sut);
  REQUIRE(replay.entries.size() == 1);
  CHECK(replay.entries.at(2) == entry_of(2, 100));
}

TEST_CASE("disk_journal: a torn tail is cut at open, and the next record follows the last good "
          "one") {
  kvlane::test::temp_dir dir;
  const fs::path path = fs::path(dir.path()) / "journal";
  std::uint64_t good = 0;
  {
    journal_replay replay;
    auto sut = disk_journal::open(path, replay);
    REQUIRE(sut);
    REQUIRE(sut->add(entry_of(1, 100)));
    good = sut->bytes();
    REQUIRE(sut->add(entry_of(2, 100)));
  }
  fs::resize_file(path, fs::file_size(path) - 5); // the second record was torn by a crash
  {
    journal_replay replay;
    auto sut = disk_journal::open(path, replay);
    REQUIRE(sut);
    CHECK(replay.entries.size() == 1);
    CHECK(replay.torn_bytes > 0);
    CHECK(fs::file_size(path) == good);
    REQUIRE(sut->add(entry_of(3, 100)));
  }
  journal_replay replay;
  REQUIRE(disk_journal::open(path, replay));
  CHECK(replay.torn_bytes == 0);
  CHECK(replay.entries.size() == 2);
  CHECK(replay.entries.contains(1));
  CHECK(replay.entries.contains(3));
}

TEST_CASE("disk_journal: it is compacted once it holds more than twice its live entries") {
  kvlane::test::temp_dir dir;
  const fs::path path = fs::path(dir.path()) / "journal";
  journal_replay replay;
  auto sut = disk_journal::open(path, replay);
  REQUIRE(sut);
  std::map<std::uint64_t, disk_entry> live;
  bool compacted = false;
  for (std::uint64_t id = 1; id <= 400 && !compacted; ++id) {
    REQUIRE(sut->add(entry_of(id, 100, 200)));
    live.emplace(id, entry_of(id, 100, 200));
    if (id > 2) { // keep two live: every other add is dead weight
      REQUIRE(sut->remove(id - 2));
      live.erase(id - 2);
    }
    auto r = sut->compact_if_due(live);
    REQUIRE(r);
    compacted = *r;
  }
  REQUIRE(compacted);
  CHECK(sut->bytes() == fs::file_size(path));
  CHECK(sut->bytes() < 64 * 1024);
  journal_replay again;
  REQUIRE(disk_journal::open(path, again));
  CHECK(again.entries == live);
}

TEST_CASE("disk_tier: a written entry reads back, is listed at the next open, and goes with "
          "remove") {
  kvlane::test::temp_dir dir;
  const auto bytes = bytes_of(3 << 20 | 5, 0x5a);
  const auto e = entry_of(0, bytes.size());
  disk_entry written;
  {
    disk_open_report report;
    auto sut = disk_tier::open({dir.path(), 64 << 20}, report);
    REQUIRE(sut);
    written = e;
    written.id = (*sut)->next_id();
    REQUIRE((*sut)->write(written, bytes, unpaced));
    CHECK((*sut)->used_bytes() == disk_tier::file_bytes(written));
    std::vector<std::byte> back(bytes.size());
    REQUIRE((*sut)->read(written, back));
    CHECK(back == bytes);
  }
  disk_open_report report;
  auto sut = disk_tier::open({dir.path(), 64 << 20}, report);
  REQUIRE(sut);
  CHECK(report.entries == 1);
  REQUIRE((*sut)->entries().size() == 1);
  CHECK((*sut)->entries()[0] == written);
  CHECK((*sut)->next_id() > written.id);
  (*sut)->remove(written.id);
  CHECK_FALSE(fs::exists(fs::path(dir.path()) / disk_file_name(written.id)));
  CHECK((*sut)->count() == 0);
}

TEST_CASE("disk_tier: a second daemon cannot open a directory in use") {
  kvlane::test::temp_dir dir;
  disk_open_report report;
  auto first = disk_tier::open({dir.path(), 1 << 20}, report);
  REQUIRE(first);
  auto second = disk_tier::open({dir.path(), 1 << 20}, report);
  REQUIRE_FALSE(second);
  CHECK(second.error().find("in use") != std::string::npos);
}

TEST_CASE("disk_tier: at open, a listed file that is missing or truncated is dropped and counted, "
          "an unlisted one (a write a crash cut short) is deleted") {
  kvlane::test::temp_dir dir;
  const fs::path root = dir.path();
  std::vector<disk_entry> written;
  {
    disk_open_report report;
    auto sut = disk_tier::open({root, 64 << 20}, report);
    REQUIRE(sut);
    for (int i = 0; i < 4; ++i) {
      auto e = entry_of((*sut)->next_id(), 1 << 20);
      REQUIRE((*sut)->write(e, bytes_of(1 << 20, static_cast<unsigned char>(i)), unpaced));
      written.push_back(e);
    }
  }
  fs::remove(root / disk_file_name(written[0].id));
  fs::resize_file(root / disk_file_name(written[1].id), (1 << 20) - 1);
  std::ofstream(root / disk_file_name(99)) << "half a file";
  std::ofstream(root / (disk_file_name(100) + ".tmp")) << "a write under way";
  disk_open_report report;
  auto sut = disk_tier::open({root, 64 << 20}, report);
  REQUIRE(sut);
  CHECK(report.entries == 2);
  CHECK(report.corrupt == 2);
  CHECK(report.orphans == 2);
  CHECK_FALSE(fs::exists(root / disk_file_name(written[1].id)));
  CHECK_FALSE(fs::exists(root / disk_file_name(99)));
  CHECK_FALSE(fs::exists(root / (disk_file_name(100) + ".tmp")));
  CHECK((*sut)->next_id() > 99); // past every id seen on disk
  std::vector<std::byte> back(1 << 20);
  REQUIRE((*sut)->read(written[2], back));
  CHECK(back == bytes_of(1 << 20, 2));
}

TEST_CASE("disk_tier: a read refuses a file whose header or size is not what the journal says") {
  kvlane::test::temp_dir dir;
  const fs::path root = dir.path();
  disk_open_report report;
  auto sut = disk_tier::open({root, 64 << 20}, report);
  REQUIRE(sut);
  auto e = entry_of((*sut)->next_id(), 1 << 20);
  REQUIRE((*sut)->write(e, bytes_of(1 << 20, 7), unpaced));
  std::vector<std::byte> back(1 << 20);
  SUBCASE("another fingerprint expected") {
    auto want = e;
    want.label.fingerprint.model_file = 99;
    CHECK_FALSE((*sut)->read(want, back));
  }
  SUBCASE("a flipped header byte") {
    std::fstream f(root / disk_file_name(e.id), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
    f.close();
    CHECK_FALSE((*sut)->read(e, back));
  }
  SUBCASE("a truncated file") {
    fs::resize_file(root / disk_file_name(e.id), disk_tier::file_bytes(e) - 1);
    CHECK_FALSE((*sut)->read(e, back));
  }
  SUBCASE("a file with bytes appended") {
    std::ofstream(root / disk_file_name(e.id), std::ios::app) << "x";
    CHECK_FALSE((*sut)->read(e, back));
  }
}

TEST_CASE("disk_tier: victims for max_bytes are the least recently used entries") {
  kvlane::test::temp_dir dir;
  disk_open_report report;
  const auto one = disk_tier::file_bytes(entry_of(1, 1 << 20));
  auto sut = disk_tier::open({dir.path(), 3 * one}, report);
  REQUIRE(sut);
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    auto e = entry_of((*sut)->next_id(), 1 << 20);
    REQUIRE((*sut)->write(e, bytes_of(1 << 20, 1), unpaced));
    ids.push_back(e.id);
  }
  auto v = (*sut)->victims_for(one);
  REQUIRE(v);
  CHECK(*v == std::vector<std::uint64_t>{ids[0]});
  (*sut)->touch(ids[0]); // read back: now the most recent
  v = (*sut)->victims_for(2 * one);
  REQUIRE(v);
  CHECK(*v == std::vector<std::uint64_t>{ids[1], ids[2]});
  CHECK_FALSE((*sut)->victims_for(4 * one));
}

TEST_CASE("disk_tier: a write that is stopped midway leaves nothing listed and no file") {
  kvlane::test::temp_dir dir;
  disk_open_report report;
  auto sut = disk_tier::open({dir.path(), 64 << 20}, report);
  REQUIRE(sut);
  auto e = entry_of((*sut)->next_id(), 4 << 20);
  int chunks = 0;
  auto r = (*sut)->write(e, bytes_of(4 << 20, 3), [&](std::size_t) { return ++chunks < 3; });
  CHECK_FALSE(r);
  CHECK((*sut)->count() == 0);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& f : fs::directory_iterator(dir.path()))
    ++files;
  CHECK(files == 2); // lock and journal
}
