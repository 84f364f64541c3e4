#include "ipc/store_index.hpp"

#include "ipc/checksum.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kvlane::ipc {

namespace {

constexpr char magic[8] = {'K', 'V', 'L', 'S', 'T', 'I', 'D', 'X'};
constexpr std::uint32_t state_open = 1;
constexpr std::uint32_t state_closed = 2;
constexpr std::size_t header_bytes = 72;
constexpr std::size_t state_at = 12;
constexpr std::size_t checked_header_bytes = 64; // the header checksum covers these, state zeroed
// A record's fixed part: 5 + 5 u64 and one u32.
constexpr std::size_t record_fixed_bytes = 10 * 8 + 4;

struct header_fields {
  std::uint32_t version = 0;
  std::uint32_t state = 0;
  std::uint64_t arena_bytes = 0, arena_inode = 0, granularity = 0, records = 0, body_bytes = 0,
                body_checksum = 0, header_checksum = 0;
};

class writer {
public:
  void u32(std::uint32_t v) { raw(&v, sizeof v); }
  void u64(std::uint64_t v) { raw(&v, sizeof v); }
  void str(const std::string& s) {
    u32(static_cast<std::uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  }
  std::vector<std::byte> out;
};

class reader {
public:
  explicit reader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  bool u32(std::uint32_t& v) { return raw(&v, sizeof v); }
  bool u64(std::uint64_t& v) { return raw(&v, sizeof v); }
  bool str(std::string& s) {
    std::uint32_t n = 0;
    if (!u32(n) || n > left())
      return false;
    s.assign(reinterpret_cast<const char*>(bytes_.data() + at_), n);
    at_ += n;
    return true;
  }
  bool raw(void* p, std::size_t n) {
    if (n > left())
      return false;
    std::memcpy(p, bytes_.data() + at_, n);
    at_ += n;
    return true;
  }
  std::size_t left() const noexcept { return bytes_.size() - at_; }

private:
  std::span<const std::byte> bytes_;
  std::size_t at_ = 0;
};

std::uint64_t header_sum(std::span<const std::byte> header) {
  std::array<std::byte, checked_header_bytes> copy{};
  std::memcpy(copy.data(), header.data(), checked_header_bytes);
  std::memset(copy.data() + state_at, 0, sizeof(std::uint32_t));
  return checksum64(copy);
}

unexpected<index_error> corrupt(std::string message) {
  return unexpected(index_error{index_errc::corrupt, std::move(message)});
}

unexpected<store_error> system_error(std::string_view what, int err) {
  return unexpected(
    store_error{store_errc::system, std::string(what) + ": " + std::strerror(err)});
}

expected<void, store_error> write_all(int fd, std::span<const std::byte> bytes, off_t at) {
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), at);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return system_error("writing the store index", errno);
    }
    bytes = bytes.subspan(static_cast<std::size_t>(n));
    at += n;
  }
  return {};
}

} // namespace

std::vector<std::byte> encode_index(const index_contents& c) {
  writer body;
  for (const auto& r : c.records) {
    body.u64(r.offset);
    body.u64(r.length);
    body.u64(r.size);
    body.u64(r.checksum);
    body.u64(r.seed);
    body.u32(r.cache_len);
    body.u64(r.label.owner);
    body.u64(r.label.user);
    body.u64(r.label.fingerprint.model_file);
    body.u64(r.label.fingerprint.tokenizer);
    body.u64(r.label.fingerprint.kv_layout);
    body.str(r.label.model);
    body.str(r.label.fingerprint.backend);
    body.str(r.label.fingerprint.chat_format);
    body.str(r.label.session);
    body.u32(static_cast<std::uint32_t>(r.label.tokens.size()));
    body.raw(r.label.tokens.data(), r.label.tokens.size() * sizeof(std::uint32_t));
  }
  writer head;
  head.raw(magic, sizeof magic);
  head.u32(store_index_version);
  head.u32(state_closed);
  head.u64(c.arena_bytes);
  head.u64(c.arena_inode);
  head.u64(c.granularity);
  head.u64(c.records.size());
  head.u64(body.out.size());
  head.u64(checksum64(body.out));
  head.u64(header_sum(head.out));
  head.out.insert(head.out.end(), body.out.begin(), body.out.end());
  return std::move(head.out);
}

