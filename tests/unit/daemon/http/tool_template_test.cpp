// Tools for models that render their own template, at the HTTP layer: the constraint is built
// in the syntax the template teaches (hermes or llama3), a template without one is a 400 that
// names the model and says why, and tool_choice "none" bans the call's opening token exactly
// when the vocabulary has it as one token.
#include "daemon/http/structured_output.hpp"

#include "common/grammar/matcher.hpp"
#include "tests/unit/grammar/grammar_fixture.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace kvlane::daemon::http;
using kvlane::backends::chat_format;
using kvlane::backends::chat_tool;
using kvlane::backends::token_id;
using kvlane::backends::tool_call_syntax;

using kvlane::test::accepts;

namespace {

/// A tokenizer that knows one added token, "<tool_call>" (or none).
struct vocab_with : kvlane::backends::tokenizer {
  std::optional<token_id> tool_call;
  std::vector<token_id> encode(std::string_view, bool) const override { return {}; }
  std::string decode(std::span<const token_id>) const override { return {}; }
  std::optional<token_id> bos() const noexcept override { return std::nullopt; }
  std::span<const token_id> stop_tokens() const noexcept override { return {}; }
  std::optional<token_id> special_token(std::string_view text) const noexcept override {
    return text == "<tool_call>" ? tool_call : std::nullopt;
  }
  std::uint32_t size() const noexcept override { return 1000; }
};

const std::vector<chat_tool> tools{
  {"get_time", "", R"({"type":"object","properties":{"zone":{"type":"string"}},"required":["zone"]})"}};

tool_request offer(tool_choice::mode m, std::string name = {}) {
  tool_request t;
  t.tools = tools;
  t.choice.m = m;
  t.choice.name = std::move(name);
  return t;
}

} // namespace

TEST_CASE("tool template: a template model's calls are enforced in the syntax its template teaches") {
  auto hermes = build_constraint({}, offer(tool_choice::mode::named, "get_time"), chat_format::automatic,
                                 tool_call_syntax::hermes, "qwen");
  REQUIRE(hermes.has_value());
  CHECK(accepts(*hermes, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\":\"UTC\"}}\n</tool_call>"));
  CHECK_FALSE(accepts(*hermes, R"({"name": "get_time", "parameters": {"zone":"UTC"}})"));
  auto llama = build_constraint({}, offer(tool_choice::mode::named, "get_time"), chat_format::jinja,
                                tool_call_syntax::llama3, "llama");
  REQUIRE(llama.has_value());
  CHECK(accepts(*llama, R"({"name": "get_time", "parameters": {"zone":"UTC"}})"));
}

TEST_CASE("tool template: a template without a syntax kvlane knows is a 400 naming the model and why") {
  for (auto chat : {chat_format::automatic, chat_format::jinja}) {
    auto sut = build_constraint({}, offer(tool_choice::mode::automatic), chat, tool_call_syntax::none,
                                "mistral-nemo");
    REQUIRE_FALSE(sut.has_value());
    CHECK(sut.error().status == 400);
    CHECK(sut.error().code == "tools_not_supported");
    CHECK(sut.error().param == "tools");
    CHECK(sut.error().message.find("'mistral-nemo'") != std::string::npos);
    CHECK(sut.error().message.find("own chat template") != std::string::npos);
    CHECK(sut.error().message.find("hermes <tool_call>") != std::string::npos);
  }
  // "none" too: the tools could not even be shown to the model.
  CHECK_FALSE(build_constraint({}, offer(tool_choice::mode::none), chat_format::automatic,
                               tool_call_syntax::none, "m")
                .has_value());
}

TEST_CASE("tool template: tool_choice none bans the opening token where the vocabulary has one") {
  vocab_with qwen;
  qwen.tool_call = 651;
  vocab_with plain;
  CHECK(none_banned_tokens(offer(tool_choice::mode::none), tool_call_syntax::hermes, qwen)
        == std::vector<token_id>{651});
  // Not one token: nothing to ban (the answer is still read as content).
  CHECK(none_banned_tokens(offer(tool_choice::mode::none), tool_call_syntax::hermes, plain).empty());
  CHECK(none_banned_tokens(offer(tool_choice::mode::none), tool_call_syntax::llama3, qwen).empty());
  // Other choices, or no tools: nothing banned.
  for (auto m : {tool_choice::mode::automatic, tool_choice::mode::required})
    CHECK(none_banned_tokens(offer(m), tool_call_syntax::hermes, qwen).empty());
  CHECK(none_banned_tokens(offer(tool_choice::mode::named, "get_time"), tool_call_syntax::hermes, qwen)
          .empty());
  tool_request none_without_tools;
  none_without_tools.choice.m = tool_choice::mode::none;
  CHECK(none_banned_tokens(none_without_tools, tool_call_syntax::hermes, qwen).empty());
  // "none" builds no call grammar at all.
  auto c = build_constraint({}, offer(tool_choice::mode::none), chat_format::automatic,
                            tool_call_syntax::hermes, "qwen");
  REQUIRE(c.has_value());
  CHECK(*c == nullptr);
}
