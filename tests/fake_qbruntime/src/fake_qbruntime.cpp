// The stand-in qbruntime on kvlane's simulated NPU. A model file is TOML:
//   batch = true            CacheType::Batch with `slots` KV slots (else one slot)
//   slots, max_cache_size, max_width, vocab, hidden, layers, layer_hash
//   output = "last"|"all"   logits of each row's last position, or of every position
//   input_rank = 4|3        (1,1,seq,H) or (1,seq,H)
//   strict = true           two overlapping calls on one Model fail with Fake_ConcurrentCall
//   overlap = "full"|"none"|"shared", call_ms, transfer_ms: the simulator's timing
//   fail_infer_nth, fail_dump_nth, fail_load_nth, fail_code: the Nth call returns fail_code
// Token ids are recovered from the input floats (fake_qbruntime/embedding_code.hpp) and
// folded into the simulator's byte vocabulary; logit v is the simulator's logit of v % 256,
// lowered by a hair per multiple of 256, so greedy decoding picks ids below 256.

#include <qbruntime/qbruntime.h>

#include "backends/sim_backend.hpp"
#include "fake_qbruntime/embedding_code.hpp"

#include <toml++/toml.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace mobilint {

namespace {

using kvlane::backends::backend_errc;
using kvlane::backends::sim_backend;
using kvlane::backends::sim_options;
using kvlane::backends::step_output;
using kvlane::backends::step_row;
using kvlane::backends::token_id;

constexpr std::uint32_t bytes_per_token = 64;

StatusCode status_of(backend_errc e) {
  switch (e) {
    case backend_errc::context_overflow: return StatusCode::Model_CacheOverflow;
    case backend_errc::out_of_memory: return StatusCode::BadAlloc;
    case backend_errc::snapshot_mismatch: return StatusCode::Model_BufferSizeMismatched;
    case backend_errc::device_timeout: return StatusCode::Acc_NPUTimeout;
    case backend_errc::invalid_argument: return StatusCode::Model_ShapeMismatched;
    case backend_errc::device_failure: break;
  }
  return StatusCode::Model_NotLaunched;
}

struct fault {
  std::uint64_t nth = 0;
  std::uint64_t calls = 0;
  bool hit() { return nth != 0 && ++calls == nth; }
};

} // namespace

struct Model::Impl {
  bool batch = false;
  std::uint32_t slots = 1, max_cache_size = 0, max_width = 0, vocab = 0, hidden = 0, layers = 1;
  std::uint64_t layer_hash = 0;
  bool all_positions = false;
  int input_rank = 4;
  bool strict = false;
  bool launched = false;
  StatusCode fail_code = StatusCode::Model_CacheOverflow;
  fault infer_fault, dump_fault, load_fault;
  std::unique_ptr<sim_backend> sim;
  std::atomic<int> active{0};
  std::mutex fault_mutex;
  std::vector<token_id> tokens; // infer scratch
  std::vector<std::byte> snapshot; // transfer scratch

  std::uint64_t layer_bytes() const {
    return std::uint64_t{bytes_per_token} * max_cache_size / layers;
  }

  /// Counts one call; false when another call on this Model is running (strict mode).
  struct call {
    Impl& m;
    bool overlapped;
    explicit call(Impl& model) : m(model), overlapped(model.active.fetch_add(1) != 0) {}
    ~call() { m.active.fetch_sub(1); }
  };

  bool take(fault& f) {
    std::lock_guard lock(fault_mutex);
    return f.hit();
  }

  /// The token ids of `count` embedding rows starting at `rows`.
  StatusCode decode(const float* rows, std::size_t count, std::vector<token_id>& out) const {
    out.clear();
    for (std::size_t i = 0; i < count; ++i) {
      auto id = fake_qbr::decode_embedding(rows + i * hidden, hidden);
      if (!id || *id >= vocab)
        return StatusCode::Model_ShapeMismatched;
      out.push_back(*id % 256);
    }
    return StatusCode::OK;
  }

  void spread(std::span<const float> sim_logits, float* out) const {
    for (std::uint32_t v = 0; v < vocab; ++v)
      out[v] = sim_logits[v % 256] - 1e-3f * static_cast<float>(v / 256);
  }

  struct row {
    int slot, cache_size, length;
  };

