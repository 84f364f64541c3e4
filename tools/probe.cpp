#include "tools/probe.hpp"

#include "tools/json_figure.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>

namespace kvlane::tools {

namespace {

using backends::backend;
using backends::backend_error;
using backends::step_row;
using backends::token_id;
using clock = std::chrono::steady_clock;

double ms_since(clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock::now() - t0).count();
}

// Deterministic filler tokens inside the vocabulary.
std::vector<token_id> make_tokens(std::size_t n, std::uint32_t vocab, std::uint32_t salt) {
  std::vector<token_id> t(n);
  for (std::size_t i = 0; i < n; ++i)
    t[i] = static_cast<token_id>((i * 2654435761u + salt * 40503u) % std::max(1u, vocab));
  return t;
}

struct step_shape {
  std::uint32_t rows;
  std::uint32_t tokens;
};

// Runs one step of `shape` on slots [first_slot, first_slot + rows), all from
// cache_len 0. Returns wall ms.
expected<double, backend_error> time_step(backend& b, step_shape shape, std::uint32_t first_slot,
                                          backends::step_output& out) {
  auto tokens = make_tokens(shape.tokens, b.info().vocab_size, shape.rows);
  std::vector<step_row> rows;
  for (std::uint32_t r = 0; r < shape.rows; ++r)
    rows.push_back({first_slot + r, 0, tokens});
  auto t0 = clock::now();
  if (auto ok = b.step(rows, out); !ok)
    return unexpected(ok.error());
  return ms_since(t0);
}

// Fills `slot` with `tokens` tokens in prefill chunks.
expected<void, backend_error> fill_slot(backend& b, backends::slot_id slot, std::uint32_t tokens,
                                        backends::step_output& out) {
  auto chunk = b.info().max_prefill_chunk;
  std::uint32_t len = 0;
  while (len < tokens) {
    auto n = std::min(chunk, tokens - len);
    auto t = make_tokens(n, b.info().vocab_size, len);
    step_row row{slot, len, t};
    if (auto ok = b.step(std::span{&row, 1}, out); !ok)
      return unexpected(ok.error());
    len += n;
  }
  return {};
}

void fit_line(const std::vector<step_sample>& s, double& base, double& slope) {
  // ms = base + slope * total_tokens, least squares.
  double n = static_cast<double>(s.size()), sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto& x : s) {
    double tok = double(x.rows) * x.tokens_per_row;
    sx += tok;
    sy += x.ms;
    sxx += tok * tok;
    sxy += tok * x.ms;
  }
  double den = n * sxx - sx * sx;
  if (n < 2 || std::abs(den) < 1e-12) {
    base = n > 0 ? sy / n : 0;
    slope = 0;
    return;
  }
  slope = (n * sxy - sx * sy) / den;
  base = (sy - slope * sx) / n;
}

} // namespace

