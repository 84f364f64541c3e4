// Stop strings over HTTP end a sequence as a stop token does: the turn counts as finished
// (status, metrics), not cancelled, and the KV of the text the client received stays, so
// the conversation's next turn is served from it (cached_tokens > 0). The "slow" model
// (time_scale 1) makes a generation last long enough that the stop string, not the
// token limit, ends it.
#include "tests/integration/http_fixture.hpp"

#include <algorithm>

using namespace kvlane::test::http;

namespace {

const std::string first_question =
  "Tell me a long story about a lighthouse keeper, the storms of the northern sea, the ships "
  "that passed and the letters that never arrived.";

json chat_on_slow(std::vector<std::pair<std::string, std::string>> turns, int max_tokens) {
  json messages = json::array();
  for (auto& [role, content] : turns)
    messages.push_back({{"role", role}, {"content", content}});
  return {{"model", "slow"},
          {"messages", messages},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

/// The first printable ASCII character at index 4 or later that does not occur earlier:
/// a stop string that ends `text` after a few characters. npos if there is none.
std::size_t stop_position(const std::string& text) {
  for (std::size_t i = 4; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c > 0x20 && c < 0x7f && c != '\\' && text.find(text[i]) == i)
      return i;
  }
  return std::string::npos;
}

/// The value of one sample line of the Prometheus text, or -1 if absent.
double sample(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos)
    return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

double outcome(http_fixture& d, std::string_view reason) {
  return sample(d.cli({"metrics"}),
                fmt::format(R"(kvlane_requests_total{{model="slow",outcome="{}"}})", reason));
}

/// The whole answer to the first question, then every retained entry dropped, so the
/// next turns can reuse only what the stopped turn left.
std::string learn_answer(http_fixture& d) {
  auto r = d.post_json("/v1/chat/completions", chat_on_slow({{"user", first_question}}, 40));
  REQUIRE(r["choices"][0]["finish_reason"] == "length");
  d.cli({"cache", "drop", "--all"});
  return r["choices"][0]["message"]["content"].get<std::string>();
}

} // namespace

TEST_CASE("http stop: an OpenAI chat turn ended by a stop string counts as finished, not "
          "cancelled, and the next turn reuses its KV") {
  http_fixture d;
  const auto full = learn_answer(d);
  const auto at = stop_position(full);
  REQUIRE_MESSAGE(at != std::string::npos, "no usable stop character in: " << full);
  const auto stops_before = outcome(d, "stop");
  const auto cancelled_before = outcome(d, "cancelled");
  const auto status_before = d.status()["models"][1];
  REQUIRE(status_before["name"] == "slow");

  auto body = chat_on_slow({{"user", first_question}}, 40);
  body["stop"] = std::string(1, full[at]);
  auto r1 = d.post_json("/v1/chat/completions", body);
  CHECK(r1["choices"][0]["finish_reason"] == "stop");
  const auto answer = r1["choices"][0]["message"]["content"].get<std::string>();
  CHECK(answer == full.substr(0, at));
  CHECK(r1["usage"]["completion_tokens"].get<int>() < 40);

  CHECK(outcome(d, "stop") == stops_before + 1);
  CHECK(outcome(d, "cancelled") == cancelled_before);
  const auto status_after = d.status()["models"][1];
  CHECK(status_after["finished"].get<int>() == status_before["finished"].get<int>() + 1);
  CHECK(status_after["cancelled"] == status_before["cancelled"]);

  // What the turn left: its prompt and the tokens of the answer the client received (the
  // sim's byte tokenizer makes one token of each byte of this ASCII answer), not those of
  // the stop string or after it.
  REQUIRE(std::all_of(answer.begin(), answer.end(), [](char c) { return c > 0x1f && c < 0x7f; }));
  const auto ls = json::parse(d.cli({"cache", "ls", "--model", "slow", "--json"}));
  REQUIRE(ls["entries"].size() == 1);
  CHECK(ls["entries"][0]["tokens"].get<std::uint64_t>()
        == r1["usage"]["prompt_tokens"].get<std::uint64_t>() + answer.size());

  // The next turn's prompt holds the first prompt and the answer the client received.
  auto r2 = d.post_json("/v1/chat/completions",
                        chat_on_slow({{"user", first_question},
                                      {"assistant", answer},
                                      {"user", "And then?"}},
                                     4));
  const auto prompt1 = r1["usage"]["prompt_tokens"].get<std::uint64_t>();
  const auto cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"].get<std::uint64_t>();
  CAPTURE(prompt1);
  CAPTURE(answer);
  CHECK(cached > 0);
  CHECK(cached == prompt1 + answer.size()); // all that the turn left
}

TEST_CASE("http stop: an Ollama chat turn ended by a stop string reports done_reason stop and "
          "the next turn reuses its KV") {
  http_fixture d;
  const auto full = learn_answer(d);
  const auto at = stop_position(full);
  REQUIRE_MESSAGE(at != std::string::npos, "no usable stop character in: " << full);
  const auto cancelled_before = outcome(d, "cancelled");
  const auto stops_before = outcome(d, "stop");

  const json options{{"temperature", 0}, {"num_predict", 40}, {"stop", {std::string(1, full[at])}}};
  auto r1 = d.post_json("/api/chat",
                        {{"model", "slow"},
                         {"messages", {{{"role", "user"}, {"content", first_question}}}},
                         {"stream", false},
                         {"options", options}});
  CHECK(r1["done_reason"] == "stop");
  const auto answer = r1["message"]["content"].get<std::string>();
  CHECK(answer == full.substr(0, at));
  CHECK(outcome(d, "stop") == stops_before + 1);
  CHECK(outcome(d, "cancelled") == cancelled_before);

  auto r2 = d.post_json("/api/chat",
                        {{"model", "slow"},
                         {"messages",
                          {{{"role", "user"}, {"content", first_question}},
                           {{"role", "assistant"}, {"content", answer}},
                           {{"role", "user"}, {"content", "And then?"}}}},
                         {"stream", false},
                         {"options", {{"temperature", 0}, {"num_predict", 4}}}});
  CHECK(r2["prompt_eval_cached_count"].get<std::uint64_t>()
        >= r1["prompt_eval_count"].get<std::uint64_t>());
}

TEST_CASE("http stop: a streamed chat turn ended by a stop string ends with finish_reason stop "
          "and leaves its KV for the next turn") {
  http_fixture d;
  const auto full = learn_answer(d);
  const auto at = stop_position(full);
  REQUIRE_MESSAGE(at != std::string::npos, "no usable stop character in: " << full);
  auto body = chat_on_slow({{"user", first_question}}, 40);
  body["stop"] = std::string(1, full[at]);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto r = d.request("POST", "/v1/chat/completions", body.dump());
  REQUIRE(r.status == 200);
  const auto events = sse_payloads(r.body);
  REQUIRE(events.size() >= 3);
  REQUIRE(events.back() == "[DONE]");
  std::string streamed, finish;
  std::uint64_t prompt1 = 0;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    auto c = json::parse(events[i]);
    if (!c["usage"].is_null())
      prompt1 = c["usage"]["prompt_tokens"].get<std::uint64_t>();
    if (c["choices"].empty())
      continue;
    if (c["choices"][0]["delta"].contains("content"))
      streamed += c["choices"][0]["delta"]["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null())
      finish = c["choices"][0]["finish_reason"];
  }
  CHECK(finish == "stop");
  CHECK(streamed == full.substr(0, at));
  REQUIRE(prompt1 > 0);

  auto r2 = d.post_json("/v1/chat/completions",
                        chat_on_slow({{"user", first_question},
                                      {"assistant", streamed},
                                      {"user", "And then?"}},
                                     4));
  CHECK(r2["usage"]["prompt_tokens_details"]["cached_tokens"].get<std::uint64_t>() >= prompt1);
}
