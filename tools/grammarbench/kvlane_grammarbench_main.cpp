// kvlane-grammarbench: what structured output costs on the host (docs/benchmarks.md, "Grammar
// masks"). Prints the compile time of a realistic 20-field JSON Schema, the time to compute the
// token mask per step over greedy-random walks on a real vocabulary, and the same mask computed
// token by token from scratch (the naive baseline) on the same states, in the same run.
//
//   kvlane-grammarbench [--vocab FILE.gguf] [--tokens N] [--seed S] [--no-max-length]
//                       [--schema FILE.json] [--cache-only]
//
// --schema replaces the built-in schema (tools/grammarbench/shapes_schema.json has other shapes:
// many enums, nested arrays, long free strings); --cache-only times the mask cache alone
// (checked against the naive mask on the sampled steps), for profiling and quick runs.
// --no-max-length drops every minLength/maxLength from the schema (most schemas from Pydantic
// or OpenAI's strict mode have none).

#include "common/grammar/json_schema.hpp"
#include "common/grammar/mask_cache.hpp"
#include "common/grammar/memo_walk.hpp"
#include "common/grammar/vocabulary.hpp"
#include "common/random.hpp"
#include "tools/grammarbench/gguf_vocab.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
using namespace kvlane;

const char* const schema = R"({
  "type": "object",
  "properties": {
    "order_id": {"type": "string", "format": "uuid"},
    "created_at": {"type": "string", "format": "date-time"},
    "status": {"enum": ["pending", "paid", "shipped", "delivered", "cancelled"]},
    "customer_name": {"type": "string", "minLength": 1, "maxLength": 40},
    "email": {"type": "string", "pattern": "^[a-z0-9._]{1,20}@[a-z0-9]{1,15}\\.(com|org|net)$"},
    "age": {"type": "integer", "minimum": 18, "maximum": 120},
    "vip": {"type": "boolean"},
    "loyalty_points": {"type": "integer", "minimum": 0, "maximum": 1000000},
    "currency": {"enum": ["EUR", "USD", "KRW", "JPY"]},
    "total": {"type": "number", "minimum": 0},
    "discount_code": {"type": ["string", "null"], "maxLength": 12},
    "shipping_address": {
      "type": "object",
      "properties": {
        "street": {"type": "string", "maxLength": 60},
        "city": {"type": "string", "maxLength": 30},
        "postal_code": {"type": "string", "pattern": "^[0-9]{5}$"},
        "country": {"type": "string", "minLength": 2, "maxLength": 2}
      },
      "required": ["street", "city", "postal_code", "country"],
      "additionalProperties": false
    },
    "items": {
      "type": "array",
      "minItems": 1,
      "maxItems": 5,
      "items": {
        "type": "object",
        "properties": {
          "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
          "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
          "unit_price": {"type": "number", "minimum": 0}
        },
        "required": ["sku", "quantity", "unit_price"],
        "additionalProperties": false
      }
    },
    "gift": {"type": "boolean"},
    "gift_message": {"type": "string", "maxLength": 80},
    "delivery_date": {"type": "string", "format": "date"},
    "priority": {"type": "integer", "minimum": 1, "maximum": 5},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 15}, "maxItems": 4},
    "notes": {"type": "string", "maxLength": 100},
    "source": {"anyOf": [{"const": "web"}, {"const": "app"}, {"type": "string", "maxLength": 10}]}
  },
  "required": ["order_id", "created_at", "status", "customer_name", "age", "items", "total", "currency"],
  "additionalProperties": false
})";

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto k = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(k, v.size() - 1)];
}

} // namespace

