#include "backends/sim_backend.hpp"

#include "backends/factory.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace kvlane::backends;

namespace {

using wall = std::chrono::steady_clock;

// Small and fast: 4 slots of 256 positions, 1 KiB per position, ~no sleeping.
sim_options small_options() {
  sim_options o;
  o.slots = 4;
  o.max_context = 256;
  o.max_prefill_chunk = 64;
  o.snapshot_bytes = 256 * 1024;
  o.time_scale = 1e6;
  return o;
}

std::unique_ptr<sim_backend> make(const sim_options& o = small_options(), std::string name = "m") {
  auto made = sim_backend::create(std::move(name), o);
  REQUIRE_MESSAGE(made.has_value(), (made ? std::string() : made.error().message));
  return std::move(*made);
}

token_id argmax(std::span<const float> logits) {
  return static_cast<token_id>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Appends `tokens` to `slot` (in chunks) and returns the greedy next token.
token_id feed(backend& b, slot_id slot, std::uint32_t& cache_len, std::span<const token_id> tokens) {
  step_output out;
  token_id next = 0;
  const std::size_t chunk = b.info().max_prefill_chunk;
  for (std::size_t i = 0; i < tokens.size(); i += chunk) {
    const auto part = tokens.subspan(i, std::min(chunk, tokens.size() - i));
    const step_row row{slot, cache_len, part};
    auto r = b.step({&row, 1}, out);
    REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().message));
    cache_len += static_cast<std::uint32_t>(part.size());
    next = argmax(out.row(0));
  }
  return next;
}

// Greedily generates n tokens, starting by feeding `next` at cache_len.
std::vector<token_id> generate(backend& b, slot_id slot, std::uint32_t cache_len, token_id next,
                               int n) {
  std::vector<token_id> produced;
  for (int i = 0; i < n; ++i) {
    next = feed(b, slot, cache_len, {&next, 1});
    produced.push_back(next);
  }
  return produced;
}

std::vector<token_id> prompt(const backend& b, std::string_view text) {
  std::vector<token_id> t{*b.tokens().bos()};
  const auto body = b.tokens().encode(text);
  t.insert(t.end(), body.begin(), body.end());
  return t;
}

std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t size = 0;
  std::size_t resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

double ms_since(wall::time_point t0) {
  return std::chrono::duration<double, std::milli>(wall::now() - t0).count();
}

} // namespace

TEST_CASE("sim_backend: create rejects nonsense options with invalid_argument") {
  auto expect_invalid = [](sim_options o, std::string_view needle) {
    auto made = sim_backend::create("m", o);
    REQUIRE_FALSE(made.has_value());
    CHECK(made.error().code == backend_errc::invalid_argument);
    CHECK_MESSAGE(made.error().message.find(needle) != std::string::npos, made.error().message);
  };
  auto o = small_options();
  o.snapshot_bytes = 256 * 1024 + 1;
  expect_invalid(o, "snapshot_bytes");
  o = small_options();
  o.slots = 0;
  expect_invalid(o, "slots");
  o = small_options();
  o.snapshot_bytes = 256 * 16; // 16 bytes per token: too small for a record
  expect_invalid(o, "per token");
  o = small_options();
  o.time_scale = 0;
  expect_invalid(o, "time_scale");
  o = small_options();
  o.dump_min_ms = 70;
  expect_invalid(o, "dump_min_ms");
  o = small_options();
  o.step_base_ms = -1;
  expect_invalid(o, "step_base_ms");
  o = small_options();
  o.eos_rate = 1.5;
  expect_invalid(o, "eos_rate");
  o = small_options();
  o.load_faults.fail_rate = 2;
  expect_invalid(o, "faults.load.fail_rate");
  o = small_options();
  o.dump_faults.fail_token = 'a';
  expect_invalid(o, "faults.dump.fail_token applies to steps only");
}