expected<probe_report, backend_error> run_probe(backend& b, const probe_options& opts,
                                                const probe_progress& progress) {
  const auto& info = b.info();
  auto say = [&](std::string_view s) {
    if (progress)
      progress(s);
  };
  if (opts.iterations == 0 || info.slots == 0 || opts.clock_scale <= 0)
    return unexpected(backend_error{backends::backend_errc::invalid_argument,
                                    "probe needs iterations >= 1, a backend with slots, "
                                    "and a positive clock scale"});
  probe_report r;
  r.info = info;
  r.clock_scale = opts.clock_scale;
  const double scale = opts.clock_scale;
  backends::step_output out;

  if (opts.verify) {
    say("verifying decoding, snapshots and slot isolation");
    auto v = run_verify(b, opts.verify_tokens);
    if (!v)
      return unexpected(v.error());
    r.verify = std::move(*v);
  }

  // 1. Step time against rows (decode) and tokens per row (prefill).
  say("measuring step time");
  std::vector<step_shape> shapes;
  for (std::uint32_t rows = 1; rows <= info.slots; rows *= 2)
    shapes.push_back({rows, 1});
  if (shapes.back().rows != info.slots)
    shapes.push_back({info.slots, 1});
  for (std::uint32_t t : {info.max_prefill_chunk / 8, info.max_prefill_chunk / 2,
                          info.max_prefill_chunk})
    if (t >= 2)
      shapes.push_back({1, std::min(t, info.max_context)});
  for (auto shape : shapes) {
    double total = 0;
    for (std::uint32_t i = 0; i < opts.iterations; ++i) {
      auto ms = time_step(b, shape, 0, out);
      if (!ms)
        return unexpected(ms.error());
      total += *ms;
    }
    r.steps.push_back({shape.rows, shape.tokens, total / opts.iterations * scale});
  }
  fit_line(r.steps, r.step_base_ms, r.step_per_token_ms);

  // 2. Dump and load of one snapshot on slot 0.
  if (!info.caps.snapshots)
    return r; // nothing to transfer: the scheduler recomputes
  say("measuring dump and load");
  r.snapshot_tokens = opts.snapshot_tokens ? std::min(opts.snapshot_tokens, info.max_context)
                                           : std::max(1u, info.max_context / 2);
  if (auto ok = fill_slot(b, 0, r.snapshot_tokens, out); !ok)
    return unexpected(ok.error());
  r.snapshot_bytes = b.snapshot_size(r.snapshot_tokens);
  std::vector<std::byte> buffer(r.snapshot_bytes);
  double dump_total = 0, load_total = 0;
  for (std::uint32_t i = 0; i < opts.iterations; ++i) {
    auto t0 = clock::now();
    if (auto ok = b.dump(0, r.snapshot_tokens, buffer); !ok)
      return unexpected(ok.error());
    dump_total += ms_since(t0);
    t0 = clock::now();
    if (auto ok = b.load(0, r.snapshot_tokens, buffer); !ok)
      return unexpected(ok.error());
    load_total += ms_since(t0);
  }
  r.dump_ms = dump_total / opts.iterations * scale;
  r.load_ms = load_total / opts.iterations * scale;
  auto gib_s = [&](double ms) { return ms > 0 ? double(r.snapshot_bytes) / (1 << 30) / (ms / 1000) : 0; };
  r.dump_gib_s = gib_s(r.dump_ms);
  r.load_gib_s = gib_s(r.load_ms);

  // 3. Overlap: transfers on slot 0 against decode steps on the other slots.
  if (info.slots < 2)
    return r;
  say("measuring transfer/compute overlap");
  r.overlap_measured = true;
  const step_shape decode{std::min(info.slots - 1, 8u), 1};
  const std::uint32_t transfers = std::max(4u, opts.iterations * 2);
  // Balance the two sides so each alone takes about as long as the other.
  double transfer_mean = (r.dump_ms + r.load_ms) / 2;
  double step_mean = 0;
  {
    double total = 0;
    for (std::uint32_t i = 0; i < opts.iterations; ++i) {
      auto ms = time_step(b, decode, 1, out);
      if (!ms)
        return unexpected(ms.error());
      total += *ms;
    }
    step_mean = total / opts.iterations * scale;
  }
  const auto steps = static_cast<std::uint32_t>(
    std::clamp(std::lround(transfers * transfer_mean / std::max(step_mean, 1e-6)), 1l, 100000l));

  auto run_steps = [&]() -> expected<void, backend_error> {
    backends::step_output o;
    for (std::uint32_t i = 0; i < steps; ++i)
      if (auto ms = time_step(b, decode, 1, o); !ms)
        return unexpected(ms.error());
    return {};
  };
  auto run_transfers = [&]() -> expected<void, backend_error> {
    for (std::uint32_t i = 0; i < transfers; ++i) {
      if (i % 2 == 0) {
        if (auto ok = b.dump(0, r.snapshot_tokens, buffer); !ok)
          return unexpected(ok.error());
      } else if (auto ok = b.load(0, r.snapshot_tokens, buffer); !ok) {
        return unexpected(ok.error());
      }
    }
    return {};
  };

  auto t0 = clock::now();
  if (auto ok = run_steps(); !ok)
    return unexpected(ok.error());
  r.step_work_ms = ms_since(t0) * scale;
  t0 = clock::now();
  if (auto ok = run_transfers(); !ok)
    return unexpected(ok.error());
  r.transfer_work_ms = ms_since(t0) * scale;
  r.serial_ms = r.step_work_ms + r.transfer_work_ms;

  expected<void, backend_error> step_result;
  std::barrier start{2};
  t0 = clock::now();
  std::thread compute{[&] {
    start.arrive_and_wait();
    step_result = run_steps();
  }};
  start.arrive_and_wait();
  auto transfer_result = run_transfers();
  compute.join();
  r.concurrent_ms = ms_since(t0) * scale;
  if (!step_result)
    return unexpected(step_result.error());
  if (!transfer_result)
    return unexpected(transfer_result.error());

  double hideable = std::min(r.step_work_ms, r.transfer_work_ms);
  r.overlap = hideable > 0 ? std::clamp((r.serial_ms - r.concurrent_ms) / hideable, 0.0, 1.0) : 0;
  return r;
}

// --- verify --------------------------------------------------------------------

