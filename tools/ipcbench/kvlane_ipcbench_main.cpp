// kvlane-ipcbench: figures for the client IPC path (docs/benchmarks.md, "IPC").
//
// One run measures, in order:
//  1. one-way latency of a 256-byte record through the SPSC ring, reader
//     waiting (spinning up to spin_us, then asleep on the eventfd), at two
//     paces: records 5 us apart (the reader is still spinning) and 1 ms apart
//     (the reader sleeps on its eventfd);
//  2. the same through a SOCK_SEQPACKET Unix socket pair (blocking recv);
//  3. the end-to-end token path with 64 concurrent streams through a real
//     kvlaned: from the daemon's sink receiving a token (right after the step
//     and its sampling) to the app's callback, per token event;
//  4. one app's token latency (8 streams) alone, then while another app keeps
//     its submit ring full of cancel records (the client loop must not let
//     one app's ring hold it);
//  5. aggregate tokens/s through kvlaned with the sim at zero step time, and
//     the same workload in process (no IPC) as the baseline;
//  6. the HTTP API at zero step time: time to first token over HTTP/SSE against
//     the ring path (sequential requests, client-side clocks), aggregate tokens/s
//     of concurrent SSE streams (and whether each got every token), and the
//     daemon's memory per idle HTTP connection.
// It prints figures and ratios; it asserts nothing.
//
// Latency threads are pinned to CPUs 0 (writer) and 1 (reader); on a machine
// shared with other work the tails (and on a busy one the medians) measure the
// neighbours as much as the IPC: note the load average with the figures.
//
//   kvlane-ipcbench [--daemon PATH] [--streams N] [--seconds S] [--samples N] [--spin-us N]
//                   [--workers N]
// --workers sets the daemons' [daemon] worker_threads (default 0: one per core).
// --spin-us sets the daemons' [clients] spin_us (the app reader's spin before it
// sleeps; default 20): a value above the step time keeps the app's reader awake.
#include "actors/engine.hpp"
#include "common/child_process.hpp"
#include "daemon/config.hpp"
#include "ipc/protocol.hpp"
#include "ipc/spsc_ring.hpp"
#include "http_load.hpp"

#include <kvlane/client.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace std::chrono_literals;
namespace proto = kvlane::ipc::proto;
namespace client = kvlane::client;

namespace {

std::uint64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

/// Pins the calling thread to one CPU (reader and writer on different cores,
/// so a spinning reader never shares a core with its writer).
void pin(unsigned cpu) {
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu % n, &set);
  (void)::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);
}

void unpin() {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i)
    CPU_SET(i, &set);
  (void)::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);
}

void spin_until(std::uint64_t t) {
  while (now_ns() < t) {
  }
}

struct summary {
  double p50 = 0, p99 = 0, mean = 0;
  std::size_t n = 0;
};

