#pragma once

// kvlane::tools::bench — reuse_variant: the reuse policies --reuse compares.
//
// Problem it solves: `--reuse off,slot,store,store-recency` names what each
// run keeps of a finished request's KV ([reuse] mode) and, with the store, how
// the store ranks what it evicts ([store] eviction): one parse, one meaning,
// shared by the command line, the runs and the report.
//
// Threading: plain functions over values.

#include "actors/reuse_policy.hpp"
#include "common/expected.hpp"
#include "ipc/snapshot_store.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::bench {

struct reuse_variant {
  std::string name; ///< off, slot, store or store-recency
  actors::reuse_mode mode = actors::reuse_mode::store;
  ipc::eviction_value eviction = ipc::eviction_value::cost;
  friend bool operator==(const reuse_variant&, const reuse_variant&) = default;
};

/// Parses a comma list of off, slot, store (cost-aware eviction, the default)
/// and store-recency (LRU eviction); duplicates are dropped. Errors name the
/// unknown item.
expected<std::vector<reuse_variant>, std::string> parse_reuse_list(std::string_view list);

} // namespace kvlane::tools::bench
