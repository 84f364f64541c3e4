#include "tools/bench/race_server_config.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <sstream>

namespace kvlane::tools::bench {

namespace {

std::string render(const toml::table& doc, std::string_view header) {
  std::ostringstream out;
  out << header << toml::toml_formatter{doc} << '\n';
  return out.str();
}

} // namespace

expected<void, std::string> check_race_settings(const race_settings& s) {
  if (s.kv_type != "f16" && s.kv_type != "q8_0" && s.kv_type != "f32")
    return unexpected(fmt::format("--kv-type must be f16, q8_0 or f32 (got '{}')", s.kv_type));
  if (s.flash_attn != "auto" && s.flash_attn != "on" && s.flash_attn != "off")
    return unexpected(fmt::format("--flash-attn must be auto, on or off (got '{}')", s.flash_attn));
  if (s.threads == 0 || s.threads_batch == 0 || s.parallel == 0 || s.batch == 0)
    return unexpected(std::string{"--threads, --threads-batch, --parallel and --batch must be at least 1"});
  if (s.ctx_per_seq < 64)
    return unexpected(std::string{"--ctx-per-seq must be at least 64"});
  if (s.cache_ram_mib == 0)
    return unexpected(std::string{"--cache-ram must be at least 1 MiB"});
  return {};
}

std::string kvlaned_race_toml(const race_settings& s, const std::string& runtime_dir,
                              std::uint16_t port, std::string_view log_level) {
  toml::table llamacpp{{"gguf", s.gguf},
                       {"slots", s.parallel},
                       {"context", s.ctx_per_seq},
                       {"threads", s.threads},
                       {"threads_batch", s.threads_batch},
                       {"batch", s.batch},
                       {"kv_type", s.kv_type},
                       {"flash_attn", s.flash_attn}};
  toml::table model{{"name", s.model_name}, {"backend", "llamacpp"}};
  model.insert("llamacpp", std::move(llamacpp));
  toml::array models;
  models.push_back(std::move(model));
  toml::table doc{
    {"version", 1},
    {"daemon", toml::table{{"runtime_dir", runtime_dir},
                           {"log_level", std::string{log_level}},
                           {"log_levels", toml::table{{"daemon", "info"}}}}},
    {"model", std::move(models)},
    {"scheduler", toml::table{{"max_step_tokens", s.batch}}},
    {"store", toml::table{{"max_bytes", fmt::format("{}MiB", s.cache_ram_mib)}}},
    {"metrics", toml::table{{"listen", ""}}},
    {"http", toml::table{{"listen", fmt::format("127.0.0.1:{}", port)}}}};
  return render(doc, "# written by kvlane-bench --race-llama\n");
}

expected<std::string, std::string> adapt_kvlane_config(std::string_view toml, std::string_view source,
                                                      const std::string& runtime_dir,
                                                      std::uint16_t port) {
  toml::table doc;
  try {
    doc = toml::parse(toml, source);
  } catch (const toml::parse_error& e) {
    return unexpected(fmt::format("{}:{}: {}", source, e.source().begin.line, e.description()));
  }
  auto section = [&](std::string_view name) -> toml::table& {
    if (!doc.contains(name) || !doc[name].is_table())
      doc.insert_or_assign(name, toml::table{});
    return *doc[name].as_table();
  };
  section("daemon").insert_or_assign("runtime_dir", runtime_dir);
  section("http").insert_or_assign("listen", fmt::format("127.0.0.1:{}", port));
  section("metrics").insert_or_assign("listen", "");
  return render(doc, fmt::format("# {} adapted by kvlane-bench --race-llama\n", source));
}

std::vector<std::string> llama_server_args(const race_settings& s, std::uint16_t port) {
  const auto n = [](std::uint64_t v) { return std::to_string(v); };
  return {"-m",
          s.gguf,
          "--alias",
          s.model_name,
          "--host",
          "127.0.0.1",
          "--port",
          n(port),
          "-t",
          n(s.threads),
          "-tb",
          n(s.threads_batch),
          "--parallel",
          n(s.parallel),
          "--no-kv-unified",
          "-c",
          n(std::uint64_t{s.parallel} * s.ctx_per_seq),
          "-b",
          n(s.batch),
          "-ub",
          n(s.batch),
          "-ctk",
          s.kv_type,
          "-ctv",
          s.kv_type,
          "-fa",
          s.flash_attn,
          "--cache-ram",
          n(s.cache_ram_mib),
          "-ngl",
          "0",
          "--no-webui"};
}

} // namespace kvlane::tools::bench