TEST_CASE("sim_backend: info describes the configured geometry and capabilities") {
  auto o = small_options();
  o.extent = snapshot_extent::used_length;
  o.overlap = transfer_overlap::none;
  auto sut = make(o, "llama");
  const auto& i = sut->info();
  CHECK(i.kind == "sim");
  CHECK(i.model == "llama");
  CHECK(i.slots == 4);
  CHECK(i.max_context == 256);
  CHECK(i.max_prefill_chunk == 64);
  CHECK(i.vocab_size == 258);
  CHECK(i.snapshot_bytes == 256 * 1024);
  CHECK(i.bytes_per_token == 1024);
  CHECK_FALSE(i.caps.transfer_overlaps_compute);
  CHECK(i.caps.extent == snapshot_extent::used_length);
  CHECK(sut->snapshot_size(10) == 10 * 1024);

  CHECK(make(o, "llama")->info().identity == i.identity);
  CHECK(make(o, "other")->info().identity != i.identity);
  auto seeded = o;
  seeded.seed = 2;
  CHECK(make(seeded, "llama")->info().identity != i.identity);
  auto bigger = o;
  bigger.slots = 5;
  CHECK(make(bigger, "llama")->info().identity != i.identity);

  o.overlap = transfer_overlap::shared;
  CHECK(make(o)->info().caps.transfer_overlaps_compute);
  o.overlap = transfer_overlap::full;
  o.extent = snapshot_extent::full_slot;
  auto full = make(o);
  CHECK(full->info().caps.transfer_overlaps_compute);
  CHECK(full->snapshot_size(10) == 256 * 1024);
}

TEST_CASE("sim_backend: the same options and inputs give identical logits, another seed does not") {
  auto a = make();
  auto b = make();
  auto o = small_options();
  o.seed = 99;
  auto c = make(o);
  const auto tokens = prompt(*a, "hello world");
  const step_row row{2, 0, tokens};
  step_output oa, ob, oc;
  REQUIRE(a->step({&row, 1}, oa));
  REQUIRE(b->step({&row, 1}, ob));
  REQUIRE(c->step({&row, 1}, oc));
  REQUIRE(oa.rows() == 1);
  REQUIRE(oa.vocab() == 258);
  const auto ra = oa.row(0);
  const auto rb = ob.row(0);
  const auto rc = oc.row(0);
  CHECK(std::equal(ra.begin(), ra.end(), rb.begin(), rb.end()));
  CHECK_FALSE(std::equal(ra.begin(), ra.end(), rc.begin(), rc.end()));
}

TEST_CASE("sim_backend: logits depend on the slot's tokens only, not on the slot or other rows") {
  auto sut = make();
  const auto p = prompt(*sut, "same prefix");
  const auto q = prompt(*sut, "another prompt");
  step_output alone, together;
  const step_row single{0, 0, p};
  REQUIRE(sut->step({&single, 1}, alone));
  const step_row rows[] = {{3, 0, q}, {1, 0, p}};
  REQUIRE(sut->step(rows, together));
  REQUIRE(together.rows() == 2);
  const auto a = alone.row(0);
  const auto t = together.row(1);
  CHECK(std::equal(a.begin(), a.end(), t.begin(), t.end()));
}

TEST_CASE("sim_backend: greedy decoding produces readable lowercase pseudo-words") {
  auto sut = make();
  std::uint32_t len = 0;
  const auto p = prompt(*sut, "Once upon a time ");
  const token_id first = feed(*sut, 0, len, p);
  auto produced = generate(*sut, 0, len, first, 199);
  produced.insert(produced.begin(), first);
  REQUIRE(produced.size() == 200);
  CHECK(std::count(produced.begin(), produced.end(), sut->tokens().stop_tokens()[0]) == 0);
  const std::string text = sut->tokens().decode(produced);
  INFO("sim text: " << text);
  const auto lower_or_space = std::count_if(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || c == ' ';
  });
  CHECK(static_cast<double>(lower_or_space) >= 0.9 * static_cast<double>(text.size()));
  CHECK(std::count(text.begin(), text.end(), ' ') >= 15);
  std::size_t longest = 0;
  std::size_t run = 0;
  for (char c : text) {
    run = (c >= 'a' && c <= 'z') ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  CHECK(longest <= 15);
  CHECK(longest >= 3);
}

TEST_CASE("sim_backend: eos_rate 0 never ends a sequence, a higher eos_rate ends it more often") {
  auto count_eos = [](double rate) {
    auto o = small_options();
    o.eos_rate = rate;
    auto sut = make(o);
    std::uint32_t len = 0;
    const auto p = prompt(*sut, "x");
    token_id next = feed(*sut, 0, len, p);
    int eos = 0;
    for (int i = 0; i < 250; ++i) {
      if (next == sut->tokens().stop_tokens()[0])
        ++eos;
      next = feed(*sut, 0, len, {&next, 1});
    }
    return eos;
  };
  CHECK(count_eos(0.0) == 0);
  const int low = count_eos(0.02);
  const int high = count_eos(0.3);
  CHECK(high > low);
  CHECK(high >= 30);
}

