#include "backends/qbruntime/qbr_backend.hpp"

#include "backends/byte_tokenizer.hpp"
#include "backends/hf_tokenizer.hpp"

#include <fmt/format.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kvlane::backends {

namespace {

/// Batch LLM models take at most this many tokens per row (Mobilint's own stacks cap it).
constexpr std::uint32_t batch_row_cap = 128;

backend_error invalid(std::string message) {
  return backend_error{backend_errc::invalid_argument, "qbruntime: " + std::move(message)};
}

backend_error runtime_failure(std::string_view op, const qbr::runtime_error& e) {
  return backend_error{qbr_error_code(e.code), fmt::format("qbruntime: {}: {}", op, e.text)};
}

std::uint64_t fnv(std::uint64_t h, const void* data, std::size_t n) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i)
    h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

template <class T>
std::uint64_t fnv_value(std::uint64_t h, const T& v) noexcept {
  return fnv(h, &v, sizeof v);
}

qbr::core_mode core_mode_of(qbr_core_mode m) noexcept {
  switch (m) {
    case qbr_core_mode::single: return qbr::core_mode::single;
    case qbr_core_mode::global4: return qbr::core_mode::global4;
    case qbr_core_mode::global8: return qbr::core_mode::global8;
    case qbr_core_mode::automatic: return qbr::core_mode::automatic;
  }
  return qbr::core_mode::single;
}

expected<std::string, backend_error> resolve_mxq(const qbruntime_options& o) {
  namespace fs = std::filesystem;
  if (!o.mxq.empty())
    return o.mxq.front() == '/' ? o.mxq : (fs::path(o.model_dir) / o.mxq).string();
  std::error_code ec;
  std::vector<std::string> found;
  for (fs::directory_iterator it(o.model_dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".mxq")
      found.push_back(it->path().string());
  if (ec)
    return unexpected(invalid(fmt::format("model_dir {}: {}", o.model_dir, ec.message())));
  if (found.size() != 1)
    return unexpected(invalid(fmt::format("model_dir {} holds {} .mxq files; set mxq",
                                          o.model_dir, found.size())));
  return found.front();
}

/// The model's tokenizer: the Hugging Face files in model_dir (or where `tokenizer`
/// points), or the byte tokenizer of the stand-in's test models.
expected<std::unique_ptr<tokenizer>, backend_error> open_tokenizer(const qbruntime_options& o) {
  if (o.tokenizer == "bytes")
    return std::unique_ptr<tokenizer>(std::make_unique<byte_tokenizer>());
  const std::filesystem::path where = o.tokenizer.empty() ? std::filesystem::path(o.model_dir)
                                      : o.tokenizer.front() == '/'
                                        ? std::filesystem::path(o.tokenizer)
                                        : std::filesystem::path(o.model_dir) / o.tokenizer;
  auto loaded = hf_tokenizer::load(where);
  if (!loaded)
    return unexpected(invalid("tokenizer: " + loaded.error().message));
  return std::unique_ptr<tokenizer>(std::move(*loaded));
}

} // namespace

backend_errc qbr_error_code(int status) noexcept {
  switch (status) {
    case 53: return backend_errc::context_overflow;     // Model_CacheOverflow
    case 13: case 32: case 39: case 44: return backend_errc::out_of_memory; // BadAlloc and kin
    case 60: case 63: return backend_errc::snapshot_mismatch; // cache count / buffer size
    case 35: case 42: return backend_errc::device_timeout;   // Acc_NPUTimeout and kin
    default: return backend_errc::device_failure;
  }
}