  /// Runs `rows` (tokens back to back in `tokens`), writing logits into `out`.
  StatusCode run(const std::vector<row>& rows, std::vector<NDArray<float>>& output) {
    std::size_t total = 0;
    for (const auto& r : rows) {
      if (r.slot < 0 || static_cast<std::uint32_t>(r.slot) >= slots || r.length <= 0
          || static_cast<std::uint32_t>(r.length) > max_width || r.cache_size < 0)
        return StatusCode::Model_ShapeMismatched;
      if (static_cast<std::uint64_t>(r.cache_size) + r.length > max_cache_size)
        return StatusCode::Model_CacheOverflow;
      total += static_cast<std::size_t>(r.length);
    }
    const std::int64_t out_rows = all_positions ? static_cast<std::int64_t>(total)
                                                : static_cast<std::int64_t>(rows.size());
    NDArray<float> logits(std::vector<int64_t>{1, out_rows, vocab});
    step_output so;
    if (!all_positions) {
      std::vector<step_row> srows;
      std::size_t at = 0;
      for (const auto& r : rows) {
        srows.push_back({static_cast<std::uint32_t>(r.slot), static_cast<std::uint32_t>(r.cache_size),
                         std::span<const token_id>(tokens.data() + at, r.length)});
        at += r.length;
      }
      if (auto ok = sim->step(srows, so); !ok)
        return status_of(ok.error().code);
      for (std::size_t i = 0; i < rows.size(); ++i)
        spread(so.row(i), logits.data() + i * vocab);
    } else {
      // Every position's logits: the simulator stepped one token at a time.
      std::size_t at = 0;
      for (const auto& r : rows) {
        for (int k = 0; k < r.length; ++k) {
          step_row sr{static_cast<std::uint32_t>(r.slot), static_cast<std::uint32_t>(r.cache_size + k),
                      std::span<const token_id>(tokens.data() + at + k, 1)};
          if (auto ok = sim->step(std::span{&sr, 1}, so); !ok)
            return status_of(ok.error().code);
          spread(so.row(0), logits.data() + (at + k) * vocab);
        }
        at += r.length;
      }
    }
    output.assign(1, logits);
    return StatusCode::OK;
  }

  /// Tokens of input 0 with the configured rank; `seq` is its token count.
  StatusCode read_input(const std::vector<NDArray<float>>& input, std::size_t& seq) {
    if (input.size() != 1)
      return StatusCode::Model_ShapeMismatched;
    const auto& shape = input[0].shape();
    if (static_cast<int>(shape.size()) != input_rank || shape.back() != hidden)
      return StatusCode::Model_ShapeMismatched;
    for (std::size_t i = 0; i + 2 < shape.size(); ++i)
      if (shape[i] != 1)
        return StatusCode::Model_ShapeMismatched;
    if (shape[shape.size() - 2] <= 0)
      return StatusCode::Model_ShapeMismatched;
    seq = static_cast<std::size_t>(shape[shape.size() - 2]);
    return decode(input[0].data(), seq, tokens);
  }

  StatusCode dump(int slot, std::vector<std::vector<int8_t>>& bufs) {
    if (slot < 0 || static_cast<std::uint32_t>(slot) >= slots)
      return StatusCode::Model_NoCache;
    snapshot.resize(std::size_t{bytes_per_token} * max_cache_size);
    if (auto ok = sim->dump(static_cast<std::uint32_t>(slot), max_cache_size, snapshot); !ok)
      return status_of(ok.error().code);
    bufs.assign(layers, {});
    for (std::uint32_t l = 0; l < layers; ++l) {
      bufs[l].resize(layer_bytes());
      std::memcpy(bufs[l].data(), snapshot.data() + l * layer_bytes(), layer_bytes());
    }
    return StatusCode::OK;
  }

  StatusCode load(int slot, const std::vector<std::vector<int8_t>>& bufs) {
    if (slot < 0 || static_cast<std::uint32_t>(slot) >= slots)
      return StatusCode::Model_NoCache;
    if (bufs.size() != layers)
      return StatusCode::Model_NumCacheMismatched;
    for (const auto& b : bufs)
      if (b.size() != layer_bytes())
        return StatusCode::Model_BufferSizeMismatched;
    snapshot.resize(std::size_t{bytes_per_token} * max_cache_size);
    for (std::uint32_t l = 0; l < layers; ++l)
      std::memcpy(snapshot.data() + l * layer_bytes(), bufs[l].data(), layer_bytes());
    if (auto ok = sim->load(static_cast<std::uint32_t>(slot), max_cache_size, snapshot); !ok)
      return status_of(ok.error().code);
    return StatusCode::OK;
  }
};