TEST_CASE("sim_backend: dump, clobber and load give the same continuation, a wrong snapshot does not") {
  for (auto extent : {snapshot_extent::full_slot, snapshot_extent::used_length}) {
    CAPTURE(to_string(extent));
    auto o = small_options();
    o.extent = extent;
    auto sut = make(o);
    std::uint32_t len_a = 0;
    std::uint32_t len_b = 0;
    const token_id next_a = feed(*sut, 0, len_a, prompt(*sut, "first sequence here"));
    feed(*sut, 1, len_b, prompt(*sut, "a different one"));

    std::vector<std::byte> snap_a(sut->snapshot_size(len_a));
    std::vector<std::byte> snap_b(sut->snapshot_size(len_b));
    auto da = sut->dump(0, len_a, snap_a);
    REQUIRE(da.has_value());
    CHECK(*da == snap_a.size());
    REQUIRE(sut->dump(1, len_b, snap_b).has_value());

    const auto expected = generate(*sut, 0, len_a, next_a, 20);
    // Clobber slot 0 with another sequence, from position 0.
    std::uint32_t len_x = 0;
    feed(*sut, 0, len_x, prompt(*sut, "clobbering tokens that overwrite everything"));

    REQUIRE(sut->load(0, len_a, snap_a).has_value());
    CHECK(generate(*sut, 0, len_a, next_a, 20) == expected);

    // Another sequence's snapshot, loaded with the first one's length.
    if (extent == snapshot_extent::used_length)
      snap_b.resize(snap_a.size());
    REQUIRE(sut->load(0, len_a, snap_b).has_value());
    CHECK(generate(*sut, 0, len_a, next_a, 20) != expected);

    // And back again.
    REQUIRE(sut->load(0, len_a, snap_a).has_value());
    CHECK(generate(*sut, 0, len_a, next_a, 20) == expected);
  }
}

TEST_CASE("sim_backend: a snapshot damaged at any early position changes the continuation") {
  for (auto extent : {snapshot_extent::full_slot, snapshot_extent::used_length}) {
    CAPTURE(to_string(extent));
    auto o = small_options();
    o.extent = extent;
    auto sut = make(o);
    std::uint32_t len = 0;
    const token_id next = feed(*sut, 0, len, prompt(*sut, "an early position matters too"));
    REQUIRE(len > 8);
    std::vector<std::byte> snap(sut->snapshot_size(len));
    REQUIRE(sut->dump(0, len, snap).has_value());
    const auto expected = generate(*sut, 0, len, next, 20);
    const std::size_t stride = sut->info().bytes_per_token;

    // Undamaged: the load changes nothing.
    REQUIRE(sut->load(1, len, snap).has_value());
    CHECK(generate(*sut, 1, len, next, 20) == expected);

    // One flipped byte in a record far from the last position: in the token,
    // in the generator state, or in the stored chain itself.
    for (const std::size_t pos : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
      for (const std::size_t offset : {std::size_t{8}, std::size_t{16}, std::size_t{2}}) {
        CAPTURE(pos);
        CAPTURE(offset);
        auto damaged = snap;
        damaged[pos * stride + offset] ^= std::byte{0x01};
        REQUIRE(sut->load(1, len, damaged).has_value());
        CHECK(generate(*sut, 1, len, next, 20) != expected);
      }
    }

    // Bytes of a position that no step writes are not KV the model reads.
    auto outside = snap;
    outside[2 * stride + stride - 1] ^= std::byte{0xFF};
    REQUIRE(sut->load(1, len, outside).has_value());
    CHECK(generate(*sut, 1, len, next, 20) == expected);
  }
}

