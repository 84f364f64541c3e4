#include "ipc/memfd_arena.hpp"

#include "common/align.hpp"

#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kvlane::ipc {

std::string_view to_string(store_errc code) noexcept {
  switch (code) {
    case store_errc::full: return "full";
    case store_errc::too_large: return "too_large";
    case store_errc::stale: return "stale";
    case store_errc::corrupt: return "corrupt";
    case store_errc::invalid_argument: return "invalid_argument";
    case store_errc::system: return "system";
  }
  return "unknown";
}

namespace {

unexpected<store_error> system_error(std::string_view what, int err) {
  std::string msg(what);
  msg += ": ";
  msg += std::strerror(err);
  return unexpected(store_error{store_errc::system, std::move(msg)});
}

} // namespace

memfd_arena::owned_fd::owned_fd(owned_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

memfd_arena::owned_fd& memfd_arena::owned_fd::operator=(owned_fd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

memfd_arena::owned_fd::~owned_fd() {
  if (fd_ >= 0)
    ::close(fd_);
}

memfd_arena::mapping::mapping(mapping&& other) noexcept
  : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

memfd_arena::mapping& memfd_arena::mapping::operator=(mapping&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr)
      ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

memfd_arena::mapping::~mapping() {
  if (data_ != nullptr)
    ::munmap(data_, size_);
}

expected<memfd_arena, store_error> memfd_arena::create(std::string_view name,
                                                        std::uint64_t max_bytes) {
  if (max_bytes == 0)
    return unexpected(store_error{store_errc::invalid_argument, "arena size must be > 0"});
  const std::uint64_t page = page_size();
  if (max_bytes > UINT64_MAX - page)
    return unexpected(store_error{store_errc::too_large, "arena size overflows"});
  const std::uint64_t size = (max_bytes + page - 1) / page * page;

  const std::string cname(name);
  owned_fd fd(::memfd_create(cname.c_str(), MFD_CLOEXEC));
  if (fd.get() < 0)
    return system_error("memfd_create", errno);
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0)
    return system_error("ftruncate", errno);
  // MAP_NORESERVE: the range is address space only; RAM is committed per page
  // on first write, so a huge arena costs nothing until used.
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd.get(), 0);
  if (base == MAP_FAILED)
    return system_error("mmap", errno);
  return memfd_arena(std::move(fd), mapping(static_cast<std::byte*>(base), size));
}

expected<memfd_arena, store_error> memfd_arena::adopt(int raw_fd) {
  owned_fd fd(raw_fd);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return system_error("fstat of the inherited arena", errno);
  if (!S_ISREG(st.st_mode))
    return unexpected(store_error{store_errc::invalid_argument,
                                  "the inherited arena is not a memfd or regular file"});
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size == 0 || size % page_size() != 0)
    return unexpected(store_error{store_errc::invalid_argument,
                                  "the inherited arena's size " + std::to_string(size)
                                    + " is not a positive multiple of the page size"});
  // The fd may have come in without FD_CLOEXEC; no child of the daemon may hold the arena.
  (void)::fcntl(fd.get(), F_SETFD, FD_CLOEXEC);
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd.get(), 0);
  if (base == MAP_FAILED)
    return system_error("mmap of the inherited arena", errno);
  return memfd_arena(std::move(fd), mapping(static_cast<std::byte*>(base), size));
}

std::span<std::byte> memfd_arena::bytes(std::uint64_t offset, std::uint64_t length) const noexcept {
  assert(offset <= size() && length <= size() - offset);
  return {data() + offset, static_cast<std::size_t>(length)};
}

expected<void, store_error> memfd_arena::release(std::uint64_t offset, std::uint64_t length) const {
  const std::uint64_t page = page_size();
  if (offset % page != 0 || length % page != 0)
    return unexpected(store_error{store_errc::invalid_argument,
                                  "release range must be page-aligned"});
  if (offset > size() || length > size() - offset)
    return unexpected(store_error{store_errc::invalid_argument, "release range outside the arena"});
  if (length == 0)
    return {};
  if (::fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(length))
      != 0)
    return system_error("fallocate(PUNCH_HOLE)", errno);
  return {};
}

expected<void, store_error> memfd_arena::commit(std::uint64_t offset, std::uint64_t length) const {
  const std::uint64_t page = page_size();
  if (offset % page != 0 || length % page != 0)
    return unexpected(store_error{store_errc::invalid_argument, "commit range must be page-aligned"});
  if (offset > size() || length > size() - offset)
    return unexpected(store_error{store_errc::invalid_argument, "commit range outside the arena"});
  if (length == 0)
    return {};
  if (::madvise(data() + offset, length, MADV_POPULATE_WRITE) == 0)
    return {};
  if (errno != EINVAL)
    return system_error("madvise(MADV_POPULATE_WRITE)", errno);
  // Kernels before 5.14 lack MADV_POPULATE_WRITE: fault each page in by hand.
  // fetch_add(0) writes without changing the contents, even if another
  // mapping reads them meanwhile.
  for (std::uint64_t at = offset; at < offset + length; at += page)
    std::atomic_ref<unsigned char>(*reinterpret_cast<unsigned char*>(data() + at))
      .fetch_add(0, std::memory_order_relaxed);
  return {};
}

expected<std::uint64_t, store_error> memfd_arena::committed_bytes() const {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0)
    return system_error("fstat", errno);
  // st_blocks counts 512-byte units whatever the file system's block size.
  return static_cast<std::uint64_t>(st.st_blocks) * 512u;
}

expected<std::uint64_t, store_error> memfd_arena::inode() const {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0)
    return system_error("fstat", errno);
  return static_cast<std::uint64_t>(st.st_ino);
}

} // namespace kvlane::ipc