expected<std::unique_ptr<qbr_backend>, backend_error>
qbr_backend::create(std::string model_name, const qbruntime_options& opts) {
  auto mxq = resolve_mxq(opts);
  if (!mxq)
    return unexpected(std::move(mxq.error()));
  struct stat st{};
  if (::stat(mxq->c_str(), &st) != 0)
    return unexpected(invalid(fmt::format("{}: {}", *mxq, std::strerror(errno))));

  auto dev = qbr::device::open(static_cast<int>(opts.dev_no));
  if (!dev)
    return unexpected(runtime_failure(fmt::format("device {}", opts.dev_no), dev.error()));
  if (opts.core_mode == qbr_core_mode::automatic && !qbr::has_auto_core_mode())
    return unexpected(invalid(fmt::format("qbruntime {} has no automatic core mode (1.1+)",
                                          qbr::runtime_version())));

  // One Model per handle, each on its own core in single-core mode.
  std::vector<std::unique_ptr<handle>> handles;
  for (std::uint32_t i = 0; i < opts.handles; ++i) {
    qbr::placement where;
    where.mode = core_mode_of(opts.core_mode);
    if (opts.core_mode == qbr_core_mode::single)
      where.cores = {opts.target_cores.empty() ? i : opts.target_cores[i]};
    auto m = qbr::model_handle::open(**dev, *mxq, where);
    if (!m)
      return unexpected(runtime_failure(fmt::format("open {} (handle {})", *mxq, i), m.error()));
    handles.push_back(std::make_unique<handle>());
    handles.back()->model = std::move(*m);
  }
  const auto& g = handles.front()->model->shape();
  if (g.input_shape.size() < 3 || g.input_shape.back() <= 0 || g.output_shape.empty()
      || g.output_shape.back() <= 0 || g.max_cache_size == 0 || g.max_width == 0)
    return unexpected(invalid(fmt::format("{}: not a text LLM this backend can drive (input rank "
                                          "{}, output rank {}, max_cache_size {}, max_width {})",
                                          *mxq, g.input_shape.size(), g.output_shape.size(),
                                          g.max_cache_size, g.max_width)));
  if (g.batch && !qbr::has_batch_infer())
    return unexpected(invalid(fmt::format(
      "{} is a Batch model and this build (qbruntime {}) found no infer taking BatchParam at "
      "configure time; rebuild against qbruntime >= 1.2 (see the configure log)",
      *mxq, qbr::runtime_version())));
  if (g.batch && opts.handles != 1)
    return unexpected(invalid(fmt::format("{} is a Batch model ({} slots in one Model): handles "
                                          "must be 1 (got {})", *mxq, g.num_batches, opts.handles)));
  const auto hidden = static_cast<std::uint32_t>(g.input_shape.back());

  const std::string emb_path = opts.embedding.front() == '/'
                                 ? opts.embedding
                                 : (std::filesystem::path(opts.model_dir) / opts.embedding).string();
  auto table = safetensors::embedding_table::open(emb_path, opts.embedding_tensor, hidden);
  if (!table)
    return unexpected(invalid("embedding: " + table.error()));

  const auto embedding_rows = table->rows();
  auto tokens = open_tokenizer(opts);
  if (!tokens)
    return unexpected(std::move(tokens.error()));

  std::unique_ptr<qbr_backend> b(new qbr_backend(opts, std::move(*table)));
  b->tokenizer_ = std::move(*tokens);
  b->device_ = std::move(*dev);
  b->handles_ = std::move(handles);
  b->batch_ = g.batch;
  b->hidden_ = hidden;

  auto& info = b->info_;
  info.kind = "qbruntime";
  info.runtime_version = qbr::runtime_version();
  info.model = std::move(model_name);
  info.slots = g.batch ? g.num_batches : opts.handles;
  info.max_context = g.max_cache_size;
  std::uint32_t chunk = g.batch ? std::min(g.max_width, batch_row_cap) : g.max_width;
  if (opts.prefill_chunk != 0) {
    if (opts.prefill_chunk > chunk)
      return unexpected(invalid(fmt::format("prefill_chunk {} exceeds the model's {}",
                                            opts.prefill_chunk, chunk)));
    chunk = opts.prefill_chunk;
  }
  info.max_prefill_chunk = std::min(chunk, info.max_context);
  info.vocab_size = static_cast<std::uint32_t>(g.output_shape.back());
  if (b->tokenizer_->size() > info.vocab_size)
    return unexpected(invalid(fmt::format("tokenizer: {} ids, more than the model's logits width "
                                          "({}): the tokenizer is not this model's",
                                          b->tokenizer_->size(), info.vocab_size)));
  if (b->tokenizer_->size() > embedding_rows)
    return unexpected(invalid(fmt::format("tokenizer: {} ids, more than the embedding table's {} "
                                          "rows: the tokenizer is not this model's",
                                          b->tokenizer_->size(), embedding_rows)));
  info.caps.extent = snapshot_extent::full_slot;
  info.caps.snapshots = !g.batch || qbr::has_slot_transfer();
  info.caps.transfer_overlaps_compute =
    opts.concurrency == qbr_concurrency::allow && info.caps.snapshots && info.slots > 1;
  b->seen_.assign(info.slots, 0);

  // Calibrate the snapshot size with one dump of slot 0.
  if (info.caps.snapshots) {
    if (auto ok = b->transfer_dump(0); !ok)
      return unexpected(std::move(ok.error()));
    for (const auto& layer : b->layers_) {
      b->layer_bytes_.push_back(layer.size());
      info.snapshot_bytes += layer.size();
    }
    if (info.snapshot_bytes == 0)
      return unexpected(invalid(*mxq + ": the calibration dump is empty"));
    info.bytes_per_token = info.snapshot_bytes / info.max_context;
  }

  std::uint64_t id = 0xCBF29CE484222325ull;
  for (const auto& l : g.layers) {
    id = fnv_value(id, l.hash);
    id = fnv_value(id, l.bytes);
  }
  for (auto v : {std::uint64_t{g.num_batches}, std::uint64_t{g.max_cache_size},
                 std::uint64_t{info.vocab_size}, std::uint64_t{hidden},
                 static_cast<std::uint64_t>(st.st_size),
                 static_cast<std::uint64_t>(st.st_mtim.tv_sec),
                 static_cast<std::uint64_t>(st.st_mtim.tv_nsec), info.snapshot_bytes})
    id = fnv_value(id, v);
  id = fnv(id, info.runtime_version.data(), info.runtime_version.size());
  info.identity = id;
  return b;
}

