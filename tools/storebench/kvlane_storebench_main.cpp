// kvlane-storebench — the host cost of one real-size KV transfer through the
// snapshot store, split by phase, against a plain memcpy of the same size.
//
// It drives the sim backend (64 MiB full-slot snapshots; --time-scale high
// enough that the modeled device time hides inside the host copy) and the
// snapshot store the way the lanes and the scheduler do:
//   dump:  reserve -> commit (page faults up front) -> backend dump (copy) -> seal
//   load:  pin -> verify -> read -> backend load (copy) -> unpin -> free (punch)
// Each round dumps one slot into a new snapshot and loads the oldest parked one
// back, so --parked snapshots stay live, as under preemption churn. Phases are
// the store's own counters (store_stats::host) plus the copies timed here.
//
// It runs twice on the same workload: with the warm pool (--pool, default
// 256MiB, the daemon's default) and without it (pool 0: every free is
// punched, every dump faults its pages in). A memcpy of --bytes between two
// committed buffers, measured in the same run (best of --repeat), is the
// baseline; the ratio is host time per transfer / that memcpy.
//
//   kvlane-storebench [--bytes 64MiB] [--rounds 40] [--parked 3] [--pool 256MiB]
//                     [--time-scale 1000] [--repeat 5]

#include "backends/factory.hpp"
#include "common/align.hpp"
#include "ipc/snapshot_store.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <sys/resource.h>

using namespace kvlane;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr std::uint64_t mib = 1024 * 1024;

struct options {
  std::uint64_t bytes = 64 * mib;
  std::uint64_t rounds = 40;
  std::uint64_t parked = 3;
  std::uint64_t pool = 256 * mib;
  double time_scale = 1000.0;
  std::uint64_t repeat = 5;
};

double ms_since(clock_type::time_point start) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
}

double ms_of(const ipc::phase_time& t) { return static_cast<double>(t.ns) / 1e6; }

long minor_faults() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}

/// Best wall time of `repeat` memcpys of `bytes` between committed buffers.
double memcpy_ms(std::uint64_t bytes, std::uint64_t repeat) {
  std::vector<std::byte> src(bytes, std::byte{0x5a});
  std::vector<std::byte> dst(bytes, std::byte{0});
  double best = 1e300;
  for (std::uint64_t i = 0; i < repeat; ++i) {
    src[i % bytes] = static_cast<std::byte>(i); // not a copy of an unchanged buffer
    const auto start = clock_type::now();
    std::memcpy(dst.data(), src.data(), bytes);
    best = std::min(best, ms_since(start));
  }
  if (dst[0] != src[0])
    std::abort(); // keeps the copy observable
  return best;
}

struct run_result {
  std::uint64_t dumps = 0;
  std::uint64_t loads = 0;
  double reserve_ms = 0, commit_ms = 0, dump_copy_ms = 0, seal_ms = 0;
  double verify_ms = 0, load_copy_ms = 0, free_ms = 0, punch_ms = 0;
  long faults = 0;
  std::uint64_t punched_bytes = 0;
  std::uint64_t committed_max = 0;
  std::uint64_t pool_bytes = 0;
};

struct parked_snapshot {
  ipc::snapshot_handle handle;
  std::uint32_t slot = 0;
};

