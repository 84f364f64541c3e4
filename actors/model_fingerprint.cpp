#include "actors/model_fingerprint.hpp"

#include "ipc/checksum.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kvlane::actors {

namespace {

constexpr std::string_view cache_magic = "kvlane-content-hash 1";

// Accumulates fields into one 64-bit hash; each field is length-framed.
class hasher {
public:
  void bytes(std::string_view s) {
    number(s.size());
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  void number(std::uint64_t v) {
    const auto* p = reinterpret_cast<const char*>(&v);
    buf_.insert(buf_.end(), p, p + sizeof v);
  }
  std::uint64_t value() const { return ipc::checksum64(std::as_bytes(std::span(buf_))); }

private:
  std::vector<char> buf_;
};

// The cache key: everything that changes when the file is rewritten,
// replaced or moved (mtime has nanoseconds; a new file has a new inode).
std::string cache_key(const std::filesystem::path& file, const struct stat& st) {
  return fmt::format("{}\n{} {}.{:09} {} {}", file.string(), st.st_size, st.st_mtim.tv_sec,
                     st.st_mtim.tv_nsec, st.st_ino, st.st_dev);
}

std::filesystem::path cache_entry(const std::filesystem::path& dir, const std::string& key) {
  return dir / fmt::format("content-hash-{:016x}", ipc::checksum64(std::as_bytes(std::span(key))));
}

std::optional<std::uint64_t> cached_hash(const std::filesystem::path& entry,
                                         const std::string& key) {
  std::ifstream in(entry);
  if (!in)
    return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const std::string expected_head = std::string(cache_magic) + "\n" + key + "\n";
  const std::string all = text.str();
  if (all.compare(0, expected_head.size(), expected_head) != 0)
    return std::nullopt;
  const std::string value = all.substr(expected_head.size());
  char* end = nullptr;
  errno = 0;
  const auto v = std::strtoull(value.c_str(), &end, 16);
  if (errno != 0 || end == value.c_str() || (*end != '\n' && *end != '\0'))
    return std::nullopt;
  return v;
}

void store_hash(const std::filesystem::path& dir, const std::filesystem::path& entry,
                const std::string& key, std::uint64_t value) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return;
  const auto tmp = entry.string() + fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << cache_magic << '\n' << key << '\n' << fmt::format("{:016x}", value) << '\n';
    if (!out)
      return;
  }
  std::filesystem::rename(tmp, entry, ec);
  if (ec)
    std::filesystem::remove(tmp, ec);
}

expected<std::uint64_t, std::string> hash_file(const std::filesystem::path& file, int fd,
                                               std::uint64_t size) {
  if (size == 0)
    return ipc::checksum64({});
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED)
    return unexpected(fmt::format("{}: mmap: {}", file.string(), std::strerror(errno)));
  (void)::madvise(p, size, MADV_SEQUENTIAL);
  const auto h = ipc::checksum64({static_cast<const std::byte*>(p), size});
  ::munmap(p, size);
  return h;
}

// The weights of a qbruntime model: its .mxq (named, or the only one in
// model_dir) and its embedding table.
std::vector<std::filesystem::path> qbruntime_files(const backends::qbruntime_options& o) {
  std::vector<std::filesystem::path> out;
  const std::filesystem::path dir(o.model_dir);
  if (!o.mxq.empty()) {
    out.push_back(dir / o.mxq);
  } else {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (e.path().extension() == ".mxq")
        out.push_back(e.path());
    std::sort(out.begin(), out.end());
  }
  const std::filesystem::path emb(o.embedding);
  out.push_back(emb.is_absolute() ? emb : dir / emb);
  return out;
}

} // namespace

std::filesystem::path default_hash_cache_dir() {
  if (const char* d = std::getenv("CACHE_DIRECTORY"); d != nullptr && *d != '\0') {
    // systemd may list several, separated by ':'; the first is ours.
    std::string_view first(d);
    return std::filesystem::path(first.substr(0, first.find(':')));
  }
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d != nullptr && *d == '/')
    return std::filesystem::path(d) / "kvlane";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h == '/')
    return std::filesystem::path(h) / ".cache" / "kvlane";
  return {};
}