TEST_CASE("sim_backend: a snapshot restores into another slot and rollback replays a continuation") {
  auto sut = make();
  std::uint32_t len = 0;
  const token_id next = feed(*sut, 2, len, prompt(*sut, "moving house"));
  const auto expected = generate(*sut, 2, len, next, 10);
  std::vector<std::byte> snap(sut->snapshot_size(len));
  REQUIRE(sut->dump(2, len, snap).has_value());
  REQUIRE(sut->load(3, len, snap).has_value());
  CHECK(generate(*sut, 3, len, next, 10) == expected);
  // Rollback: the slot advanced by 10 tokens, cache_len goes back.
  CHECK(generate(*sut, 2, len, next, 10) == expected);
}

TEST_CASE("sim_backend: load with a wrong size is snapshot_mismatch and leaves the slot unchanged") {
  for (auto extent : {snapshot_extent::full_slot, snapshot_extent::used_length}) {
    CAPTURE(to_string(extent));
    auto o = small_options();
    o.extent = extent;
    auto sut = make(o);
    std::uint32_t len = 0;
    const token_id next = feed(*sut, 0, len, prompt(*sut, "keep me"));
    std::vector<std::byte> garbage(sut->snapshot_size(len) + 1, std::byte{0x5a});
    auto r = sut->load(0, len, garbage);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == backend_errc::snapshot_mismatch);
    garbage.resize(sut->snapshot_size(len) - 1);
    CHECK(sut->load(0, len, garbage).error().code == backend_errc::snapshot_mismatch);
    CHECK(sut->counters().loads == 0);

    auto fresh = make(o);
    std::uint32_t fresh_len = 0;
    feed(*fresh, 0, fresh_len, prompt(*fresh, "keep me"));
    CHECK(generate(*sut, 0, len, next, 15) == generate(*fresh, 0, fresh_len, next, 15));
  }
}

TEST_CASE("sim_backend: dump into a too small buffer or a bad slot is invalid_argument") {
  auto sut = make();
  std::vector<std::byte> small(sut->snapshot_size(0) - 1);
  auto r = sut->dump(0, 0, small);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == backend_errc::invalid_argument);
  std::vector<std::byte> ok(sut->snapshot_size(0));
  CHECK(sut->dump(4, 0, ok).error().code == backend_errc::invalid_argument);
  CHECK(sut->dump(0, 257, ok).error().code == backend_errc::invalid_argument);
  CHECK(sut->load(9, 0, ok).error().code == backend_errc::invalid_argument);
  CHECK(sut->counters().dumps == 0);
}

TEST_CASE("sim_backend: a used_length snapshot of an empty slot is zero bytes") {
  auto o = small_options();
  o.extent = snapshot_extent::used_length;
  auto sut = make(o);
  auto dumped = sut->dump(0, 0, {});
  REQUIRE(dumped.has_value());
  CHECK(*dumped == 0);
  CHECK(sut->load(0, 0, {}).has_value());
}

TEST_CASE("sim_backend: context overflow and invalid rows fail the whole step and advance nothing") {
  auto sut = make();
  auto reference = make();
  std::uint32_t len = 0;
  std::uint32_t ref_len = 0;
  const auto p = prompt(*sut, "steady");
  const token_id next = feed(*sut, 0, len, p);
  std::uint32_t len1 = 0;
  feed(*sut, 1, len1, p);
  feed(*reference, 0, ref_len, p);

  step_output out;
  const token_id tok[] = {'a'};
  const std::vector<token_id> chunk(65, 'b');
  const token_id bad_tok[] = {258};
  struct bad_case {
    const char* what;
    std::vector<step_row> rows;
    backend_errc code;
  };
  const std::vector<bad_case> cases{
      {"overflow", {{0, len, tok}, {1, 256, tok}}, backend_errc::context_overflow},
      {"overflow by a chunk", {{0, len, tok}, {1, 200, {chunk.data(), 64}}}, backend_errc::context_overflow},
      {"slot out of range", {{0, len, tok}, {4, 0, tok}}, backend_errc::invalid_argument},
      {"duplicate slot", {{0, len, tok}, {0, len, tok}}, backend_errc::invalid_argument},
      {"empty row", {{0, len, tok}, {1, 0, {}}}, backend_errc::invalid_argument},
      {"chunk too large", {{0, len, tok}, {1, 0, chunk}}, backend_errc::invalid_argument},
      {"token outside vocab", {{0, len, tok}, {1, 0, bad_tok}}, backend_errc::invalid_argument},
      {"no rows", {}, backend_errc::invalid_argument},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    auto r = sut->step(c.rows, out);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == c.code);
    CHECK(!r.error().message.empty());
  }
  CHECK(sut->counters().steps == 2); // the two feeds only
  CHECK(generate(*sut, 0, len, next, 20) == generate(*reference, 0, ref_len, next, 20));
  // A row filling the context exactly is fine.
  const step_row last{1, 255, tok};
  CHECK(sut->step({&last, 1}, out).has_value());
}

