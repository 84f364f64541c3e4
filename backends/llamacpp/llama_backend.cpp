#include "backends/llamacpp/llama_backend.hpp"

#include "common/logging.hpp"

#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sys/stat.h>
#include <thread>

#ifndef KVLANE_LLAMACPP_VERSION
#define KVLANE_LLAMACPP_VERSION "llama.cpp (version unknown)"
#endif

namespace kvlane::backends {

namespace {

backend_error error(backend_errc code, std::string message) {
  return backend_error{code, std::move(message)};
}

/// llama.cpp's and ggml's log lines, into the "backend" logger: their INFO chatter at
/// debug, warnings and errors as such. A line may arrive in pieces (level CONT).
void route_log(ggml_log_level level, const char* text, void*) {
  static thread_local ggml_log_level last = GGML_LOG_LEVEL_INFO;
  if (level == GGML_LOG_LEVEL_CONT)
    level = last;
  last = level;
  std::string_view line = text != nullptr ? text : "";
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r'))
    line.remove_suffix(1);
  if (line.empty())
    return;
  static const auto log = logging::get("backend");
  switch (level) {
    case GGML_LOG_LEVEL_ERROR: log->error("llama.cpp: {}", line); break;
    case GGML_LOG_LEVEL_WARN: log->warn("llama.cpp: {}", line); break;
    case GGML_LOG_LEVEL_DEBUG: log->trace("llama.cpp: {}", line); break;
    default: log->debug("llama.cpp: {}", line); break;
  }
}

void init_llama_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    llama_log_set(route_log, nullptr);
    llama_backend_init();
  });
}

/// Tokens per embedding decode: what the compute lane may wait for between two steps, and
/// the rows of the embedding context's output buffers (every token's logits, which llama.cpp
/// computes in embeddings mode too: 64 x 128k vocabulary = 32 MiB).
constexpr std::uint32_t embedding_batch = 64;

ggml_type kv_ggml_type(llama_kv_type t) {
  switch (t) {
    case llama_kv_type::f16: return GGML_TYPE_F16;
    case llama_kv_type::q8_0: return GGML_TYPE_Q8_0;
    case llama_kv_type::f32: return GGML_TYPE_F32;
  }
  return GGML_TYPE_F16;
}

llama_flash_attn_type flash_attn_type(llama_flash_attn f) {
  switch (f) {
    case llama_flash_attn::automatic: return LLAMA_FLASH_ATTN_TYPE_AUTO;
    case llama_flash_attn::on: return LLAMA_FLASH_ATTN_TYPE_ENABLED;
    case llama_flash_attn::off: return LLAMA_FLASH_ATTN_TYPE_DISABLED;
  }
  return LLAMA_FLASH_ATTN_TYPE_AUTO;
}

std::string meta_string(const llama_model* m, const char* key) {
  std::array<char, 256> small{};
  const auto n = llama_model_meta_val_str(m, key, small.data(), small.size());
  if (n < 0)
    return {};
  if (static_cast<std::size_t>(n) < small.size())
    return std::string(small.data(), static_cast<std::size_t>(n));
  std::string big(static_cast<std::size_t>(n) + 1, '\0');
  llama_model_meta_val_str(m, key, big.data(), big.size());
  big.resize(static_cast<std::size_t>(n));
  return big;
}

/// FNV-1a over the values that make one snapshot loadable into another context: the
/// file (path, size, modification time), the model's shape and the KV layout.
class fingerprint {
public:
  void add(std::string_view bytes) {
    for (unsigned char c : bytes) {
      h_ ^= c;
      h_ *= 1099511628211ull;
    }
    add_number(bytes.size());
  }
  void add_number(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h_ ^= (v >> (8 * i)) & 0xff;
      h_ *= 1099511628211ull;
    }
  }
  std::uint64_t value() const noexcept { return h_; }

private:
  std::uint64_t h_ = 1469598103934665603ull;
};

} // namespace

void llama_backend::model_deleter::operator()(llama_model* m) const noexcept {
  llama_model_free(m);
}

void llama_backend::context_deleter::operator()(llama_context* c) const noexcept {
  llama_free(c);
}

