// The qbruntime adapter against the stand-in SDK (tests/fake_qbruntime), which runs each
// model on the simulator: wrong rows, strides, conversions, output positions or restores
// change the tokens, and inputs that are not embedding rows fail the call.

#include "backends/factory.hpp"
#include "backends/qbruntime/qbr_backend.hpp"
#include "backends/sim_backend.hpp"
#include "tests/support/qbr_fixture.hpp"
#include "tools/probe.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <iterator>
#include <string_view>
#include <thread>
#include <utility>

#if KVLANE_QBRUNTIME_FAKE
#include <qbruntime/qbruntime.h>
#endif

using namespace kvlane;
using backends::backend_errc;
using backends::qbr_backend;
using backends::step_output;
using backends::step_row;
using backends::token_id;

namespace {

constexpr std::uint32_t vocab = 600;
constexpr std::uint32_t hidden = 12;

std::string batch_mxq(std::string_view extra = "") {
  return "batch = true\nslots = 4\nmax_cache_size = 256\nmax_width = 64\nvocab = 600\n"
         "hidden = 12\nlayers = 4\nseed = 7\n"
         + std::string(extra);
}

std::string single_mxq(std::string_view extra = "") {
  return "batch = false\nmax_cache_size = 256\nmax_width = 64\nvocab = 600\nhidden = 12\n"
         "layers = 4\nseed = 7\n"
         + std::string(extra);
}

/// `o` names files of the model directory, which must outlive the backend.
std::unique_ptr<qbr_backend> open(const test::qbr_model_dir&, const backends::qbruntime_options& o) {
  auto sut = qbr_backend::create("m", o);
  if (!sut)
    FAIL(sut.error().message);
  return std::move(*sut);
}

std::unique_ptr<qbr_backend> open(const test::qbr_model_dir& dir) {
  return open(dir, dir.options());
}

token_id argmax(std::span<const float> logits) {
  return static_cast<token_id>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

std::vector<token_id> prompt_of(std::uint32_t salt, std::size_t n) {
  std::vector<token_id> t;
  for (std::size_t i = 0; i < n; ++i)
    t.push_back(static_cast<token_id>((i * 37 + salt * 101 + 3) % vocab));
  return t;
}

/// Prefills `prompt` into `slot` from cache_len 0 (in max_prefill_chunk pieces) and returns
/// the greedy token after it.
token_id prefill(backends::backend& b, backends::slot_id slot, std::span<const token_id> prompt) {
  step_output out;
  std::uint32_t len = 0;
  token_id next = 0;
  while (len < prompt.size()) {
    const auto n = std::min<std::size_t>(b.info().max_prefill_chunk, prompt.size() - len);
    step_row row{slot, len, prompt.subspan(len, n)};
    auto ok = b.step(std::span{&row, 1}, out);
    REQUIRE_MESSAGE(ok.has_value(), ok.error().message);
    len += static_cast<std::uint32_t>(n);
    next = argmax(out.row(0));
  }
  return next;
}

/// Greedy-decodes `n` tokens on `slot`, which holds `len` tokens and whose next input is `next`.
std::vector<token_id> decode(backends::backend& b, backends::slot_id slot, std::uint32_t len,
                             token_id next, std::size_t n) {
  std::vector<token_id> got;
  step_output out;
  for (std::size_t i = 0; i < n; ++i) {
    got.push_back(next);
    step_row row{slot, len, std::span<const token_id>(&got.back(), 1)};
    auto ok = b.step(std::span{&row, 1}, out);
    REQUIRE_MESSAGE(ok.has_value(), ok.error().message);
    ++len;
    next = argmax(out.row(0));
  }
  got.push_back(next);
  return got;
}

std::vector<token_id> generate(backends::backend& b, backends::slot_id slot,
                               std::span<const token_id> prompt, std::size_t n) {
  const token_id next = prefill(b, slot, prompt);
  return decode(b, slot, static_cast<std::uint32_t>(prompt.size()), next, n);
}

} // namespace

TEST_CASE("qbruntime: geometry comes from the model, with the prefill chunk capped at 128 on Batch models") {
  test::qbr_model_dir dir(
    "batch = true\nslots = 4\nmax_cache_size = 512\nmax_width = 256\nvocab = 600\nhidden = 12\n"
    "layers = 4\n",
    vocab, hidden);
  auto sut = open(dir);
  const auto& i = sut->info();
  CHECK(i.kind == "qbruntime");
  CHECK(i.model == "m");
  CHECK(i.slots == 4);
  CHECK(i.max_context == 512);
  CHECK(i.max_prefill_chunk == 128);
  CHECK(i.vocab_size == vocab);
  CHECK(i.snapshot_bytes == 512 * 64); // the stand-in keeps 64 bytes per position, 4 layers
  CHECK(i.bytes_per_token == 64);
  CHECK(i.caps.extent == backends::snapshot_extent::full_slot);
  CHECK(i.caps.snapshots);
  CHECK_FALSE(i.caps.transfer_overlaps_compute);
  CHECK(sut->batch());
  CHECK(sut->runtime_version() == "1.2.0-fake");

  auto o = dir.options();
  o.prefill_chunk = 32;
  CHECK(open(dir, o)->info().max_prefill_chunk == 32);
  o.prefill_chunk = 129;
  auto too_big = qbr_backend::create("m", o);
  REQUIRE_FALSE(too_big.has_value());
  CHECK(too_big.error().code == backend_errc::invalid_argument);
  CHECK(too_big.error().message.find("prefill_chunk 129 exceeds the model's 128") != std::string::npos);

  o = dir.options();
  o.concurrency = backends::qbr_concurrency::allow;
  CHECK(open(dir, o)->info().caps.transfer_overlaps_compute);
}

TEST_CASE("qbruntime: the identity changes with the model's cache layers") {
  test::qbr_model_dir a(batch_mxq("layer_hash = 1\n"), vocab, hidden);
  test::qbr_model_dir b(batch_mxq("layer_hash = 2\n"), vocab, hidden);
  CHECK(open(a)->info().identity == open(a)->info().identity);
  CHECK(open(a)->info().identity != open(b)->info().identity);
}

TEST_CASE("qbruntime: greedy decoding equals that of the simulator the stand-in runs on") {
  test::qbr_model_dir dir(batch_mxq(), vocab, hidden);
  auto sut = open(dir);
  backends::sim_options so;
  so.slots = 4;
  so.max_context = 256;
  so.max_prefill_chunk = 64;
  so.snapshot_bytes = 256 * 64;
  so.seed = 7;
  so.step_base_ms = so.step_per_token_ms = 0;
  auto sim = backends::sim_backend::create("ref", so);
  REQUIRE(sim.has_value());
  // The stand-in folds ids into bytes (id % 256) and prefers ids below 256.
  const auto prompt = prompt_of(1, 150);
  std::vector<token_id> folded;
  for (auto t : prompt)
    folded.push_back(t % 256);
  const auto want = generate(**sim, 2, folded, 20);
  const auto got = generate(*sut, 2, prompt, 20);
  CHECK(got == want);
}

TEST_CASE("qbruntime: output layouts, input ranks, embedding dtypes and handle models agree") {
  const auto prompt = prompt_of(2, 100);
  test::qbr_model_dir base(batch_mxq(), vocab, hidden);
  const auto want = generate(*open(base), 1, prompt, 16);

  SUBCASE("every-position logits") {
    test::qbr_model_dir dir(batch_mxq("output = \"all\"\n"), vocab, hidden);
    CHECK(generate(*open(dir), 1, prompt, 16) == want);
  }
  SUBCASE("rank-3 input") {
    test::qbr_model_dir dir(batch_mxq("input_rank = 3\n"), vocab, hidden);
    CHECK(generate(*open(dir), 1, prompt, 16) == want);
  }
  SUBCASE("f16 and f32 embedding tables") {
    test::qbr_model_dir f16(batch_mxq(), vocab, hidden, test::emb_dtype::f16);
    test::qbr_model_dir f32(batch_mxq(), vocab, hidden, test::emb_dtype::f32);
    CHECK(generate(*open(f16), 1, prompt, 16) == want);
    CHECK(generate(*open(f32), 1, prompt, 16) == want);
  }
  SUBCASE("a model without batching, one Model per slot") {
    test::qbr_model_dir dir(single_mxq(), vocab, hidden);
    auto o = dir.options();
    o.handles = 2;
    auto sut = open(dir, o);
    CHECK_FALSE(sut->batch());
    CHECK(sut->info().slots == 2);
    CHECK(generate(*sut, 1, prompt, 16) == want);
  }
  SUBCASE("a non-batch model with every-position logits") {
    test::qbr_model_dir dir(single_mxq("output = \"all\"\n"), vocab, hidden);
    CHECK(generate(*open(dir), 0, prompt, 16) == want);
  }
}

TEST_CASE("qbruntime: one step mixes prefill chunks and decodes in any row order") {
  for (const char* layout : {"last", "all"}) {
    CAPTURE(layout);
    test::qbr_model_dir dir(batch_mxq(std::string("output = \"") + layout + "\"\n"), vocab, hidden);
    auto alone = open(dir);
    auto mixed = open(dir);
    const auto a = prompt_of(3, 40), b = prompt_of(4, 90);
    // Reference: each slot on its own.
    const token_id a_next = prefill(*alone, 0, a);
    const token_id b_next = prefill(*alone, 3, b);
    const auto a_more = decode(*alone, 0, 40, a_next, 1);

    // Mixed: slot 0 prefilled, then one step with a prefill chunk of slot 3 (64 tokens),
    // a decode of slot 0, and the rest of slot 3 in the next step.
    REQUIRE(prefill(*mixed, 0, a) == a_next);
    step_output out;
    const std::span<const token_id> b_span(b);
    const token_id a_tok = a_next;
    step_row rows[] = {{3, 0, b_span.subspan(0, 64)}, {0, 40, std::span<const token_id>(&a_tok, 1)}};
    REQUIRE(mixed->step(rows, out).has_value());
    CHECK(argmax(out.row(1)) == a_more.back());
    step_row rest[] = {{0, 41, std::span<const token_id>(&a_more.back(), 1)},
                       {3, 64, b_span.subspan(64)}};
    REQUIRE(mixed->step(rest, out).has_value());
    CHECK(argmax(out.row(1)) == b_next);
  }
}

TEST_CASE("qbruntime: invalid rows are refused before any runtime call") {
  // The stand-in fails its first infer call: if a refused step reached it, the valid step
  // after it would succeed.
  test::qbr_model_dir dir(batch_mxq("fail_infer_nth = 1\nfail_code = 53\n"), vocab, hidden);
  auto sut = open(dir);
  step_output out;
  const token_id t[] = {1, 2};
  const token_id bad[] = {vocab};
  std::vector<token_id> long_row(65, 1);
  struct row_case {
    std::vector<step_row> rows;
    backend_errc code;
    std::string_view what;
  };
  const row_case cases[] = {
    {{}, backend_errc::invalid_argument, "no rows"},
    {{{4, 0, t}}, backend_errc::invalid_argument, "slot 4 out of range"},
    {{{1, 0, t}, {1, 0, t}}, backend_errc::invalid_argument, "duplicate slot 1"},
    {{{1, 0, {}}}, backend_errc::invalid_argument, "0 tokens"},
    {{{1, 0, long_row}}, backend_errc::invalid_argument, "65 tokens (1..64 per row)"},
    {{{1, 0, bad}}, backend_errc::invalid_argument, "token 600 outside the embedding table"},
    {{{1, 255, t}}, backend_errc::context_overflow, "exceed max_context 256"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    auto r = sut->step(c.rows, out);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == c.code);
    CHECK(r.error().message.find(c.what) != std::string::npos);
  }
  step_row ok{1, 0, t};
  auto r = sut->step(std::span{&ok, 1}, out);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == backend_errc::context_overflow); // the injected 53 of call 1
  CHECK(r.error().message.find("status 53") != std::string::npos);
}

