#include "ipc/disk_tier.hpp"

#include "common/logging.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kvlane::ipc {

namespace {

constexpr std::size_t chunk_bytes = 1 << 20;
constexpr std::string_view journal_name = "journal";

std::string errno_text(std::string_view what, const std::filesystem::path& path, int err) {
  return fmt::format("{} {}: {}", what, path.string(), std::strerror(err));
}

expected<void, std::string> read_fully(int fd, std::span<std::byte> into, std::uint64_t offset,
                                       const std::filesystem::path& path) {
  while (!into.empty()) {
    const ssize_t n = ::pread(fd, into.data(), into.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return unexpected(errno_text("reading", path, errno));
    if (n == 0)
      return unexpected(fmt::format("{} ends early", path.string()));
    into = into.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return {};
}

/// Owns an fd for the length of a scope.
struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

} // namespace

std::uint64_t disk_tier::file_bytes(const disk_entry& e) {
  return encode_disk_header(e).size() + e.length;
}

disk_tier::disk_tier(disk_tier_options options, int lock_fd, disk_journal journal)
  : options_(std::move(options)), lock_fd_(lock_fd), journal_(std::move(journal)) {}

disk_tier::~disk_tier() {
  if (lock_fd_ >= 0)
    ::close(lock_fd_); // drops the flock
}

expected<std::unique_ptr<disk_tier>, std::string> disk_tier::open(disk_tier_options options,
                                                                  disk_open_report& report) {
  const std::filesystem::path dir = options.dir; // options moves into the tier below
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return unexpected(fmt::format("creating {}: {}", dir.string(), ec.message()));
  ::chmod(dir.c_str(), 0700);
  const auto lock_path = dir / "lock";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0)
    return unexpected(errno_text("opening", lock_path, errno));
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd);
    return unexpected(err == EWOULDBLOCK
                        ? fmt::format("{} is in use by another daemon", dir.string())
                        : errno_text("locking", lock_path, err));
  }
  journal_replay replay;
  auto journal = disk_journal::open(dir / journal_name, replay);
  if (!journal) {
    ::close(lock_fd);
    return unexpected(std::move(journal).error());
  }
  report.torn_bytes = replay.torn_bytes;
  report.note = replay.note;
  std::unique_ptr<disk_tier> tier(new disk_tier(std::move(options), lock_fd, std::move(*journal)));

  // Every file must be listed and whole; what is not goes now.
  std::vector<std::uint64_t> dropped;
  for (auto& [id, e] : replay.entries) {
    const auto path = dir / disk_file_name(id);
    const auto bytes = file_bytes(e);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || static_cast<std::uint64_t>(st.st_size) != bytes) {
      ++report.corrupt;
      dropped.push_back(id);
      continue;
    }
    tier->listed_.emplace(id, listed{std::move(e), bytes, ++tier->tick_});
    tier->used_ += bytes;
    tier->next_id_ = std::max(tier->next_id_, id + 1);
  }
  for (const auto id : dropped) {
    tier->next_id_ = std::max(tier->next_id_, id + 1);
    if (auto r = tier->journal_.remove(id); !r)
      return unexpected(std::move(r).error());
    ::unlink((dir / disk_file_name(id)).c_str());
  }
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    const auto name = f.path().filename().string();
    if (name == "lock" || name == journal_name)
      continue;
    std::uint64_t id = 0;
    const bool ours = name.size() == 19 && name.ends_with(".kv")
                      && std::sscanf(name.c_str(), "%16lx", &id) == 1;
    if (ours && tier->listed_.contains(id))
      continue;
    if (ours || name.ends_with(".tmp")) {
      if (ours)
        tier->next_id_ = std::max(tier->next_id_, id + 1);
      ::unlink(f.path().c_str());
      ++report.orphans;
    }
  }
  if (ec)
    return unexpected(fmt::format("listing {}: {}", dir.string(), ec.message()));
  if (!dropped.empty() || report.orphans > 0)
    (void)sync_directory(dir);
  report.entries = tier->listed_.size();
  report.bytes = tier->used_;
  {
    std::lock_guard lock(tier->mutex_);
    tier->compact_locked();
  }
  return tier;
}

std::vector<disk_entry> disk_tier::entries() const {
  std::lock_guard lock(mutex_);
  std::vector<const listed*> order;
  for (const auto& [id, l] : listed_)
    order.push_back(&l);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->last_use < b->last_use; });
  std::vector<disk_entry> out;
  for (const auto* l : order)
    out.push_back(l->entry);
  return out;
}

std::optional<std::vector<std::uint64_t>> disk_tier::victims_for(std::uint64_t incoming) const {
  std::lock_guard lock(mutex_);
  if (incoming > options_.max_bytes)
    return std::nullopt;
  std::vector<std::uint64_t> out;
  if (used_ + incoming <= options_.max_bytes)
    return out;
  std::vector<const listed*> order;
  for (const auto& [id, l] : listed_)
    order.push_back(&l);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->last_use < b->last_use; });
  std::uint64_t used = used_;
  for (const auto* l : order) {
    if (used + incoming <= options_.max_bytes)
      break;
    out.push_back(l->entry.id);
    used -= l->bytes;
  }
  return out;
}

