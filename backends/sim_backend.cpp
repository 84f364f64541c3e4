#include "backends/sim_backend.hpp"

#include "common/align.hpp"
#include "common/random.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>

namespace kvlane::backends {

namespace {

// --- the cheap PRNG: splitmix64 (common/random.hpp, which also hashes) ------

double uniform01(std::uint64_t& state) noexcept {
  return unit_double(splitmix64(state));
}

float unit_float(std::uint64_t& state) noexcept {
  return static_cast<float>(splitmix64(state) >> 40) * 0x1p-24f;
}

// --- what a step writes into KV memory ---------------------------------------

// The record at the start of each written position. Only these bytes are
// written per token (writing all bytes_per_token would make steps slow); the
// rest of the position keeps whatever it held. word_len/consonants make the
// text generator's state part of the KV contents, like the chain hash.
struct kv_record {
  std::uint64_t chain;      ///< H(chain at p-1, token, seed)
  std::uint32_t token;
  std::uint32_t position;
  std::uint16_t word_len;   ///< letters since the last non-letter
  std::uint16_t consonants; ///< consonants since the last vowel or non-letter
  std::uint32_t reserved;
  std::uint64_t filler;     ///< derived from chain: makes the record look like data
};
static_assert(sizeof(kv_record) == 32);
static_assert(std::is_trivially_copyable_v<kv_record> && std::is_standard_layout_v<kv_record>);

kv_record read_record(const std::byte* at) noexcept {
  kv_record r;
  std::memcpy(&r, at, sizeof r); // positions need not be aligned
  return r;
}

void write_record(std::byte* at, const kv_record& r) noexcept {
  std::memcpy(at, &r, sizeof r);
}

std::uint64_t chain_start(std::uint64_t seed_key) noexcept {
  return mix64(seed_key ^ 0x5EED5EED5EED5EEDull);
}

std::uint64_t chain_next(std::uint64_t prev, token_id token, std::uint64_t seed_key) noexcept {
  return mix64(mix64(prev ^ seed_key) + token + 1);
}

bool is_letter(token_id t) noexcept {
  return (t >= 'a' && t <= 'z') || (t >= 'A' && t <= 'Z');
}

bool is_vowel(token_id t) noexcept {
  switch (t | 0x20u) {
    case 'a': case 'e': case 'i': case 'o': case 'u': return true;
    default: return false;
  }
}

bool is_punctuation(token_id t) noexcept {
  return (t >= '!' && t <= '/') || (t >= ':' && t <= '@') || (t >= '[' && t <= '`')
         || (t >= '{' && t <= '~');
}

// The record a step writes at `pos` for `token`, given the record at pos - 1
// (origin_record for position 0). The chain folds in every token so far.
kv_record derive_record(const kv_record& prev, token_id token, std::uint32_t pos,
                        std::uint64_t seed_key) noexcept {
  const bool letter = is_letter(token);
  const bool prev_letter = pos > 0 && is_letter(prev.token);
  kv_record next{};
  next.chain = chain_next(prev.chain, token, seed_key);
  next.token = token;
  next.position = pos;
  next.word_len = letter ? static_cast<std::uint16_t>(
                               std::min<unsigned>(prev_letter ? prev.word_len + 1u : 1u, 0xFFFFu))
                         : 0;
  next.consonants =
      letter && !is_vowel(token)
          ? static_cast<std::uint16_t>(std::min<unsigned>(prev_letter ? prev.consonants + 1u : 1u, 0xFFFFu))
          : 0;
  next.filler = mix64(next.chain);
  return next;
}

// What precedes position 0: only its chain is read.
kv_record origin_record(std::uint64_t seed_key) noexcept {
  kv_record r{};
  r.chain = chain_start(seed_key);
  return r;
}

// A digest of a record's raw bytes, for folding damage into the chain.
std::uint64_t record_digest(const kv_record& r) noexcept {
  std::uint64_t words[sizeof(kv_record) / 8];
  std::memcpy(words, &r, sizeof r);
  std::uint64_t h = 0xDA3A6EDull;
  for (const std::uint64_t w : words)
    h = mix64(h ^ w);
  return h;
}

// --- the text generator ------------------------------------------------------

// English letter frequencies (percent), split so words alternate roughly
// between consonants and vowels and read as pronounceable pseudo-words.
constexpr std::string_view vowels = "eaoiu";
constexpr float vowel_freq[] = {12.7f, 8.2f, 7.5f, 7.0f, 2.8f};
constexpr std::string_view consonants = "tnshrdlcmwfgypbvkjxqz";
constexpr float consonant_freq[] = {9.1f, 6.7f, 6.3f, 6.1f, 6.0f, 4.3f, 4.0f, 2.8f, 2.4f, 2.4f, 2.2f,
                                    2.0f, 2.0f, 1.9f, 1.5f, 1.0f, 0.8f, 0.15f, 0.15f, 0.1f, 0.07f};

float letter_freq(char c) noexcept {
  if (auto i = vowels.find(c); i != std::string_view::npos)
    return vowel_freq[i];
  if (auto i = consonants.find(c); i != std::string_view::npos)
    return consonant_freq[i];
  return 0.0f;
}

template <std::size_t N>
char pick_weighted(std::string_view letters, const float (&freq)[N], std::uint64_t& rng) noexcept {
  float total = 0.0f;
  for (float f : freq)
    total += f;
  float x = static_cast<float>(uniform01(rng)) * total;
  for (std::size_t i = 0; i < N; ++i) {
    if (x < freq[i])
      return letters[i];
    x -= freq[i];
  }
  return letters[N - 1];
}

// The token greedy decoding should produce after `last`.
token_id choose_next(const kv_record& last, double eos_rate, std::uint64_t& rng) noexcept {
  if (eos_rate > 0.0 && uniform01(rng) < eos_rate)
    return byte_tokenizer::eos_token;
  const token_id prev = last.token;
  if (is_letter(prev)) {
    // Hazard of ending the word after this many letters: words of 3..8 letters.
    constexpr double end_hazard[] = {0.0, 0.0, 0.0, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0};
    const double hazard = end_hazard[std::min<std::size_t>(last.word_len, 8)];
    if (uniform01(rng) < hazard) {
      const double u = uniform01(rng);
      return u < 0.9 ? token_id{' '} : u < 0.96 ? token_id{','} : token_id{'.'};
    }
  } else if (is_punctuation(prev)) {
    return ' ';
  }
  bool want_vowel = false;
  const double u = uniform01(rng);
  if (!is_letter(prev))
    want_vowel = u < 0.3;
  else if (last.consonants >= 2 || last.word_len == 1)
    want_vowel = !is_vowel(prev); // no triple consonants, no clusters starting a word
  else if (is_vowel(prev))
    want_vowel = u < 0.12;
  else
    want_vowel = u < 0.6;
  const char c = want_vowel ? pick_weighted(vowels, vowel_freq, rng)
                            : pick_weighted(consonants, consonant_freq, rng);
  return static_cast<unsigned char>(c);
}

// --- time --------------------------------------------------------------------

using steady = std::chrono::steady_clock;

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now().time_since_epoch())
      .count();
}