TEST_CASE("qbruntime: dump, overwrite and load continue the sequence identically") {
  for (const char* mxq : {"batch", "single"}) {
    CAPTURE(mxq);
    const bool batch = std::string_view(mxq) == "batch";
    test::qbr_model_dir dir(batch ? batch_mxq() : single_mxq(), vocab, hidden);
    auto ref = open(dir);
    auto sut = open(dir);
    const auto prompt = prompt_of(5, 70);
    const auto want = generate(*ref, 0, prompt, 24);

    const token_id next = prefill(*sut, 0, prompt);
    const auto first = decode(*sut, 0, 70, next, 8); // 8 decoded + the 9th predicted
    std::vector<std::byte> snap(sut->snapshot_size(78));
    auto n = sut->dump(0, 78, snap);
    REQUIRE(n.has_value());
    CHECK(*n == snap.size());
    generate(*sut, 0, prompt_of(6, 120), 4); // overwrite slot 0 with another sequence
    REQUIRE(sut->load(0, 78, snap).has_value());
    const auto rest = decode(*sut, 0, 78, first.back(), 16);
    std::vector<token_id> got(first.begin(), first.end() - 1);
    got.insert(got.end(), rest.begin(), rest.end());
    CHECK(got == want);
  }
}

TEST_CASE("qbruntime: slots are isolated, and restoring another slot's snapshot diverges") {
  test::qbr_model_dir dir(batch_mxq(), vocab, hidden);
  auto sut = open(dir);
  auto ref = open(dir);
  const auto pa = prompt_of(7, 60), pb = prompt_of(8, 60);
  const auto want_a = generate(*ref, 0, pa, 12);
  const auto want_b = generate(*ref, 1, pb, 12);

  const token_id a_next = prefill(*sut, 0, pa);
  const token_id b_next = prefill(*sut, 1, pb);
  // Work on slot 1 and a transfer of slot 2 leave slot 0 untouched.
  CHECK(decode(*sut, 1, 60, b_next, 12) == want_b);
  std::vector<std::byte> snap_b(sut->info().snapshot_bytes);
  REQUIRE(sut->dump(1, 72, snap_b).has_value());
  REQUIRE(sut->load(2, 72, snap_b).has_value());
  CHECK(decode(*sut, 0, 60, a_next, 12) == want_a);

  // Slot 0 holds A; loading B's snapshot there continues B, not A.
  REQUIRE(sut->load(0, 72, snap_b).has_value());
  const auto after = decode(*sut, 0, 72, want_a.back(), 6);
  const auto a_cont = decode(*ref, 0, 72, want_a.back(), 6);
  CHECK(after != a_cont);
}

