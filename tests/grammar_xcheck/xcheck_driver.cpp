// kvlane-grammar-xcheck-driver: kvlane's side of the cross-check against xgrammar
// (tests/grammar_xcheck/README.md).
//
//   kvlane-grammar-xcheck-driver CORPUS.json OUT.json [--seed S] [--walks N] [--steps N]
//
// For every case of the corpus (a JSON Schema or a GBNF grammar, with example documents) it
// writes what kvlane decides: the grammar text both engines compile (a schema's GBNF as
// compile_json_schema generates it), each example's verdict byte by byte (how many bytes are
// accepted, whether the whole is a sentence), and seeded random token walks over a synthetic
// byte-level vocabulary with the full token mask at every step. xcheck.mjs replays the same
// bytes and tokens through xgrammar and compares every decision.
//
// The vocabulary: ids 0..255 are the single bytes; then pieces of the corpus' examples and
// literals, JSON punctuation, multi-byte UTF-8 characters (whole and cut), and random bytes,
// seeded; the last id is the end token (no bytes). The masks come from mask_cache (what the
// scheduler calls) and are checked here against fill_mask; a difference is a failure of its own.
//
// Exit status: 0 when OUT was written (disagreements are judged by xcheck.mjs), 1 when a case
// does not compile in kvlane although it should (or compiles although it must be refused, or is
// refused without naming the keyword), or the mask variants differ.

#include "common/grammar/gbnf.hpp"
#include "common/grammar/json_schema.hpp"
#include "common/grammar/mask_cache.hpp"
#include "common/grammar/vocabulary.hpp"
#include "common/random.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using json = nlohmann::ordered_json;
using namespace kvlane;

std::string hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

/// A mask as hex, bit i of the vocabulary at nibble i/4 (little-endian nibbles: the first hex
/// digit holds ids 0..3, its lowest bit id 0).
std::string mask_hex(std::span<const std::uint64_t> bits, std::uint32_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve((n + 3) / 4);
  for (std::uint32_t d = 0; d * 4 < n; ++d) {
    unsigned nibble = 0;
    for (std::uint32_t i = d * 4; i < std::min(n, d * 4 + 4); ++i)
      if ((bits[i / 64] >> (i % 64)) & 1u) nibble |= 1u << (i % 4);
    out += digits[nibble];
  }
  return out;
}