std::uint64_t disk_tier::next_id() {
  std::lock_guard lock(mutex_);
  return next_id_++;
}

expected<void, std::string> disk_tier::write(const disk_entry& e, std::span<const std::byte> bytes,
                                             const std::function<bool(std::size_t)>& pace) {
  if (bytes.size() != e.length)
    return unexpected(
      fmt::format("entry {} says {} bytes, {} given", e.id, e.length, bytes.size()));
  const auto path = options_.dir / disk_file_name(e.id);
  auto tmp = path;
  tmp += ".tmp";
  const auto header = encode_disk_header(e);
  fd_guard fd{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)};
  if (fd.fd < 0)
    return unexpected(errno_text("creating", tmp, errno));
  const auto fail = [&](std::string why) {
    ::unlink(tmp.c_str());
    return unexpected(std::move(why));
  };
  if (auto r = write_fully(fd.fd, header, 0, tmp.string()); !r)
    return fail(std::move(r).error());
  for (std::size_t at = 0; at < bytes.size(); at += chunk_bytes) {
    const auto chunk = bytes.subspan(at, std::min(chunk_bytes, bytes.size() - at));
    if (!pace(chunk.size()))
      return fail("the write was cut short (stopping)");
    if (auto r = write_fully(fd.fd, chunk, header.size() + at, tmp.string()); !r)
      return fail(std::move(r).error());
  }
  if (::fsync(fd.fd) != 0)
    return fail(errno_text("fsync of", tmp, errno));
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return fail(errno_text("renaming to", path, errno));
  if (auto r = sync_directory(options_.dir); !r) {
    ::unlink(path.c_str());
    return unexpected(std::move(r).error());
  }
  std::lock_guard lock(mutex_);
  if (auto r = journal_.add(e); !r) {
    ::unlink(path.c_str());
    return r;
  }
  const auto size = header.size() + e.length;
  listed_.insert_or_assign(e.id, listed{e, size, ++tick_});
  used_ += size;
  compact_locked();
  return {};
}

expected<void, std::string> disk_tier::read(const disk_entry& expect, std::span<std::byte> into) {
  if (into.size() != expect.length)
    return unexpected(fmt::format("entry {} holds {} bytes, {} asked for", expect.id,
                                  expect.length, into.size()));
  const auto path = options_.dir / disk_file_name(expect.id);
  fd_guard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0)
    return unexpected(errno_text("opening", path, errno));
  std::vector<std::byte> header(disk_header_prefix_bytes);
  if (auto r = read_fully(fd.fd, header, 0, path); !r)
    return r;
  auto size = disk_header_size(header);
  if (!size)
    return unexpected(fmt::format("{}: {}", path.string(), size.error()));
  header.resize(*size);
  if (auto r = read_fully(fd.fd, std::span(header).subspan(disk_header_prefix_bytes),
                          disk_header_prefix_bytes, path);
      !r)
    return r;
  auto entry = decode_disk_header(header);
  if (!entry)
    return unexpected(fmt::format("{}: {}", path.string(), entry.error()));
  if (auto why = disk_entry_mismatch(*entry, expect))
    return unexpected(fmt::format("{}: {}", path.string(), *why));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0)
    return unexpected(errno_text("fstat of", path, errno));
  if (static_cast<std::uint64_t>(st.st_size) != *size + expect.length)
    return unexpected(fmt::format("{} is {} bytes, its header says {}", path.string(), st.st_size,
                                  *size + expect.length));
  return read_fully(fd.fd, into, *size, path);
}

void disk_tier::remove(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  const auto it = listed_.find(id);
  if (it == listed_.end())
    return;
  if (auto r = journal_.remove(id); !r) {
    // The file stays listed: a later remove (or the next start) tries again.
    logging::get("store")->error("disk tier: unlisting entry {}: {}", id, r.error());
    return;
  }
  used_ -= it->second.bytes;
  listed_.erase(it);
  ::unlink((options_.dir / disk_file_name(id)).c_str());
  compact_locked();
}

void disk_tier::touch(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  if (const auto it = listed_.find(id); it != listed_.end())
    it->second.last_use = ++tick_;
}

std::uint64_t disk_tier::used_bytes() const {
  std::lock_guard lock(mutex_);
  return used_;
}

std::size_t disk_tier::count() const {
  std::lock_guard lock(mutex_);
  return listed_.size();
}

void disk_tier::compact_locked() {
  if (!journal_.compaction_due())
    return;
  std::map<std::uint64_t, disk_entry> live;
  for (const auto& [id, l] : listed_)
    live.emplace(id, l.entry);
  if (auto r = journal_.compact_if_due(live); !r)
    logging::get("store")->warn("disk tier: compacting the journal: {}", r.error());
}

} // namespace kvlane::ipc
