// [model.qbruntime]: read in every build, validated with "<file>:<line>: <key>: <what>" errors.

#include "daemon/config.hpp"

#include <doctest/doctest.h>

#include <string>
#include <string_view>

using namespace kvlane::daemon;
using kvlane::backends::qbr_concurrency;
using kvlane::backends::qbr_core_mode;

namespace {

// Lines 1-4; snippets appended to it start at line 5.
constexpr std::string_view qbr_model = "version = 1\n"
                                       "[[model]]\n"
                                       "name = \"m\"\n"
                                       "backend = \"qbruntime\"\n";

config parse_ok(std::string_view text) {
  auto sut = parse(text, "test.toml");
  if (!sut)
    FAIL("unexpected error: " << sut.error().message);
  return *sut;
}

kvlane::config_error parse_error(std::string_view text) {
  auto sut = parse(text, "test.toml");
  REQUIRE_FALSE(sut.has_value());
  return sut.error();
}

void check_error(const kvlane::config_error& e, std::string_view key, std::uint32_t line,
                 std::string_view what) {
  CAPTURE(e.message);
  CHECK(e.key == key);
  CHECK(e.line == line);
  CHECK(e.message.find("test.toml:" + std::to_string(line) + ": " + std::string(key) + ": ") == 0);
  CHECK(e.message.find(what) != std::string::npos);
}

std::string with_table(std::string_view body) {
  return std::string(qbr_model) + "[model.qbruntime]\nmodel_dir = \"/srv/models/m\"\n"
         + std::string(body);
}

} // namespace

TEST_CASE("qbruntime config: model_dir alone yields the documented defaults") {
  const auto cfg = parse_ok(with_table(""));
  const auto& q = cfg.models.front().backend.qbruntime;
  CHECK(cfg.models.front().backend.kind == "qbruntime");
  CHECK(q.model_dir == "/srv/models/m");
  CHECK(q.mxq.empty());
  CHECK(q.embedding == "model.safetensors");
  CHECK(q.embedding_tensor.empty());
  CHECK(q.tokenizer.empty());
  CHECK(q.dev_no == 0);
  CHECK(q.core_mode == qbr_core_mode::single);
  CHECK(q.target_cores.empty());
  CHECK(q.prefill_chunk == 0);
  CHECK(q.handles == 1);
  CHECK(q.concurrency == qbr_concurrency::serialize);
}

TEST_CASE("qbruntime config: every key is read into its field") {
  const auto cfg = parse_ok(with_table("mxq = \"llama.mxq\"\n"
                                       "embedding = \"/data/emb.safetensors\"\n"
                                       "embedding_tensor = \"model.embed_tokens.weight\"\n"
                                       "tokenizer = \"/data/tok\"\n"
                                       "dev_no = 1\n"
                                       "core_mode = \"single\"\n"
                                       "target_cores = [4, 5]\n"
                                       "prefill_chunk = 64\n"
                                       "handles = 2\n"
                                       "concurrency = \"allow\"\n"));
  const auto& q = cfg.models.front().backend.qbruntime;
  CHECK(q.mxq == "llama.mxq");
  CHECK(q.embedding == "/data/emb.safetensors");
  CHECK(q.embedding_tensor == "model.embed_tokens.weight");
  CHECK(q.tokenizer == "/data/tok");
  CHECK(q.dev_no == 1);
  CHECK(q.target_cores == std::vector<std::uint32_t>{4, 5});
  CHECK(q.prefill_chunk == 64);
  CHECK(q.handles == 2);
  CHECK(q.concurrency == qbr_concurrency::allow);
  CHECK(parse_ok(with_table("core_mode = \"global8\"\n")).models.front().backend.qbruntime.core_mode
        == qbr_core_mode::global8);
  CHECK(parse_ok(with_table("core_mode = \"auto\"\n")).models.front().backend.qbruntime.core_mode
        == qbr_core_mode::automatic);
}

TEST_CASE("qbruntime config: a qbruntime model without its table is an error naming it") {
  const auto e = parse_error(std::string(qbr_model));
  check_error(e, "model[0].qbruntime", 2, "needs a [model.qbruntime] table");
}