std::optional<run_result> run(const options& opt, std::uint64_t pool) {
  backends::backend_config cfg;
  cfg.kind = "sim";
  cfg.sim.slots = 2;
  cfg.sim.snapshot_bytes = opt.bytes;
  cfg.sim.time_scale = opt.time_scale;
  auto backend = backends::make_backend("storebench", cfg);
  if (!backend) {
    fmt::print(stderr, "sim backend: {}\n", backend.error().message);
    return std::nullopt;
  }
  const std::uint32_t tokens = cfg.sim.max_context;

  // Slots hold random bytes (the sim skips zero pages), loaded once.
  std::vector<std::byte> seed_bytes(opt.bytes);
  std::mt19937_64 rng(7);
  for (std::size_t i = 0; i + 8 <= seed_bytes.size(); i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(seed_bytes.data() + i, &v, 8);
  }
  for (std::uint32_t s = 0; s < cfg.sim.slots; ++s)
    if (auto r = (*backend)->load(s, tokens, seed_bytes); !r) {
      fmt::print(stderr, "seeding slot {}: {}\n", s, r.error().message);
      return std::nullopt;
    }

  const std::uint64_t limit = (opt.parked + 2) * round_up(opt.bytes, 64 * 1024);
  auto arena = ipc::memfd_arena::create("kvlane-storebench", 2 * limit);
  if (!arena) {
    fmt::print(stderr, "arena: {}\n", arena.error().message);
    return std::nullopt;
  }
  ipc::store_options so;
  so.limit_bytes = limit;
  so.warm_pool_bytes = pool;
  auto created = ipc::snapshot_store::create(std::move(*arena), so);
  if (!created) {
    fmt::print(stderr, "store: {}\n", created.error().message);
    return std::nullopt;
  }
  auto& store = **created;
  if (auto r = store.register_model(0, 0, 0); !r)
    return std::nullopt;

  std::deque<parked_snapshot> parked;
  run_result out;
  const auto fail = [](std::string_view what, const std::string& message) {
    fmt::print(stderr, "{}: {}\n", what, message);
    return std::nullopt;
  };
  // Round r dumps slot r % 2 and, once --parked snapshots wait, loads the
  // oldest back into its slot. The first 2 * parked rounds warm up (the
  // store's first dumps land on cold pages whatever the pool) and are not counted.
  const std::uint64_t warmup = 2 * opt.parked + 2;
  ipc::store_host_times base{};
  double dump_copy = 0, load_copy = 0, free_time = 0;
  long faults_base = 0;
  for (std::uint64_t r = 0; r < warmup + opt.rounds; ++r) {
    if (r == warmup) {
      base = store.stats().host;
      out = {};
      dump_copy = load_copy = free_time = 0;
      faults_base = minor_faults();
    }
    const auto slot = static_cast<std::uint32_t>(r % cfg.sim.slots);
    ipc::snapshot_meta meta;
    meta.model_identity = 1;
    meta.cache_len = tokens;
    meta.generation = r + 1;
    meta.sequence_id = r;
    auto res = store.reserve(meta, opt.bytes);
    if (!res)
      return fail("reserve", res.error().message);
    if (!res->evicted.empty())
      return fail("reserve", "evicted a parked snapshot: the limit is too small");
    if (auto c = store.commit(res->handle); !c)
      return fail("commit", c.error().message);
    auto start = clock_type::now();
    if (auto d = (*backend)->dump(slot, tokens, res->bytes); !d)
      return fail("dump", d.error().message);
    dump_copy += ms_since(start);
    if (auto s = store.seal(res->handle); !s)
      return fail("seal", s.error().message);
    ++out.dumps;
    parked.push_back({res->handle, slot});

    if (parked.size() > opt.parked) {
      const parked_snapshot p = parked.front();
      parked.pop_front();
      if (auto x = store.pin(p.handle); !x)
        return fail("pin", x.error().message);
      if (auto v = store.verify(p.handle); !v)
        return fail("verify", v.error().message);
      auto bytes = store.read(p.handle);
      if (!bytes)
        return fail("read", bytes.error().message);
      start = clock_type::now();
      if (auto l = (*backend)->load(p.slot, tokens, *bytes); !l)
        return fail("load", l.error().message);
      load_copy += ms_since(start);
      start = clock_type::now();
      if (auto u = store.unpin(p.handle); !u)
        return fail("unpin", u.error().message);
      if (auto f = store.free(p.handle); !f)
        return fail("free", f.error().message);
      free_time += ms_since(start);
      ++out.loads;
    }
    out.committed_max = std::max(out.committed_max, store.stats().committed_bytes);
  }
  out.faults = minor_faults() - faults_base;
  const auto end = store.stats();
  out.reserve_ms = ms_of(end.host.reserve) - ms_of(base.reserve);
  out.commit_ms = ms_of(end.host.commit) - ms_of(base.commit);
  out.seal_ms = ms_of(end.host.seal) - ms_of(base.seal);
  out.verify_ms = ms_of(end.host.verify) - ms_of(base.verify);
  out.punch_ms = ms_of(end.host.punch) - ms_of(base.punch);
  out.punched_bytes = end.host.punched_bytes - base.punched_bytes;
  out.dump_copy_ms = dump_copy;
  out.load_copy_ms = load_copy;
  out.free_ms = free_time;
  out.pool_bytes = end.pool_bytes;
  return out;
}