/// The synthetic vocabulary; the end token is appended by the caller.
std::vector<std::string> make_vocabulary(const json& corpus, std::uint64_t seed) {
  std::set<std::string> seen;
  std::vector<std::string> out;
  auto add = [&](std::string t) {
    if (t.empty() || !seen.insert(t).second) return;
    out.push_back(std::move(t));
  };
  for (unsigned b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
  auto rng = xoshiro256_seed(seed);
  auto below = [&](std::size_t n) { return static_cast<std::size_t>(xoshiro256_next(rng) % n); };
  // Pieces of the examples: the tokens a model would produce for such documents.
  std::vector<std::string> texts;
  for (const auto& c : corpus["cases"]) {
    for (const char* key : {"valid", "invalid"})
      if (c.contains(key))
        for (const auto& e : c[key]) texts.push_back(e.get<std::string>());
  }
  for (const auto& t : texts) {
    for (int k = 0; k < 24 && !t.empty(); ++k) {
      const std::size_t len = 2 + below(7);
      const std::size_t at = below(t.size());
      add(t.substr(at, len));
    }
  }
  for (const char* t : {"{\"", "\":", "\":\"", "\",\"", "\"}", "\"]", "},", "}]", "[{", "[]", "{}", "\":{",
                        "true", "false", "null", "tr", "ue", "nul", ",\"", "\\\"", "\\n", "\\u00", "\\u",
                        "0.", ".5", "e+", "E-", "-0", "00", "123", "2024", "-01", "T12", ":00", "Z\"",
                        " ", "  ", "\n", "\t", " \"", "é", "中", "😀", "ω", "\xC3", "\xA9", "\xE4\xB8",
                        "\xF0\x9F", "\x98\x80", "\xED\xA0\x80", "\xC0\xAF", "\xF4\x90\x80\x80", "\xFF"})
    add(t);
  // Random printable runs and random bytes (invalid UTF-8 included).
  for (int k = 0; k < 300; ++k) {
    std::string t;
    const std::size_t len = 2 + below(5);
    for (std::size_t i = 0; i < len; ++i) t += static_cast<char>(0x20 + below(0x5F));
    add(std::move(t));
  }
  for (int k = 0; k < 150; ++k) {
    std::string t;
    const std::size_t len = 2 + below(3);
    for (std::size_t i = 0; i < len; ++i) t += static_cast<char>(below(256));
    add(std::move(t));
  }
  return out;
}

struct verdict {
  std::size_t accepted = 0; ///< bytes accepted before the first rejected one
  bool complete = false;    ///< all bytes accepted and the grammar can end there
};

verdict judge(const std::shared_ptr<const grammar::grammar>& g, std::string_view text) {
  grammar::matcher m{g};
  verdict v;
  for (char c : text) {
    if (!m.feed(static_cast<std::uint8_t>(c))) return v;
    ++v.accepted;
  }
  v.complete = m.can_end();
  return v;
}

int fail(const std::string& what) {
  std::fprintf(stderr, "kvlane-grammar-xcheck-driver: %s\n", what.c_str());
  return 1;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: kvlane-grammar-xcheck-driver CORPUS.json OUT.json [--seed S] [--walks N] [--steps N]\n");
    return 64;
  }
  std::uint64_t seed = 22;
  std::size_t walks = 6, steps = 48;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--seed") seed = std::stoull(argv[i + 1]);
    else if (a == "--walks") walks = std::stoul(argv[i + 1]);
    else if (a == "--steps") steps = std::stoul(argv[i + 1]);
    else return fail("unknown option " + a);
  }
  json corpus;
  try {
    std::ifstream in{argv[1]};
    if (!in) return fail(std::string{"cannot read "} + argv[1]);
    corpus = json::parse(in);
  } catch (const std::exception& e) {
    return fail(std::string{argv[1]} + ": " + e.what());
  }

  std::vector<std::string> tokens = make_vocabulary(corpus, seed);
  const auto end_id = static_cast<std::uint32_t>(tokens.size());
  tokens.emplace_back(); // the end token: no bytes
  const std::vector<std::uint32_t> ends{end_id};
  auto vocab = std::make_shared<const grammar::vocabulary>(tokens, ends);
  const auto n = vocab->size();

  json out;
  out["seed"] = seed;
  out["vocab"] = json::array();
  for (const auto& t : tokens) out["vocab"].push_back(hex(t));
  out["end"] = end_id;
  out["cases"] = json::array();

  auto rng_state = xoshiro256_seed(seed ^ 0x78636865636bull);
  auto rng = [&rng_state] { return xoshiro256_next(rng_state); };
  std::vector<std::uint64_t> bits(vocab->words()), check(vocab->words());
  int status = 0;
  for (const auto& c : corpus["cases"]) {
    json r;
    r["name"] = c["name"];
    std::string text;
    if (c.contains("schema")) {
      const std::string schema = c["schema"].dump();
      r["schema"] = schema;
      auto gbnf = grammar::json_schema_to_gbnf(schema);
      if (c.contains("error")) { // a schema kvlane must refuse, naming the keyword
        const std::string keyword = c["error"].get<std::string>();
        if (gbnf) status = fail(c["name"].get<std::string>() + ": compiled, but must be refused naming '" + keyword + "'");
        else if (gbnf.error().message().find("'" + keyword + "'") == std::string::npos)
          status = fail(c["name"].get<std::string>() + ": the error does not name '" + keyword + "': " + gbnf.error().message());
        r["error"] = gbnf ? std::string{"(compiled)"} : gbnf.error().message();
        out["cases"].push_back(std::move(r));
        continue;
      }
      if (!gbnf) {
        r["error"] = gbnf.error().message();
        status = fail(c["name"].get<std::string>() + ": " + gbnf.error().message());
        out["cases"].push_back(std::move(r));
        continue;
      }
      text = *gbnf;
    } else {
      text = c["gbnf"].get<std::string>();
    }
    r["gbnf"] = c.contains("gbnf_xgrammar") ? c["gbnf_xgrammar"].get<std::string>() : text;
    auto g = grammar::compile_gbnf(text);
    if (!g) {
      r["error"] = g.error().message();
      status = fail(c["name"].get<std::string>() + ": " + g.error().message());
      out["cases"].push_back(std::move(r));
      continue;
    }
    r["examples"] = json::array();
    for (const char* key : {"valid", "invalid"}) {
      if (!c.contains(key)) continue;
      for (const auto& e : c[key]) {
        const std::string s = e.get<std::string>();
        const verdict v = judge(*g, s);
        r["examples"].push_back({{"text", hex(s)}, {"expect", std::string{key} == "valid"},
                                 {"accepted", v.accepted}, {"complete", v.complete}});
      }
    }
    grammar::mask_cache cache{*g, vocab};
    r["walks"] = json::array();
    for (std::size_t w = 0; w < walks; ++w) {
      grammar::matcher m{*g};
      json walk{{"tokens", json::array()}, {"masks", json::array()}};
      for (std::size_t s = 0; s < steps; ++s) {
        cache.fill(m, bits);
        grammar::fill_mask(m, *vocab, check);
        if (bits != check) {
          status = fail(c["name"].get<std::string>() + ": mask_cache and fill_mask differ at walk " +
                        std::to_string(w) + " step " + std::to_string(s));
          break;
        }
        walk["masks"].push_back(mask_hex(bits, n));
        std::vector<std::uint32_t> allowed;
        for (std::uint32_t id = 0; id < n; ++id)
          if (id != end_id && ((bits[id / 64] >> (id % 64)) & 1u)) allowed.push_back(id);
        const bool can_end = (bits[end_id / 64] >> (end_id % 64)) & 1u;
        // End now and then where allowed (more often late in the walk), else any allowed token.
        if (can_end && (allowed.empty() || rng() % (s + 8 > steps ? 2 : 6) == 0)) {
          walk["tokens"].push_back(end_id);
          break;
        }
        if (allowed.empty()) break;
        const std::uint32_t t = allowed[rng() % allowed.size()];
        if (!m.feed(vocab->bytes(t))) {
          status = fail(c["name"].get<std::string>() + ": a token from the mask was rejected");
          break;
        }
        walk["tokens"].push_back(t);
      }
      r["walks"].push_back(std::move(walk));
    }
    out["cases"].push_back(std::move(r));
  }
  std::ofstream o{argv[2]};
  o << out.dump() << '\n';
  if (!o) return fail(std::string{"cannot write "} + argv[2]);
  return status;
}
