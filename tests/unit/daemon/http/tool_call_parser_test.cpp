#include "daemon/http/tool_call_parser.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace kvlane::daemon::http;
using kvlane::backends::tool_call_syntax;
using kind = tool_call_event::kind;

namespace {

struct answer {
  std::string text;
  std::vector<std::string> names, ids, arguments;
  std::vector<std::vector<std::string>> fragments; ///< per call
  std::vector<std::string> ended;                  ///< each end event's arguments
};

/// Feeds `pieces` in order and collects the events.
answer run(tool_call_syntax syntax, std::initializer_list<std::string_view> pieces) {
  tool_call_parser sut{syntax, "call_"};
  std::vector<tool_call_event> events;
  for (const auto p : pieces)
    sut.feed(p, events);
  sut.finish(events);
  answer a;
  for (const auto& e : events) {
    switch (e.k) {
    case kind::text: a.text += e.text; break;
    case kind::begin:
      CHECK(e.index == a.names.size());
      a.names.push_back(e.text);
      a.ids.push_back(e.id);
      a.arguments.emplace_back();
      a.fragments.emplace_back();
      break;
    case kind::arguments:
      REQUIRE(e.index < a.arguments.size());
      a.arguments[e.index] += e.text;
      a.fragments[e.index].push_back(e.text);
      break;
    case kind::end: a.ended.push_back(e.text); break;
    }
  }
  return a;
}

/// `text` fed one byte at a time.
std::vector<std::string_view> bytes_of(std::string_view text) {
  std::vector<std::string_view> out;
  for (std::size_t i = 0; i < text.size(); ++i)
    out.push_back(text.substr(i, 1));
  return out;
}

answer run_bytes(tool_call_syntax syntax, std::string_view text) {
  tool_call_parser sut{syntax, "call_"};
  std::vector<tool_call_event> events;
  for (auto b : bytes_of(text))
    sut.feed(b, events);
  sut.finish(events);
  answer a;
  for (const auto& e : events) {
    if (e.k == kind::text)
      a.text += e.text;
    else if (e.k == kind::begin) {
      a.names.push_back(e.text);
      a.arguments.emplace_back();
    } else if (e.k == kind::arguments)
      a.arguments[e.index] += e.text;
  }
  return a;
}

} // namespace

TEST_CASE("tool_call_parser: hermes calls become calls and the text around them stays text") {
  const auto sut = run(tool_call_syntax::hermes,
                       {"Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                        "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
                        "</tool_call>\n"});
  CHECK(sut.text == "Let me check.\n");
  CHECK(sut.names == std::vector<std::string>{"get_weather", "get_time"});
  CHECK(sut.ids == std::vector<std::string>{"call_0", "call_1"});
  CHECK(sut.arguments == std::vector<std::string>{R"({"city": "Paris"})", "{}"});
  CHECK(sut.ended == sut.arguments);
}

TEST_CASE("tool_call_parser: the name comes out as soon as it is complete, the arguments as they arrive") {
  tool_call_parser sut{tool_call_syntax::hermes, "id-"};
  std::vector<tool_call_event> events;
  sut.feed("<tool_call>\n{\"name\": \"get_wea", events);
  CHECK(events.empty());
  sut.feed("ther\", \"arguments\": {\"ci", events);
  REQUIRE(events.size() == 2);
  CHECK(events[0].k == kind::begin);
  CHECK(events[0].text == "get_weather");
  CHECK(events[0].id == "id-0");
  CHECK(events[1].k == kind::arguments);
  CHECK(events[1].text == "{\"ci");
  events.clear();
  sut.feed("ty\": \"}\"}}\n</tool", events);
  REQUIRE(events.size() == 2);
  CHECK(events[0].text == "ty\": \"}\"}"); // a brace inside a string does not end the arguments
  CHECK(events[1].k == kind::end);
  CHECK(events[1].text == "{\"city\": \"}\"}");
  events.clear();
  sut.feed("_call>", events);
  sut.finish(events);
  CHECK(events.empty());
  CHECK(sut.calls() == 1);
}

TEST_CASE("tool_call_parser: split at every byte, the result is the same") {
  const std::string_view text =
    "Sure <tool_call>{\"name\":\"f\",\"arguments\":{\"a\":[1,{\"b\":\"x\\\"}\"}]}}</tool_call> done";
  const auto sut = run_bytes(tool_call_syntax::hermes, text);
  CHECK(sut.text == "Sure  done");
  CHECK(sut.names == std::vector<std::string>{"f"});
  CHECK(sut.arguments == std::vector<std::string>{R"({"a":[1,{"b":"x\"}"}]})"});
}

TEST_CASE("tool_call_parser: text that only looks like an opening is held, then given back") {
  CHECK(run(tool_call_syntax::hermes, {"a <tool", "_x> b"}).text == "a <tool_x> b");
  CHECK(run(tool_call_syntax::hermes, {"ends with <tool_c"}).text == "ends with <tool_c");
  // An opening followed by something that never becomes a call: all of it is text.
  const auto junk = run(tool_call_syntax::hermes, {"<tool_call>not json</tool_call>"});
  CHECK(junk.text == "<tool_call>not json</tool_call>");
  CHECK(junk.names.empty());
  const auto no_name = run(tool_call_syntax::hermes, {"<tool_call>{\"x\": 1}</tool_call>"});
  CHECK(no_name.text == "<tool_call>{\"x\": 1}</tool_call>");
  CHECK(no_name.names.empty());
}

TEST_CASE("tool_call_parser: a call in another key order is read whole when it closes") {
  const auto sut = run(tool_call_syntax::hermes,
                       {"<tool_call>{\"arguments\": {\"q\": 1}, ", "\"name\": \"search\"}</tool_call>"});
  CHECK(sut.text.empty());
  CHECK(sut.names == std::vector<std::string>{"search"});
  CHECK(sut.arguments == std::vector<std::string>{R"({"q":1})"});
}

TEST_CASE("tool_call_parser: a call cut short ends with the arguments it has") {
  const auto sut = run(tool_call_syntax::hermes, {"<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1"});
  CHECK(sut.names == std::vector<std::string>{"f"});
  CHECK(sut.ended == std::vector<std::string>{"{\"a\": 1"});
  // Cut short before its name: neither a call nor text (it is no answer text).
  const auto head = run(tool_call_syntax::hermes, {"Calling. <tool_call>{\"name\": \"f"});
  CHECK(head.names.empty());
  CHECK(head.text == "Calling. ");
}

TEST_CASE("tool_call_parser: llama3 calls are the answer's JSON object, with parameters") {
  const auto sut = run(tool_call_syntax::llama3, {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}"});
  CHECK(sut.text.empty());
  CHECK(sut.names == std::vector<std::string>{"get_weather"});
  CHECK(sut.arguments == std::vector<std::string>{R"({"city": "Oslo"})"});
  const auto plain = run(tool_call_syntax::llama3, {"{\"answer\": 42} is JSON but not a call"});
  CHECK(plain.text == "{\"answer\": 42} is JSON but not a call");
  CHECK(plain.names.empty());
  const auto bad = run(tool_call_syntax::llama3, {"{\"name\" is what I call it"});
  CHECK(bad.text == "{\"name\" is what I call it");
}

TEST_CASE("tool_call_parser: without a tool syntax everything is text") {
  const auto sut = run(tool_call_syntax::none, {"<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"});
  CHECK(sut.text == "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
  CHECK(sut.names.empty());
}