void sleep_until_ns(std::int64_t deadline_ns) {
  // steady_clock is CLOCK_MONOTONIC; sleep_until never returns early.
  std::this_thread::sleep_until(steady::time_point(std::chrono::nanoseconds(deadline_ns)));
}

// --- memory ------------------------------------------------------------------

bool all_zero(const std::byte* p, std::size_t n) noexcept {
  static const std::byte zeros[4096] = {};
  while (n > 0) {
    const std::size_t k = std::min(n, sizeof zeros);
    if (std::memcmp(p, zeros, k) != 0)
      return false;
    p += k;
    n -= k;
  }
  return true;
}

// Zeroes [p, p+n) of the KV mapping, handing whole pages back to the kernel:
// on a private anonymous mapping they read as zero again and stop counting
// toward RSS.
void zero_kv(std::byte* p, std::size_t n) noexcept {
  const auto page = page_size();
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  const auto end = begin + n;
  const auto inner_begin = (begin + page - 1) / page * page;
  const auto inner_end = end / page * page;
  if (inner_end > inner_begin
      && ::madvise(reinterpret_cast<void*>(inner_begin), inner_end - inner_begin, MADV_DONTNEED)
             == 0) {
    std::memset(p, 0, inner_begin - begin);
    std::memset(reinterpret_cast<std::byte*>(inner_end), 0, end - inner_end);
    return;
  }
  std::memset(p, 0, n);
}