summary summarize(std::vector<double> v) {
  summary s;
  if (v.empty())
    return s;
  std::sort(v.begin(), v.end());
  s.n = v.size();
  s.p50 = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  double sum = 0;
  for (double x : v)
    sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

/// Ring one-way latency (us): writer stamps, reader (spin then eventfd) measures.
summary ring_latency(std::size_t samples, std::uint64_t gap_ns, std::chrono::microseconds spin) {
  const kvlane::ipc::ring_geometry g{0, 64, 256};
  const auto bytes = kvlane::ipc::ring_bytes(64, 256);
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  auto* base = static_cast<std::byte*>(mem);
  kvlane::ipc::ring_init(base, g);
  const int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  std::vector<double> lat;
  lat.reserve(samples);
  std::thread reader{[&] {
    pin(1);
    kvlane::ipc::ring_reader r(base, g, true);
    proto::record_bytes rec;
    while (lat.size() < samples) {
      if (!kvlane::ipc::wait_readable(r, efd, spin, 1000ms))
        continue;
      while (r.try_pop(rec) == kvlane::ipc::ring_status::ok) {
        const auto t = now_ns();
        std::uint64_t sent;
        std::memcpy(&sent, rec.data(), sizeof sent);
        lat.push_back(static_cast<double>(t - sent) / 1000.0);
      }
    }
  }};
  kvlane::ipc::ring_writer w(base, g, false);
  proto::record_bytes rec{};
  pin(0);
  std::this_thread::sleep_for(5ms);
  for (std::size_t i = 0; i < samples; ++i) {
    spin_until(now_ns() + gap_ns);
    const auto t = now_ns();
    std::memcpy(rec.data(), &t, sizeof t);
    while (w.try_push(rec) != kvlane::ipc::ring_status::ok) {
    }
    if (w.reader_sleeping())
      kvlane::ipc::eventfd_signal(efd);
  }
  reader.join();
  unpin();
  ::close(efd);
  ::munmap(mem, bytes);
  return summarize(std::move(lat));
}

/// Unix socket pair one-way latency (us): blocking recv on the reader side.
summary socket_latency(std::size_t samples, std::uint64_t gap_ns) {
  int sv[2];
  ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv);
  std::vector<double> lat;
  lat.reserve(samples);
  std::thread reader{[&] {
    pin(1);
    proto::record_bytes rec;
    while (lat.size() < samples) {
      if (::recv(sv[1], rec.data(), rec.size(), 0) != static_cast<ssize_t>(rec.size()))
        continue;
      const auto t = now_ns();
      std::uint64_t sent;
      std::memcpy(&sent, rec.data(), sizeof sent);
      lat.push_back(static_cast<double>(t - sent) / 1000.0);
    }
  }};
  proto::record_bytes rec{};
  pin(0);
  std::this_thread::sleep_for(5ms);
  for (std::size_t i = 0; i < samples; ++i) {
    spin_until(now_ns() + gap_ns);
    const auto t = now_ns();
    std::memcpy(rec.data(), &t, sizeof t);
    (void)::send(sv[0], rec.data(), rec.size(), 0);
  }
  reader.join();
  unpin();
  ::close(sv[0]);
  ::close(sv[1]);
  return summarize(std::move(lat));
}

std::uint32_t g_spin_us = 20; // [clients] spin_us of the benchmark daemons
std::uint32_t g_workers = 0;  // [daemon] worker_threads of the benchmark daemons (0 = one per core)

std::string bench_config(const std::string& run_dir, std::uint32_t slots, bool zero_time) {
  return fmt::format(R"(version = 1
[daemon]
runtime_dir = "{}"
log_level = "warn"
worker_threads = {}
[daemon.log_levels]
daemon = "info"   # its "ready:" line
http = "info"     # its "serving ... on http://HOST:PORT" line
[http]
listen = ""
[[model]]
name = "bench"
[model.sim]
slots = {}
max_context = 512
max_prefill_chunk = 64
snapshot_bytes = "512KiB"
step_base_ms = {}
step_per_token_ms = {}
time_scale = {}
[scheduler]
spare_slots = 0
max_step_tokens = 4096
[clients]
events_ring_records = 4096
spin_us = {}
)",
                     run_dir, g_workers, slots, zero_time ? 0.0 : 31.0, zero_time ? 0.0 : 1.7,
                     zero_time ? 1e6 : 10.0, g_spin_us);
}

/// A kvlaned child process with its own runtime directory, ready (its sockets
/// accept) once constructed; stopped with SIGTERM on destruction.
class daemon_proc {
public:
  daemon_proc(const std::string& exe, const std::string& dir, const std::string& config) {
    std::filesystem::create_directories(dir);
    const auto cfg = dir + "/kvlane.toml";
    std::ofstream{cfg} << config;
    socket_ = dir + "/run/kvlane.sock";
    kvlane::child_options o;
    o.args = {"--config", cfg};
    auto c = kvlane::child_process::start(exe, std::move(o));
    if (!c)
      die(c.error());
    proc_.emplace(std::move(*c));
    if (!proc_->wait_for_output("ready:", 20s))
      die(fmt::format("kvlaned was not ready within 20 s; it printed:\n{}", proc_->output()));
  }
  ~daemon_proc() {
    if (proc_)
      (void)proc_->stop(10s, 10s);
  }
  pid_t pid() const noexcept { return proc_->pid(); }