expected<std::uint64_t, std::string> file_content_hash(const std::filesystem::path& file,
                                                       const std::filesystem::path& cache_dir,
                                                       bool* computed) {
  if (computed != nullptr)
    *computed = false;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return unexpected(fmt::format("{}: {}", file.string(), std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return unexpected(fmt::format("{}: fstat: {}", file.string(), std::strerror(err)));
  }
  // The key comes from the open file, so a rename between stat and read cannot mix two files.
  const std::string key = cache_key(std::filesystem::absolute(file), st);
  const auto entry = cache_dir.empty() ? std::filesystem::path{} : cache_entry(cache_dir, key);
  if (!cache_dir.empty())
    if (const auto v = cached_hash(entry, key)) {
      ::close(fd);
      return *v;
    }
  auto h = hash_file(file, fd, static_cast<std::uint64_t>(st.st_size));
  ::close(fd);
  if (!h)
    return h;
  if (computed != nullptr)
    *computed = true;
  if (!cache_dir.empty())
    store_hash(cache_dir, entry, key, *h);
  return h;
}

std::uint64_t tokenizer_hash(const backends::tokenizer& tok) {
  hasher h;
  h.number(tok.size());
  std::string all;
  for (backends::token_id id = 0; id < tok.size(); ++id) {
    const std::string bytes = tok.decode(std::span(&id, 1));
    all += std::to_string(bytes.size());
    all += ':';
    all += bytes;
  }
  h.bytes(all);
  h.number(tok.bos() ? std::uint64_t{*tok.bos()} + 1 : 0);
  for (const auto s : tok.stop_tokens())
    h.number(s);
  // Special tokens decode to nothing: their ids are pinned by the texts the
  // chat formats look up.
  for (const std::string_view text :
       {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>",
        "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "[|system|]", "[|user|]",
        "[|assistant|]", "[|endofturn|]", "<think>", "</think>", "<tool_call>", "</tool_call>"}) {
    const auto id = tok.special_token(text);
    h.number(id ? std::uint64_t{*id} + 1 : 0);
  }
  h.bytes(tok.chat_template());
  return h.value();
}

expected<ipc::kv_fingerprint, std::string> fingerprint_of(const model_config& model,
                                                          const backends::backend& backend,
                                                          const std::filesystem::path& cache_dir) {
  const auto& info = backend.info();
  ipc::kv_fingerprint fp;
  std::string dtype = info.kind;
  if (info.kind == "llamacpp") {
    auto h = file_content_hash(model.backend.llamacpp.gguf, cache_dir);
    if (!h)
      return unexpected(std::move(h).error());
    fp.model_file = *h;
    dtype = std::string(backends::to_string(model.backend.llamacpp.kv_type));
  } else if (info.kind == "qbruntime") {
    hasher files;
    for (const auto& f : qbruntime_files(model.backend.qbruntime)) {
      auto h = file_content_hash(f, cache_dir);
      if (!h)
        return unexpected(std::move(h).error());
      files.number(*h);
    }
    fp.model_file = files.value();
  } else {
    // No weights file: the config identity (name, seed, geometry) is the model.
    fp.model_file = info.identity;
  }
  fp.tokenizer = tokenizer_hash(backend.tokens());
  hasher layout;
  layout.number(info.bytes_per_token);
  layout.number(info.snapshot_bytes);
  layout.number(info.snapshot_header_bytes);
  layout.number(static_cast<std::uint64_t>(info.caps.extent));
  layout.number(info.max_context);
  layout.bytes(dtype);
  fp.kv_layout = layout.value();
  fp.backend = info.runtime_version.empty() ? info.kind : info.kind + " " + info.runtime_version;
  fp.chat_format = std::string(backends::to_string(model.chat_format));
  if (model.chat_format == backends::chat_format::automatic
      || model.chat_format == backends::chat_format::jinja) {
    const auto tmpl = backend.tokens().chat_template();
    fp.chat_format += fmt::format(":{:016x}", ipc::checksum64(std::as_bytes(std::span(tmpl))));
  }
  return fp;
}

} // namespace kvlane::actors
