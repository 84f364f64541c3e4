#include "ipc/disk_format.hpp"

#include "ipc/checksum.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace kvlane::ipc {

namespace {

constexpr char file_magic[8] = {'K', 'V', 'L', 'D', 'I', 'S', 'K', '1'};
constexpr char journal_magic[8] = {'K', 'V', 'L', 'J', 'R', 'N', 'L', '1'};
constexpr std::uint64_t max_header_bytes = 64ull << 20;
// An entry's fixed part: 4 u64, one u32, 5 u64, 4 string lengths, the token count.
constexpr std::size_t entry_fixed_bytes = 4 * 8 + 4 + 5 * 8 + 4 * 4 + 4;

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
    if (n > 0)
      std::memcpy(p, bytes_.data() + at_, n);
    at_ += n;
    return true;
  }
  void skip(std::size_t n) noexcept { at_ += std::min(n, left()); }
  std::size_t left() const noexcept { return bytes_.size() - at_; }
  std::size_t at() const noexcept { return at_; }

private:
  std::span<const std::byte> bytes_;
  std::size_t at_ = 0;
};

void put_entry(writer& w, const disk_entry& e) {
  w.u64(e.id);
  w.u64(e.length);
  w.u64(e.checksum);
  w.u64(e.seed);
  w.u32(e.cache_len);
  w.u64(e.label.owner);
  w.u64(e.label.user);
  w.u64(e.label.fingerprint.model_file);
  w.u64(e.label.fingerprint.tokenizer);
  w.u64(e.label.fingerprint.kv_layout);
  w.str(e.label.model);
  w.str(e.label.fingerprint.backend);
  w.str(e.label.fingerprint.chat_format);
  w.str(e.label.session);
  w.u32(static_cast<std::uint32_t>(e.label.tokens.size()));
  w.raw(e.label.tokens.data(), e.label.tokens.size() * sizeof(std::uint32_t));
}

expected<disk_entry, std::string> get_entry(reader& in) {
  disk_entry e;
  auto& fp = e.label.fingerprint;
  std::uint32_t tokens = 0;
  const bool ok = in.u64(e.id) && in.u64(e.length) && in.u64(e.checksum) && in.u64(e.seed)
                  && in.u32(e.cache_len) && in.u64(e.label.owner) && in.u64(e.label.user)
                  && in.u64(fp.model_file) && in.u64(fp.tokenizer) && in.u64(fp.kv_layout)
                  && in.str(e.label.model) && in.str(fp.backend) && in.str(fp.chat_format)
                  && in.str(e.label.session) && in.u32(tokens)
                  && tokens <= in.left() / sizeof(std::uint32_t);
  if (!ok)
    return unexpected(std::string("the entry runs past its end"));
  e.label.tokens.resize(tokens);
  in.raw(e.label.tokens.data(), tokens * sizeof(std::uint32_t));
  if (e.length == 0)
    return unexpected(std::string("the entry holds 0 bytes of KV"));
  if (e.label.tokens.size() != e.cache_len)
    return unexpected(fmt::format("{} tokens for a KV of {} positions", tokens, e.cache_len));
  return e;
}

std::uint64_t record_sum(std::uint32_t kind, std::span<const std::byte> payload) {
  return checksum64(payload, kind);
}

std::vector<std::byte> record(journal_kind kind, const writer& payload) {
  writer w;
  w.u32(static_cast<std::uint32_t>(payload.out.size()));
  w.u32(static_cast<std::uint32_t>(kind));
  w.raw(payload.out.data(), payload.out.size());
  w.u64(record_sum(static_cast<std::uint32_t>(kind), payload.out));
  return std::move(w.out);
}

} // namespace

std::vector<std::byte> encode_disk_header(const disk_entry& e) {
  writer body;
  put_entry(body, e);
  writer w;
  w.raw(file_magic, sizeof file_magic);
  w.u32(disk_format_version);
  w.u32(0);
  w.u64(disk_header_prefix_bytes + body.out.size() + sizeof(std::uint64_t));
  w.raw(body.out.data(), body.out.size());
  w.u64(checksum64(w.out));
  return std::move(w.out);
}

expected<std::uint64_t, std::string> disk_header_size(std::span<const std::byte> prefix) {
  if (prefix.size() < disk_header_prefix_bytes)
    return unexpected(fmt::format("the file is {} bytes, shorter than a header", prefix.size()));
  if (std::memcmp(prefix.data(), file_magic, sizeof file_magic) != 0)
    return unexpected(std::string("no KVLDISK1 magic"));
  reader in(prefix.subspan(sizeof file_magic));
  std::uint32_t version = 0, reserved = 0;
  std::uint64_t size = 0;
  in.u32(version);
  in.u32(reserved);
  in.u64(size);
  if (version != disk_format_version)
    return unexpected(fmt::format("format version {}, this daemon reads version {}", version,
                                  disk_format_version));
  if (size < disk_header_prefix_bytes + entry_fixed_bytes + sizeof(std::uint64_t)
      || size > max_header_bytes)
    return unexpected(fmt::format("a header of {} bytes", size));
  return size;
}