llama_backend::~llama_backend() = default;

expected<std::unique_ptr<llama_backend>, backend_error>
llama_backend::create(std::string model_name, const llamacpp_options& opts) {
  struct stat st {};
  if (::stat(opts.gguf.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return unexpected(error(backend_errc::invalid_argument,
                            fmt::format("gguf {}: no such file", opts.gguf)));
  if (opts.kv_type == llama_kv_type::q8_0 && opts.flash_attn == llama_flash_attn::off)
    return unexpected(error(backend_errc::invalid_argument,
                            "kv_type \"q8_0\" needs flash attention (flash_attn = \"auto\" or \"on\")"));
  std::string template_override;
  if (!opts.chat_template_file.empty()) {
    std::ifstream in(opts.chat_template_file, std::ios::binary);
    if (!in)
      return unexpected(error(backend_errc::invalid_argument,
                              fmt::format("chat_template_file {}: cannot read it",
                                          opts.chat_template_file)));
    template_override.assign(std::istreambuf_iterator<char>(in), {});
    if (template_override.empty())
      return unexpected(error(backend_errc::invalid_argument,
                              fmt::format("chat_template_file {}: empty", opts.chat_template_file)));
  }
  init_llama_once();

  std::unique_ptr<llama_backend> b(new llama_backend());
  auto mp = llama_model_default_params();
  mp.n_gpu_layers = static_cast<std::int32_t>(opts.gpu_layers);
  mp.load_mode = opts.mmap ? (opts.mlock ? LLAMA_LOAD_MODE_MMAP_MLOCK : LLAMA_LOAD_MODE_MMAP)
                           : (opts.mlock ? LLAMA_LOAD_MODE_MLOCK : LLAMA_LOAD_MODE_NONE);
  b->model_.reset(llama_model_load_from_file(opts.gguf.c_str(), mp));
  if (!b->model_)
    return unexpected(error(backend_errc::invalid_argument,
                            fmt::format("gguf {}: llama.cpp could not load it (not a GGUF, or an "
                                        "architecture this build does not know; the backend "
                                        "logger at debug level has llama.cpp's reason)",
                                        opts.gguf)));
  const llama_model* model = b->model_.get();
  if (llama_model_has_encoder(model) || llama_model_is_recurrent(model) || llama_model_is_hybrid(model))
    return unexpected(error(backend_errc::invalid_argument,
                            fmt::format("gguf {}: {} is not a decoder-only transformer (encoder, "
                                        "recurrent and hybrid models cannot roll back a "
                                        "sequence's KV)",
                                        opts.gguf, meta_string(model, "general.architecture"))));

  const auto cores = std::max(1u, std::thread::hardware_concurrency());
  const auto threads = opts.threads != 0 ? opts.threads : cores;
  const auto threads_batch = opts.threads_batch != 0 ? opts.threads_batch : threads;
  const auto train_context = static_cast<std::uint32_t>(std::max(0, llama_model_n_ctx_train(model)));
  const auto context = opts.context != 0 ? opts.context : train_context;
  if (context == 0)
    return unexpected(error(backend_errc::invalid_argument,
                            fmt::format("gguf {}: the model states no training context; set "
                                        "[model.llamacpp] context", opts.gguf)));

  auto cp = llama_context_default_params();
  cp.n_seq_max = opts.slots;
  cp.n_ctx = context * opts.slots;
  cp.n_ubatch = opts.batch;
  cp.n_batch = opts.batch * opts.slots; // every slot may send a full chunk in one step
  cp.n_threads = static_cast<std::int32_t>(threads);
  cp.n_threads_batch = static_cast<std::int32_t>(threads_batch);
  cp.type_k = kv_ggml_type(opts.kv_type);
  cp.type_v = kv_ggml_type(opts.kv_type);
  cp.flash_attn_type = flash_attn_type(opts.flash_attn);
  cp.kv_unified = false; // one KV stream per slot, as llama-server --parallel N
  cp.no_perf = true;
  cp.embeddings = false;
  b->context_.reset(llama_init_from_model(b->model_.get(), cp));
  if (!b->context_)
    return unexpected(error(backend_errc::out_of_memory,
                            fmt::format("gguf {}: llama.cpp could not create a context of {} slots "
                                        "x {} tokens ({} KV); try fewer slots, a shorter context "
                                        "or kv_type \"q8_0\"",
                                        opts.gguf, opts.slots, context, to_string(opts.kv_type))));

  const llama_vocab* vocab = llama_model_get_vocab(model);
  if (const char* t = llama_model_chat_template(model, nullptr); t != nullptr)
    b->chat_template_ = t;
  if (!template_override.empty())
    b->chat_template_ = std::move(template_override);
  b->tokenizer_ = std::make_unique<gguf_tokenizer>(vocab, b->chat_template_);
  std::array<char, 256> desc{};
  llama_model_desc(model, desc.data(), desc.size());
  b->description_ = desc.data();
  b->parameters_ = llama_model_n_params(model);

  auto& i = b->info_;
  i.kind = "llamacpp";
  i.model = std::move(model_name);
  i.runtime_version = KVLANE_LLAMACPP_VERSION;
  i.slots = opts.slots;
  i.max_context = std::min<std::uint32_t>(context, llama_n_ctx_seq(b->context_.get()));
  i.max_prefill_chunk = opts.batch;
  i.vocab_size = static_cast<std::uint32_t>(llama_vocab_n_tokens(vocab));
  i.caps.transfer_overlaps_compute = false;
  i.caps.extent = snapshot_extent::used_length;
  i.caps.snapshots = true;
  i.caps.embedding_dimension = static_cast<std::uint32_t>(std::max(0, llama_model_n_embd_out(model)));
  // The embedding context is made by the embedder's worker on its first job: a model that
  // only serves allocates nothing for embeddings and starts no thread.
  auto ep = cp;
  ep.n_seq_max = 1;
  ep.n_ctx = i.max_context;
  ep.n_batch = ep.n_ubatch = std::min<std::uint32_t>(opts.batch, embedding_batch);
  ep.n_threads = static_cast<std::int32_t>(threads_batch); // every decode is a prompt's
  ep.embeddings = true;
  // Pooled by the embedder (mean), across batches: the context pools nothing. Left unspecified
  // when the GGUF names no pooling (it then means none, without llama.cpp's warning).
  const auto pooling = meta_string(model, (meta_string(model, "general.architecture") + ".pooling_type").c_str());
  ep.pooling_type = pooling.empty() ? LLAMA_POOLING_TYPE_UNSPECIFIED : LLAMA_POOLING_TYPE_NONE;
  if (!pooling.empty() && pooling != "0" && pooling != "1")
    logging::get("backend")->warn("llamacpp {}: the GGUF names pooling type {}; kvlane's embeddings "
                                  "pool by the mean of the hidden states",
                                  i.model, pooling);
  llama_embedder::settings es;
  es.model = i.model;
  es.dimension = i.caps.embedding_dimension;
  es.batch = ep.n_batch;
  b->embedder_ = std::make_unique<llama_embedder>(
    std::move(es), [model = b->model_.get(), ep] { return llama_init_from_model(model, ep); },
    b->turns_);
  b->held_.assign(opts.slots, 0);
  // The calibration decodes run on a thread that ends here. With ggml's OpenMP build, the
  // thread that runs a decode keeps a team of (threads - 1) libgomp workers for as long as
  // it lives. A second team (this thread's, beside the compute lane's) leaves libgomp
  // managing more threads than the box has CPUs, and it then cuts its spin-wait to 1,000
  // iterations, so every ggml barrier (one per graph node) sleeps in futex: one-stream decode
  // ran ~25% slower. docs/backends.md, "Threads".
  expected<void, backend_error> calibrated;
  std::thread([&] { calibrated = b->calibrate_snapshots(); }).join();
  if (!calibrated)
    return unexpected(std::move(calibrated).error());
  i.snapshot_bytes = b->snapshot_size(i.max_context);

  fingerprint f;
  f.add(opts.gguf);
  f.add_number(static_cast<std::uint64_t>(st.st_size));
  f.add_number(static_cast<std::uint64_t>(st.st_mtim.tv_sec));
  f.add_number(static_cast<std::uint64_t>(st.st_mtim.tv_nsec));
  f.add_number(b->parameters_);
  f.add(to_string(opts.kv_type));
  f.add_number(i.max_context);
  f.add_number(i.bytes_per_token);
  f.add_number(i.snapshot_header_bytes);
  i.identity = f.value();

  logging::get("backend")->info(
    "llamacpp {}: {} ({} parameters), {} slots x {} tokens, KV {} ({} B/token + {} B header), "
    "{} threads ({} for prompts), batch {}",
    i.model, b->description_, b->parameters_, i.slots, i.max_context, to_string(opts.kv_type),
    i.bytes_per_token, i.snapshot_header_bytes, threads, threads_batch, opts.batch);
  return b;
}

expected<void, backend_error> llama_backend::calibrate_snapshots() {
  // A snapshot of n tokens is header + n * per_token bytes: measure it at 1 and 2 tokens.
  const auto first = tokenizer_->bos().value_or(0);
  std::array<token_id, 2> probe{first, first};
  step_output out;
  std::array<std::size_t, 2> sizes{};
  for (std::uint32_t n = 1; n <= 2; ++n) {
    const step_row row{0, n - 1, std::span<const token_id>(probe.data(), 1)};
    if (auto s = step(std::span(&row, 1), out); !s)
      return unexpected(error(s.error().code, "calibrating snapshots: " + s.error().message));
    sizes[n - 1] = llama_state_seq_get_size(context_.get(), 0);
  }
  trim_locked(0, 0);
  if (sizes[1] <= sizes[0] || sizes[0] < sizes[1] - sizes[0])
    return unexpected(error(backend_errc::device_failure,
                            fmt::format("calibrating snapshots: state sizes {} and {} bytes for 1 "
                                        "and 2 tokens are not affine",
                                        sizes[0], sizes[1])));
  info_.bytes_per_token = sizes[1] - sizes[0];
  info_.snapshot_header_bytes = sizes[0] - info_.bytes_per_token;
  return {};
}

void llama_backend::inject_transfer_faults(double rate, std::uint64_t seed) {
  std::lock_guard lock(mutex_);
  fault_rate_ = rate;
  fault_rng_ = seed;
}

std::uint64_t llama_backend::injected_faults() const noexcept {
  std::lock_guard lock(mutex_);
  return injected_;
}

std::optional<backend_error> llama_backend::take_fault_locked(std::string_view op) {
  if (fault_rate_ <= 0)
    return std::nullopt;
  // splitmix64: one draw per call.
  std::uint64_t z = (fault_rng_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  if (double(z >> 11) * 0x1.0p-53 >= fault_rate_)
    return std::nullopt;
  ++injected_;
  return error(backend_errc::device_failure, fmt::format("llamacpp: injected failure of {}", op));
}

void llama_backend::trim_locked(slot_id slot, std::uint32_t cache_len) {
  if (held_[slot] == cache_len)
    return;
  llama_memory_seq_rm(llama_get_memory(context_.get()), static_cast<llama_seq_id>(slot),
                      static_cast<llama_pos>(cache_len), -1);
  held_[slot] = std::min(held_[slot], cache_len);
}

expected<void, backend_error> llama_backend::step(std::span<const step_row> rows, step_output& out) {
  if (rows.empty())
    return unexpected(error(backend_errc::invalid_argument, "step with no rows"));
  turns_.before_step();
  std::lock_guard lock(mutex_);
  std::size_t total = 0;
  auto& used = step_slot_used_;
  used.assign(info_.slots, 0);
  for (const auto& r : rows) {
    if (r.slot >= info_.slots)
      return unexpected(error(backend_errc::invalid_argument,
                              fmt::format("slot {} out of range (slots: {})", r.slot, info_.slots)));
    if (used[r.slot])
      return unexpected(error(backend_errc::invalid_argument,
                              fmt::format("slot {} appears twice in one step", r.slot)));
    used[r.slot] = 1;
    if (r.tokens.empty() || r.tokens.size() > info_.max_prefill_chunk)
      return unexpected(error(backend_errc::invalid_argument,
                              fmt::format("slot {}: a row holds 1 to {} tokens (got {})", r.slot,
                                          info_.max_prefill_chunk, r.tokens.size())));
    if (std::uint64_t(r.cache_len) + r.tokens.size() > info_.max_context)
      return unexpected(error(backend_errc::context_overflow,
                              fmt::format("slot {}: {} + {} tokens exceed the context of {}", r.slot,
                                          r.cache_len, r.tokens.size(), info_.max_context)));
    if (r.cache_len > held_[r.slot])
      return unexpected(error(backend_errc::invalid_argument,
                              fmt::format("slot {} holds {} tokens, the row starts at {}", r.slot,
                                          held_[r.slot], r.cache_len)));
    for (auto t : r.tokens)
      if (t >= info_.vocab_size)
        return unexpected(error(backend_errc::invalid_argument,
                                fmt::format("slot {}: token {} outside the vocabulary of {}", r.slot,
                                            t, info_.vocab_size)));
    total += r.tokens.size();
  }
  for (const auto& r : rows)
    trim_locked(r.slot, r.cache_len);

  batch_tokens_.resize(total);
  batch_pos_.resize(total);
  batch_n_seq_.assign(total, 1);
  batch_seq_.resize(total);
  batch_seq_ptr_.resize(total);
  batch_logits_.assign(total, 0);
  auto& last = step_last_;
  last.resize(rows.size());
  // Rows go into the batch in slot order: llama.cpp splits a batch over non-unified KV into
  // micro-batches of consecutive sequence ids taken in batch order (split_equal), and each
  // micro-batch reads every weight again. Rows in rank order (2, 0, 3, 1) made one step of
  // four decodes into four passes over the weights.
  auto& order = step_order_;
  order.resize(rows.size());
  for (std::size_t ri = 0; ri < rows.size(); ++ri)
    order[ri] = static_cast<std::uint32_t>(ri);
  std::sort(order.begin(), order.end(),
            [&](std::uint32_t a, std::uint32_t b) { return rows[a].slot < rows[b].slot; });
  std::size_t at = 0;
  for (const auto ri : order) {
    const auto& r = rows[ri];
    for (std::size_t k = 0; k < r.tokens.size(); ++k, ++at) {
      batch_tokens_[at] = static_cast<llama_token>(r.tokens[k]);
      batch_pos_[at] = static_cast<llama_pos>(r.cache_len + k);
      batch_seq_[at] = static_cast<llama_seq_id>(r.slot);
      batch_seq_ptr_[at] = &batch_seq_[at];
    }
    batch_logits_[at - 1] = 1;
    last[ri] = static_cast<std::int32_t>(at - 1);
  }
  llama_batch batch{static_cast<std::int32_t>(total), batch_tokens_.data(), nullptr, batch_pos_.data(),
                    batch_n_seq_.data(), batch_seq_ptr_.data(), batch_logits_.data()};
  const auto rc = llama_decode(context_.get(), batch);
  if (rc != 0) {
    // Whatever llama.cpp kept of a failed batch is removed: no slot advances.
    for (const auto& r : rows) {
      llama_memory_seq_rm(llama_get_memory(context_.get()), static_cast<llama_seq_id>(r.slot),
                          static_cast<llama_pos>(r.cache_len), -1);
      held_[r.slot] = r.cache_len;
    }
    const auto code = rc == 1 ? backend_errc::out_of_memory : backend_errc::device_failure;
    return unexpected(error(code, fmt::format("llama_decode failed ({}) on {} rows, {} tokens", rc,
                                              rows.size(), total)));
  }
  out.reset(rows.size(), info_.vocab_size);
  for (std::size_t ri = 0; ri < rows.size(); ++ri) {
    const float* logits = llama_get_logits_ith(context_.get(), last[ri]);
    if (logits == nullptr)
      return unexpected(error(backend_errc::device_failure,
                              fmt::format("no logits for row {} (slot {})", ri, rows[ri].slot)));
    std::copy(logits, logits + info_.vocab_size, out.row(ri).begin());
    held_[rows[ri].slot] = rows[ri].cache_len + static_cast<std::uint32_t>(rows[ri].tokens.size());
  }
  return {};
}

expected<std::size_t, backend_error> llama_backend::dump(slot_id slot, std::uint32_t cache_len,
                                                         std::span<std::byte> destination) {
  if (slot >= info_.slots)
    return unexpected(error(backend_errc::invalid_argument,
                            fmt::format("slot {} out of range (slots: {})", slot, info_.slots)));
  const auto want = snapshot_size(cache_len);
  if (destination.size() < want)
    return unexpected(error(backend_errc::snapshot_mismatch,
                            fmt::format("slot {}: {} tokens need {} bytes, the buffer has {}", slot,
                                        cache_len, want, destination.size())));
  std::lock_guard lock(mutex_);
  if (cache_len > held_[slot])
    return unexpected(error(backend_errc::invalid_argument,
                            fmt::format("slot {} holds {} tokens, asked to dump {}", slot,
                                        held_[slot], cache_len)));
  if (auto fault = take_fault_locked("dump"))
    return unexpected(std::move(*fault));
  trim_locked(slot, cache_len);
  if (cache_len == 0)
    return std::size_t{0};
  const auto seq = static_cast<llama_seq_id>(slot);
  const auto size = llama_state_seq_get_size(context_.get(), seq);
  if (size != want)
    return unexpected(error(backend_errc::snapshot_mismatch,
                            fmt::format("slot {}: llama.cpp's state of {} tokens is {} bytes, "
                                        "expected {}",
                                        slot, cache_len, size, want)));
  const auto written = llama_state_seq_get_data(context_.get(), reinterpret_cast<std::uint8_t*>(destination.data()),
                                                destination.size(), seq);
  if (written != want)
    return unexpected(error(backend_errc::device_failure,
                            fmt::format("slot {}: llama.cpp wrote {} of {} state bytes", slot,
                                        written, want)));
  return written;
}

expected<void, backend_error> llama_backend::load(slot_id slot, std::uint32_t cache_len,
                                                  std::span<const std::byte> source) {
  if (slot >= info_.slots)
    return unexpected(error(backend_errc::invalid_argument,
                            fmt::format("slot {} out of range (slots: {})", slot, info_.slots)));
  if (cache_len > info_.max_context)
    return unexpected(error(backend_errc::context_overflow,
                            fmt::format("slot {}: {} tokens exceed the context of {}", slot,
                                        cache_len, info_.max_context)));
  const auto want = snapshot_size(cache_len);
  if (source.size() != want)
    return unexpected(error(backend_errc::snapshot_mismatch,
                            fmt::format("slot {}: {} tokens take {} bytes, the snapshot has {}",
                                        slot, cache_len, want, source.size())));
  std::lock_guard lock(mutex_);
  const auto seq = static_cast<llama_seq_id>(slot);
  auto* memory = llama_get_memory(context_.get());
  if (auto fault = take_fault_locked("load")) {
    llama_memory_seq_rm(memory, seq, -1, -1);
    held_[slot] = 0;
    return unexpected(std::move(*fault));
  }
  if (cache_len == 0) {
    llama_memory_seq_rm(memory, seq, -1, -1);
    held_[slot] = 0;
    return {};
  }
  const auto read = llama_state_seq_set_data(context_.get(), reinterpret_cast<const std::uint8_t*>(source.data()),
                                             source.size(), seq);
  const auto last = llama_memory_seq_pos_max(memory, seq);
  if (read != want || last != static_cast<llama_pos>(cache_len) - 1
      || llama_memory_seq_pos_min(memory, seq) != 0) {
    llama_memory_seq_rm(memory, seq, -1, -1);
    held_[slot] = 0;
    return unexpected(error(backend_errc::snapshot_mismatch,
                            fmt::format("slot {}: the snapshot does not restore {} tokens (read {} "
                                        "of {} bytes, last position {})",
                                        slot, cache_len, read, want, last)));
  }
  held_[slot] = cache_len;
  return {};
}

void llama_backend::embed(embedding_job job) {
  if (auto bad = check_embedding_inputs(info_, job.inputs)) {
    job.done(unexpected(std::move(*bad)));
    return;
  }
  embedder_->submit(std::move(job));
}

} // namespace kvlane::backends