  /// The HTTP API's port, from the daemon's "... on http://127.0.0.1:PORT" line.
  std::uint16_t http_port() {
    constexpr std::string_view marker = "on http://127.0.0.1:";
    if (!proc_->wait_for_output(marker, 20s))
      die(fmt::format("kvlaned logged no HTTP API URL; it printed:\n{}", proc_->output()));
    const auto out = proc_->output();
    return static_cast<std::uint16_t>(std::stoul(out.substr(out.find(marker) + marker.size())));
  }

  std::unique_ptr<client::connection> connect() {
    client::connect_options o;
    o.socket_path = socket_;
    o.client_name = "ipcbench";
    auto c = client::connect(o);
    if (!c)
      die(fmt::format("cannot connect to {}: {}", socket_, c.error().message));
    return std::move(*c);
  }

private:
  [[noreturn]] static void die(const std::string& message) {
    std::fprintf(stderr, "ipcbench: %s\n", message.c_str());
    std::exit(1);
  }

  std::optional<kvlane::child_process> proc_;
  std::string socket_;
};

/// Resident set size of `pid` in KiB (VmRSS), 0 if unknown.
std::uint64_t rss_kib(pid_t pid) {
  std::ifstream in{fmt::format("/proc/{}/status", pid)};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stoull(line.substr(6));
  return 0;
}

/// Submit-to-first-token over the ring path, client clock, one request at a time.
std::vector<double> ring_ttft_us(client::connection& c, std::size_t n) {
  std::vector<double> out;
  for (std::size_t i = 0; i < n; ++i) {
    client::request r;
    r.model = "bench";
    r.prompt = fmt::format("ttft request {} says", i);
    r.sampling.max_tokens = 4;
    r.sampling.stop_at_eos = false;
    const auto t0 = now_ns();
    auto s = c.submit(r);
    if (!s)
      continue;
    auto first = (*s)->next(5000ms);
    if (first && !first->tokens.empty())
      out.push_back(static_cast<double>(now_ns() - t0) / 1000.0);
    (void)(*s)->wait(5000ms);
  }
  return out;
}

/// Runs `streams` callback streams of `max_tokens` each, resubmitting as they
/// end, for `seconds`; returns (tokens received, seconds, token latencies in us).
struct stream_result {
  std::uint64_t tokens = 0;
  double seconds = 0;
  std::vector<double> latency_us;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> stamps; ///< (daemon ns, app ns)
};

stream_result run_streams(client::connection& c, std::uint32_t streams, std::uint32_t max_tokens,
                          double seconds, bool measure) {
  stream_result out;
  std::mutex mu;
  std::atomic<std::uint64_t> tokens{0};
  std::atomic<std::uint32_t> running{0};
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> seq{0};
  std::function<void()> submit_one;
  auto cb = [&](const client::event& ev) {
    if (ev.tokens) {
      tokens.fetch_add(ev.tokens->size(), std::memory_order_relaxed);
      if (measure) {
        const auto t = now_ns();
        std::lock_guard lock{mu};
        out.latency_us.push_back(static_cast<double>(t - ev.daemon_time_ns) / 1000.0);
        out.stamps.emplace_back(ev.daemon_time_ns, t);
      }
    }
    if (ev.end || ev.failure) {
      running.fetch_sub(1);
      if (!stop.load())
        submit_one(); // from the reader thread: the submit ring never blocks long
    }
  };
  submit_one = [&] {
    client::request r;
    r.model = "bench";
    r.prompt = fmt::format("stream {} says", seq.fetch_add(1));
    r.sampling.max_tokens = max_tokens;
    r.sampling.stop_at_eos = false;
    running.fetch_add(1);
    if (!c.submit(r, cb))
      running.fetch_sub(1);
  };
  const auto start = std::chrono::steady_clock::now();
  for (std::uint32_t i = 0; i < streams; ++i)
    submit_one();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  out.tokens = tokens.load();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  while (running.load() > 0 && std::chrono::steady_clock::now() - start < std::chrono::duration<double>(seconds + 30))
    std::this_thread::sleep_for(10ms);
  std::lock_guard lock{mu};
  return out;
}