namespace {

using backends::slot_id;
using check = verify_check;

/// A sequence on one slot, decoded greedily one step at a time.
struct greedy_run {
  greedy_run(backend& backend_ref, slot_id s) : b(backend_ref), slot(s) {}

  backend& b;
  slot_id slot;
  std::uint32_t len = 0;
  backends::token_id next = 0;
  std::vector<backends::token_id> out;
  backends::step_output logits;

  static backends::token_id argmax(std::span<const float> row) {
    return static_cast<backends::token_id>(std::max_element(row.begin(), row.end()) - row.begin());
  }

  expected<void, backend_error> prefill(std::span<const backends::token_id> prompt) {
    len = 0;
    out.clear();
    while (len < prompt.size()) {
      const auto n = std::min<std::size_t>(b.info().max_prefill_chunk, prompt.size() - len);
      step_row row{slot, len, prompt.subspan(len, n)};
      if (auto ok = b.step(std::span{&row, 1}, logits); !ok)
        return ok;
      len += static_cast<std::uint32_t>(n);
    }
    next = argmax(logits.row(0));
    return {};
  }

  expected<void, backend_error> decode(std::uint32_t n) {
    for (std::uint32_t i = 0; i < n; ++i) {
      out.push_back(next);
      step_row row{slot, len, std::span<const backends::token_id>(&out.back(), 1)};
      if (auto ok = b.step(std::span{&row, 1}, logits); !ok)
        return ok;
      ++len;
      next = argmax(logits.row(0));
    }
    return {};
  }
};

std::string first_difference(const std::vector<backends::token_id>& got,
                             const std::vector<backends::token_id>& want) {
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i])
    ++i;
  if (i == got.size() && i == want.size())
    return fmt::format("{} tokens equal", want.size());
  return fmt::format("differs at token {}: got {}, expected {}", i,
                     i < got.size() ? std::to_string(got[i]) : "nothing",
                     i < want.size() ? std::to_string(want[i]) : "nothing");
}

check compare(std::string name, const std::vector<backends::token_id>& got,
              const std::vector<backends::token_id>& want) {
  return {std::move(name), got == want ? check::outcome::passed : check::outcome::failed,
          first_difference(got, want)};
}

} // namespace

std::string_view to_string(verify_check::outcome o) noexcept {
  switch (o) {
    case verify_check::outcome::passed: return "passed";
    case verify_check::outcome::failed: return "failed";
    case verify_check::outcome::skipped: return "skipped";
  }
  return "unknown";
}

bool verify_report::passed() const noexcept {
  return std::none_of(checks.begin(), checks.end(),
                      [](const check& c) { return c.result == check::outcome::failed; });
}

