#include "backends/qbruntime_options.hpp"

#include <algorithm>

namespace kvlane::backends {

namespace {

using namespace config_reader;

constexpr choice<qbr_core_mode> core_modes[] = {
  {"single", qbr_core_mode::single},
  {"global4", qbr_core_mode::global4},
  {"global8", qbr_core_mode::global8},
  {"auto", qbr_core_mode::automatic},
};

constexpr choice<qbr_concurrency> concurrency_modes[] = {
  {"serialize", qbr_concurrency::serialize},
  {"allow", qbr_concurrency::allow},
};

/// A path key, when present, is neither empty nor holds a NUL byte.
status check_path(const reporter& r, const section& s, std::string_view name,
                  const std::string& value) {
  if (s.find(name) == nullptr)
    return {};
  if (value.empty())
    return unexpected(r.bad_value(s.key(name), s.line(name), "must not be empty"));
  if (value.find('\0') != std::string::npos)
    return unexpected(r.bad_value(s.key(name), s.line(name), "must not contain a NUL byte"));
  return {};
}

status read_cores(const reporter& r, const section& s, std::vector<std::uint32_t>& out) {
  const auto* n = s.find("target_cores");
  if (n == nullptr)
    return {};
  const auto* a = n->as_array();
  if (a == nullptr)
    return unexpected(r.wrong_type(s.key("target_cores"), *n, "array of integers"));
  out.clear();
  for (std::size_t i = 0; i < a->size(); ++i) {
    const auto& e = *a->get(i);
    const auto key = fmt::format("{}[{}]", s.key("target_cores"), i);
    const auto* v = e.as_integer();
    if (v == nullptr)
      return unexpected(r.wrong_type(key, e, "integer"));
    if (v->get() < 0 || v->get() >= qbr_core_count)
      return unexpected(r.bad_value(key, line_of(e),
                                    fmt::format("must be a core between 0 and {} (got {})",
                                                qbr_core_count - 1, v->get())));
    const auto core = static_cast<std::uint32_t>(v->get());
    if (std::find(out.begin(), out.end(), core) != out.end())
      return unexpected(r.bad_value(key, line_of(e), fmt::format("core {} is listed twice", core)));
    out.push_back(core);
  }
  if (out.empty())
    return unexpected(r.bad_value(s.key("target_cores"), line_of(*n),
                                  "must list at least one core (leave it out for the default)"));
  return {};
}

} // namespace

std::string_view to_string(qbr_core_mode m) noexcept {
  for (const auto& c : core_modes)
    if (c.value == m)
      return c.name;
  return "unknown";
}

std::string_view to_string(qbr_concurrency c) noexcept {
  for (const auto& x : concurrency_modes)
    if (x.value == c)
      return x.name;
  return "unknown";
}

config_reader::status parse_qbruntime_options(const config_reader::reporter& r,
                                              const config_reader::section& model,
                                              qbruntime_options& out) {
  auto table = find_table(r, model, "qbruntime");
  if (!table)
    return unexpected(std::move(table.error()));
  if (*table == nullptr)
    return unexpected(r.bad_value(model.key("qbruntime"), model.line(),
                                  "missing: backend \"qbruntime\" needs a [model.qbruntime] table "
                                  "with at least model_dir"));
  const section s{**table, model.key("qbruntime")};
  KVLANE_CONFIG_TRY(check_keys(r, s,
                               {"model_dir", "mxq", "embedding", "embedding_tensor", "tokenizer", "dev_no",
                                "core_mode", "target_cores", "prefill_chunk", "handles",
                                "concurrency"}));

  if (s.find("model_dir") == nullptr)
    return unexpected(r.bad_value(s.key("model_dir"), s.line(),
                                  "missing: the directory holding the .mxq, tokenizer.json and "
                                  "model.safetensors"));
  KVLANE_CONFIG_TRY(read_string(r, s, "model_dir", out.model_dir));
  if (out.model_dir.empty() || out.model_dir.front() != '/')
    return unexpected(r.bad_value(s.key("model_dir"), s.line("model_dir"),
                                  fmt::format("must be an absolute path (got {})",
                                              quoted(out.model_dir))));
  KVLANE_CONFIG_TRY(check_path(r, s, "model_dir", out.model_dir));

  KVLANE_CONFIG_TRY(read_string(r, s, "mxq", out.mxq));
  KVLANE_CONFIG_TRY(check_path(r, s, "mxq", out.mxq));
  KVLANE_CONFIG_TRY(read_string(r, s, "embedding", out.embedding));
  KVLANE_CONFIG_TRY(check_path(r, s, "embedding", out.embedding));
  KVLANE_CONFIG_TRY(read_string(r, s, "embedding_tensor", out.embedding_tensor));
  KVLANE_CONFIG_TRY(check_path(r, s, "embedding_tensor", out.embedding_tensor));
  KVLANE_CONFIG_TRY(read_string(r, s, "tokenizer", out.tokenizer));
  KVLANE_CONFIG_TRY(check_path(r, s, "tokenizer", out.tokenizer));

  KVLANE_CONFIG_TRY(read_int(r, s, "dev_no", out.dev_no, 0, 255));
  KVLANE_CONFIG_TRY(read_choice(r, s, "core_mode", out.core_mode,
                                std::span<const choice<qbr_core_mode>>(core_modes)));
  KVLANE_CONFIG_TRY(read_int(r, s, "prefill_chunk", out.prefill_chunk, 0, 65536));
  KVLANE_CONFIG_TRY(read_int(r, s, "handles", out.handles, 1, qbr_core_count));
  KVLANE_CONFIG_TRY(read_cores(r, s, out.target_cores));
  KVLANE_CONFIG_TRY(read_choice(r, s, "concurrency", out.concurrency,
                                std::span<const choice<qbr_concurrency>>(concurrency_modes)));

  if (out.handles > 1 && out.core_mode != qbr_core_mode::single)
    return unexpected(r.bad_value(s.key("handles"), s.line("handles"),
                                  fmt::format("more than one handle needs core_mode \"single\" "
                                              "(one core per handle; got {})",
                                              quoted(to_string(out.core_mode)))));
  if (!out.target_cores.empty() && out.core_mode == qbr_core_mode::single
      && out.target_cores.size() != out.handles)
    return unexpected(r.bad_value(
      s.key("target_cores"), s.line("target_cores"),
      fmt::format("core_mode \"single\" takes one core per handle: {} listed, handles = {}",
                  out.target_cores.size(), out.handles)));
  if (!out.target_cores.empty() && out.core_mode != qbr_core_mode::single)
    return unexpected(r.bad_value(s.key("target_cores"), s.line("target_cores"),
                                  fmt::format("applies to core_mode \"single\" only (got {})",
                                              quoted(to_string(out.core_mode)))));
  return {};
}

} // namespace kvlane::backends
