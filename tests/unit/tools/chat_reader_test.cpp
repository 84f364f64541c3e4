#include "tools/chat_command.hpp"

#include <doctest/doctest.h>

using kvlane::tools::chat_reader;
using kind = chat_reader::kind;

TEST_CASE("chat_reader: a line is a turn, a slash starts a command, blank lines are skipped") {
  chat_reader sut;
  auto turn = sut.feed("hello there");
  CHECK(turn.what == kind::turn);
  CHECK(turn.text == "hello there");
  auto cmd = sut.feed("  /clear  ");
  CHECK(cmd.what == kind::command);
  CHECK(cmd.text == "/clear");
  CHECK(sut.feed("").what == kind::none);
  CHECK(sut.feed("   \t").what == kind::none);
  CHECK(sut.feed("with CRLF\r").text == "with CRLF");
}

TEST_CASE("chat_reader: triple quotes join lines into one turn") {
  chat_reader sut;
  CHECK(sut.feed(R"("""first)").what == kind::none);
  CHECK(sut.open());
  CHECK(sut.feed("/not a command inside a block").what == kind::none);
  CHECK(sut.feed("").what == kind::none);
  auto turn = sut.feed(R"(last""")");
  CHECK_FALSE(sut.open());
  CHECK(turn.what == kind::turn);
  CHECK(turn.text == "first\n/not a command inside a block\n\nlast");
}

TEST_CASE("chat_reader: a block may open and close on one line or on lines of their own") {
  chat_reader sut;
  auto one = sut.feed(R"("""one line""")");
  CHECK(one.what == kind::turn);
  CHECK(one.text == "one line");
  CHECK(sut.feed(R"(""")").what == kind::none);
  CHECK(sut.feed("a").what == kind::none);
  auto closed = sut.feed(R"(""")");
  CHECK(closed.what == kind::turn);
  CHECK(closed.text == "a");
}

TEST_CASE("chat_reader: input that ends inside a block yields what the block holds") {
  chat_reader sut;
  sut.feed(R"("""unfinished)");
  sut.feed("second");
  auto rest = sut.finish();
  CHECK(rest.what == kind::turn);
  CHECK(rest.text == "unfinished\nsecond");
  CHECK(sut.finish().what == kind::none);
}
