#pragma once

// kvlane::actors::grammar_vocabulary — one model's tokens as the grammar engine sees them, and
// what the model's constrained requests share: the mask caches of their grammars and the
// trigger tables of their trigger sets.
//
// Problem it solves: a token mask is computed against the model's real vocabulary (byte-level
// BPE tokens as the raw bytes they decode to; special and control tokens, which decode to
// nothing, never allowed; the tokenizer's end-of-generation tokens allowed when the grammar is
// complete). Building that vocabulary's trie costs tens of milliseconds on a 151k-token
// vocabulary, so it is built once per model, on its first constrained request (not at daemon
// start: most models never see one), on the submitting thread. A grammar's mask cache is
// shared by every sequence of that grammar (the HTTP layer reuses a compiled grammar for equal
// schemas), and a trigger set's table by every request with those triggers.
//
// Threading: every method is thread-safe (engine::submit runs on any thread); what it returns
// is immutable or itself thread-safe (grammar::mask_cache).

#include "actors/constrained_decoding.hpp"
#include "backends/backend.hpp"
#include "common/grammar/mask_cache.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kvlane::actors {

/// The tokens below `width` of `tok` as a grammar vocabulary: token t is decode({t}) (empty for
/// special tokens, which a grammar never allows), the end tokens are tok.stop_tokens().
std::shared_ptr<const grammar::vocabulary> make_grammar_vocabulary(const backends::tokenizer& tok,
                                                                   std::uint32_t width);

class model_grammar {
public:
  /// `width`: the ids a sampled token can have (min of the tokenizer's size and the logits row).
  model_grammar(std::shared_ptr<backends::backend> backend, std::uint32_t width)
    : backend_(std::move(backend)), width_(width) {}

  /// The model's vocabulary, built by the first call.
  std::shared_ptr<const grammar::vocabulary> vocabulary();
  /// The mask cache of `g` on this model's vocabulary, shared while a sequence uses it.
  std::shared_ptr<grammar::mask_cache> cache_for(const std::shared_ptr<const grammar::grammar>& g);
  /// The trigger table of `triggers` on this model's vocabulary (built once per trigger set).
  std::shared_ptr<const trigger_table> triggers_for(const std::vector<std::string>& triggers);

  /// Everything a constrained sequence needs.
  constraint_setup setup_for(std::shared_ptr<const output_constraint> c);

private:
  std::shared_ptr<backends::backend> backend_;
  std::uint32_t width_;
  std::once_flag built_;
  std::shared_ptr<const grammar::vocabulary> vocabulary_;
  std::mutex mu_;
  struct cache_entry {
    std::weak_ptr<const grammar::grammar> grammar; ///< the key's owner: a reused address is a miss
    std::weak_ptr<grammar::mask_cache> cache;
  };
  std::map<const grammar::grammar*, cache_entry> caches_;
  std::size_t sweep_at_ = 64; ///< caches_ size at which expired entries are removed
  /// Trigger sets are few (one per chat format's tool syntax); past this many, start over.
  static constexpr std::size_t max_trigger_sets = 64;
  std::map<std::vector<std::string>, std::shared_ptr<const trigger_table>> trigger_tables_;
};

} // namespace kvlane::actors
