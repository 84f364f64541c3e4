#include "tools/cli.hpp"

#include "backends/factory.hpp"
#include "daemon/config.hpp"
#include "tools/probe.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace kvlane::tools {

namespace {

constexpr const char* usage_text =
  "usage: kvlane <command> [options]\n"
  "\n"
  "commands:\n"
  "  probe    measure a backend: step time vs rows/tokens, dump/load time and\n"
  "           bandwidth, and whether transfers overlap compute\n"
  "\n"
  "probe options:\n"
  "  --config PATH        configuration (default /etc/kvlane/kvlane.toml)\n"
  "  --model NAME         model to probe (default: the first one)\n"
  "  --iterations N       repetitions per measurement (default 5)\n"
  "  --tokens N           tokens in the probed snapshot (default max_context/2)\n"
  "  --time-scale X       sim only: override [model.sim] time_scale\n"
  "  --overlap MODE       sim only: override [model.sim] overlap (full|none|shared)\n"
  "  --json               print one JSON object instead of text\n"
  "\n"
  "The probe overwrites every slot of the device: run it with kvlaned stopped.\n";

template <class T>
bool parse_number(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size();
}

int fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "kvlane: %s\n", message.c_str());
  return code;
}

int probe_main(int argc, char** argv) {
  std::string config_path = "/etc/kvlane/kvlane.toml";
  std::optional<std::string> model;
  std::optional<double> time_scale;
  std::optional<backends::transfer_overlap> overlap;
  probe_options opts;
  bool json = false;
  for (int i = 0; i < argc; ++i) {
    std::string_view a{argv[i]};
    auto value = [&]() -> std::optional<std::string_view> {
      if (i + 1 >= argc)
        return std::nullopt;
      return std::string_view{argv[++i]};
    };
    if (a == "--json") {
      json = true;
    } else if (a == "--config") {
      auto v = value();
      if (!v)
        return fail("--config needs a path", 64);
      config_path = *v;
    } else if (a == "--model") {
      auto v = value();
      if (!v)
        return fail("--model needs a name", 64);
      model = std::string{*v};
    } else if (a == "--iterations" || a == "--tokens") {
      auto v = value();
      std::uint32_t n = 0;
      if (!v || !parse_number(*v, n) || n == 0 || n > 1000000)
        return fail(fmt::format("{} needs a whole number between 1 and 1000000", a), 64);
      (a == "--iterations" ? opts.iterations : opts.snapshot_tokens) = n;
    } else if (a == "--time-scale") {
      auto v = value();
      double x = 0;
      if (!v || !parse_number(*v, x) || !(x > 0) || x > 1e6)
        return fail("--time-scale needs a number in (0, 1000000]", 64);
      time_scale = x;
    } else if (a == "--overlap") {
      auto v = value();
      if (v == "full")
        overlap = backends::transfer_overlap::full;
      else if (v == "none")
        overlap = backends::transfer_overlap::none;
      else if (v == "shared")
        overlap = backends::transfer_overlap::shared;
      else
        return fail("--overlap needs full, none or shared", 64);
    } else {
      return fail(fmt::format("probe: unknown argument '{}'\n\n{}", a, usage_text), 64);
    }
  }

  auto cfg = daemon::load(config_path);
  if (!cfg)
    return fail("invalid configuration: " + cfg.error().message, 78);
  const daemon::model_section* m = model ? nullptr : &cfg->models.front();
  for (auto& candidate : cfg->models)
    if (model && candidate.name == *model)
      m = &candidate;
  if (!m)
    return fail(fmt::format("no model named '{}' in {}", *model, config_path), 64);

  auto sim = m->sim;
  if (time_scale)
    sim.time_scale = *time_scale;
  if (overlap)
    sim.overlap = *overlap;
  auto b = backends::make_backend(m->backend, m->name, sim);
  if (!b)
    return fail(fmt::format("model '{}': backend failed to load: {}", m->name, b.error().message));
  opts.clock_scale = m->backend == "sim" ? sim.time_scale : 1.0;

  auto report = run_probe(**b, opts, [&](std::string_view step) {
    if (!json)
      std::fprintf(stderr, "probe: %.*s...\n", static_cast<int>(step.size()), step.data());
  });
  if (!report)
    return fail(fmt::format("probe failed: {} ({})", report.error().message,
                            backends::to_string(report.error().code)));
  auto text = json ? format_json(*report) + "\n" : format_text(*report);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

} // namespace

int cli_main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(usage_text, stderr);
    return 64;
  }
  std::string_view cmd{argv[1]};
  if (cmd == "probe")
    return probe_main(argc - 2, argv + 2);
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(usage_text, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("kvlane %s\n", KVLANE_VERSION);
    return 0;
  }
  return fail(fmt::format("unknown command '{}'\n\n{}", cmd, usage_text), 64);
}

} // namespace kvlane::tools
