#include "actors/grammar_vocabulary.hpp"

#include <algorithm>

namespace kvlane::actors {

std::shared_ptr<const grammar::vocabulary> make_grammar_vocabulary(const backends::tokenizer& tok,
                                                                   std::uint32_t width) {
  const std::uint32_t n = std::min(width, tok.size());
  std::vector<std::string> tokens;
  tokens.reserve(n);
  for (std::uint32_t id = 0; id < n; ++id) {
    const backends::token_id t = id;
    tokens.push_back(tok.decode({&t, 1}));
  }
  const auto stops = tok.stop_tokens();
  const std::vector<std::uint32_t> ends(stops.begin(), stops.end());
  return std::make_shared<const grammar::vocabulary>(tokens, ends);
}

std::shared_ptr<const grammar::vocabulary> model_grammar::vocabulary() {
  std::call_once(built_, [this] { vocabulary_ = make_grammar_vocabulary(backend_->tokens(), width_); });
  return vocabulary_;
}

std::shared_ptr<grammar::mask_cache>
model_grammar::cache_for(const std::shared_ptr<const grammar::grammar>& g) {
  auto v = vocabulary();
  std::lock_guard lock{mu_};
  auto& e = caches_[g.get()];
  if (auto cache = e.cache.lock(); cache && e.grammar.lock() == g)
    return cache;
  auto cache = std::make_shared<grammar::mask_cache>(g, std::move(v));
  e = {g, cache};
  if (caches_.size() >= sweep_at_) {
    std::erase_if(caches_, [](const auto& kv) { return kv.second.cache.expired(); });
    sweep_at_ = std::max<std::size_t>(64, 2 * caches_.size());
  }
  return cache;
}

std::shared_ptr<const trigger_table>
model_grammar::triggers_for(const std::vector<std::string>& triggers) {
  auto v = vocabulary();
  {
    std::lock_guard lock{mu_};
    if (auto it = trigger_tables_.find(triggers); it != trigger_tables_.end())
      return it->second;
  }
  // Built outside the lock (a pass over the vocabulary); a concurrent twin is harmless.
  auto table = std::make_shared<const trigger_table>(triggers, *v);
  std::lock_guard lock{mu_};
  if (trigger_tables_.size() >= max_trigger_sets)
    trigger_tables_.clear();
  return trigger_tables_.emplace(triggers, std::move(table)).first->second;
}

constraint_setup model_grammar::setup_for(std::shared_ptr<const output_constraint> c) {
  constraint_setup s;
  s.vocabulary = vocabulary();
  s.masks = cache_for(c->grammar);
  if (!c->triggers.empty())
    s.triggers = triggers_for(c->triggers);
  s.constraint = std::move(c);
  return s;
}

} // namespace kvlane::actors