TEST_CASE("sim_backend: KV memory is reserved lazily, 16 slots of 64 MiB cost almost no RSS") {
  sim_options o;
  o.time_scale = 1e6;
  const auto before = resident_bytes();
  auto sut = make(o);
  CHECK(sut->info().snapshot_bytes == 64ull << 20);
  std::vector<std::byte> snapshot(sut->snapshot_size(0));
  const auto with_buffer = resident_bytes();
  // Touch every slot with a short sequence: a few pages each.
  for (slot_id s = 0; s < 16; ++s) {
    std::uint32_t len = 0;
    feed(*sut, s, len, prompt(*sut, "tiny"));
  }
  const auto after = resident_bytes();
  INFO("RSS before " << before / 1024 << " KiB, after " << after / 1024 << " KiB");
  CHECK(after - std::min(after, with_buffer) < (4u << 20));
  // Loading a nearly empty full-slot snapshot commits nothing either.
  REQUIRE(sut->dump(5, 0, snapshot).has_value());
  const auto before_loads = resident_bytes();
  for (slot_id s = 0; s < 16; ++s)
    REQUIRE(sut->load(s, 0, snapshot).has_value());
  const auto after_loads = resident_bytes(); // read once: RSS may shrink between two reads
  CHECK(after_loads - std::min(after_loads, before_loads) < (4u << 20));
}

TEST_CASE("sim_backend: fail_nth fails exactly that call and changes nothing") {
  auto sut = make();
  auto reference = make();
  std::uint32_t len = 0;
  std::uint32_t ref_len = 0;
  const auto p = prompt(*sut, "faulty");
  const token_id next = feed(*sut, 0, len, p);
  feed(*reference, 0, ref_len, p);

  sut->inject(sim_op::step, {.fail_nth = 2, .fail_rate = 0, .code = backend_errc::device_timeout});
  step_output out;
  const token_id junk[] = {'Z'};
  const step_row elsewhere{2, 0, junk};
  // Would overwrite slot 0's last prompt token if it ran.
  const step_row clobber{0, len - 1, junk};
  CHECK(sut->step({&elsewhere, 1}, out).has_value()); // call 1
  auto failed = sut->step({&clobber, 1}, out);         // call 2
  REQUIRE_FALSE(failed.has_value());
  CHECK(failed.error().code == backend_errc::device_timeout);
  CHECK(failed.error().message.find("step call 2") != std::string::npos);
  CHECK(sut->step({&elsewhere, 1}, out).has_value()); // call 3
  CHECK(generate(*sut, 0, len, next, 20) == generate(*reference, 0, ref_len, next, 20));

  // A failed load leaves the slot as it was; a failed dump writes nothing.
  std::vector<std::byte> good(sut->snapshot_size(len));
  REQUIRE(sut->dump(0, len, good).has_value());
  std::vector<std::byte> other(good.size());
  std::uint32_t other_len = 0;
  feed(*sut, 1, other_len, prompt(*sut, "not this one"));
  REQUIRE(sut->dump(1, len, other).has_value());
  sut->inject(sim_op::load, {.fail_nth = 1, .fail_rate = 0, .code = backend_errc::device_failure});
  CHECK(sut->load(0, len, other).error().code == backend_errc::device_failure);
  CHECK(generate(*sut, 0, len, next, 20) == generate(*reference, 0, ref_len, next, 20));
  sut->inject(sim_op::dump, {.fail_nth = 1, .fail_rate = 0, .code = backend_errc::out_of_memory});
  std::vector<std::byte> untouched(good.size(), std::byte{0x77});
  CHECK(sut->dump(0, len, untouched).error().code == backend_errc::out_of_memory);
  CHECK(std::all_of(untouched.begin(), untouched.end(), [](std::byte b) { return b == std::byte{0x77}; }));

  const auto c = sut->counters();
  CHECK(c.injected_faults == 3);
  CHECK(c.dumps == 2);
  CHECK(c.loads == 0);
}

