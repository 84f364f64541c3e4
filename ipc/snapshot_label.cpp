#include "ipc/snapshot_label.hpp"

namespace kvlane::ipc {

std::string_view to_string(discard_reason r) noexcept {
  switch (r) {
    case discard_reason::model_changed: return "model_changed";
    case discard_reason::tokenizer_changed: return "tokenizer_changed";
    case discard_reason::kv_layout_changed: return "kv_layout_changed";
    case discard_reason::backend_changed: return "backend_changed";
    case discard_reason::chat_format_changed: return "chat_format_changed";
    case discard_reason::tokens_mismatch: return "tokens_mismatch";
    case discard_reason::unknown_model: return "unknown_model";
    case discard_reason::checksum: return "checksum";
    case discard_reason::index_corrupt: return "index_corrupt";
    case discard_reason::index_unclean: return "index_unclean";
    case discard_reason::arena_changed: return "arena_changed";
    case discard_reason::disk_corrupt: return "disk_corrupt";
  }
  return "unknown";
}

std::optional<discard_reason> fingerprint_mismatch(const kv_fingerprint& recorded,
                                                   const kv_fingerprint& loaded) noexcept {
  if (recorded.model_file != loaded.model_file)
    return discard_reason::model_changed;
  if (recorded.tokenizer != loaded.tokenizer)
    return discard_reason::tokenizer_changed;
  if (recorded.kv_layout != loaded.kv_layout)
    return discard_reason::kv_layout_changed;
  if (recorded.backend != loaded.backend)
    return discard_reason::backend_changed;
  if (recorded.chat_format != loaded.chat_format)
    return discard_reason::chat_format_changed;
  return std::nullopt;
}

} // namespace kvlane::ipc
