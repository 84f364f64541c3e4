#include "actors/model_fingerprint.hpp"

#include "backends/byte_tokenizer.hpp"
#include "backends/factory.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>

#include <fcntl.h>
#include <sys/stat.h>

using namespace kvlane;
using kvlane::backends::token_id;

namespace {

/// The byte tokenizer with one token's bytes changed, as a changed
/// tokenizer.json would.
class edited_tokenizer final : public backends::tokenizer {
public:
  std::vector<token_id> encode(std::string_view text, bool special) const override {
    return base_.encode(text, special);
  }
  std::string decode(std::span<const token_id> tokens) const override {
    if (tokens.size() == 1 && tokens[0] == 'a')
      return "A";
    return base_.decode(tokens);
  }
  std::optional<token_id> bos() const noexcept override { return base_.bos(); }
  std::span<const token_id> stop_tokens() const noexcept override { return base_.stop_tokens(); }
  std::optional<token_id> special_token(std::string_view text) const noexcept override {
    return base_.special_token(text);
  }
  std::uint32_t size() const noexcept override { return base_.size(); }

private:
  backends::byte_tokenizer base_;
};

/// Sets a file's mtime, so a rewrite is visible even within one clock tick.
void set_mtime(const std::string& path, std::int64_t seconds) {
  const timespec times[2] = {{seconds, 0}, {seconds, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

std::shared_ptr<backends::backend> sim(const std::string& name, std::uint64_t seed = 1) {
  backends::backend_config cfg;
  cfg.kind = "sim";
  cfg.sim.seed = seed;
  auto b = backends::make_backend(name, cfg);
  REQUIRE(b.has_value());
  return std::shared_ptr<backends::backend>{std::move(*b)};
}

} // namespace

TEST_CASE("model_fingerprint: a file's content hash is computed once, then read from the cache "
          "until the file changes") {
  test::temp_dir dir;
  const auto cache = std::filesystem::path(dir.path()) / "cache";
  const auto file = dir.write("model.gguf", "weights-v1");
  set_mtime(file, 1000);
  bool computed = false;
  const auto h1 = actors::file_content_hash(file, cache, &computed);
  REQUIRE(h1);
  CHECK(computed);
  const auto again = actors::file_content_hash(file, cache, &computed);
  REQUIRE(again);
  CHECK_FALSE(computed);
  CHECK(*again == *h1);

  // Same size, new content: the mtime changed, so the cache entry does not apply.
  dir.write("model.gguf", "weights-v2");
  set_mtime(file, 2000);
  const auto h2 = actors::file_content_hash(file, cache, &computed);
  REQUIRE(h2);
  CHECK(computed);
  CHECK(*h2 != *h1);

  // Another file put in its place (a new inode) with the old content and mtime: hashed again.
  const auto replacement = dir.write("new.gguf", "weights-v1");
  set_mtime(replacement, 1000);
  std::filesystem::rename(replacement, file);
  const auto h3 = actors::file_content_hash(file, cache, &computed);
  REQUIRE(h3);
  CHECK(computed);
  CHECK(*h3 == *h1);

  // A damaged cache entry is ignored, not trusted.
  for (const auto& e : std::filesystem::directory_iterator(cache)) {
    std::FILE* f = std::fopen(e.path().c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("garbage\n", f);
    std::fclose(f);
  }
  const auto h4 = actors::file_content_hash(file, cache, &computed);
  REQUIRE(h4);
  CHECK(computed);
  CHECK(*h4 == *h1);

  // No cache directory: always computed.
  CHECK(actors::file_content_hash(file, {}, &computed));
  CHECK(computed);
  CHECK_FALSE(actors::file_content_hash(dir.path() + "/missing", cache));
}

TEST_CASE("model_fingerprint: one token's bytes changed changes the tokenizer hash") {
  const backends::byte_tokenizer a;
  const backends::byte_tokenizer b;
  const edited_tokenizer edited;
  CHECK(actors::tokenizer_hash(a) == actors::tokenizer_hash(b));
  CHECK(actors::tokenizer_hash(a) != actors::tokenizer_hash(edited));
}

TEST_CASE("model_fingerprint: equal for the same model; the sim's config and the chat format "
          "each change their own field") {
  actors::model_config m;
  m.name = "m";
  const auto fp = actors::fingerprint_of(m, *sim("m"), {});
  REQUIRE(fp);
  CHECK(fp->backend == "sim");
  CHECK(fp->chat_format == "chatml");
  const auto same = actors::fingerprint_of(m, *sim("m"), {});
  REQUIRE(same);
  CHECK(*same == *fp);

  const auto reseeded = actors::fingerprint_of(m, *sim("m", 2), {});
  REQUIRE(reseeded);
  CHECK(ipc::fingerprint_mismatch(*reseeded, *fp) == ipc::discard_reason::model_changed);

  auto other_format = m;
  other_format.chat_format = backends::chat_format::llama3;
  const auto formatted = actors::fingerprint_of(other_format, *sim("m"), {});
  REQUIRE(formatted);
  CHECK(ipc::fingerprint_mismatch(*formatted, *fp) == ipc::discard_reason::chat_format_changed);
}
