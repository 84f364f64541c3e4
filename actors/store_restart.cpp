#include "actors/store_restart.hpp"

#include "common/align.hpp"

#include <fmt/format.h>

#include <unistd.h>

namespace kvlane::actors {

expected<store_opening, std::string> open_store(const store_config& cfg,
                                                const ipc::store_options& options,
                                                store_handoff handoff) {
  store_opening out;
  std::vector<ipc::discard_reason> discards;
  std::optional<ipc::memfd_arena> arena;
  if (handoff.arena_fd >= 0) {
    auto adopted = ipc::memfd_arena::adopt(handoff.arena_fd);
    const std::uint64_t page = page_size();
    const std::uint64_t wanted = (cfg.max_bytes + page - 1) / page * page;
    if (!adopted) {
      out.note = fmt::format("the inherited arena is unusable ({}); starting empty",
                             adopted.error().message);
      discards.push_back(ipc::discard_reason::arena_changed);
    } else if (adopted->size() != wanted) {
      out.note = fmt::format("the inherited arena has {} bytes, [store] max_bytes asks for {}; "
                             "starting empty",
                             adopted->size(), wanted);
      discards.push_back(ipc::discard_reason::arena_changed);
    } else {
      arena.emplace(std::move(*adopted));
      out.arena_inherited = true;
    }
  }
  if (!arena) {
    auto created = ipc::memfd_arena::create("kvlane-store", cfg.max_bytes);
    if (!created)
      return unexpected(created.error().message);
    arena.emplace(std::move(*created));
  }

  std::optional<ipc::index_file> index;
  if (handoff.index_fd >= 0) {
    auto adopted = ipc::index_file::adopt(handoff.index_fd);
    if (adopted)
      index.emplace(std::move(*adopted));
    else if (out.arena_inherited)
      out.note = fmt::format("the inherited index is unusable ({})", adopted.error().message);
  }
  if (!index) {
    auto created = ipc::index_file::create();
    if (!created)
      return unexpected(created.error().message);
    index.emplace(std::move(*created));
  }

  // Read what the index says, then mark it open before the arena can change:
  // if this daemon dies without a clean stop, the next start refuses it.
  std::optional<ipc::index_contents> contents;
  if (out.arena_inherited) {
    auto bytes = index->read();
    if (!bytes)
      return unexpected(bytes.error().message);
    auto decoded = ipc::decode_index(*bytes);
    if (decoded) {
      contents = std::move(*decoded);
    } else {
      switch (decoded.error().code) {
        case ipc::index_errc::empty:
          out.note = "the inherited arena came without an index; its contents are dropped";
          discards.push_back(ipc::discard_reason::index_unclean);
          break;
        case ipc::index_errc::unclean:
          out.note = decoded.error().message + "; its contents are dropped";
          discards.push_back(ipc::discard_reason::index_unclean);
          break;
        case ipc::index_errc::corrupt:
          out.note = "the inherited index is corrupt (" + decoded.error().message
                     + "); its contents are dropped";
          discards.push_back(ipc::discard_reason::index_corrupt);
          break;
      }
    }
  }
  if (auto r = index->mark_open(); !r)
    return unexpected(r.error().message);

  auto store = ipc::snapshot_store::create(std::move(*arena), options);
  if (!store)
    return unexpected(store.error().message);
  for (const auto why : discards)
    (*store)->count_discard(why);
  if (out.arena_inherited) {
    // Without a usable index nothing is taken back, and every page is returned.
    ipc::index_contents what = contents.value_or(ipc::index_contents{});
    if (!contents) {
      auto empty = (*store)->snapshot_index();
      if (!empty)
        return unexpected(empty.error().message);
      what = std::move(*empty);
    }
    auto recovered = (*store)->recover(what);
    if (recovered) {
      out.recovered = *recovered;
    } else {
      out.note = recovered.error().message + "; its contents are dropped";
      auto empty = (*store)->snapshot_index();
      if (empty)
        (void)(*store)->recover(*empty);
    }
  }
  (*store)->attach_index(std::move(*index));
  out.store = std::move(*store);
  return out;
}

} // namespace kvlane::actors