expected<verify_report, backend_error> run_verify(backend& b, std::uint32_t tokens) {
  const auto& info = b.info();
  if (tokens < 2 || info.slots == 0)
    return unexpected(backend_error{backends::backend_errc::invalid_argument,
                                    "verify needs at least 2 tokens and a backend with slots"});
  verify_report r;
  // A fixed prompt, through the model's tokenizer, cut so that the continuation fits.
  r.prompt = b.tokens().encode(
    "The quick brown fox jumps over the lazy dog. A probe checks that the NPU keeps state.");
  const std::uint32_t room = info.max_context > tokens ? info.max_context - tokens : 0;
  if (room < 2)
    return unexpected(backend_error{backends::backend_errc::invalid_argument,
                                    fmt::format("verify: max_context {} leaves no room for a "
                                                "prompt and {} tokens", info.max_context, tokens)});
  if (r.prompt.size() > room / 2)
    r.prompt.resize(room / 2);
  for (auto t : r.prompt)
    if (t >= info.vocab_size)
      return unexpected(backend_error{backends::backend_errc::invalid_argument,
                                      fmt::format("verify: the tokenizer produced token {} outside "
                                                  "the model's {} logits", t, info.vocab_size)});
  // Another sequence, used to overwrite slots.
  std::vector<backends::token_id> other(r.prompt.rbegin(), r.prompt.rend());
  const std::uint32_t half = tokens / 2;

#define KVLANE_VERIFY_TRY(...)                                                                    \
  if (auto ok_ = (__VA_ARGS__); !ok_)                                                             \
    return unexpected(std::move(ok_.error()));

  // 1. Reference, then the same again from scratch on the last slot.
  greedy_run ref{b, 0};
  KVLANE_VERIFY_TRY(ref.prefill(r.prompt));
  KVLANE_VERIFY_TRY(ref.decode(tokens));
  r.greedy = ref.out;
  {
    greedy_run again{b, info.slots - 1};
    KVLANE_VERIFY_TRY(again.prefill(r.prompt));
    KVLANE_VERIFY_TRY(again.decode(tokens));
    r.checks.push_back(compare("repeatable", again.out, r.greedy));
  }

  // 2. Round trip on slot 0: decode half, dump, overwrite, load, decode the rest.
  std::vector<std::byte> snapshot;
  if (!info.caps.snapshots) {
    r.checks.push_back({"round_trip", check::outcome::skipped, "the backend has no snapshots"});
  } else {
    greedy_run run{b, 0};
    KVLANE_VERIFY_TRY(run.prefill(r.prompt));
    KVLANE_VERIFY_TRY(run.decode(half));
    snapshot.resize(b.snapshot_size(run.len));
    KVLANE_VERIFY_TRY(b.dump(0, run.len, snapshot));
    greedy_run overwrite{b, 0};
    KVLANE_VERIFY_TRY(overwrite.prefill(other));
    KVLANE_VERIFY_TRY(overwrite.decode(half));
    KVLANE_VERIFY_TRY(b.load(0, run.len, snapshot));
    KVLANE_VERIFY_TRY(run.decode(tokens - half));
    r.checks.push_back(compare("round_trip", run.out, r.greedy));
  }

  // 3. Isolation: slot 0 decodes half, other slots run another sequence (and, with
  //    snapshots, slot 1 is dumped and loaded), then slot 0 finishes.
  if (info.slots < 2) {
    r.checks.push_back({"isolation", check::outcome::skipped, "one slot"});
  } else {
    greedy_run run{b, 0};
    KVLANE_VERIFY_TRY(run.prefill(r.prompt));
    KVLANE_VERIFY_TRY(run.decode(half));
    for (slot_id s = 1; s < info.slots; ++s) {
      greedy_run noise{b, s};
      KVLANE_VERIFY_TRY(noise.prefill(other));
      KVLANE_VERIFY_TRY(noise.decode(2));
      if (s == 1 && info.caps.snapshots) {
        snapshot.resize(b.snapshot_size(noise.len));
        KVLANE_VERIFY_TRY(b.dump(1, noise.len, snapshot));
        KVLANE_VERIFY_TRY(b.load(1, noise.len, snapshot));
      }
    }
    KVLANE_VERIFY_TRY(run.decode(tokens - half));
    r.checks.push_back(compare("isolation", run.out, r.greedy));
  }

  // 4. Concurrent: slot 1 decodes the reference while slot 0 is dumped and loaded.
  if (info.slots < 2 || !info.caps.snapshots) {
    r.checks.push_back({"concurrent", check::outcome::skipped,
                        info.slots < 2 ? "one slot" : "the backend has no snapshots"});
  } else if (!info.caps.transfer_overlaps_compute) {
    r.checks.push_back({"concurrent", check::outcome::skipped,
                        "the backend serializes transfers with compute"});
  } else {
    greedy_run parked{b, 0};
    KVLANE_VERIFY_TRY(parked.prefill(other));
    snapshot.resize(b.snapshot_size(parked.len));
    std::atomic<bool> done{false};
    expected<void, backend_error> transfer_result;
    std::uint32_t transfers = 0;
    std::thread transfer{[&] {
      // At least one dump and one load, then as many as fit beside the decode.
      while (transfers < 2 || !done.load(std::memory_order_acquire)) {
        expected<void, backend_error> ok;
        if (transfers % 2 == 0) {
          if (auto n = b.dump(0, parked.len, snapshot); !n)
            ok = unexpected(std::move(n.error()));
        } else {
          ok = b.load(0, parked.len, snapshot);
        }
        if (!ok) {
          transfer_result = unexpected(std::move(ok.error()));
          return;
        }
        ++transfers;
      }
    }};
    greedy_run run{b, 1};
    auto decoded = run.prefill(r.prompt);
    if (decoded)
      decoded = run.decode(tokens);
    done.store(true, std::memory_order_release);
    transfer.join();
    KVLANE_VERIFY_TRY(decoded);
    KVLANE_VERIFY_TRY(transfer_result);
    auto c = compare("concurrent", run.out, r.greedy);
    c.detail += fmt::format(" ({} transfers on slot 0 meanwhile)", transfers);
    r.checks.push_back(std::move(c));
  }
#undef KVLANE_VERIFY_TRY
  return r;
}