expected<disk_entry, std::string> decode_disk_header(std::span<const std::byte> header) {
  auto size = disk_header_size(header);
  if (!size)
    return unexpected(std::move(size).error());
  if (header.size() != *size)
    return unexpected(fmt::format("the header is {} bytes, it says {}", header.size(), *size));
  const auto checked = header.first(header.size() - sizeof(std::uint64_t));
  std::uint64_t sum = 0;
  std::memcpy(&sum, header.data() + checked.size(), sizeof sum);
  if (checksum64(checked) != sum)
    return unexpected(std::string("the header fails its checksum"));
  reader in(checked.subspan(disk_header_prefix_bytes));
  auto e = get_entry(in);
  if (!e)
    return e;
  if (in.left() != 0)
    return unexpected(fmt::format("{} stray bytes after the entry", in.left()));
  return e;
}

std::optional<std::string> disk_entry_mismatch(const disk_entry& recorded,
                                               const disk_entry& expected) {
  if (recorded.id != expected.id)
    return fmt::format("id {} where {} was expected", recorded.id, expected.id);
  if (recorded.length != expected.length || recorded.checksum != expected.checksum
      || recorded.seed != expected.seed || recorded.cache_len != expected.cache_len)
    return std::string("length, checksum or seed differ from the journal's");
  if (const auto why = fingerprint_mismatch(recorded.label.fingerprint, expected.label.fingerprint))
    return fmt::format("fingerprint differs ({})", to_string(*why));
  if (recorded.label.tokens != expected.label.tokens)
    return std::string("tokens differ from the journal's");
  if (recorded.label.model != expected.label.model || recorded.label.owner != expected.label.owner
      || recorded.label.user != expected.label.user
      || recorded.label.session != expected.label.session)
    return std::string("model, owner or session differ from the journal's");
  return std::nullopt;
}

std::vector<std::byte> encode_journal_header() {
  writer w;
  w.raw(journal_magic, sizeof journal_magic);
  w.u32(disk_format_version);
  w.u32(0);
  return std::move(w.out);
}

std::vector<std::byte> encode_journal_add(const disk_entry& e) {
  writer payload;
  put_entry(payload, e);
  return record(journal_kind::add, payload);
}

std::vector<std::byte> encode_journal_remove(std::uint64_t id) {
  writer payload;
  payload.u64(id);
  return record(journal_kind::remove, payload);
}

journal_replay replay_journal(std::span<const std::byte> bytes) {
  journal_replay out;
  if (bytes.size() < journal_header_bytes
      || std::memcmp(bytes.data(), journal_magic, sizeof journal_magic) != 0) {
    out.header_bad = !bytes.empty();
    out.torn_bytes = bytes.size();
    out.note = bytes.empty() ? "" : "the journal has no valid header";
    return out;
  }
  std::uint32_t version = 0;
  std::memcpy(&version, bytes.data() + sizeof journal_magic, sizeof version);
  if (version != disk_format_version) {
    out.header_bad = true;
    out.torn_bytes = bytes.size();
    out.note = fmt::format("journal version {}, this daemon reads version {}", version,
                           disk_format_version);
    return out;
  }
  reader in(bytes.subspan(journal_header_bytes));
  out.valid_bytes = journal_header_bytes;
  for (;;) {
    if (in.left() == 0)
      break;
    std::uint32_t size = 0, kind = 0;
    if (!in.u32(size) || !in.u32(kind) || size > in.left()
        || in.left() - size < sizeof(std::uint64_t)) {
      out.note = fmt::format("a record at byte {} runs past the end", out.valid_bytes);
      break;
    }
    const auto payload = bytes.subspan(journal_header_bytes + in.at(), size);
    in.skip(size);
    std::uint64_t sum = 0;
    in.u64(sum);
    if (record_sum(kind, payload) != sum) {
      out.note = fmt::format("the record at byte {} fails its checksum", out.valid_bytes);
      break;
    }
    reader p(payload);
    if (kind == static_cast<std::uint32_t>(journal_kind::add)) {
      auto e = get_entry(p);
      if (!e || p.left() != 0) {
        out.note = fmt::format("the add record at byte {} is malformed", out.valid_bytes);
        break;
      }
      const auto id = e->id;
      out.entries.insert_or_assign(id, std::move(*e));
    } else if (kind == static_cast<std::uint32_t>(journal_kind::remove)) {
      std::uint64_t id = 0;
      if (!p.u64(id) || p.left() != 0) {
        out.note = fmt::format("the remove record at byte {} is malformed", out.valid_bytes);
        break;
      }
      out.entries.erase(id);
    } else {
      out.note = fmt::format("the record at byte {} has an unknown kind {}", out.valid_bytes, kind);
      break;
    }
    ++out.records;
    out.valid_bytes = journal_header_bytes + in.at();
  }
  out.torn_bytes = bytes.size() - out.valid_bytes;
  return out;
}

std::string disk_file_name(std::uint64_t id) { return fmt::format("{:016x}.kv", id); }

} // namespace kvlane::ipc
