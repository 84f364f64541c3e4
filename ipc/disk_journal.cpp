#include "ipc/disk_journal.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kvlane::ipc {

namespace {

std::string errno_text(std::string_view what, const std::filesystem::path& path, int err) {
  return fmt::format("{} {}: {}", what, path.string(), std::strerror(err));
}

expected<std::vector<std::byte>, std::string> read_all(int fd, const std::filesystem::path& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return unexpected(errno_text("fstat of", path, errno));
  std::vector<std::byte> out(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return unexpected(errno_text("reading", path, errno));
    if (n == 0)
      break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

} // namespace

expected<void, std::string> write_fully(int fd, std::span<const std::byte> bytes,
                                        std::uint64_t offset, std::string_view what) {
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return unexpected(fmt::format("writing {}: {}", what, std::strerror(errno)));
    bytes = bytes.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return {};
}

expected<void, std::string> sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return unexpected(errno_text("opening directory", dir, errno));
  const int r = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (r != 0)
    return unexpected(errno_text("fsync of directory", dir, err));
  return {};
}

expected<disk_journal, std::string> disk_journal::open(const std::filesystem::path& path,
                                                       journal_replay& replay) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return unexpected(errno_text("opening the journal", path, errno));
  disk_journal j(path, fd, 0);
  auto bytes = read_all(fd, path);
  if (!bytes)
    return unexpected(std::move(bytes).error());
  replay = replay_journal(*bytes);
  if (bytes->empty() || replay.header_bad) {
    // A fresh journal, or one nothing in can be trusted: start it over.
    const auto header = encode_journal_header();
    if (::ftruncate(fd, 0) != 0)
      return unexpected(errno_text("truncating the journal", path, errno));
    if (auto r = write_fully(fd, header, 0, "the journal header"); !r)
      return unexpected(std::move(r).error());
    if (::fdatasync(fd) != 0)
      return unexpected(errno_text("fdatasync of the journal", path, errno));
    j.bytes_ = header.size();
  } else {
    if (replay.torn_bytes > 0) {
      if (::ftruncate(fd, static_cast<off_t>(replay.valid_bytes)) != 0
          || ::fdatasync(fd) != 0)
        return unexpected(errno_text("truncating the journal's torn tail", path, errno));
    }
    j.bytes_ = replay.valid_bytes;
  }
  for (const auto& [id, e] : replay.entries) {
    const auto n = encode_journal_add(e).size();
    j.record_bytes_[id] = n;
    j.live_bytes_ += n;
  }
  return j;
}

disk_journal::disk_journal(disk_journal&& o) noexcept
  : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)), bytes_(o.bytes_),
    live_bytes_(o.live_bytes_), record_bytes_(std::move(o.record_bytes_)) {}

disk_journal& disk_journal::operator=(disk_journal&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0)
      ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    bytes_ = o.bytes_;
    live_bytes_ = o.live_bytes_;
    record_bytes_ = std::move(o.record_bytes_);
  }
  return *this;
}

disk_journal::~disk_journal() {
  if (fd_ >= 0)
    ::close(fd_);
}

expected<void, std::string> disk_journal::append(const std::vector<std::byte>& record) {
  if (auto r = write_fully(fd_, record, bytes_, "a journal record"); !r) {
    // A partial record is a torn tail: cut it so the next append follows the last good one.
    (void)::ftruncate(fd_, static_cast<off_t>(bytes_));
    return r;
  }
  if (::fdatasync(fd_) != 0) {
    const int err = errno;
    (void)::ftruncate(fd_, static_cast<off_t>(bytes_));
    return unexpected(errno_text("fdatasync of the journal", path_, err));
  }
  bytes_ += record.size();
  return {};
}

expected<void, std::string> disk_journal::add(const disk_entry& e) {
  const auto record = encode_journal_add(e);
  if (auto r = append(record); !r)
    return r;
  live_bytes_ += record.size();
  live_bytes_ -= std::exchange(record_bytes_[e.id], record.size());
  return {};
}

expected<void, std::string> disk_journal::remove(std::uint64_t id) {
  if (auto r = append(encode_journal_remove(id)); !r)
    return r;
  if (const auto it = record_bytes_.find(id); it != record_bytes_.end()) {
    live_bytes_ -= it->second;
    record_bytes_.erase(it);
  }
  return {};
}

bool disk_journal::compaction_due() const noexcept {
  constexpr std::uint64_t min_bytes = 64 * 1024;
  return bytes_ >= min_bytes && bytes_ > 2 * (live_bytes_ + journal_header_bytes);
}

expected<bool, std::string>
disk_journal::compact_if_due(const std::map<std::uint64_t, disk_entry>& live) {
  if (!compaction_due())
    return false;
  if (auto r = compact(live); !r)
    return unexpected(std::move(r).error());
  return true;
}

expected<void, std::string>
disk_journal::compact(const std::map<std::uint64_t, disk_entry>& live) {
  auto next = encode_journal_header();
  std::map<std::uint64_t, std::uint64_t> sizes;
  std::uint64_t live_bytes = 0;
  for (const auto& [id, e] : live) {
    const auto record = encode_journal_add(e);
    sizes[id] = record.size();
    live_bytes += record.size();
    next.insert(next.end(), record.begin(), record.end());
  }
  auto tmp = path_;
  tmp += ".tmp";
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return unexpected(errno_text("creating", tmp, errno));
  auto fail = [&](std::string why) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return unexpected(std::move(why));
  };
  if (auto r = write_fully(fd, next, 0, "the compacted journal"); !r)
    return fail(std::move(r).error());
  if (::fsync(fd) != 0)
    return fail(errno_text("fsync of", tmp, errno));
  if (::rename(tmp.c_str(), path_.c_str()) != 0)
    return fail(errno_text("renaming the compacted journal to", path_, errno));
  if (auto r = sync_directory(path_.parent_path()); !r) {
    ::close(fd);
    return unexpected(std::move(r).error());
  }
  ::close(fd_);
  fd_ = fd;
  bytes_ = next.size();
  live_bytes_ = live_bytes;
  record_bytes_ = std::move(sizes);
  return {};
}

} // namespace kvlane::ipc