qbr_backend::qbr_backend(qbruntime_options opts, safetensors::embedding_table embedding)
  : opts_(std::move(opts)), embedding_(std::move(embedding)) {}

qbr_backend::~qbr_backend() {
  handles_.clear(); // Models before the device they run on
  device_.reset();
}

std::unique_lock<std::mutex> qbr_backend::guard(handle& h) {
  if (opts_.concurrency == qbr_concurrency::serialize)
    return std::unique_lock(h.mutex);
  return {};
}

void qbr_backend::embed(std::span<const token_id> tokens, float* out) const noexcept {
  for (std::size_t i = 0; i < tokens.size(); ++i)
    embedding_.lookup(tokens[i], std::span<float>(out + i * hidden_, hidden_));
}

expected<void, backend_error> qbr_backend::validate(std::span<const step_row> rows) {
  if (rows.empty())
    return unexpected(invalid("step: no rows"));
  const std::uint64_t epoch = ++epoch_;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    if (row.slot >= info_.slots)
      return unexpected(invalid(fmt::format("step row {}: slot {} out of range (slots {})", i,
                                            row.slot, info_.slots)));
    if (seen_[row.slot] == epoch)
      return unexpected(invalid(fmt::format("step row {}: duplicate slot {}", i, row.slot)));
    seen_[row.slot] = epoch;
    if (row.tokens.empty() || row.tokens.size() > info_.max_prefill_chunk)
      return unexpected(invalid(fmt::format("step row {}: {} tokens (1..{} per row)", i,
                                            row.tokens.size(), info_.max_prefill_chunk)));
    for (token_id t : row.tokens)
      if (t >= embedding_.rows())
        return unexpected(invalid(fmt::format("step row {}: token {} outside the embedding "
                                              "table ({} rows)", i, t, embedding_.rows())));
    if (std::uint64_t{row.cache_len} + row.tokens.size() > info_.max_context)
      return unexpected(backend_error{
        backend_errc::context_overflow,
        fmt::format("qbruntime: step row {}: slot {} cache_len {} + {} tokens exceed max_context {}",
                    i, row.slot, row.cache_len, row.tokens.size(), info_.max_context)});
  }
  return {};
}

expected<void, backend_error> qbr_backend::copy_logits(qbr::output_view view, std::size_t position,
                                                       std::size_t positions,
                                                       std::span<float> row) const {
  // `positions` rows of logits are expected when the model returns every position; one
  // per row otherwise (the caller passes both layouts through `position`).
  const std::size_t v = info_.vocab_size;
  if (view.data == nullptr || view.size < (position + 1) * v || view.size % v != 0
      || view.size / v != positions)
    return unexpected(backend_error{backend_errc::device_failure,
                                    fmt::format("qbruntime: unexpected output shape: {} floats "
                                                "for {} rows of {} logits",
                                                view.size, positions, v)});
  std::memcpy(row.data(), view.data + position * v, v * sizeof(float));
  return {};
}