// The StatusCode numbers qbruntime documents and the backend error each must become: the
// "error map" row of the qbruntime design notes (shared/design/QBRUNTIME.md, section 1; read
// from qbruntime 1.0.0's status_code.h) as docs/backends.md, "Errors", states it. Names are
// given where the notes give them; every other number is a device_failure.
namespace {

struct documented_status {
  int number;
  std::string_view name;
  backend_errc want;
};
constexpr documented_status documented_statuses[] = {
  {53, "Model_CacheOverflow", backend_errc::context_overflow},
  {39, "BadAlloc", backend_errc::out_of_memory},
  {13, "", backend_errc::out_of_memory},
  {32, "", backend_errc::out_of_memory},
  {44, "", backend_errc::out_of_memory},
  {60, "NumCacheMismatched", backend_errc::snapshot_mismatch},
  {63, "BufferSizeMismatched", backend_errc::snapshot_mismatch},
  {42, "Acc_NPUTimeout", backend_errc::device_timeout},
  {35, "", backend_errc::device_timeout},
  {9, "NotLaunched", backend_errc::device_failure},
  {54, "NoCache", backend_errc::device_failure},
};

} // namespace

TEST_CASE("qbruntime: each documented StatusCode number becomes its documented backend error") {
  for (const auto& d : documented_statuses) {
    CAPTURE(d.number);
    CAPTURE(d.name);
    CHECK(backends::qbr_error_code(d.number) == d.want);
  }
  for (int undocumented : {1, 2, 70, 200})
    CHECK(backends::qbr_error_code(undocumented) == backend_errc::device_failure);
}