// Copies a snapshot into KV memory. Runs of zero pages in the source (slots
// whose positions were never written) are not copied but zeroed by
// zero_kv(), so loading a mostly empty full-slot snapshot commits no memory.
void copy_into_kv(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
  const auto page = page_size();
  const auto dst_addr = reinterpret_cast<std::uintptr_t>(dst);
  // Chunks end on page boundaries of the destination.
  auto chunk_end = [&](std::size_t i) {
    return std::min(n, static_cast<std::size_t>((dst_addr + i) / page * page + page - dst_addr));
  };
  std::size_t i = 0;
  while (i < n) {
    std::size_t end = chunk_end(i);
    if (!all_zero(src + i, end - i)) {
      std::memcpy(dst + i, src + i, end - i);
      i = end;
      continue;
    }
    const std::size_t run_begin = i;
    i = end;
    while (i < n) {
      end = chunk_end(i);
      if (!all_zero(src + i, end - i))
        break;
      i = end;
    }
    zero_kv(dst + run_begin, i - run_begin);
  }
}

// --- options -----------------------------------------------------------------

constexpr double max_op_ms = 3.6e6; // one hour: beyond that a figure is a typo

std::string fmt_num(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0')
    s.pop_back();
  if (!s.empty() && s.back() == '.')
    s.pop_back();
  return s;
}

bool valid_code(backend_errc c) noexcept {
  return static_cast<int>(c) >= static_cast<int>(backend_errc::context_overflow)
         && static_cast<int>(c) <= static_cast<int>(backend_errc::device_failure);
}

std::optional<std::string> validate(const sim_options& o) {
  if (o.slots == 0)
    return "sim.slots must be at least 1";
  if (o.max_context == 0)
    return "sim.max_context must be at least 1";
  if (o.max_prefill_chunk == 0)
    return "sim.max_prefill_chunk must be at least 1";
  if (o.snapshot_bytes == 0 || o.snapshot_bytes % o.max_context != 0)
    return "sim.snapshot_bytes (" + std::to_string(o.snapshot_bytes)
           + ") must be a positive multiple of sim.max_context (" + std::to_string(o.max_context)
           + ")";
  if (o.snapshot_bytes / o.max_context < sizeof(kv_record))
    return "sim.snapshot_bytes / sim.max_context must be at least " + std::to_string(sizeof(kv_record))
           + " bytes per token (got " + std::to_string(o.snapshot_bytes / o.max_context) + ")";
  if (o.snapshot_bytes > std::numeric_limits<std::size_t>::max() / 2 / o.slots)
    return "sim.slots * sim.snapshot_bytes is too large";
  if (o.extent != snapshot_extent::full_slot && o.extent != snapshot_extent::used_length)
    return "sim.snapshot has an unknown value";
  const std::pair<const char*, double> times[] = {
      {"step_base_ms", o.step_base_ms}, {"step_per_token_ms", o.step_per_token_ms},
      {"dump_min_ms", o.dump_min_ms},   {"dump_max_ms", o.dump_max_ms},
      {"load_min_ms", o.load_min_ms},   {"load_max_ms", o.load_max_ms}};
  for (const auto& [key, v] : times)
    if (!std::isfinite(v) || v < 0.0 || v > max_op_ms)
      return std::string("sim.") + key + " (" + fmt_num(v) + ") must be within [0, "
             + fmt_num(max_op_ms) + "]";
  if (o.dump_min_ms > o.dump_max_ms)
    return "sim.dump_min_ms must not exceed sim.dump_max_ms";
  if (o.load_min_ms > o.load_max_ms)
    return "sim.load_min_ms must not exceed sim.load_max_ms";
  if (!std::isfinite(o.time_scale) || o.time_scale <= 0.0)
    return "sim.time_scale (" + fmt_num(o.time_scale) + ") must be a positive number";
  if (o.overlap != transfer_overlap::full && o.overlap != transfer_overlap::none
      && o.overlap != transfer_overlap::shared)
    return "sim.overlap has an unknown value";
  if (!(o.eos_rate >= 0.0 && o.eos_rate <= 1.0))
    return "sim.eos_rate (" + fmt_num(o.eos_rate) + ") must be within [0, 1]";
  const std::pair<const char*, const fault_spec*> faults[] = {
      {"step", &o.step_faults}, {"dump", &o.dump_faults}, {"load", &o.load_faults}};
  for (const auto& [key, f] : faults) {
    if (!(f->fail_rate >= 0.0 && f->fail_rate <= 1.0))
      return std::string("sim.faults.") + key + ".fail_rate (" + fmt_num(f->fail_rate)
             + ") must be within [0, 1]";
    if (!valid_code(f->code))
      return std::string("sim.faults.") + key + ".code has an unknown value";
    if (f->fail_token >= 0 && f != &o.step_faults)
      return std::string("sim.faults.") + key + ".fail_token applies to steps only";
  }
  return std::nullopt;
}