expected<void, backend_error> qbr_backend::step(std::span<const step_row> rows, step_output& out) {
  if (auto ok = validate(rows); !ok)
    return ok;
  out.reset(rows.size(), info_.vocab_size);
  const std::size_t v = info_.vocab_size;

  if (batch_) {
    std::size_t total = 0;
    for (const auto& r : rows)
      total += r.tokens.size();
    input_.resize(total * hidden_);
    params_.clear();
    std::size_t at = 0;
    for (const auto& r : rows) {
      embed(r.tokens, input_.data() + at * hidden_);
      params_.push_back({static_cast<std::uint32_t>(r.tokens.size()), r.cache_len, r.slot});
      at += r.tokens.size();
    }
    auto& h = *handles_.front();
    auto lock = guard(h);
    if (auto ok = h.model->infer_batch(input_, static_cast<std::uint32_t>(total), params_); !ok)
      return unexpected(runtime_failure("infer", ok.error()));
    const auto view = h.model->output();
    // Last position per row (rows x V) or every position (sum of tokens x V).
    const bool per_row = view.size == rows.size() * v;
    std::size_t end = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      end += rows[i].tokens.size();
      auto ok = per_row ? copy_logits(view, i, rows.size(), out.row(i))
                        : copy_logits(view, end - 1, total, out.row(i));
      if (!ok)
        return ok;
    }
    return {};
  }

  // One Model per slot: one infer per row.
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const auto n = static_cast<std::uint32_t>(r.tokens.size());
    input_.resize(std::size_t{n} * hidden_);
    embed(r.tokens, input_.data());
    auto& h = handle_of(r.slot);
    auto lock = guard(h);
    if (auto ok = h.model->infer(input_, n, r.cache_len); !ok)
      return unexpected(runtime_failure(fmt::format("infer (slot {})", r.slot), ok.error()));
    const auto view = h.model->output();
    auto ok = view.size == v ? copy_logits(view, 0, 1, out.row(i))
                             : copy_logits(view, n - 1, n, out.row(i));
    if (!ok)
      return ok;
  }
  return {};
}

expected<void, backend_error> qbr_backend::transfer_dump(slot_id slot) {
  auto& h = handle_of(slot);
  auto lock = guard(h);
  auto ok = batch_ ? h.model->dump_slot(slot, layers_) : h.model->dump(layers_);
  if (!ok)
    return unexpected(runtime_failure(fmt::format("dump (slot {})", slot), ok.error()));
  return {};
}

expected<std::size_t, backend_error> qbr_backend::dump(slot_id slot, std::uint32_t cache_len,
                                                       std::span<std::byte> destination) {
  if (!info_.caps.snapshots)
    return unexpected(invalid(fmt::format("dump: snapshots are unavailable (qbruntime {} has no "
                                          "per-slot dump that this build found)", info_.runtime_version)));
  if (slot >= info_.slots)
    return unexpected(invalid(fmt::format("dump: slot {} out of range (slots {})", slot, info_.slots)));
  if (cache_len > info_.max_context)
    return unexpected(invalid(fmt::format("dump: cache_len {} exceeds max_context {}", cache_len,
                                          info_.max_context)));
  if (destination.size() < info_.snapshot_bytes)
    return unexpected(invalid(fmt::format("dump: destination holds {} bytes, the snapshot needs {}",
                                          destination.size(), info_.snapshot_bytes)));
  if (auto ok = transfer_dump(slot); !ok)
    return unexpected(std::move(ok.error()));
  bool same = layers_.size() == layer_bytes_.size();
  for (std::size_t l = 0; same && l < layers_.size(); ++l)
    same = layers_[l].size() == layer_bytes_[l];
  if (!same)
    return unexpected(backend_error{backend_errc::device_failure,
                                    fmt::format("qbruntime: dump (slot {}): snapshot size changed "
                                                "since the calibration at create()", slot)});
  std::size_t at = 0;
  for (const auto& layer : layers_) {
    std::memcpy(destination.data() + at, layer.data(), layer.size());
    at += layer.size();
  }
  return at;
}

expected<void, backend_error> qbr_backend::load(slot_id slot, std::uint32_t cache_len,
                                                std::span<const std::byte> source) {
  if (!info_.caps.snapshots)
    return unexpected(invalid(fmt::format("load: snapshots are unavailable (qbruntime {} has no "
                                          "per-slot load that this build found)", info_.runtime_version)));
  if (slot >= info_.slots)
    return unexpected(invalid(fmt::format("load: slot {} out of range (slots {})", slot, info_.slots)));
  if (cache_len > info_.max_context)
    return unexpected(invalid(fmt::format("load: cache_len {} exceeds max_context {}", cache_len,
                                          info_.max_context)));
  if (source.size() != info_.snapshot_bytes)
    return unexpected(backend_error{backend_errc::snapshot_mismatch,
                                    fmt::format("qbruntime: load: snapshot has {} bytes, slot {} "
                                                "needs {}", source.size(), slot,
                                                info_.snapshot_bytes)});
  layers_.resize(layer_bytes_.size());
  std::size_t at = 0;
  for (std::size_t l = 0; l < layer_bytes_.size(); ++l) {
    layers_[l].resize(layer_bytes_[l]);
    std::memcpy(layers_[l].data(), source.data() + at, layer_bytes_[l]);
    at += layer_bytes_[l];
  }
  auto& h = handle_of(slot);
  auto lock = guard(h);
  auto ok = batch_ ? h.model->load_slot(slot, layers_) : h.model->load(layers_);
  if (!ok)
    return unexpected(runtime_failure(fmt::format("load (slot {})", slot), ok.error()));
  return {};
}

} // namespace kvlane::backends