#if KVLANE_QBRUNTIME_FAKE
TEST_CASE("qbruntime: the stand-in SDK's StatusCode names carry the documented numbers") {
  using mobilint::StatusCode;
  const std::pair<StatusCode, int> named[] = {
    {StatusCode::OK, 0},
    {StatusCode::Model_CacheOverflow, 53},
    {StatusCode::BadAlloc, 39},
    {StatusCode::Model_NumCacheMismatched, 60},
    {StatusCode::Model_BufferSizeMismatched, 63},
    {StatusCode::Acc_NPUTimeout, 42},
    {StatusCode::Model_NotLaunched, 9},
    {StatusCode::Model_NoCache, 54},
  };
  for (const auto& [code, number] : named)
    CHECK(static_cast<int>(code) == number);
}
#endif

TEST_CASE("qbruntime: a documented status returned by the runtime fails the call with its error") {
  // Each documented number, injected into the stand-in's Nth call, goes through the shim and
  // the adapter. fail_dump_nth = 2: the dump at create() (calibration) is the first dump call.
  const std::string_view calls[] = {"fail_infer_nth = 1", "fail_dump_nth = 2", "fail_load_nth = 1"};
  std::size_t i = 0;
  for (const auto& d : documented_statuses) {
    const auto key = calls[i++ % std::size(calls)];
    CAPTURE(key);
    CAPTURE(d.number);
    test::qbr_model_dir dir(
      batch_mxq(std::string(key) + "\nfail_code = " + std::to_string(d.number) + "\n"), vocab,
      hidden);
    auto sut = open(dir);
    std::vector<std::byte> snap(sut->info().snapshot_bytes);
    step_output out;
    const token_id t[] = {1};
    step_row row{0, 0, t};
    expected<void, backends::backend_error> r;
    if (key.starts_with("fail_infer")) {
      r = sut->step(std::span{&row, 1}, out);
    } else if (key.starts_with("fail_dump")) {
      if (auto n = sut->dump(0, 0, snap); !n)
        r = unexpected(std::move(n.error()));
    } else {
      r = sut->load(0, 0, snap);
    }
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == d.want);
    CHECK(r.error().message.find("status " + std::to_string(d.number)) != std::string::npos);
  }
}