std::uint64_t identity_of(std::string_view model, const sim_options& o) noexcept {
  std::uint64_t h = 0xCBF29CE484222325ull; // FNV-1a over the name
  for (char c : model) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  for (std::uint64_t v : {o.seed, std::uint64_t{o.slots}, std::uint64_t{o.max_context},
                          o.snapshot_bytes})
    h = mix64(h ^ mix64(v + 0x9E3779B97F4A7C15ull));
  return h;
}

backend_error invalid(std::string message) {
  return backend_error{backend_errc::invalid_argument, std::move(message)};
}

std::size_t op_index(sim_op op) noexcept {
  return static_cast<std::size_t>(op);
}

std::uint64_t fault_rng_seed(std::uint64_t seed_key, sim_op op) noexcept {
  return mix64(seed_key ^ (0xFA017ull + op_index(op)));
}

} // namespace

std::string_view to_string(sim_op op) noexcept {
  switch (op) {
    case sim_op::step: return "step";
    case sim_op::dump: return "dump";
    case sim_op::load: return "load";
  }
  return "unknown";
}

// --- kv_region ---------------------------------------------------------------

sim_backend::kv_region::kv_region(kv_region&& other) noexcept
  : base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)) {}

sim_backend::kv_region& sim_backend::kv_region::operator=(kv_region&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr)
      ::munmap(base_, size_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

sim_backend::kv_region::~kv_region() {
  if (base_ != nullptr)
    ::munmap(base_, size_);
}

// --- sim_backend -------------------------------------------------------------

expected<std::unique_ptr<sim_backend>, backend_error>
sim_backend::create(std::string model_name, const sim_options& opts) {
  if (auto problem = validate(opts))
    return unexpected(invalid(std::move(*problem)));
  const std::size_t bytes = static_cast<std::size_t>(opts.snapshot_bytes) * opts.slots;
  // Reserved, not committed: a page costs memory only once a step or a load writes it.
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED)
    return unexpected(backend_error{backend_errc::out_of_memory,
                                    "sim: cannot map " + std::to_string(bytes)
                                        + " bytes of KV memory: " + std::strerror(errno)});
  kv_region memory(static_cast<std::byte*>(base), bytes);
  return std::unique_ptr<sim_backend>(new sim_backend(std::move(model_name), opts, std::move(memory)));
}

sim_backend::sim_backend(std::string model_name, const sim_options& opts, kv_region memory)
  : opts_(opts), memory_(std::move(memory)), seed_key_(mix64(opts.seed ^ 0x6B766C616E65ull)),
    seen_slots_(opts.slots, 0) {
  info_.kind = "sim";
  info_.identity = identity_of(model_name, opts);
  info_.model = std::move(model_name);
  info_.slots = opts.slots;
  info_.max_context = opts.max_context;
  info_.max_prefill_chunk = opts.max_prefill_chunk;
  info_.vocab_size = byte_tokenizer::vocab_size;
  info_.snapshot_bytes = opts.snapshot_bytes;
  info_.bytes_per_token = opts.snapshot_bytes / opts.max_context;
  info_.caps.transfer_overlaps_compute = opts.overlap != transfer_overlap::none;
  info_.caps.extent = opts.extent;
  info_.caps.snapshots = opts.snapshots;
  info_.caps.embedding_dimension = embedding_dimension;
  dump_rng_ = mix64(seed_key_ ^ 0xD0D0ull);
  load_rng_ = mix64(seed_key_ ^ 0x10ADull);
  faults_[op_index(sim_op::step)].spec = opts.step_faults;
  faults_[op_index(sim_op::dump)].spec = opts.dump_faults;
  faults_[op_index(sim_op::load)].spec = opts.load_faults;
  for (auto op : {sim_op::step, sim_op::dump, sim_op::load})
    faults_[op_index(op)].rng = fault_rng_seed(seed_key_, op);
}