TEST_CASE("sim_backend: fail_token fails every step with a row that carries it, wherever it "
          "runs, and changes nothing") {
  auto sut = make();
  auto reference = make();
  std::uint32_t len = 0;
  std::uint32_t ref_len = 0;
  const auto p = prompt(*sut, "clean");
  const token_id next = feed(*sut, 0, len, p);
  feed(*reference, 0, ref_len, p);

  sut->inject(sim_op::step, {.code = backend_errc::device_failure, .fail_token = '#'});
  const token_id poisoned[] = {'x', '#'};
  const token_id junk[] = {'Z'};
  step_output out;
  for (slot_id slot : {1u, 2u}) {
    // Alone, or beside a row that would overwrite slot 0's last prompt token.
    const step_row rows[] = {{slot, 0, poisoned}, {0, len - 1, junk}};
    auto failed = sut->step({rows, slot == 1 ? 1u : 2u}, out);
    REQUIRE_FALSE(failed.has_value());
    CHECK(failed.error().code == backend_errc::device_failure);
    CHECK(failed.error().message.find("carrying token 35") != std::string::npos);
  }
  const step_row clean{3, 0, junk};
  CHECK(sut->step({&clean, 1}, out).has_value());
  CHECK(generate(*sut, 0, len, next, 20) == generate(*reference, 0, ref_len, next, 20));
  CHECK(sut->counters().injected_faults == 2);
}

TEST_CASE("sim_backend: fail_rate 0.5 fails about half of 200 calls and the counters agree") {
  auto o = small_options();
  o.dump_faults.fail_rate = 0.5;
  auto sut = make(o);
  std::vector<std::byte> buf(sut->snapshot_size(0));
  int failures = 0;
  for (int i = 0; i < 200; ++i) {
    auto r = sut->dump(0, 0, buf);
    if (!r) {
      CHECK(r.error().code == backend_errc::device_failure);
      ++failures;
    }
  }
  CHECK(failures >= 60);
  CHECK(failures <= 140);
  const auto c = sut->counters();
  CHECK(c.injected_faults == static_cast<std::uint64_t>(failures));
  CHECK(c.dumps == static_cast<std::uint64_t>(200 - failures));

  // Same seed, same outcomes: inject() restarts the sequence.
  sut->inject(sim_op::dump, o.dump_faults);
  int again = 0;
  for (int i = 0; i < 200; ++i)
    again += sut->dump(0, 0, buf).has_value() ? 0 : 1;
  CHECK(again == failures);
}

TEST_CASE("sim_backend: fault specs from the options apply from the first call") {
  auto o = small_options();
  o.load_faults.fail_nth = 2;
  o.load_faults.code = backend_errc::snapshot_mismatch;
  auto sut = make(o);
  std::vector<std::byte> buf(sut->snapshot_size(0));
  CHECK(sut->load(0, 0, buf).has_value());
  CHECK(sut->load(0, 0, buf).error().code == backend_errc::snapshot_mismatch);
  CHECK(sut->load(0, 0, buf).has_value());
  CHECK(sut->counters().injected_faults == 1);
}

TEST_CASE("sim_backend: a step and a dump take at least their modeled time") {
  auto o = small_options();
  o.time_scale = 1.0;
  o.step_base_ms = 18.0;
  o.step_per_token_ms = 1.0; // two tokens: 20 ms
  o.dump_min_ms = o.dump_max_ms = 10.0;
  o.extent = snapshot_extent::full_slot;
  auto sut = make(o);
  const token_id two[] = {'h', 'i'};
  const step_row row{0, 0, two};
  step_output out;
  auto t0 = wall::now();
  REQUIRE(sut->step({&row, 1}, out));
  CHECK(ms_since(t0) >= 20.0);
  std::vector<std::byte> buf(sut->snapshot_size(2));
  t0 = wall::now();
  REQUIRE(sut->dump(0, 2, buf));
  CHECK(ms_since(t0) >= 10.0);
}