expected<index_contents, index_error> decode_index(std::span<const std::byte> bytes) {
  if (bytes.empty())
    return unexpected(index_error{index_errc::empty, "the index is empty"});
  if (bytes.size() < header_bytes)
    return corrupt("the index is " + std::to_string(bytes.size())
                   + " bytes, shorter than its header (" + std::to_string(header_bytes) + ")");
  if (std::memcmp(bytes.data(), magic, sizeof magic) != 0)
    return corrupt("the index has no KVLSTIDX magic");
  reader head(bytes.subspan(sizeof magic, header_bytes - sizeof magic));
  header_fields h;
  head.u32(h.version);
  head.u32(h.state);
  head.u64(h.arena_bytes);
  head.u64(h.arena_inode);
  head.u64(h.granularity);
  head.u64(h.records);
  head.u64(h.body_bytes);
  head.u64(h.body_checksum);
  head.u64(h.header_checksum);
  if (h.version != store_index_version)
    return corrupt("index version " + std::to_string(h.version) + ", this daemon reads version "
                   + std::to_string(store_index_version));
  if (h.state == state_open)
    return unexpected(index_error{index_errc::unclean,
                                  "the index is still open: the daemon that wrote it did not stop "
                                  "cleanly"});
  if (h.state != state_closed)
    return corrupt("the index has an unknown state " + std::to_string(h.state));
  if (header_sum(bytes) != h.header_checksum)
    return corrupt("the index header fails its checksum");
  const auto body = bytes.subspan(header_bytes);
  if (body.size() != h.body_bytes)
    return corrupt("the index body is " + std::to_string(body.size()) + " bytes, its header says "
                   + std::to_string(h.body_bytes));
  if (checksum64(body) != h.body_checksum)
    return corrupt("the index body fails its checksum");
  if (h.granularity == 0 || (h.granularity & (h.granularity - 1)) != 0
      || h.arena_bytes % h.granularity != 0)
    return corrupt("the index has a bad granularity " + std::to_string(h.granularity)
                   + " for an arena of " + std::to_string(h.arena_bytes) + " bytes");
  if (h.records > body.size() / record_fixed_bytes)
    return corrupt("the index claims " + std::to_string(h.records) + " records in "
                   + std::to_string(body.size()) + " bytes");

  index_contents out;
  out.arena_bytes = h.arena_bytes;
  out.arena_inode = h.arena_inode;
  out.granularity = h.granularity;
  out.records.reserve(h.records);
  reader in(body);
  for (std::uint64_t i = 0; i < h.records; ++i) {
    index_record r;
    auto& fp = r.label.fingerprint;
    std::uint32_t tokens = 0;
    const bool ok = in.u64(r.offset) && in.u64(r.length) && in.u64(r.size) && in.u64(r.checksum)
                    && in.u64(r.seed) && in.u32(r.cache_len) && in.u64(r.label.owner)
                    && in.u64(r.label.user) && in.u64(fp.model_file) && in.u64(fp.tokenizer)
                    && in.u64(fp.kv_layout) && in.str(r.label.model) && in.str(fp.backend)
                    && in.str(fp.chat_format) && in.str(r.label.session) && in.u32(tokens)
                    && tokens <= in.left() / sizeof(std::uint32_t);
    if (!ok)
      return corrupt("index record " + std::to_string(i) + " runs past the end of the index");
    r.label.tokens.resize(tokens);
    in.raw(r.label.tokens.data(), tokens * sizeof(std::uint32_t));
    const auto where = "index record " + std::to_string(i) + ": ";
    if (r.length == 0 || r.size % h.granularity != 0 || r.offset % h.granularity != 0
        || r.length > r.size || r.size - r.length >= h.granularity)
      return corrupt(where + "extent " + std::to_string(r.offset) + "+" + std::to_string(r.size)
                     + " (length " + std::to_string(r.length) + ") does not fit the granularity");
    if (r.offset > h.arena_bytes || r.size > h.arena_bytes - r.offset)
      return corrupt(where + "extent lies outside the arena");
    if (r.label.tokens.size() != r.cache_len)
      return corrupt(where + std::to_string(tokens) + " tokens for a KV of "
                     + std::to_string(r.cache_len) + " positions");
    out.records.push_back(std::move(r));
  }
  if (in.left() != 0)
    return corrupt("the index has " + std::to_string(in.left()) + " bytes after its records");
  std::vector<const index_record*> by_offset;
  for (const auto& r : out.records)
    by_offset.push_back(&r);
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->size > by_offset[i]->offset)
      return corrupt("index records overlap at arena offset "
                     + std::to_string(by_offset[i]->offset));
  return out;
}

expected<index_file, store_error> index_file::create() {
  const int fd = ::memfd_create("kvlane-store-index", MFD_CLOEXEC);
  if (fd < 0)
    return system_error("memfd_create", errno);
  return index_file(fd);
}

expected<index_file, store_error> index_file::adopt(int fd) {
  index_file f(fd); // owns it from here, whatever happens
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return system_error("fstat of the inherited store index", errno);
  if (!S_ISREG(st.st_mode))
    return unexpected(store_error{store_errc::invalid_argument,
                                  "the inherited store index is not a memfd or regular file"});
  return f;
}

index_file::index_file(index_file&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

index_file& index_file::operator=(index_file&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

index_file::~index_file() {
  if (fd_ >= 0)
    ::close(fd_);
}

expected<std::vector<std::byte>, store_error> index_file::read() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0)
    return system_error("fstat of the store index", errno);
  std::vector<std::byte> out(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::pread(fd_, out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return system_error("reading the store index", errno);
    }
    if (n == 0)
      break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

expected<void, store_error> index_file::mark_open() {
  struct stat st {};
  if (::fstat(fd_, &st) != 0)
    return system_error("fstat of the store index", errno);
  if (static_cast<std::uint64_t>(st.st_size) < header_bytes) {
    if (::ftruncate(fd_, 0) != 0)
      return system_error("truncating the store index", errno);
    return {};
  }
  const std::uint32_t open = state_open;
  return write_all(fd_, std::as_bytes(std::span(&open, 1)), state_at);
}

expected<void, store_error> index_file::write(const index_contents& contents) {
  auto bytes = encode_index(contents);
  std::uint32_t closed = 0;
  std::memcpy(&closed, bytes.data() + state_at, sizeof closed);
  const std::uint32_t open = state_open;
  std::memcpy(bytes.data() + state_at, &open, sizeof open);
  if (auto r = mark_open(); !r)
    return r;
  if (::ftruncate(fd_, static_cast<off_t>(bytes.size())) != 0)
    return system_error("sizing the store index", errno);
  if (auto r = write_all(fd_, bytes, 0); !r)
    return r;
  return write_all(fd_, std::as_bytes(std::span(&closed, 1)), state_at);
}

} // namespace kvlane::ipc