/// The same workload in process: a counting sink, no IPC.
double inprocess_tokens_per_second(const std::string& config_text, std::uint32_t streams,
                                   std::uint32_t max_tokens, double seconds) {
  auto cfg = kvlane::daemon::parse(config_text);
  if (!cfg)
    return 0;
  caf::actor_system_config sc;
  caf::actor_system sys{sc};
  auto eng = kvlane::actors::engine::create(sys, *cfg);
  if (!eng)
    return 0;
  struct counting_sink final : kvlane::actors::stream_sink {
    std::atomic<std::uint64_t>* tokens;
    std::function<void()> again;
    void on_tokens(std::span<const kvlane::actors::token_id> t) override { tokens->fetch_add(t.size()); }
    void on_end(const kvlane::actors::stream_end&) override { again(); }
  };
  std::atomic<std::uint64_t> tokens{0};
  std::atomic<bool> stop{false};
  std::function<void()> submit_one = [&] {
    if (stop)
      return;
    kvlane::actors::submit_request r;
    r.model = "bench";
    r.prompt_text = "stream says";
    r.sampling.max_tokens = max_tokens;
    r.stop_at_eos = false;
    auto sink = std::make_shared<counting_sink>();
    sink->tokens = &tokens;
    sink->again = submit_one;
    (void)(*eng)->submit(std::move(r), sink);
  };
  const auto start = std::chrono::steady_clock::now();
  for (std::uint32_t i = 0; i < streams; ++i)
    submit_one();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  const auto n = tokens.load();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  (*eng)->shutdown();
  return static_cast<double>(n) / s;
}

} // namespace

