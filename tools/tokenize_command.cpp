#include "tools/tokenize_command.hpp"

#include "backends/hf_tokenizer.hpp"

#include <charconv>
#include <istream>
#include <iterator>
#include <optional>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

namespace kvlane::tools {

namespace {

constexpr int exit_usage = 64;

constexpr std::string_view tokenize_usage =
    "usage: kvlane tokenize --tokenizer PATH [--no-special] [--json] [TEXT | -]\n"
    "print the token ids of TEXT, like Hugging Face encode: special tokens written in\n"
    "the text are recognised and the BOS is added when the tokenizer adds one\n"
    "  PATH           a model directory holding tokenizer.json, or the file itself\n"
    "  --no-special   special-token text is plain text, and no BOS is added\n"
    "  --json         print a JSON array instead of space-separated ids\n"
    "  TEXT           the text (default, or \"-\": read stdin)\n"
    "exit codes: 0 done, 1 the tokenizer did not load, 64 usage\n";

constexpr std::string_view detokenize_usage =
    "usage: kvlane detokenize --tokenizer PATH [ID... | -]\n"
    "write the raw bytes of the ids (none, or \"-\": read ids from stdin, separated\n"
    "by spaces, commas or brackets); special tokens write nothing\n"
    "  PATH           a model directory holding tokenizer.json, or the file itself\n"
    "exit codes: 0 done, 1 the tokenizer did not load or an id is outside it, 64 usage\n";

struct common_args {
  std::string tokenizer;
  bool no_special = false;
  bool json = false;
  std::vector<std::string_view> rest;
};

/// The parsed arguments, or the exit code when there is nothing to run: 0
/// after printing the usage for --help, exit_usage after a usage error.
std::variant<common_args, int> parse_args(std::span<const std::string_view> args, bool tokenize,
                                          std::ostream& out, std::ostream& err) {
  const auto usage = tokenize ? tokenize_usage : detokenize_usage;
  common_args a;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto arg = args[i];
    if (arg == "--tokenizer" && i + 1 < args.size()) {
      a.tokenizer = std::string(args[++i]);
    } else if (tokenize && arg == "--no-special") {
      a.no_special = true;
    } else if (tokenize && arg == "--json") {
      a.json = true;
    } else if (arg == "--help" || arg == "-h") {
      out << usage;
      return 0;
    } else if (arg.starts_with("--")) {
      err << "kvlane: unknown option '" << arg << "'\n" << usage;
      return exit_usage;
    } else {
      a.rest.push_back(arg);
    }
  }
  if (a.tokenizer.empty()) {
    err << "kvlane: --tokenizer PATH is required\n" << usage;
    return exit_usage;
  }
  if (tokenize && a.rest.size() > 1) {
    err << "kvlane: give the text as one argument (quote it), or \"-\" for stdin\n" << usage;
    return exit_usage;
  }
  return a;
}

std::string read_all(std::istream& in) {
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

} // namespace

int tokenize_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out,
                  std::ostream& err) {
  const auto parsed = parse_args(args, true, out, err);
  if (const int* code = std::get_if<int>(&parsed))
    return *code;
  const auto* a = &std::get<common_args>(parsed);
  auto tok = backends::hf_tokenizer::load(a->tokenizer);
  if (!tok) {
    err << "kvlane: " << tok.error().message << "\n";
    return 1;
  }
  const std::string text =
      a->rest.empty() || a->rest[0] == "-" ? read_all(in) : std::string(a->rest[0]);
  std::vector<backends::token_id> ids;
  if (!a->no_special)
    if (const auto bos = (*tok)->bos())
      ids.push_back(*bos);
  const auto body = (*tok)->encode(text, !a->no_special);
  ids.insert(ids.end(), body.begin(), body.end());

  out << (a->json ? "[" : "");
  for (std::size_t i = 0; i < ids.size(); ++i)
    out << (i == 0 ? "" : a->json ? "," : " ") << ids[i];
  out << (a->json ? "]\n" : "\n");
  return 0;
}

int detokenize_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out,
                    std::ostream& err) {
  const auto parsed = parse_args(args, false, out, err);
  if (const int* code = std::get_if<int>(&parsed))
    return *code;
  const auto* a = &std::get<common_args>(parsed);
  auto tok = backends::hf_tokenizer::load(a->tokenizer);
  if (!tok) {
    err << "kvlane: " << tok.error().message << "\n";
    return 1;
  }
  std::string input;
  if (a->rest.empty() || (a->rest.size() == 1 && a->rest[0] == "-")) {
    input = read_all(in);
  } else {
    for (const auto r : a->rest)
      input.append(r).push_back(' ');
  }
  std::vector<backends::token_id> ids;
  std::size_t i = 0;
  while (i < input.size()) {
    const char c = input[i];
    if (c == ' ' || c == ',' || c == '[' || c == ']' || c == '\n' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    backends::token_id id = 0;
    const auto [end, ec] = std::from_chars(input.data() + i, input.data() + input.size(), id);
    const auto length = static_cast<std::size_t>(end - (input.data() + i));
    if (ec != std::errc{} || length == 0) {
      std::size_t stop = i;
      while (stop < input.size() && input[stop] != ' ' && input[stop] != ',' && input[stop] != '\n')
        ++stop;
      err << "kvlane: '" << input.substr(i, stop - i) << "' is not a token id\n";
      return exit_usage;
    }
    if (id >= (*tok)->size()) {
      err << "kvlane: token id " << id << " is outside the vocabulary (size " << (*tok)->size()
          << ")\n";
      return 1;
    }
    ids.push_back(id);
    i += length;
  }
  out << (*tok)->decode(ids);
  return 0;
}

} // namespace kvlane::tools