namespace {

struct overlap_run {
  double total_ms = 0; ///< from starting the dump to both being done
  double step_ms = 0;  ///< the step's own wall time
};

// A 40 ms dump on another thread, then a 40 ms step while it runs.
overlap_run run_concurrently(transfer_overlap mode) {
  auto o = small_options();
  o.time_scale = 1.0;
  o.step_base_ms = 40.0;
  o.step_per_token_ms = 0.0;
  o.dump_min_ms = o.dump_max_ms = 40.0;
  o.overlap = mode;
  auto sut = make(o);
  std::vector<std::byte> buf(sut->snapshot_size(0));
  std::atomic<bool> started{false};
  overlap_run run;
  const auto t0 = wall::now();
  std::thread transfer([&] {
    started.store(true);
    (void)sut->dump(0, 0, buf);
  });
  while (!started.load())
    std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const token_id tok[] = {'a'};
  const step_row row{1, 0, tok};
  step_output out;
  const auto s0 = wall::now();
  const bool ok = sut->step({&row, 1}, out).has_value();
  run.step_ms = ms_since(s0);
  transfer.join();
  run.total_ms = ms_since(t0);
  CHECK(ok);
  return run;
}

} // namespace

TEST_CASE("sim_backend: overlap none serializes a step with a concurrent dump") {
  const auto run = run_concurrently(transfer_overlap::none);
  INFO("none: total " << run.total_ms << " ms, step " << run.step_ms << " ms");
  CHECK(run.total_ms >= 0.9 * 80.0);
}

TEST_CASE("sim_backend: overlap full runs a step and a concurrent dump in parallel") {
  // Upper bound on wall time: retried, since a loaded machine may stall once.
  overlap_run run;
  for (int attempt = 0; attempt < 3; ++attempt) {
    run = run_concurrently(transfer_overlap::full);
    if (run.total_ms <= 0.75 * 80.0)
      break;
  }
  INFO("full: total " << run.total_ms << " ms, step " << run.step_ms << " ms");
  CHECK(run.total_ms <= 0.75 * 80.0);
  CHECK(run.step_ms >= 40.0);
}

TEST_CASE("sim_backend: overlap shared slows a step to half speed while a dump runs") {
  const auto run = run_concurrently(transfer_overlap::shared);
  INFO("shared: total " << run.total_ms << " ms, step " << run.step_ms << " ms");
  // Fully overlapped the step would take ~80 ms; allow for a late dump thread.
  CHECK(run.step_ms >= 1.3 * 40.0);
  CHECK(run.total_ms >= 0.9 * 80.0);
}

TEST_CASE("sim_backend: make_backend builds the sim and rejects unknown kinds") {
  backend_config cfg;
  cfg.sim = small_options();
  auto made = make_backend("m", cfg);
  REQUIRE(made.has_value());
  CHECK((*made)->info().kind == "sim");
  cfg.kind = "tpu";
  auto unknown = make_backend("m", cfg);
  REQUIRE_FALSE(unknown.has_value());
  CHECK(unknown.error().code == backend_errc::invalid_argument);
  CHECK(unknown.error().message == "unknown backend 'tpu' (known: sim, qbruntime, llamacpp)");
  backend_config bad;
  bad.sim = small_options();
  bad.sim.slots = 0;
  CHECK(make_backend("m", bad).error().code == backend_errc::invalid_argument);
}

TEST_CASE("sim_backend: snapshot none reports no snapshots and refuses dump and load") {
  auto o = small_options();
  o.snapshots = false;
  auto sut = sim_backend::create("m", o);
  REQUIRE(sut.has_value());
  CHECK_FALSE((*sut)->info().caps.snapshots);
  std::vector<std::byte> buf((*sut)->info().snapshot_bytes);
  auto d = (*sut)->dump(0, 0, buf);
  REQUIRE_FALSE(d.has_value());
  CHECK(d.error().code == backend_errc::invalid_argument);
  CHECK(d.error().message.find("no snapshots") != std::string::npos);
  auto l = (*sut)->load(0, 0, buf);
  REQUIRE_FALSE(l.has_value());
  CHECK(l.error().code == backend_errc::invalid_argument);
}

#if !KVLANE_HAVE_QBRUNTIME
TEST_CASE("sim_backend: make_backend explains how to build the qbruntime backend in a build without it") {
  backend_config cfg;
  cfg.kind = "qbruntime";
  auto sut = make_backend("m", cfg);
  REQUIRE_FALSE(sut.has_value());
  CHECK(sut.error().code == backend_errc::invalid_argument);
  CHECK(sut.error().message.find("-DKVLANE_QBRUNTIME=sdk") != std::string::npos);
}
#endif
