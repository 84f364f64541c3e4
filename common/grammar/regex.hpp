#pragma once

// kvlane::grammar::regex_to_gbnf — JSON Schema `pattern` (a documented regex subset) as a GBNF
// expression over the characters of a JSON string's content.
//
// Subset: the pattern must be anchored (^...$); literals and escapes (\. \\ \/ \- \n ...), `.`,
// classes [a-z] [^...] with \d \w \s inside or outside them, groups ( ) and (?: ), alternation |,
// quantifiers * + ? {m} {m,} {m,n}. Anything else (backreferences, lookaround, lazy or possessive
// quantifiers, \b, Unicode properties) is an error naming it. The generated string never
// contains JSON escapes: `.` and negated classes exclude '"', '\\' and control characters,
// positive classes drop them, \s matches only a space; a literal '"' or '\\' in the pattern is
// written escaped (\" \\), which decodes to the character the pattern asks for.

#include "common/grammar/grammar.hpp"

#include <string>
#include <string_view>

namespace kvlane::grammar {

/// `where` prefixes error positions (the schema pointer of the pattern).
expected<std::string, error> regex_to_gbnf(std::string_view pattern, const std::string& where,
                                           const limits& lim = {});

/// A GBNF string literal spelling of raw text ("..." with escapes).
std::string gbnf_literal(std::string_view text);

} // namespace kvlane::grammar