sim_backend::~sim_backend() = default;

std::byte* sim_backend::slot_base(slot_id slot) const noexcept {
  return memory_.data() + static_cast<std::size_t>(slot) * opts_.snapshot_bytes;
}

std::byte* sim_backend::position(slot_id slot, std::uint32_t pos) const noexcept {
  return slot_base(slot) + static_cast<std::size_t>(pos) * info_.bytes_per_token;
}

void sim_backend::inject(sim_op op, fault_spec spec) {
  auto& f = faults_[op_index(op)];
  std::lock_guard lock(f.mutex);
  f.spec = spec;
  f.calls = 0;
  f.rng = fault_rng_seed(seed_key_, op);
}

sim_counters sim_backend::counters() const noexcept {
  return {steps_.load(std::memory_order_relaxed), dumps_.load(std::memory_order_relaxed),
          loads_.load(std::memory_order_relaxed), injected_faults_.load(std::memory_order_relaxed)};
}

std::optional<backend_error> sim_backend::take_fault(sim_op op) {
  auto& f = faults_[op_index(op)];
  std::uint64_t call = 0;
  backend_errc code{};
  {
    std::lock_guard lock(f.mutex);
    call = ++f.calls;
    // One draw per call whatever the spec, so fail_rate outcomes depend only
    // on the call number.
    const double u = uniform01(f.rng);
    if (f.spec.crash_nth != 0 && call == f.spec.crash_nth)
      throw std::runtime_error("sim: injected crash on " + std::string(to_string(op)) + " call "
                               + std::to_string(call));
    const bool fail = (f.spec.fail_nth != 0 && call == f.spec.fail_nth)
                      || (f.spec.fail_rate > 0.0 && u < f.spec.fail_rate);
    if (!fail)
      return std::nullopt;
    code = f.spec.code;
  }
  injected_faults_.fetch_add(1, std::memory_order_relaxed);
  return backend_error{code, "sim: injected " + std::string(to_string(code)) + " on "
                                 + std::string(to_string(op)) + " call " + std::to_string(call)};
}

std::optional<backend_error> sim_backend::take_token_fault(std::span<const step_row> rows) {
  auto& f = faults_[op_index(sim_op::step)];
  std::int64_t poison = -1;
  backend_errc code{};
  {
    std::lock_guard lock(f.mutex);
    poison = f.spec.fail_token;
    code = f.spec.code;
  }
  if (poison < 0)
    return std::nullopt;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& t = rows[i].tokens;
    if (std::find(t.begin(), t.end(), static_cast<token_id>(poison)) == t.end())
      continue;
    injected_faults_.fetch_add(1, std::memory_order_relaxed);
    return backend_error{code, "sim: injected " + std::string(to_string(code)) + " on step row "
                                   + std::to_string(i) + " (slot " + std::to_string(rows[i].slot)
                                   + ") carrying token " + std::to_string(poison)};
  }
  return std::nullopt;
}

