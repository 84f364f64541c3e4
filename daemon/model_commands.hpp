#pragma once

// kvlane::daemon::model_commands — the model lifecycle on the admin socket
// and in the APIs that show it: `kvlane load|unload MODEL`, the models' states
// in `status` and `ps`, and the times and sizes /api/ps reports.
//
// Problem it solves: the admin socket, the CLI and the Ollama API must show
// one model's state (unloaded, loading, loaded, unloading), keep_alive and
// expiry the same way; this unit turns the engine's model_status into JSON
// once, and runs the two admin commands.
//
// Threading: load and unload block (bounded) on the caller's thread, which
// must not be an actor's: the admin server's thread.

#include "actors/engine.hpp"
#include "common/expected.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <string>

namespace kvlane::daemon {

/// "2026-12-03T04:05:06.123456789Z".
std::string rfc3339(std::chrono::system_clock::time_point t);

/// What stays resident for a loaded model: its weights file (a GGUF; the
/// sim has none) and its KV slots (snapshot_bytes per slot).
std::uint64_t resident_bytes(const actors::model_entry& m);

/// One model's lifecycle: {"name", "state", "keep_alive", "expires_at" (or
/// null), "in_use", "waiting", "size", "error"}.
nlohmann::json model_state_json(const actors::model_status& m);

/// Every configured model's lifecycle, in config order.
nlohmann::json model_states_json(const actors::engine& engine);

/// Admin "load" {"model", "keep_alive"?: string or number of seconds}.
/// Errors are {code, message} for the admin's error reply.
struct command_failure {
  std::string code;
  std::string message;
};
expected<nlohmann::json, command_failure> load_command(const nlohmann::json& req,
                                                       actors::engine& engine);
/// Admin "unload" {"model"}.
expected<nlohmann::json, command_failure> unload_command(const nlohmann::json& req,
                                                         actors::engine& engine);

/// A keep_alive as a request gives it: a duration string or a number of
/// seconds (Ollama's `keep_alive`); the error names `field`.
expected<actors::keep_alive, std::string> keep_alive_of(const nlohmann::json& v,
                                                        std::string_view field);

} // namespace kvlane::daemon