int main(int argc, char** argv) {
  std::string vocab_path = std::string(KVLANE_GRAMMAR_VOCAB_DIR) + "/ggml-vocab-qwen2.gguf";
  std::size_t tokens = 400;
  std::uint64_t seed = 1;
  bool no_max_length = false, cache_only = false;
  std::string schema_path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--vocab" && i + 1 < argc) vocab_path = argv[++i];
    else if (a == "--schema" && i + 1 < argc) schema_path = argv[++i];
    else if (a == "--cache-only") cache_only = true;
    else if (a == "--tokens" && i + 1 < argc) tokens = std::stoul(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::stoull(argv[++i]);
    else if (a == "--no-max-length") no_max_length = true;
    else {
      std::fprintf(stderr, "usage: kvlane-grammarbench [--vocab FILE.gguf] [--tokens N] [--seed S] [--no-max-length] "
                           "[--schema FILE.json] [--cache-only]\n");
      return 64;
    }
  }

  auto loaded = tools::load_gguf_vocab(vocab_path);
  if (!loaded) {
    std::fprintf(stderr, "kvlane-grammarbench: %s\n", loaded.error().c_str());
    return 1;
  }
  auto t0 = clock_type::now();
  const auto shared_vocab = std::make_shared<const grammar::vocabulary>(loaded->tokens, loaded->end_tokens);
  const grammar::vocabulary& vocab = *shared_vocab;
  const double vocab_us = us_since(t0);
  std::printf("vocabulary: %s, %u tokens, %zu trie nodes, built in %.1f ms (once per model)\n",
              vocab_path.c_str(), vocab.size(), vocab.trie_nodes(), vocab_us / 1000);

  std::string schema_text = schema;
  if (!schema_path.empty()) {
    std::FILE* f = std::fopen(schema_path.c_str(), "rb");
    if (f == nullptr) {
      std::fprintf(stderr, "kvlane-grammarbench: cannot open %s\n", schema_path.c_str());
      return 1;
    }
    schema_text.clear();
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) schema_text.append(buf, n);
    std::fclose(f);
  }
  if (no_max_length) {
    auto doc = nlohmann::ordered_json::parse(schema_text);
    auto strip = [](auto& self, nlohmann::ordered_json& j) -> void {
      if (j.is_object()) {
        j.erase("minLength");
        j.erase("maxLength");
      }
      if (j.is_structured())
        for (auto& x : j) self(self, x);
    };
    strip(strip, doc);
    schema_text = doc.dump();
  }
  std::vector<double> compile_us;
  std::shared_ptr<const grammar::grammar> g;
  for (int k = 0; k < 20; ++k) {
    t0 = clock_type::now();
    auto c = grammar::compile_json_schema(schema_text);
    compile_us.push_back(us_since(t0));
    if (!c) {
      std::fprintf(stderr, "kvlane-grammarbench: schema: %s\n", c.error().message().c_str());
      return 1;
    }
    g = *c;
  }
  std::printf("compile (%s%s, %zu grammar elements): p50 %.2f ms, max %.2f ms over 20 runs\n",
              schema_path.empty() ? "20-field schema" : schema_path.c_str(), no_max_length ? " without length bounds" : "",
              g->elements().size(), percentile(compile_us, 0.5) / 1000,
              percentile(compile_us, 1.0) / 1000);

  // Greedy-random walks: each step computes the mask, then picks a random allowed token,
  // preferring (3 in 4) the longest allowed token among 64 random draws so documents finish.
  std::uint64_t rng = seed;
  std::vector<std::uint64_t> bits(vocab.words()), naive_bits(vocab.words());
  std::vector<double> mask_us, naive_us, cached_us, memo_us;
  std::vector<std::size_t> sampled; // the steps the naive mask was measured on
  std::vector<std::uint64_t> cached_bits(vocab.words());
  grammar::mask_cache cache{g, shared_vocab};
  std::vector<std::uint32_t> allowed;
  std::size_t documents = 0, mismatches = 0;
  grammar::matcher m{g};
  for (std::size_t step = 0; step < tokens; ++step) {
    if (cache_only) {
      t0 = clock_type::now();
      cache.fill(m, bits);
      cached_us.push_back(us_since(t0));
      mask_us.push_back(cached_us.back());
      memo_us.push_back(cached_us.back());
    } else {
      t0 = clock_type::now();
      grammar::fill_mask(m, vocab, bits);
      mask_us.push_back(us_since(t0));
      t0 = clock_type::now();
      grammar::fill_mask_memo(m, vocab, cached_bits);
      memo_us.push_back(us_since(t0));
      if (cached_bits != bits) ++mismatches;
      t0 = clock_type::now();
      cache.fill(m, cached_bits);
      cached_us.push_back(us_since(t0));
      if (cached_bits != bits) ++mismatches;
    }
    if (step % 20 == 0) {
      t0 = clock_type::now();
      grammar::fill_mask_naive(m, vocab, naive_bits);
      naive_us.push_back(us_since(t0));
      sampled.push_back(step);
      if (naive_bits != bits) ++mismatches;
    }
    allowed.clear();
    for (std::uint32_t id = 0; id < vocab.size(); ++id)
      if ((bits[id >> 6] >> (id & 63)) & 1) allowed.push_back(id);
    bool end_allowed = false;
    for (std::uint32_t e : vocab.end_tokens()) end_allowed = end_allowed || ((bits[e >> 6] >> (e & 63)) & 1);
    if (allowed.empty() || (end_allowed && !m.can_continue())) {
      ++documents;
      m = grammar::matcher{g};
      continue;
    }
    std::uint32_t pick = allowed[splitmix64(rng) % allowed.size()];
    if (splitmix64(rng) % 4 != 0) {
      for (int d = 0; d < 64; ++d) {
        std::uint32_t c = allowed[splitmix64(rng) % allowed.size()];
        if (vocab.bytes(c).size() > vocab.bytes(pick).size()) pick = c;
      }
    }
    if (vocab.bytes(pick).empty()) { // an end token
      ++documents;
      m = grammar::matcher{g};
      continue;
    }
    if (!m.feed(vocab.bytes(pick))) {
      std::fprintf(stderr, "kvlane-grammarbench: a token from the mask was rejected\n");
      return 1;
    }
  }
  if (cache_only) { // the other methods did not run
    const auto st = cache.counters();
    std::printf("mask per token (mask cache): p50 %.1f us, p99 %.1f us, max %.1f us over %zu steps (%zu documents "
                "completed; %zu entries, %.1f MiB, %zu hits, %zu plain walks)\n",
                percentile(cached_us, 0.5), percentile(cached_us, 0.99), percentile(cached_us, 1.0), cached_us.size(),
                documents, st.entries, static_cast<double>(st.bytes) / (1 << 20), st.hits, st.plain_walks);
    std::printf("mask per token (naive, every token from scratch): p50 %.1f us over %zu of the same states; masks "
                "differing from the naive one: %zu\n", percentile(naive_us, 0.5), naive_us.size(), mismatches);
    return mismatches == 0 ? 0 : 1;
  }
  const double p50 = percentile(mask_us, 0.5), p99 = percentile(mask_us, 0.99);
  const double naive50 = percentile(naive_us, 0.5);
  std::printf("mask per token (trie walk): p50 %.1f us, p99 %.1f us, max %.1f us over %zu steps "
              "(%zu documents completed)\n", p50, p99, percentile(mask_us, 1.0), mask_us.size(), documents);
  std::printf("mask per token (naive, every token from scratch): p50 %.1f us, p99 %.1f us over %zu "
              "of the same states\n", naive50, percentile(naive_us, 0.99), naive_us.size());
  std::printf("mask per token (trie walk, memoized states): p50 %.1f us, p99 %.1f us, max %.1f us over the same %zu steps\n",
              percentile(memo_us, 0.5), percentile(memo_us, 0.99), percentile(memo_us, 1.0), memo_us.size());
  const auto st = cache.counters();
  std::printf("mask per token (mask cache): p50 %.1f us, p99 %.1f us, max %.1f us over the same %zu steps "
              "(%zu entries, %.1f MiB, %zu hits, %zu plain walks)\n",
              percentile(cached_us, 0.5), percentile(cached_us, 0.99), percentile(cached_us, 1.0),
              cached_us.size(), st.entries, static_cast<double>(st.bytes) / (1 << 20), st.hits, st.plain_walks);
  // Ratios on the sampled steps only, each method against the naive mask on the same state.
  auto ratio = [&](const std::vector<double>& t) {
    std::vector<double> r;
    for (std::size_t k = 0; k < sampled.size(); ++k) r.push_back(naive_us[k] / std::max(t[sampled[k]], 0.01));
    return percentile(r, 0.5);
  };
  std::printf("naive / method on the same %zu states (median ratio): trie walk %.0fx, memoized %.0fx, "
              "mask cache %.0fx; masks differing from the trie walk's: %zu\n",
              sampled.size(), ratio(mask_us), ratio(memo_us), ratio(cached_us), mismatches);
  return mismatches == 0 ? 0 : 1;
}