void sim_backend::finish_at(std::int64_t start_ns, double wall_ns, bool transfer) {
  if (opts_.overlap != transfer_overlap::shared) {
    sleep_until_ns(start_ns + std::llround(wall_ns));
    return;
  }
  // Shared: the operation progresses at half speed while the other kind is
  // active. Advance in short slices, re-checking the other side each time.
  constexpr double max_slice_ns = 1e6;
  const std::atomic<bool>& other = transfer ? compute_active_ : transfer_active_;
  double remaining = wall_ns; // in full-speed nanoseconds
  std::int64_t last = start_ns;
  double rate = other.load(std::memory_order_acquire) ? 0.5 : 1.0;
  for (;;) {
    const std::int64_t now = now_ns();
    remaining -= static_cast<double>(now - last) * rate;
    last = now;
    if (remaining <= 0.0)
      return;
    rate = other.load(std::memory_order_acquire) ? 0.5 : 1.0;
    sleep_until_ns(now + std::max<std::int64_t>(1, std::llround(std::min(remaining / rate, max_slice_ns))));
  }
}

void sim_backend::write_logits(slot_id slot, std::uint32_t last_pos, std::span<float> logits) const {
  const kv_record last = read_record(position(slot, last_pos));
  std::uint64_t rng = mix64(last.chain ^ seed_key_ ^ 0x1061750000ull);
  // Background: plausible scores by byte class, so sampling at a temperature
  // also yields mostly letters and spaces.
  float top = -std::numeric_limits<float>::infinity();
  for (token_id v = 0; v < byte_tokenizer::vocab_size; ++v) {
    const float noise = 2.0f * unit_float(rng);
    float x = 0.0f;
    if (v >= 'a' && v <= 'z')
      x = 1.0f + noise + 0.1f * letter_freq(static_cast<char>(v));
    else if (v == ' ')
      x = 1.0f + noise;
    else if (v == ',' || v == '.')
      x = -1.0f + noise;
    else if (v >= '!' && v <= '~')
      x = -3.0f + noise;
    else if (v == byte_tokenizer::bos_token)
      x = -30.0f;
    else if (v == byte_tokenizer::eos_token)
      x = opts_.eos_rate > 0.0 ? std::max(-30.0f, static_cast<float>(std::log(opts_.eos_rate)) + noise)
                               : -30.0f;
    else
      x = -8.0f + noise;
    logits[v] = x;
    top = std::max(top, x);
  }
  const token_id winner = choose_next(last, opts_.eos_rate, rng);
  logits[winner] = top + 1.0f + unit_float(rng);
}

expected<void, backend_error> sim_backend::step(std::span<const step_row> rows, step_output& out) {
  if (auto fault = take_fault(sim_op::step))
    return unexpected(std::move(*fault));
  if (auto fault = take_token_fault(rows))
    return unexpected(std::move(*fault));
  if (rows.empty())
    return unexpected(invalid("step: no rows"));

  // Validate everything before touching memory: a failed step advances nothing.
  // seen_slots_ holds the epoch of the call that last named each slot, so it
  // never needs clearing.
  const std::uint64_t epoch = ++step_epoch_;
  std::uint64_t total_tokens = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    const std::string where = "step row " + std::to_string(i) + ": ";
    if (row.slot >= opts_.slots)
      return unexpected(invalid(where + "slot " + std::to_string(row.slot) + " out of range (slots "
                                + std::to_string(opts_.slots) + ")"));
    if (seen_slots_[row.slot] == epoch)
      return unexpected(invalid(where + "duplicate slot " + std::to_string(row.slot)));
    seen_slots_[row.slot] = epoch;
    if (row.tokens.empty())
      return unexpected(invalid(where + "no tokens"));
    if (row.tokens.size() > opts_.max_prefill_chunk)
      return unexpected(invalid(where + std::to_string(row.tokens.size())
                                + " tokens exceed max_prefill_chunk "
                                + std::to_string(opts_.max_prefill_chunk)));
    for (token_id t : row.tokens)
      if (t >= byte_tokenizer::vocab_size)
        return unexpected(invalid(where + "token " + std::to_string(t) + " outside vocab "
                                  + std::to_string(byte_tokenizer::vocab_size)));
    total_tokens += row.tokens.size();
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    if (std::uint64_t{row.cache_len} + row.tokens.size() > opts_.max_context)
      return unexpected(backend_error{
          backend_errc::context_overflow,
          "step row " + std::to_string(i) + ": slot " + std::to_string(row.slot) + " cache_len "
              + std::to_string(row.cache_len) + " + " + std::to_string(row.tokens.size())
              + " tokens exceed max_context " + std::to_string(opts_.max_context)});
  }

  const double modeled_ms =
      opts_.step_base_ms + opts_.step_per_token_ms * static_cast<double>(total_tokens);
  const double wall_ns = modeled_ms * 1e6 / opts_.time_scale;

  std::unique_lock device(device_mutex_, std::defer_lock);
  if (opts_.overlap == transfer_overlap::none)
    device.lock();
  compute_active_.store(true, std::memory_order_release);
  const std::int64_t start = now_ns();

  out.reset(rows.size(), byte_tokenizer::vocab_size);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    // The chain reads its predecessor back from KV memory, never from a
    // cache of ours: what a load restored is what the next token sees.
    kv_record rec = row.cache_len > 0 ? read_record(position(row.slot, row.cache_len - 1))
                                      : origin_record(seed_key_);
    for (std::size_t k = 0; k < row.tokens.size(); ++k) {
      const std::uint32_t pos = row.cache_len + static_cast<std::uint32_t>(k);
      write_record(position(row.slot, pos), derive_record(rec, row.tokens[k], pos, seed_key_));
      rec = read_record(position(row.slot, pos));
    }
    write_logits(row.slot, row.cache_len + static_cast<std::uint32_t>(row.tokens.size()) - 1,
                 out.row(i));
  }

  finish_at(start, wall_ns, false);
  compute_active_.store(false, std::memory_order_release);
  steps_.fetch_add(1, std::memory_order_relaxed);
  return {};
}

