#include "backends/llamacpp_options.hpp"

namespace kvlane::backends {

namespace {

using namespace config_reader;

constexpr choice<llama_kv_type> kv_types[] = {
  {"f16", llama_kv_type::f16},
  {"q8_0", llama_kv_type::q8_0},
  {"f32", llama_kv_type::f32},
};

constexpr choice<llama_flash_attn> flash_attn_modes[] = {
  {"auto", llama_flash_attn::automatic},
  {"on", llama_flash_attn::on},
  {"off", llama_flash_attn::off},
};

/// A path key, when present, is absolute and holds no NUL byte.
status read_absolute_path(const reporter& r, const section& s, std::string_view name,
                          std::string& out) {
  if (s.find(name) == nullptr)
    return {};
  KVLANE_CONFIG_TRY(read_string(r, s, name, out));
  if (out.find('\0') != std::string::npos)
    return unexpected(r.bad_value(s.key(name), s.line(name), "must not contain a NUL byte"));
  if (out.empty() || out.front() != '/')
    return unexpected(r.bad_value(s.key(name), s.line(name),
                                  fmt::format("must be an absolute path (got {})", quoted(out))));
  return {};
}

} // namespace

std::string_view to_string(llama_kv_type t) noexcept {
  for (const auto& c : kv_types)
    if (c.value == t)
      return c.name;
  return "unknown";
}

std::string_view to_string(llama_flash_attn f) noexcept {
  for (const auto& c : flash_attn_modes)
    if (c.value == f)
      return c.name;
  return "unknown";
}

config_reader::status parse_llamacpp_options(const config_reader::reporter& r,
                                             const config_reader::section& model,
                                             llamacpp_options& out) {
  auto table = find_table(r, model, "llamacpp");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return unexpected(r.bad_value(model.key("llamacpp"), model.line(),
                                  "missing: backend \"llamacpp\" needs a [model.llamacpp] table "
                                  "with at least gguf"));
  const section s{**table, model.key("llamacpp")};
  KVLANE_CONFIG_TRY(check_keys(r, s,
                               {"gguf", "slots", "context", "threads", "threads_batch", "batch",
                                "kv_type", "flash_attn", "gpu_layers", "mmap", "mlock",
                                "chat_template_file"}));
  if (s.find("gguf") == nullptr)
    return unexpected(r.bad_value(s.key("gguf"), s.line(), "missing: the path of the .gguf model file"));
  KVLANE_CONFIG_TRY(read_absolute_path(r, s, "gguf", out.gguf));
  KVLANE_CONFIG_TRY(read_absolute_path(r, s, "chat_template_file", out.chat_template_file));
  KVLANE_CONFIG_TRY(read_int(r, s, "slots", out.slots, 1, 256));
  KVLANE_CONFIG_TRY(read_int(r, s, "context", out.context, 0, 1u << 20));
  if (out.context != 0 && out.context < 64)
    return unexpected(r.bad_value(s.key("context"), s.line("context"),
                                  fmt::format("must be 0 (the model's) or at least 64 tokens (got {})",
                                              out.context)));
  KVLANE_CONFIG_TRY(read_int(r, s, "threads", out.threads, 0, 1024));
  KVLANE_CONFIG_TRY(read_int(r, s, "threads_batch", out.threads_batch, 0, 1024));
  KVLANE_CONFIG_TRY(read_int(r, s, "batch", out.batch, 1, 65536));
  KVLANE_CONFIG_TRY(read_choice(r, s, "kv_type", out.kv_type,
                                std::span<const choice<llama_kv_type>>(kv_types)));
  KVLANE_CONFIG_TRY(read_choice(r, s, "flash_attn", out.flash_attn,
                                std::span<const choice<llama_flash_attn>>(flash_attn_modes)));
  KVLANE_CONFIG_TRY(read_int(r, s, "gpu_layers", out.gpu_layers, 0, 100000));
  KVLANE_CONFIG_TRY(read_bool(r, s, "mmap", out.mmap));
  KVLANE_CONFIG_TRY(read_bool(r, s, "mlock", out.mlock));
  return {};
}

} // namespace kvlane::backends