TEST_CASE("qbruntime: snapshots of the wrong size are refused") {
  test::qbr_model_dir dir(batch_mxq(), vocab, hidden);
  auto sut = open(dir);
  const auto bytes = sut->info().snapshot_bytes;
  std::vector<std::byte> small(bytes - 1), big(bytes + 1);
  auto d = sut->dump(0, 0, small);
  REQUIRE_FALSE(d.has_value());
  CHECK(d.error().code == backend_errc::invalid_argument);
  for (auto* buf : {&small, &big}) {
    auto l = sut->load(0, 0, *buf);
    REQUIRE_FALSE(l.has_value());
    CHECK(l.error().code == backend_errc::snapshot_mismatch);
  }
  auto wrong_slot = sut->load(4, 0, std::vector<std::byte>(bytes));
  REQUIRE_FALSE(wrong_slot.has_value());
  CHECK(wrong_slot.error().code == backend_errc::invalid_argument);
}

TEST_CASE("qbruntime: serialize keeps runtime calls on one Model apart under two threads") {
  // strict: the stand-in fails any call that overlaps another on the same Model. Each call
  // lasts about a millisecond so that unserialized calls would overlap.
  auto run = [](backends::qbr_concurrency mode) {
    test::qbr_model_dir dir(batch_mxq("strict = true\ncall_ms = 1.0\ntransfer_ms = 1.0\n"), vocab, hidden);
    auto o = dir.options();
    o.concurrency = mode;
    auto sut = open(dir, o);
    std::vector<std::byte> snap(sut->info().snapshot_bytes);
    std::atomic<int> failures{0};
    std::thread compute([&] {
      step_output out;
      const token_id t[] = {5};
      for (std::uint32_t i = 0; i < 60; ++i) {
        step_row rows[] = {{1, i, t}, {2, i, t}};
        if (!sut->step(rows, out))
          ++failures;
      }
    });
    for (int i = 0; i < 60; ++i) {
      if (!sut->dump(0, 0, snap) || !sut->load(0, 0, snap))
        ++failures;
    }
    compute.join();
    return failures.load();
  };
  CHECK(run(backends::qbr_concurrency::serialize) == 0);
  // The check has teeth: without the lock the stand-in sees the calls overlap.
  CHECK(run(backends::qbr_concurrency::allow) > 0);
}

TEST_CASE("qbruntime: create refuses missing files, ambiguous models and bad geometry with a reason") {
  test::qbr_model_dir dir(batch_mxq(), vocab, hidden);
  auto error_of = [](const backends::qbruntime_options& o) {
    auto r = qbr_backend::create("m", o);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == backend_errc::invalid_argument);
    return r.error().message;
  };
  auto o = dir.options();
  o.mxq = "absent.mxq";
  CHECK(error_of(o).find("absent.mxq: No such file") != std::string::npos);

  o = dir.options();
  o.embedding = "absent.safetensors";
  CHECK(error_of(o).find("absent.safetensors: No such file") != std::string::npos);

  o = dir.options();
  o.embedding_tensor = "lm_head.extra";
  CHECK(error_of(o).find("has rows of 5 values, the model takes 12") != std::string::npos);

  o = dir.options();
  o.handles = 2;
  CHECK(error_of(o).find("Batch model (4 slots in one Model): handles must be 1") != std::string::npos);

  std::ofstream(dir.dir / "second.mxq") << batch_mxq();
  CHECK(error_of(dir.options()).find("holds 2 .mxq files; set mxq") != std::string::npos);
  o = dir.options();
  o.mxq = "second.mxq";
  CHECK(qbr_backend::create("m", o).has_value());
}