// A real model attends to every position, so damage anywhere in a restored
// KV changes what comes next. The sim gets the same property by re-deriving
// each restored record from its predecessor and its own token: an intact
// snapshot matches byte for byte and nothing changes; at the first record
// that differs, the damage is folded into the chain, and every later record
// (whose stored chain no longer follows) is rewritten too, so the last
// position's chain, and thus the next token, changes.
void sim_backend::recheck_chain(slot_id slot, std::uint32_t cache_len) {
  kv_record prev = origin_record(seed_key_);
  for (std::uint32_t pos = 0; pos < cache_len; ++pos) {
    const kv_record stored = read_record(position(slot, pos));
    kv_record expected = derive_record(prev, stored.token, pos, seed_key_);
    if (std::memcmp(&expected, &stored, sizeof expected) != 0) {
      expected.chain = mix64(expected.chain ^ record_digest(stored));
      expected.filler = mix64(expected.chain);
      write_record(position(slot, pos), expected);
    }
    prev = expected;
  }
}

double sim_backend::transfer_wall_ns(double min_ms, double max_ms, std::uint32_t cache_len,
                                     std::uint64_t& rng) const {
  double ms = min_ms + (max_ms - min_ms) * uniform01(rng);
  if (opts_.extent == snapshot_extent::used_length)
    ms *= static_cast<double>(cache_len) / static_cast<double>(opts_.max_context);
  return ms * 1e6 / opts_.time_scale;
}

expected<std::size_t, backend_error> sim_backend::dump(slot_id slot, std::uint32_t cache_len,
                                                       std::span<std::byte> destination) {
  if (auto fault = take_fault(sim_op::dump))
    return unexpected(std::move(*fault));
  if (!opts_.snapshots)
    return unexpected(invalid("dump: this device has no snapshots (snapshot = \"none\")"));
  if (slot >= opts_.slots)
    return unexpected(invalid("dump: slot " + std::to_string(slot) + " out of range (slots "
                              + std::to_string(opts_.slots) + ")"));
  if (cache_len > opts_.max_context)
    return unexpected(invalid("dump: cache_len " + std::to_string(cache_len)
                              + " exceeds max_context " + std::to_string(opts_.max_context)));
  const std::size_t bytes = snapshot_size(cache_len);
  if (destination.size() < bytes)
    return unexpected(invalid("dump: destination holds " + std::to_string(destination.size())
                              + " bytes, the snapshot needs " + std::to_string(bytes)));
  const double wall_ns = transfer_wall_ns(opts_.dump_min_ms, opts_.dump_max_ms, cache_len, dump_rng_);

  std::unique_lock device(device_mutex_, std::defer_lock);
  if (opts_.overlap == transfer_overlap::none)
    device.lock();
  transfer_active_.store(true, std::memory_order_release);
  const std::int64_t start = now_ns();
  if (bytes > 0) // an empty span may have a null data()
    std::memcpy(destination.data(), slot_base(slot), bytes);
  finish_at(start, wall_ns, true);
  transfer_active_.store(false, std::memory_order_release);
  dumps_.fetch_add(1, std::memory_order_relaxed);
  return bytes;
}

