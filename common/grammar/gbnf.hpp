#pragma once

// kvlane::grammar::compile_gbnf — the GBNF grammar text format (llama.cpp's), compiled to a
// grammar.
//
// Format: rules `name ::= body`, one per line (a body may start on the line after `::=` and
// continues on the next line after `|` or inside parentheses); `root` is the start rule; `# comment` to the end of a line. A body is
// alternatives separated by `|`, each a sequence of: "literal" (escapes \n \r \t \\ \" \' \[
// \] \xHH \uHHHH \UHHHHHHHH), a class [a-z0-9_] or [^"\\] (same escapes, ranges of code
// points), `.` (any character), a rule name, or ( group ); each may be followed by *, +, ?,
// {m}, {m,} or {m,n}. Characters are Unicode code points matched as UTF-8.
//
// Errors name line:column and what is wrong. Limits (grammar.hpp `limits`) bound rule count,
// nesting depth, repetition bounds and the expanded size. Left recursion is an error (the
// matcher is a pushdown automaton without it; repetition covers every list in practice).

#include "common/grammar/grammar.hpp"

namespace kvlane::grammar {

expected<std::shared_ptr<const grammar>, error> compile_gbnf(std::string_view text,
                                                             const limits& lim = {});

} // namespace kvlane::grammar
