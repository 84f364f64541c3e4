// [model.llamacpp] through the daemon's config parser, and the [[model]] table that
// `kvlaned --gguf FILE` writes: defaults, precise PATH:LINE: key errors, the chat format.
#include "daemon/config.hpp"
#include "daemon/gguf_model.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <unistd.h>

using namespace kvlane::daemon;
using kvlane::backends::chat_format;
using kvlane::backends::llama_flash_attn;
using kvlane::backends::llama_kv_type;

namespace {

// Lines 1-6; snippets appended to it start at line 7.
constexpr std::string_view model = "version = 1\n"
                                   "[[model]]\n"
                                   "name = \"m\"\n"
                                   "backend = \"llamacpp\"\n"
                                   "[model.llamacpp]\n"
                                   "gguf = \"/models/m.gguf\"\n";

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
  CHECK(e.message.find("test.toml:" + std::to_string(line) + ": " + std::string(key)) == 0);
  CHECK(e.message.find(what) != std::string::npos);
}

} // namespace

TEST_CASE("llamacpp config: a table with only gguf takes every default and the model's own template") {
  auto sut = parse(model, "test.toml");
  REQUIRE_MESSAGE(sut.has_value(), (sut ? std::string() : sut.error().message));
  const auto& m = sut->models.at(0);
  CHECK(m.backend.kind == "llamacpp");
  CHECK(m.chat_format == chat_format::automatic);
  const auto& o = m.backend.llamacpp;
  CHECK(o.gguf == "/models/m.gguf");
  CHECK(o.slots == 4);
  CHECK(o.context == 4096);
  CHECK(o.threads == 0);
  CHECK(o.threads_batch == 0);
  CHECK(o.batch == 512);
  CHECK(o.kv_type == llama_kv_type::f16);
  CHECK(o.flash_attn == llama_flash_attn::automatic);
  CHECK(o.gpu_layers == 0);
  CHECK(o.mmap);
  CHECK_FALSE(o.mlock);
  CHECK(o.chat_template_file.empty());
}

TEST_CASE("llamacpp config: every key is read, and chat_format may name a built-in format") {
  auto sut = parse(std::string(model) + "slots = 8\ncontext = 2048\nthreads = 3\nthreads_batch = 4\n"
                   "batch = 128\nkv_type = \"q8_0\"\nflash_attn = \"on\"\ngpu_layers = 99\n"
                   "mmap = false\nmlock = true\nchat_template_file = \"/t/chat.jinja\"\n",
                   "test.toml");
  REQUIRE_MESSAGE(sut.has_value(), (sut ? std::string() : sut.error().message));
  const auto& o = sut->models.at(0).backend.llamacpp;
  CHECK(o.slots == 8);
  CHECK(o.context == 2048);
  CHECK(o.threads == 3);
  CHECK(o.threads_batch == 4);
  CHECK(o.batch == 128);
  CHECK(o.kv_type == llama_kv_type::q8_0);
  CHECK(o.flash_attn == llama_flash_attn::on);
  CHECK(o.gpu_layers == 99);
  CHECK_FALSE(o.mmap);
  CHECK(o.mlock);
  CHECK(o.chat_template_file == "/t/chat.jinja");

  auto llama3 = parse("version = 1\n[[model]]\nname = \"m\"\nbackend = \"llamacpp\"\n"
                      "chat_format = \"llama3\"\n[model.llamacpp]\ngguf = \"/m.gguf\"\n",
                      "test.toml");
  REQUIRE(llama3.has_value());
  CHECK(llama3->models.at(0).chat_format == chat_format::llama3);
}

TEST_CASE("llamacpp config: bad values name the key and its line") {
  check_error(parse_error(std::string(model) + "kv_type = \"q4\"\n"), "model[0].llamacpp.kv_type", 7,
              "\"f16\"");
  check_error(parse_error(std::string(model) + "slots = 0\n"), "model[0].llamacpp.slots", 7, "1");
  check_error(parse_error(std::string(model) + "context = 10\n"), "model[0].llamacpp.context", 7,
              "at least 64");
  check_error(parse_error(std::string(model) + "flash_attn = \"maybe\"\n"),
              "model[0].llamacpp.flash_attn", 7, "\"auto\"");
  check_error(parse_error(std::string(model) + "chat_template_file = \"t.jinja\"\n"),
              "model[0].llamacpp.chat_template_file", 7, "absolute");
  const auto unknown = parse_error(std::string(model) + "n_gpu_layers = 3\n");
  CHECK(unknown.line == 7);
  CHECK(unknown.message.find("test.toml:7: unknown key 'model[0].llamacpp.n_gpu_layers' (did you "
                             "mean 'gpu_layers'?)") == 0);
  check_error(parse_error("version = 1\n[[model]]\nname = \"m\"\nbackend = \"llamacpp\"\n"
                          "[model.llamacpp]\ngguf = \"m.gguf\"\n"),
              "model[0].llamacpp.gguf", 6, "absolute");
  const auto missing = parse_error("version = 1\n[[model]]\nname = \"m\"\nbackend = \"llamacpp\"\n");
  CHECK(missing.message.find("[model.llamacpp]") != std::string::npos);
  const auto wrong_table = parse_error("version = 1\n[[model]]\nname = \"m\"\n[model.llamacpp]\n"
                                       "gguf = \"/m.gguf\"\n");
  CHECK(wrong_table.message.find("backend \"sim\"") != std::string::npos);
}

TEST_CASE("gguf model: the name comes from the file, the table parses as a config's") {
  CHECK(gguf_model_name("/models/Qwen2.5-0.5B-Instruct-Q4_K_M.gguf") == "qwen2.5-0.5b-instruct-q4_k_m");
  CHECK(gguf_model_name("/m/llama 3 (8b).gguf") == "llama-3--8b-");
  CHECK(gguf_model_name("/models/") == "model");
  CHECK(gguf_model_name("/m/" + std::string(100, 'a') + ".gguf") == std::string(64, 'a'));

  CHECK(gguf_model_toml("relative.gguf").error().find("absolute") != std::string::npos);
  CHECK(gguf_model_toml("/nonexistent/x.gguf").error().find("no such file") != std::string::npos);

  char path[] = "/tmp/kvlane-gguf-model-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  const std::string weird = std::string(path) + "-\"quoted\\.gguf";
  REQUIRE(std::rename(path, weird.c_str()) == 0);
  auto table = gguf_model_toml(weird);
  REQUIRE(table.has_value());
  auto sut = parse("version = 1\n" + *table, "--gguf");
  std::remove(weird.c_str());
  REQUIRE_MESSAGE(sut.has_value(), (sut ? std::string() : sut.error().message));
  CHECK(sut->models.at(0).backend.llamacpp.gguf == weird);
  CHECK(sut->models.at(0).chat_format == chat_format::automatic);
}
