#pragma once

// kvlane tokenize / kvlane detokenize — a model's tokenizer on the command line.
//
//   kvlane tokenize --tokenizer PATH [--no-special] [--json] [TEXT | -]
//   kvlane detokenize --tokenizer PATH [ID... | -]
//
// tokenize prints the ids of TEXT (stdin when TEXT is "-" or absent), space
// separated, or as a JSON array with --json. By default it behaves like
// Hugging Face's `encode`: special tokens written in the text are recognised
// and the BOS is prepended if the tokenizer's post-processor adds one.
// --no-special recognises none and adds no BOS (how kvlane encodes untrusted
// message text). detokenize writes the raw bytes of the ids (arguments, or
// stdin separated by spaces, commas or brackets, so a JSON array works);
// special tokens write nothing.
//
// `--help` (`-h`) writes the usage to `out` and returns 0.
// Exit codes: 0 done, 1 the tokenizer did not load or an id is outside it, 64 usage.

#include <iosfwd>
#include <span>
#include <string_view>

namespace kvlane::tools {

int tokenize_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out,
                  std::ostream& err);
int detokenize_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out,
                    std::ostream& err);

} // namespace kvlane::tools