std::string format_text(const probe_report& r) {
  std::string s;
  auto out = std::back_inserter(s);
  const auto& i = r.info;
  fmt::format_to(out, "backend {} model '{}': {} slots, max context {}, prefill chunk {}, vocab {}\n",
                 i.kind, i.model, i.slots, i.max_context, i.max_prefill_chunk, i.vocab_size);
  if (!i.runtime_version.empty())
    fmt::format_to(out, "runtime version {}\n", i.runtime_version);
  if (r.verify) {
    fmt::format_to(out, "\nverify ({} prompt tokens, {} greedy tokens): {}\n", r.verify->prompt.size(),
                   r.verify->greedy.size(), r.verify->passed() ? "passed" : "FAILED");
    for (const auto& c : r.verify->checks)
      fmt::format_to(out, "  {:<11} {:<8} {}\n", c.name, to_string(c.result), c.detail);
  }
  if (r.clock_scale != 1.0)
    fmt::format_to(out, "times in device ms (wall ms x {})\n", r.clock_scale);
  fmt::format_to(out, "\nstep time\n  {:>5} {:>10} {:>10}\n", "rows", "tokens/row", "ms");
  for (auto& st : r.steps)
    fmt::format_to(out, "  {:>5} {:>10} {:>10.2f}\n", st.rows, st.tokens_per_row, st.ms);
  fmt::format_to(out, "  fit: {:.2f} ms + {:.3f} ms per token\n", r.step_base_ms, r.step_per_token_ms);
  fmt::format_to(out, "\nsnapshot of {} tokens: {:.1f} MiB ({})\n", r.snapshot_tokens,
                 double(r.snapshot_bytes) / (1 << 20), backends::to_string(i.caps.extent));
  fmt::format_to(out, "  dump {:8.2f} ms  {:6.2f} GiB/s\n  load {:8.2f} ms  {:6.2f} GiB/s\n",
                 r.dump_ms, r.dump_gib_s, r.load_ms, r.load_gib_s);
  if (!r.overlap_measured) {
    fmt::format_to(out, "\noverlap: not measured (needs at least 2 slots and snapshots)\n");
    return s;
  }
  fmt::format_to(out,
                 "\ntransfer/compute overlap\n  steps alone {:.1f} ms, transfers alone {:.1f} ms, "
                 "serial {:.1f} ms, concurrent {:.1f} ms\n  overlap {:.2f} (1 = transfers fully "
                 "hidden behind compute, 0 = serialized); backend claims: {}\n",
                 r.step_work_ms, r.transfer_work_ms, r.serial_ms, r.concurrent_ms, r.overlap,
                 i.caps.transfer_overlaps_compute ? "overlaps" : "does not overlap");
  return s;
}

std::string format_json(const probe_report& r) {
  using json = nlohmann::ordered_json;
  const auto& i = r.info;
  json steps = json::array();
  for (const auto& st : r.steps)
    steps.push_back(json{{"rows", st.rows},
                         {"tokens_per_row", st.tokens_per_row},
                         {"ms", json_figure(st.ms)}});
  json doc{{"backend", i.kind},
           {"model", i.model},
           {"slots", i.slots},
           {"max_context", i.max_context},
           {"max_prefill_chunk", i.max_prefill_chunk},
           {"runtime_version", i.runtime_version},
           {"snapshots", i.caps.snapshots},
           {"clock_scale", json_figure(r.clock_scale)},
           {"steps", std::move(steps)},
           {"step_base_ms", json_figure(r.step_base_ms)},
           {"step_per_token_ms", json_figure(r.step_per_token_ms)},
           {"snapshot_tokens", r.snapshot_tokens},
           {"snapshot_bytes", r.snapshot_bytes},
           {"dump_ms", json_figure(r.dump_ms)},
           {"load_ms", json_figure(r.load_ms)},
           {"dump_gib_s", json_figure(r.dump_gib_s)},
           {"load_gib_s", json_figure(r.load_gib_s)},
           {"overlap_measured", r.overlap_measured},
           {"serial_ms", json_figure(r.serial_ms)},
           {"concurrent_ms", json_figure(r.concurrent_ms)},
           {"overlap", json_figure(r.overlap)},
           {"claims_overlap", i.caps.transfer_overlaps_compute}};
  if (r.verify) {
    json checks = json::array();
    for (const auto& c : r.verify->checks)
      checks.push_back(json{{"name", c.name},
                            {"result", std::string(to_string(c.result))},
                            {"detail", c.detail}});
    doc["verify"] = json{{"passed", r.verify->passed()},
                         {"prompt_tokens", r.verify->prompt.size()},
                         {"greedy", r.verify->greedy},
                         {"checks", std::move(checks)}};
  }
  // Replace, not throw, should a backend report a name with invalid UTF-8.
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

} // namespace kvlane::tools
