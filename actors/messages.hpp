#pragma once

// The message vocabulary of kvlane's actors: atoms and payload types.
//
// Payloads that carry buffers travel as std::shared_ptr (CAF 0.17 needs
// copyable, default-constructible message types; a shared_ptr copy is cheap
// and the receiver becomes the only user). All messages are local to the
// daemon, so they are whitelisted as unsafe (never serialized).

#include "actors/sampler.hpp"
#include "backends/backend.hpp"
#include "ipc/snapshot_store.hpp"

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvlane::actors {

using seq_id = std::uint64_t;
using backends::slot_id;
using backends::token_id;

enum class priority_class : std::uint8_t { interactive = 0, batch = 1 };
std::string_view to_string(priority_class c) noexcept;

/// Why a stream ended.
enum class end_reason : std::uint8_t {
  length,    ///< max_tokens generated
  stop,      ///< a stop token was sampled (not delivered)
  cancelled, ///< the consumer or an admin cancelled it
  error,     ///< a backend or store failure it could not recover from
};
std::string_view to_string(end_reason r) noexcept;

// -- atoms --------------------------------------------------------------------

using step_atom = caf::atom_constant<caf::atom("step")>;
using transfer_atom = caf::atom_constant<caf::atom("transfer")>;
using submit_atom = caf::atom_constant<caf::atom("submit")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
/// (stop_atom, seq_id, generated, keep): end a sequence as a stop token would (engine::stop).
using stop_atom = caf::atom_constant<caf::atom("stopseq")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using tokens_atom = caf::atom_constant<caf::atom("tokens")>;
using end_atom = caf::atom_constant<caf::atom("end")>;

// -- compute lane ----------------------------------------------------------------

/// One step as the compute lane runs it. Row i belongs to sequence seqs[i].
struct step_plan {
  std::uint64_t number = 0;
  std::vector<seq_id> seqs;
  std::vector<std::vector<token_id>> tokens;
  std::vector<backends::step_row> rows; ///< spans point into `tokens`
};

struct step_done {
  std::shared_ptr<step_plan> plan;
  backends::step_output out;
  std::optional<backends::backend_error> error;
  std::chrono::steady_clock::time_point start, end;
};

// -- transfer lane ---------------------------------------------------------------

enum class transfer_kind : std::uint8_t { dump, load };

/// A dump writes the slot into a reserved snapshot and seals it; a load
/// verifies the snapshot (checksum and generation) and restores the slot.
struct transfer_job {
  transfer_kind kind = transfer_kind::dump;
  seq_id seq = 0;
  slot_id slot = 0;
  std::uint32_t cache_len = 0;
  std::uint64_t bytes = 0; ///< the snapshot's size: the backend's snapshot_size(cache_len)
  std::uint64_t generation = 0;
  ipc::snapshot_handle snapshot;
  std::span<std::byte> destination; ///< dump only: the reserved bytes
  std::uint64_t retained = 0;       ///< dump of a retained entry (its id), not of a sequence
  bool keep_snapshot = false;       ///< load of a retained snapshot: reuse does not consume it
};

struct transfer_done {
  transfer_job job;
  std::optional<std::string> error; ///< backend or store failure, as a message
  bool corrupt = false;             ///< load: the snapshot failed verification
  std::chrono::steady_clock::time_point start, end;
};

using step_plan_ptr = std::shared_ptr<step_plan>;
using step_done_ptr = std::shared_ptr<step_done>;
using transfer_job_ptr = std::shared_ptr<transfer_job>;
using transfer_done_ptr = std::shared_ptr<transfer_done>;

// -- sessions --------------------------------------------------------------------

struct constraint_setup; // actors/constrained_decoding.hpp

/// A validated request as the scheduler receives it.
struct submission {
  seq_id id = 0;
  std::string client;
  std::string fairness_unit; ///< the per-client round robin's unit (the client, if not set)
  std::uint64_t owner = 0; ///< who may reuse its KV (peer uid)
  std::string session_name; ///< the client session it is a turn of, empty if none
  priority_class priority = priority_class::interactive;
  std::vector<token_id> prompt;
  sampling_params sampling;
  /// The grammar its output follows (actors/constrained_decoding); null: free text.
  std::shared_ptr<const constraint_setup> constraint;
  caf::actor session; ///< receives tokens_atom and end_atom messages
};
using submission_ptr = std::shared_ptr<submission>;

/// How a stream ended, with its timings (wall clock, milliseconds).
struct stream_end {
  end_reason reason = end_reason::length;
  std::string message;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t generated_tokens = 0;
  double ttft_ms = 0; ///< submit to first token
  double tpot_ms = 0; ///< mean time per output token after the first
  double e2e_ms = 0;  ///< submit to end
  std::uint32_t preemptions = 0;
  /// Prompt tokens not prefilled because retained KV covered them (a warm
  /// slot or a loaded snapshot; 0 when the prompt was prefilled in full).
  std::uint32_t cached_tokens = 0;
};

} // namespace kvlane::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvlane::actors::step_plan_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvlane::actors::step_done_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvlane::actors::transfer_job_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvlane::actors::transfer_done_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvlane::actors::submission_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvlane::actors::stream_end)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<kvlane::backends::token_id>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<kvlane::actors::token_logprobs>)