TEST_CASE("qbruntime config: a missing or relative model_dir is an error") {
  check_error(parse_error(std::string(qbr_model) + "[model.qbruntime]\ndev_no = 0\n"),
              "model[0].qbruntime.model_dir", 5, "missing");
  check_error(parse_error(std::string(qbr_model) + "[model.qbruntime]\nmodel_dir = \"models/m\"\n"),
              "model[0].qbruntime.model_dir", 6, "must be an absolute path (got \"models/m\")");
}

TEST_CASE("qbruntime config: a [model.sim] table on a qbruntime model is an error naming it") {
  const auto e = parse_error(with_table("[model.sim]\nslots = 4\n"));
  check_error(e, "model[0].sim", 7, "options for backend \"sim\" but this model uses backend \"qbruntime\"");
}

TEST_CASE("qbruntime config: a [model.qbruntime] table on a sim model is an error naming it") {
  const auto e = parse_error("version = 1\n[[model]]\nname = \"m\"\n"
                             "[model.qbruntime]\nmodel_dir = \"/m\"\n");
  check_error(e, "model[0].qbruntime", 4, "options for backend \"qbruntime\" but this model uses backend \"sim\"");
}

TEST_CASE("qbruntime config: bad values are errors naming key, line and what is allowed") {
  struct row {
    std::string_view snippet;
    std::string_view key;
    std::string_view what;
  };
  const row rows[] = {
    {"modeldir = \"/x\"\n", "model[0].qbruntime.modeldir", "did you mean 'model_dir'?"},
    {"mxq = \"\"\n", "model[0].qbruntime.mxq", "must not be empty"},
    {"tokenizer = \"\"\n", "model[0].qbruntime.tokenizer", "must not be empty"},
    {"embedding = 3\n", "model[0].qbruntime.embedding", "expected string, got integer"},
    {"dev_no = -1\n", "model[0].qbruntime.dev_no", "must be between 0 and 255 (got -1)"},
    {"core_mode = \"dual\"\n", "model[0].qbruntime.core_mode",
     "must be one of \"single\", \"global4\", \"global8\", \"auto\" (got \"dual\")"},
    {"concurrency = \"yes\"\n", "model[0].qbruntime.concurrency",
     "must be one of \"serialize\", \"allow\" (got \"yes\")"},
    {"handles = 0\n", "model[0].qbruntime.handles", "must be between 1 and 8 (got 0)"},
    {"prefill_chunk = 70000\n", "model[0].qbruntime.prefill_chunk", "must be between 0 and 65536"},
    {"target_cores = 3\n", "model[0].qbruntime.target_cores", "expected array of integers, got integer"},
    {"target_cores = [8]\n", "model[0].qbruntime.target_cores[0]", "must be a core between 0 and 7 (got 8)"},
    {"target_cores = [\"0\"]\n", "model[0].qbruntime.target_cores[0]", "expected integer, got string"},
    {"target_cores = []\n", "model[0].qbruntime.target_cores", "at least one core"},
    {"handles = 2\ntarget_cores = [1, 1]\n", "model[0].qbruntime.target_cores[1]", "core 1 is listed twice"},
    {"handles = 2\ntarget_cores = [1]\n", "model[0].qbruntime.target_cores",
     "one core per handle: 1 listed, handles = 2"},
    {"handles = 2\ncore_mode = \"global4\"\n", "model[0].qbruntime.handles",
     "more than one handle needs core_mode \"single\""},
    {"core_mode = \"global4\"\ntarget_cores = [0]\n", "model[0].qbruntime.target_cores",
     "applies to core_mode \"single\" only"},
  };
  for (const auto& r : rows) {
    CAPTURE(r.snippet);
    const auto e = parse_error(with_table(r.snippet));
    CAPTURE(e.message);
    CHECK(e.key == r.key);
    CHECK(e.line >= 7);
    CHECK(e.message.find(r.key) != std::string::npos);
    CHECK(e.message.find(r.what) != std::string::npos);
  }
}

TEST_CASE("qbruntime config: the shipped etc/aries.toml parses with a qbruntime model") {
  auto sut = load(KVLANE_SOURCE_DIR "/etc/aries.toml");
  if (!sut)
    FAIL(sut.error().message);
  REQUIRE(sut->models.size() == 1);
  const auto& m = sut->models.front();
  CHECK(m.backend.kind == "qbruntime");
  CHECK(m.backend.qbruntime.model_dir.front() == '/');
  CHECK(m.backend.qbruntime.concurrency == qbr_concurrency::serialize);
}