TEST_CASE("qbruntime: the tokenizer is the model dir's tokenizer.json and must fit the logits width") {
  const std::filesystem::path fixture = KVLANE_SOURCE_DIR "/tests/tokenizer/fixtures/tiny";
  test::qbr_model_dir dir(batch_mxq(), vocab, hidden);
  auto o = dir.options();
  o.tokenizer.clear(); // the default: model_dir
  auto missing = qbr_backend::create("m", o);
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().code == backend_errc::invalid_argument);
  CHECK(missing.error().message.find("qbruntime: tokenizer: ") == 0);
  CHECK(missing.error().message.find("tokenizer.json") != std::string::npos);

  for (const auto* name : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    std::filesystem::copy_file(fixture / name, dir.dir / name);
  auto sut = open(dir, o);
  CHECK(sut->tokens().size() == 308); // the fixture's ids run up to 307
  CHECK(sut->tokens().special_token("<|im_end|>") == token_id{302});
  const auto ids = sut->tokens().encode("hello world");
  CHECK_FALSE(ids.empty());
  CHECK(sut->tokens().decode(ids) == "hello world");

  // A tokenizer elsewhere, named relative to model_dir.
  std::filesystem::create_directory(dir.dir / "tok");
  std::filesystem::rename(dir.dir / "tokenizer.json", dir.dir / "tok" / "tokenizer.json");
  CHECK_FALSE(qbr_backend::create("m", o).has_value());
  o.tokenizer = "tok";
  CHECK(open(dir, o)->tokens().size() == 308);

  // A model whose logits are narrower than the tokenizer's ids is not its model.
  test::qbr_model_dir narrow(
    "batch = true\nslots = 4\nmax_cache_size = 256\nmax_width = 64\nvocab = 300\n"
    "hidden = 12\nlayers = 4\nseed = 7\n",
    300, hidden);
  auto n = narrow.options();
  n.tokenizer = (dir.dir / "tok").string();
  auto refused = qbr_backend::create("m", n);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message.find("tokenizer: 308 ids, more than the model's logits width (300)")
        != std::string::npos);
}

TEST_CASE("qbruntime: make_backend builds the qbruntime kind from its options") {
  test::qbr_model_dir dir(batch_mxq(), vocab, hidden);
  backends::backend_config cfg;
  cfg.kind = "qbruntime";
  cfg.qbruntime = dir.options();
  auto sut = backends::make_backend("llm", cfg);
  REQUIRE(sut.has_value());
  CHECK((*sut)->info().kind == "qbruntime");
  CHECK((*sut)->info().model == "llm");
}

TEST_CASE("qbruntime: probe --verify passes on the stand-in, the concurrent check with concurrency allow") {
  test::qbr_model_dir dir(batch_mxq(), vocab, hidden);
  auto o = dir.options();
  o.concurrency = backends::qbr_concurrency::allow;
  auto sut = open(dir, o);
  tools::probe_options po;
  po.iterations = 1;
  po.verify = true;
  po.verify_tokens = 20;
  auto r = tools::run_probe(*sut, po);
  REQUIRE(r.has_value());
  REQUIRE(r->verify.has_value());
  CHECK(r->verify->passed());
  for (const auto& c : r->verify->checks) {
    CAPTURE(c.name);
    CHECK(c.result == tools::verify_check::outcome::passed);
  }
  CHECK(tools::format_json(*r).find("\"runtime_version\":\"1.2.0-fake\"") != std::string::npos);

  // serialize (the default): the concurrent check is skipped, the others pass.
  auto serial = tools::run_verify(*open(dir), 20);
  REQUIRE(serial.has_value());
  CHECK(serial->passed());
  CHECK(serial->checks.back().name == "concurrent");
  CHECK(serial->checks.back().result == tools::verify_check::outcome::skipped);
}