expected<void, backend_error> sim_backend::load(slot_id slot, std::uint32_t cache_len,
                                                std::span<const std::byte> source) {
  if (auto fault = take_fault(sim_op::load))
    return unexpected(std::move(*fault));
  if (!opts_.snapshots)
    return unexpected(invalid("load: this device has no snapshots (snapshot = \"none\")"));
  if (slot >= opts_.slots)
    return unexpected(invalid("load: slot " + std::to_string(slot) + " out of range (slots "
                              + std::to_string(opts_.slots) + ")"));
  if (cache_len > opts_.max_context)
    return unexpected(invalid("load: cache_len " + std::to_string(cache_len)
                              + " exceeds max_context " + std::to_string(opts_.max_context)));
  const std::size_t bytes = snapshot_size(cache_len);
  if (source.size() != bytes)
    return unexpected(backend_error{backend_errc::snapshot_mismatch,
                                    "load: snapshot has " + std::to_string(source.size())
                                        + " bytes, slot " + std::to_string(slot) + " with cache_len "
                                        + std::to_string(cache_len) + " needs "
                                        + std::to_string(bytes)});
  const double wall_ns = transfer_wall_ns(opts_.load_min_ms, opts_.load_max_ms, cache_len, load_rng_);

  std::unique_lock device(device_mutex_, std::defer_lock);
  if (opts_.overlap == transfer_overlap::none)
    device.lock();
  transfer_active_.store(true, std::memory_order_release);
  const std::int64_t start = now_ns();
  copy_into_kv(slot_base(slot), source.data(), bytes);
  recheck_chain(slot, cache_len);
  finish_at(start, wall_ns, true);
  transfer_active_.store(false, std::memory_order_release);
  loads_.fetch_add(1, std::memory_order_relaxed);
  return {};
}

void sim_backend::embed(embedding_job job) {
  if (auto bad = check_embedding_inputs(info_, job.inputs)) {
    job.done(unexpected(std::move(*bad)));
    return;
  }
  constexpr std::uint32_t dim = embedding_dimension;
  embeddings out;
  out.dimension = dim;
  out.values.assign(job.inputs.size() * dim, 0.0f);
  for (std::size_t i = 0; i < job.inputs.size(); ++i) {
    const std::span<float> row{out.values.data() + i * dim, dim};
    // A feature adds +-1 to the bucket its hash picks: inputs sharing tokens and bigrams
    // share buckets, so their vectors are close.
    const auto add = [&](std::uint64_t h) { row[h % dim] += (h >> 63) != 0 ? -1.0f : 1.0f; };
    std::uint64_t whole = mix64(seed_key_ ^ 0xE3BEDull);
    token_id prev = 0;
    for (std::size_t k = 0; k < job.inputs[i].size(); ++k) {
      const token_id t = job.inputs[i][k];
      add(mix64(seed_key_ ^ (std::uint64_t{t} + 1)));
      if (k > 0)
        add(mix64(mix64(seed_key_ ^ (std::uint64_t{prev} + 1)) + t + 0x8000'0000ull));
      whole = mix64(whole ^ (std::uint64_t{t} + 1));
      prev = t;
    }
    // Inputs with the same tokens and bigrams in another order would share every bucket: a
    // small dense component of the whole sequence's hash (length about 0.1, a tenth of one
    // feature's) tells them apart.
    std::uint64_t state = whole;
    for (auto& x : row)
      x += (unit_float(state) - 0.5f) * 0.02f;
    if (!l2_normalize(row)) {
      job.done(unexpected(backend_error{backend_errc::device_failure,
                                        "sim: an embedding of length 0"}));
      return;
    }
  }
  job.done(std::move(out));
}

} // namespace kvlane::backends
