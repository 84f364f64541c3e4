#pragma once

// kvlane::daemon::gguf_model_toml — the [[model]] table that `kvlaned --gguf FILE` serves.
//
// Problem it solves: a newcomer with a GGUF should get a running daemon with one flag.
// The flag becomes an ordinary [[model]] table (backend "llamacpp", every option at its
// default), parsed by the same config code as a written file, so --gguf and a config
// behave the same and report the same errors.
//
// Pure functions; safe from any thread.

#include "common/expected.hpp"

#include <string>
#include <string_view>

namespace kvlane::daemon {

/// The model name for a GGUF path: the file name without ".gguf", lower-cased, characters
/// outside [a-z0-9._-] replaced by '-', at most 64 bytes; "model" if nothing is left.
std::string gguf_model_name(std::string_view path);

/// `[[model]]` TOML text serving the GGUF at absolute `path`. An error (with the reason)
/// when the path is not absolute, holds a control character, or is not a regular file.
expected<std::string, std::string> gguf_model_toml(std::string_view path);

} // namespace kvlane::daemon
