// kvlane-tokbench: encode throughput of kvlane's Hugging Face tokenizer on one
// core, and of the reference tokenizer (@lenml/tokenizers under node) on the
// same texts in the same run, with the ratio (docs/benchmarks.md, "Tokenizer").
//
//   kvlane-tokbench --tokenizer MODEL_DIR --input FILE [--repeat N]
//                   [--node-modules DIR] [--reference-script PATH]
//
// FILE holds the texts: a JSON array of strings if it ends in .json (the
// tokenizer test corpus, e.g. build/tokenizer-data/corpus.json), else one text
// per line. Each side encodes every text once untimed (warm-up: kvlane's word
// cache, node's JIT), then REPEAT times timed, as Hugging Face encode without
// post-processing: added tokens recognised, no BOS.
// The process runs pinned to one CPU; node is single-threaded. It prints
// figures and the ratio; it asserts nothing. Needs node and the npm packages
// (scripts/fetch-test-vocab DIR puts them in DIR/node_modules) for the reference.
#include "backends/hf_tokenizer.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sched.h>
#include <string>
#include <string_view>
#include <vector>

namespace {

int usage(const char* why) {
  std::fprintf(stderr,
               "kvlane-tokbench: %s\nusage: kvlane-tokbench --tokenizer MODEL_DIR --input FILE "
               "[--repeat N] [--node-modules DIR] [--reference-script PATH]\n",
               why);
  return 64;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

} // namespace

int main(int argc, char** argv) {
  std::string tokenizer_dir;
  std::string input;
  std::string node_modules;
  std::string script = std::string(KVLANE_SOURCE_DIR) + "/tests/tokenizer/reference.js";
  int repeat = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--tokenizer" && has_value)
      tokenizer_dir = argv[++i];
    else if (a == "--input" && has_value)
      input = argv[++i];
    else if (a == "--repeat" && has_value)
      repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--node-modules" && has_value)
      node_modules = argv[++i];
    else if (a == "--reference-script" && has_value)
      script = argv[++i];
    else
      return usage(("unknown or incomplete argument '" + std::string(a) + "'").c_str());
  }
  if (tokenizer_dir.empty() || input.empty())
    return usage("--tokenizer and --input are required");

  std::ifstream in(input, std::ios::binary);
  if (!in)
    return usage(("cannot read " + input).c_str());
  const std::string raw{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<std::string> texts;
  if (input.ends_with(".json")) {
    texts = nlohmann::json::parse(raw).get<std::vector<std::string>>();
  } else {
    std::size_t start = 0;
    for (std::size_t nl; (nl = raw.find('\n', start)) != std::string::npos; start = nl + 1)
      texts.push_back(raw.substr(start, nl - start));
    texts.push_back(raw.substr(start));
  }

  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  sched_setaffinity(0, sizeof one, &one); // node below inherits the same single CPU

  const auto load_start = std::chrono::steady_clock::now();
  auto tok = kvlane::backends::hf_tokenizer::load(tokenizer_dir);
  if (!tok) {
    std::fprintf(stderr, "kvlane-tokbench: %s\n", tok.error().message.c_str());
    return 1;
  }
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();

  std::size_t bytes = 0;
  std::size_t tokens = 0;
  for (const auto& t : texts)
    (void)(*tok)->encode(t, true);
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < repeat; ++r)
    for (const auto& t : texts) {
      tokens += (*tok)->encode(t, true).size();
      bytes += t.size();
    }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double kvlane_mbs = static_cast<double>(bytes) / seconds / 1e6;
  fmt::print("texts {} ({} bytes per pass), {} timed passes, one CPU\n", texts.size(), bytes / repeat,
             repeat);
  fmt::print("kvlane     load {:.2f} s   encode {:.1f} MB/s  {:.2f} M tokens/s  ({} tokens in {:.3f} s)\n",
             load_s, kvlane_mbs, static_cast<double>(tokens) / seconds / 1e6, tokens, seconds);

  if (node_modules.empty()) {
    fmt::print("reference  skipped (no --node-modules)\n");
    return 0;
  }
  const std::string cmd = "NODE_PATH=" + shell_quote(node_modules) + " node " + shell_quote(script)
                          + " bench " + shell_quote(tokenizer_dir) + " " + shell_quote(input) + " "
                          + std::to_string(repeat);
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    std::fprintf(stderr, "kvlane-tokbench: cannot run node\n");
    return 1;
  }
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;)
    out.append(buf, n);
  if (::pclose(p) != 0) {
    std::fprintf(stderr, "kvlane-tokbench: the reference failed: %s\n", cmd.c_str());
    return 1;
  }
  const auto r = nlohmann::json::parse(out, nullptr, false);
  if (r.is_discarded() || !r.contains("seconds")) {
    std::fprintf(stderr, "kvlane-tokbench: unexpected reference output: %s\n", out.c_str());
    return 1;
  }
  const double ref_seconds = r["seconds"].get<double>();
  const double ref_bytes = r["bytes"].get<double>();
  const double ref_mbs = ref_bytes / ref_seconds / 1e6;
  fmt::print("reference  encode {:.1f} MB/s  {:.2f} M tokens/s  ({} tokens in {:.3f} s)\n", ref_mbs,
             r["tokens"].get<double>() / ref_seconds / 1e6, r["tokens"].get<std::size_t>(), ref_seconds);
  fmt::print("ratio      kvlane / reference = {:.1f}x{}\n", kvlane_mbs / ref_mbs,
             r["tokens"].get<std::size_t>() == tokens ? "" : "  (token counts differ!)");
  return 0;
}