bool ModelConfig::setSingleCoreMode(int num_cores) {
  core_ids_.clear();
  for (int i = 0; i < num_cores; ++i)
    core_ids_.push_back({Cluster::Cluster0, Core::Core0});
  return num_cores > 0;
}
bool ModelConfig::setSingleCoreMode(std::vector<CoreId> core_ids) {
  core_ids_ = std::move(core_ids);
  return !core_ids_.empty();
}
bool ModelConfig::setGlobal4CoreMode(std::vector<Cluster> clusters) {
  core_ids_.clear();
  return !clusters.empty();
}
bool ModelConfig::setGlobal8CoreMode() {
  core_ids_.clear();
  return true;
}
#if FAKE_QBR_API >= 110
bool ModelConfig::setAutoCoreMode() {
  core_ids_.clear();
  return true;
}
#endif

std::unique_ptr<Accelerator> Accelerator::create(int dev_no, StatusCode& sc) {
  if (dev_no != 0) {
    sc = StatusCode::Model_NotLaunched;
    return nullptr;
  }
  sc = StatusCode::OK;
  return std::unique_ptr<Accelerator>(new Accelerator(dev_no));
}

std::unique_ptr<Model> Model::create(const std::string& mxq_path, const ModelConfig&, StatusCode& sc) {
  sc = StatusCode::Fake_ModelFile;
  toml::table t;
  try {
    t = toml::parse_file(mxq_path);
  } catch (const toml::parse_error&) {
    return nullptr;
  }
  auto impl = std::make_unique<Impl>();
  impl->batch = t["batch"].value_or(false);
  impl->slots = impl->batch ? t["slots"].value_or(1u) : 1u;
  impl->max_cache_size = t["max_cache_size"].value_or(512u);
  impl->max_width = t["max_width"].value_or(128u);
  impl->vocab = t["vocab"].value_or(1000u);
  impl->hidden = t["hidden"].value_or(16u);
  impl->layers = t["layers"].value_or(4u);
  impl->layer_hash = t["layer_hash"].value_or(std::uint64_t{1});
  impl->all_positions = t["output"].value_or(std::string("last")) == "all";
  impl->input_rank = t["input_rank"].value_or(4);
  impl->strict = t["strict"].value_or(false);
  impl->infer_fault.nth = t["fail_infer_nth"].value_or(std::uint64_t{0});
  impl->dump_fault.nth = t["fail_dump_nth"].value_or(std::uint64_t{0});
  impl->load_fault.nth = t["fail_load_nth"].value_or(std::uint64_t{0});
  impl->fail_code = static_cast<StatusCode>(t["fail_code"].value_or(53));
  if (impl->slots == 0 || impl->max_cache_size == 0 || impl->layers == 0 || impl->max_width == 0
      || impl->hidden < fake_qbr::code_columns || impl->vocab == 0
      || (std::uint64_t{bytes_per_token} * impl->max_cache_size) % impl->layers != 0
      || (impl->input_rank != 3 && impl->input_rank != 4))
    return nullptr;

  sim_options o;
  o.slots = impl->slots;
  o.max_context = impl->max_cache_size;
  o.max_prefill_chunk = impl->max_width;
  o.snapshot_bytes = std::uint64_t{bytes_per_token} * impl->max_cache_size;
  o.step_base_ms = t["call_ms"].value_or(0.0);
  o.step_per_token_ms = 0;
  o.dump_min_ms = o.dump_max_ms = o.load_min_ms = o.load_max_ms = t["transfer_ms"].value_or(0.0);
  const auto overlap = t["overlap"].value_or(std::string("full"));
  o.overlap = overlap == "none"     ? kvlane::backends::transfer_overlap::none
              : overlap == "shared" ? kvlane::backends::transfer_overlap::shared
                                    : kvlane::backends::transfer_overlap::full;
  o.seed = t["seed"].value_or(std::uint64_t{7});
  auto sim = sim_backend::create("fake-qbruntime", o);
  if (!sim)
    return nullptr;
  impl->sim = std::move(*sim);
  sc = StatusCode::OK;
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() {
  dispose();
}

StatusCode Model::launch(Accelerator&) {
  impl_->launched = true;
  return StatusCode::OK;
}

StatusCode Model::dispose() {
  impl_->launched = false;
  return StatusCode::OK;
}

StatusCode Model::infer(const std::vector<NDArray<float>>& input, std::vector<NDArray<float>>& output,
                        uint32_t cache_size) {
  Impl::call c(*impl_);
  if (impl_->strict && c.overlapped)
    return StatusCode::Fake_ConcurrentCall;
  if (!impl_->launched)
    return StatusCode::Model_NotLaunched;
  if (impl_->take(impl_->infer_fault))
    return impl_->fail_code;
  std::size_t seq = 0;
  if (auto sc = impl_->read_input(input, seq); !sc)
    return sc;
  return impl_->run({{0, static_cast<int>(cache_size), static_cast<int>(seq)}}, output);
}

#if FAKE_QBR_API >= 120
StatusCode Model::infer(const std::vector<NDArray<float>>& input, std::vector<NDArray<float>>& output,
                        const std::vector<BatchParam>& params) {
  Impl::call c(*impl_);
  if (impl_->strict && c.overlapped)
    return StatusCode::Fake_ConcurrentCall;
  if (!impl_->launched)
    return StatusCode::Model_NotLaunched;
  if (impl_->take(impl_->infer_fault))
    return impl_->fail_code;
  std::size_t seq = 0;
  if (auto sc = impl_->read_input(input, seq); !sc)
    return sc;
  std::vector<Impl::row> rows;
  std::size_t total = 0;
  for (const auto& p : params) {
    rows.push_back({p.cache_id, p.cache_size, p.sequence_length});
    total += p.sequence_length > 0 ? static_cast<std::size_t>(p.sequence_length) : 0;
  }
  if (rows.empty() || rows.size() > impl_->slots || total != seq)
    return StatusCode::Model_ShapeMismatched;
  return impl_->run(rows, output);
}
#endif

std::vector<std::vector<int64_t>> Model::getModelInputShape() const {
  if (impl_->input_rank == 3)
    return {{1, -1, impl_->hidden}};
  return {{1, 1, -1, impl_->hidden}};
}

std::vector<std::vector<int64_t>> Model::getModelOutputShape() const {
  return {{1, impl_->all_positions ? -1 : 1, impl_->vocab}};
}

std::vector<BufferInfo> Model::getInputBufferInfo() const {
  BufferInfo b;
  b.original_width = impl_->hidden;
  b.max_width = impl_->max_width;
  b.max_cache_size = impl_->max_cache_size;
  return {b};
}

std::vector<CacheInfo> Model::getCacheInfos() const {
  std::vector<CacheInfo> out;
  for (std::uint32_t l = 0; l < impl_->layers; ++l) {
    CacheInfo c;
    c.cache_type = impl_->batch ? CacheType::Batch : CacheType::Default;
    c.name = "layer" + std::to_string(l);
    c.layer_hash = impl_->layer_hash + l;
    c.size = impl_->layer_bytes();
    c.num_batches = impl_->slots;
    out.push_back(c);
  }
  return out;
}

StatusCode Model::dumpCacheMemory(std::vector<std::vector<int8_t>>& bufs) {
  Impl::call c(*impl_);
  if (impl_->strict && c.overlapped)
    return StatusCode::Fake_ConcurrentCall;
  if (impl_->take(impl_->dump_fault))
    return impl_->fail_code;
  return impl_->dump(0, bufs);
}

StatusCode Model::loadCacheMemory(const std::vector<std::vector<int8_t>>& bufs) {
  Impl::call c(*impl_);
  if (impl_->strict && c.overlapped)
    return StatusCode::Fake_ConcurrentCall;
  if (impl_->take(impl_->load_fault))
    return impl_->fail_code;
  return impl_->load(0, bufs);
}

#if FAKE_QBR_API >= 120
StatusCode Model::dumpCacheMemory(std::vector<std::vector<int8_t>>& bufs, int cache_id) {
  Impl::call c(*impl_);
  if (impl_->strict && c.overlapped)
    return StatusCode::Fake_ConcurrentCall;
  if (impl_->take(impl_->dump_fault))
    return impl_->fail_code;
  return impl_->dump(cache_id, bufs);
}

StatusCode Model::loadCacheMemory(const std::vector<std::vector<int8_t>>& bufs, int cache_id) {
  Impl::call c(*impl_);
  if (impl_->strict && c.overlapped)
    return StatusCode::Fake_ConcurrentCall;
  if (impl_->take(impl_->load_fault))
    return impl_->fail_code;
  return impl_->load(cache_id, bufs);
}
#endif

std::string getQbRuntimeVersion() {
  return FAKE_QBR_API >= 120 ? "1.2.0-fake" : "1.0.0-fake";
}

} // namespace mobilint