void print(std::string_view label, const run_result& r, double baseline_ms) {
  const auto per_dump = [&](double ms) { return r.dumps ? ms / static_cast<double>(r.dumps) : 0.0; };
  const auto per_load = [&](double ms) { return r.loads ? ms / static_cast<double>(r.loads) : 0.0; };
  // free() is bookkeeping plus the punch; the punch is reported on its own.
  const double free_rest = std::max(0.0, r.free_ms - r.punch_ms);
  const double dump_total = r.reserve_ms + r.commit_ms + r.dump_copy_ms + r.seal_ms;
  const double load_total = r.verify_ms + r.load_copy_ms + r.free_ms;
  const double transfers = static_cast<double>(r.dumps + r.loads);
  const double per_transfer = (dump_total + load_total) / transfers;
  fmt::print("{}: {} dumps, {} loads\n", label, r.dumps, r.loads);
  fmt::print("  dump  ms: reserve {:6.2f}  page faults {:6.2f}  copy {:6.2f}  seal {:6.2f}   "
             "total {:6.2f}\n",
             per_dump(r.reserve_ms), per_dump(r.commit_ms), per_dump(r.dump_copy_ms),
             per_dump(r.seal_ms), per_dump(dump_total));
  fmt::print("  load  ms: verify {:6.2f}  copy {:6.2f}  punch {:6.2f}  free (rest) {:6.2f}   "
             "total {:6.2f}\n",
             per_load(r.verify_ms), per_load(r.load_copy_ms), per_load(r.punch_ms),
             per_load(free_rest), per_load(load_total));
  fmt::print("  per transfer: {:.2f} ms = {:.2f}x memcpy   minor faults/transfer {:.0f}   "
             "punched {} MiB   committed max {} MiB, pool {} MiB\n",
             per_transfer, per_transfer / baseline_ms, static_cast<double>(r.faults) / transfers,
             r.punched_bytes / mib, r.committed_max / mib, r.pool_bytes / mib);
}

std::optional<std::uint64_t> parse_bytes(std::string_view text) {
  std::uint64_t unit = 1;
  for (const auto& [suffix, scale] : {std::pair<std::string_view, std::uint64_t>{"GiB", 1024 * mib},
                                      {"MiB", mib},
                                      {"KiB", 1024}})
    if (text.size() > suffix.size() && text.ends_with(suffix)) {
      unit = scale;
      text.remove_suffix(suffix.size());
      break;
    }
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || v > UINT64_MAX / unit)
    return std::nullopt;
  return v * unit;
}

} // namespace

int main(int argc, char** argv) {
  options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 >= argc) {
      fmt::print(stderr, "{}: missing value\n", arg);
      return 2;
    }
    const std::string_view value = argv[++i];
    if (arg == "--time-scale") {
      try {
        opt.time_scale = std::stod(std::string(value));
      } catch (const std::exception&) {
        opt.time_scale = 0;
      }
      if (!(opt.time_scale > 0)) {
        fmt::print(stderr, "--time-scale: expected a positive number, got '{}'\n", value);
        return 2;
      }
      continue;
    }
    const auto v = parse_bytes(value);
    if (!v) {
      fmt::print(stderr, "{}: expected a number (bytes may end in KiB, MiB, GiB), got '{}'\n",
                 arg, value);
      return 2;
    }
    if (arg == "--bytes" && *v > 0)
      opt.bytes = *v;
    else if (arg == "--rounds" && *v > 0)
      opt.rounds = *v;
    else if (arg == "--parked" && *v > 0)
      opt.parked = *v;
    else if (arg == "--pool")
      opt.pool = *v;
    else if (arg == "--repeat" && *v > 0)
      opt.repeat = *v;
    else {
      fmt::print(stderr, "unknown option or bad value: {} {}\n", arg, value);
      return 2;
    }
  }
  if (opt.bytes % 4096 != 0 || opt.bytes < 4096) {
    fmt::print(stderr, "--bytes must be a multiple of 4KiB (the sim's max_context is 4096)\n");
    return 2;
  }

  fmt::print("kvlane-storebench: {} MiB snapshots, {} parked, {} rounds, sim time_scale {}\n",
             opt.bytes / mib, opt.parked, opt.rounds, opt.time_scale);
  const double before = memcpy_ms(opt.bytes, opt.repeat);
  const auto warm = run(opt, opt.pool);
  const auto cold = run(opt, 0);
  const double after = memcpy_ms(opt.bytes, opt.repeat);
  if (!warm || !cold)
    return 1;
  const double baseline = std::min(before, after);
  fmt::print("memcpy of {} MiB (best of {}, before and after): {:.2f} ms\n", opt.bytes / mib,
             2 * opt.repeat, baseline);
  print(fmt::format("warm pool {} MiB", opt.pool / mib), *warm, baseline);
  print("no pool (punch on free, fault on reserve)", *cold, baseline);
  return 0;
}