int main(int argc, char** argv) {
  std::string daemon_exe =
    (std::filesystem::canonical("/proc/self/exe").parent_path() / "kvlaned").string();
  std::uint32_t streams = 64;
  double seconds = 5;
  std::size_t samples = 20000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string_view a{argv[i]};
    if (a == "--daemon")
      daemon_exe = argv[i + 1];
    else if (a == "--streams")
      streams = static_cast<std::uint32_t>(std::stoul(argv[i + 1]));
    else if (a == "--seconds")
      seconds = std::stod(argv[i + 1]);
    else if (a == "--samples")
      samples = std::stoul(argv[i + 1]);
    else if (a == "--workers")
      g_workers = static_cast<std::uint32_t>(std::stoul(argv[i + 1]));
    else if (a == "--spin-us")
      g_spin_us = static_cast<std::uint32_t>(std::stoul(argv[i + 1]));
  }
  double load[3] = {0, 0, 0};
  (void)::getloadavg(load, 3);
  std::printf("kvlane-ipcbench %s: %u CPUs, load average %.2f; all latencies in microseconds\n\n",
              KVLANE_VERSION, std::thread::hardware_concurrency(), load[0]);

  const auto ring_spin = ring_latency(samples, 5'000, 20us);
  const auto sock_spin = socket_latency(samples, 5'000);
  const auto ring_sleep = ring_latency(samples / 10, 1'000'000, 20us);
  const auto sock_sleep = socket_latency(samples / 10, 1'000'000);
  std::printf("one-way record latency (256 B), %zu samples per row\n", samples);
  std::printf("  %-44s p50 %7.2f  p99 %7.2f\n", "ring, records 5 us apart (reader spinning)", ring_spin.p50, ring_spin.p99);
  std::printf("  %-44s p50 %7.2f  p99 %7.2f\n", "unix socket, records 5 us apart (blocking recv)", sock_spin.p50, sock_spin.p99);
  std::printf("  %-44s p50 %7.2f  p99 %7.2f\n", "ring, records 1 ms apart (reader asleep)", ring_sleep.p50, ring_sleep.p99);
  std::printf("  %-44s p50 %7.2f  p99 %7.2f\n", "unix socket, records 1 ms apart", sock_sleep.p50, sock_sleep.p99);
  std::printf("  ring / socket p50: %.3f (5 us apart), %.3f (1 ms apart)\n\n",
              ring_spin.p50 / sock_spin.p50, ring_sleep.p50 / sock_sleep.p50);

  const auto dir = fmt::format("/tmp/kvlane-ipcbench-{}", ::getpid());
  {
    daemon_proc d{daemon_exe, dir + "/paced", bench_config(dir + "/paced/run", streams, false)};
    auto c = d.connect();
    auto r = run_streams(*c, streams, 400, seconds, true);
    const auto s = summarize(r.latency_us);
    std::printf("token path, daemon sink -> app callback, %u streams, sim step 31 ms + 1.7 ms/token "
                "at 10x, app reader spin %u us, daemon workers %u\n",
                streams, g_spin_us, g_workers);
    std::printf("  %zu token events: p50 %.2f  p99 %.2f  mean %.2f  (%.0f tokens/s)\n", s.n, s.p50,
                s.p99, s.mean, static_cast<double>(r.tokens) / r.seconds);
    // Where the time goes: a step's tokens arrive as a burst; split the first
    // of each burst (the app's reader is asleep) from the rest.
    auto stamps = r.stamps;
    std::sort(stamps.begin(), stamps.end());
    std::vector<double> first, rest, spread, arrival;
    std::uint64_t burst_start = 0, prev = 0;
    for (auto [d, a] : stamps) {
      const bool starts = prev == 0 || d - prev > 1'000'000;
      if (starts) {
        if (prev != 0)
          spread.push_back(static_cast<double>(prev - burst_start) / 1000.0);
        burst_start = d;
      }
      (starts ? first : rest).push_back(static_cast<double>(a - d) / 1000.0);
      arrival.push_back(static_cast<double>(d - burst_start) / 1000.0);
      prev = d;
    }
    const auto f = summarize(first), o = summarize(rest), sp = summarize(spread);
    std::printf("  first token of a step: p50 %.2f  p99 %.2f; the other tokens: p50 %.2f  p99 %.2f\n",
                f.p50, f.p99, o.p50, o.p99);
    std::printf("  the daemon hands a step's tokens to its sinks over p50 %.1f us (p99 %.1f)\n\n",
                sp.p50, sp.p99);
  }
  {
    // One app streams; another floods its submit ring with cancels of ids it
    // never submitted (each costs the daemon a decode and a lookup): the
    // first app's token latency with and without the flood.
    constexpr std::uint32_t victim_streams = 8;
    // A large submit ring: the flooding app can keep far more records queued than
    // the loop decodes in one pass.
    daemon_proc d{daemon_exe, dir + "/flood",
                  bench_config(dir + "/flood/run", victim_streams, false) + "submit_ring_records = 65536\n"};
    auto victim = d.connect();
    auto flooder = d.connect();
    const auto quiet = summarize(run_streams(*victim, victim_streams, 400, seconds, true).latency_us);
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> flood_records{0};
    std::thread flood{[&] {
      for (std::uint64_t id = 1ull << 40; !stop.load(std::memory_order_relaxed); ++id)
        if (flooder->cancel(id, 1s))
          flood_records.fetch_add(1, std::memory_order_relaxed);
    }};
    const auto flood_start = std::chrono::steady_clock::now();
    auto flooded_run = run_streams(*victim, victim_streams, 400, seconds, true);
    stop = true;
    flood.join();
    const double flood_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - flood_start).count();
    const auto flooded = summarize(flooded_run.latency_us);
    std::printf("token path of one app (%u streams) while another floods its submit ring with cancels\n",
                victim_streams);
    std::printf("  alone:   %zu token events: p50 %.2f  p99 %.2f\n", quiet.n, quiet.p50, quiet.p99);
    std::printf("  flooded: %zu token events: p50 %.2f  p99 %.2f  (flood: %.0f records/s)\n", flooded.n,
                flooded.p50, flooded.p99, static_cast<double>(flood_records.load()) / flood_s);
    std::printf("  flooded / alone p99: %.2f\n\n", quiet.p99 > 0 ? flooded.p99 / quiet.p99 : 0.0);
  }
  {
    const auto cfg_text = bench_config(dir + "/fast/run", streams, true);
    double ipc_tps = 0;
    {
      daemon_proc d{daemon_exe, dir + "/fast", cfg_text};
      auto c = d.connect();
      auto r = run_streams(*c, streams, 448, seconds, false);
      ipc_tps = static_cast<double>(r.tokens) / r.seconds;
    }
    const double inproc = inprocess_tokens_per_second(cfg_text, streams, 448, seconds);
    std::printf("aggregate throughput, %u streams, sim at zero step time\n", streams);
    std::printf("  through kvlaned and the rings: %10.0f tokens/s\n", ipc_tps);
    std::printf("  in process (engine, no IPC):   %10.0f tokens/s\n", inproc);
    std::printf("  IPC / in process: %.2f\n", inproc > 0 ? ipc_tps / inproc : 0.0);
  }
  {
    auto cfg_text = bench_config(dir + "/http/run", streams, true);
    const std::string off = "[http]\nlisten = \"\"\n";
    if (auto at = cfg_text.find(off); at != std::string::npos)
      cfg_text.replace(at, off.size(),
                      "[daemon.log_levels]\nhttp = \"info\"\n" // logs the URL with the port
                      "[http]\nlisten = \"127.0.0.1:0\"\nmax_connections = 4096\n");
    daemon_proc d{daemon_exe, dir + "/http", cfg_text};
    auto c = d.connect();
    const auto port = d.http_port();
    const std::size_t n = 300;
    const auto ring = summarize(ring_ttft_us(*c, n));
    std::vector<double> http_ttft;
    if (const int fd = kvlane::ipcbench::http_connect(port); fd >= 0) {
      for (std::size_t i = 0; i < n; ++i) {
        auto r = kvlane::ipcbench::sse_completion(fd, "bench", fmt::format("ttft request {} says", i), 4);
        if (r.ok && r.text_events > 0)
          http_ttft.push_back(r.ttft_us);
      }
      ::close(fd);
    }
    const auto http = summarize(http_ttft);
    std::printf("\nHTTP API, sim at zero step time\n");
    std::printf("  time to first token, %zu sequential requests, client clock:\n", n);
    std::printf("    ring path (libkvlane):       p50 %8.1f  p99 %8.1f\n", ring.p50, ring.p99);
    std::printf("    HTTP/SSE (/v1/completions):  p50 %8.1f  p99 %8.1f\n", http.p50, http.p99);
    std::printf("    HTTP - ring, p50: %.1f us\n", http.p50 - ring.p50);

    constexpr int idle = 500; // under the default limit of 1024 open files per process
    const auto before = rss_kib(d.pid());
    std::vector<int> fds;
    for (int i = 0; i < idle; ++i)
      if (const int fd = kvlane::ipcbench::http_connect(port); fd >= 0)
        fds.push_back(fd);
    // One request on the last connection: every earlier connection has been accepted by then.
    if (!fds.empty()) {
      auto probe = kvlane::ipcbench::sse_completion(fds.back(), "bench", "probe", 1);
      (void)probe;
    }
    const auto after = rss_kib(d.pid());
    std::printf("  %zu idle connections: daemon RSS %llu -> %llu KiB, %.1f KiB per connection\n",
                fds.size(), static_cast<unsigned long long>(before),
                static_cast<unsigned long long>(after),
                fds.empty() ? 0.0 : static_cast<double>(after - std::min(after, before)) / static_cast<double>(fds.size()));
    for (int fd : fds)
      ::close(fd);
    const auto r = kvlane::ipcbench::run_http_streams(port, "bench", streams, 448, seconds);
    std::printf("  %u concurrent SSE streams, 448 tokens per request: %.0f tokens/s; %llu requests, "
                "%llu short of tokens, %llu failed\n",
                streams, static_cast<double>(r.tokens) / r.seconds,
                static_cast<unsigned long long>(r.requests),
                static_cast<unsigned long long>(r.short_requests),
                static_cast<unsigned long long>(r.failed));

  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
