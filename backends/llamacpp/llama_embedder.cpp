#include "backends/llamacpp/llama_embedder.hpp"

#include "common/logging.hpp"

#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <exception>

namespace kvlane::backends {

namespace {

backend_error error(backend_errc code, std::string message) {
  return backend_error{code, std::move(message)};
}

/// Calls a job's `done`; a callback that throws (std::bad_alloc while it formats an
/// answer) must not end the worker, and with it the process.
void finish(embedding_job& job, expected<embeddings, backend_error> result) {
  try {
    job.done(std::move(result));
  } catch (const std::exception& e) {
    logging::get("backend")->error("an embedding job's completion failed: {}", e.what());
  }
}

} // namespace

void device_turns::before_step() {
  if (!waiting_.load(std::memory_order_acquire))
    return;
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !waiting_.load(std::memory_order_relaxed); });
}

std::unique_lock<std::mutex> device_turns::take() {
  waiting_.store(true, std::memory_order_release);
  std::unique_lock device(device_);
  {
    std::lock_guard lock(mu_);
    waiting_.store(false, std::memory_order_relaxed);
  }
  cv_.notify_all();
  return device;
}

void llama_embedder::context_deleter::operator()(llama_context* c) const noexcept {
  llama_free(c);
}

llama_embedder::llama_embedder(settings s, context_factory make, device_turns& turns)
  : settings_(std::move(s)), make_(std::move(make)), turns_(turns), idle_exit_(settings_.idle_exit) {}

llama_embedder::~llama_embedder() {
  std::deque<embedding_job> orphans;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    orphans.swap(queue_);
  }
  cv_.notify_all();
  if (worker_.joinable())
    worker_.join();
  for (auto& job : orphans)
    finish(job, unexpected(error(backend_errc::device_failure,
                                 fmt::format("model '{}' is shutting down", settings_.model))));
}

void llama_embedder::submit(embedding_job job) {
  std::unique_lock lock(mu_);
  if (stopping_) {
    lock.unlock();
    finish(job, unexpected(error(backend_errc::device_failure,
                                 fmt::format("model '{}' is shutting down", settings_.model))));
    return;
  }
  if (queue_.size() >= settings_.max_queued) {
    lock.unlock();
    finish(job, unexpected(error(backend_errc::out_of_memory,
                                 fmt::format("{} embedding jobs already wait for model '{}'",
                                             settings_.max_queued, settings_.model))));
    return;
  }
  queue_.push_back(std::move(job));
  if (running_) {
    cv_.notify_one();
    return;
  }
  // A worker that ended on its idle timeout has nothing left to do but exit (it no longer
  // takes mu_): joining it here is short.
  if (worker_.joinable())
    worker_.join();
  running_ = true;
  worker_ = std::thread([this] { work(); });
}

bool llama_embedder::worker_running() const {
  std::lock_guard lock(mu_);
  return running_;
}

bool llama_embedder::wait_until_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return ended_.wait_for(lock, timeout, [&] { return !running_; });
}

void llama_embedder::set_idle_exit(std::chrono::milliseconds idle) {
  std::lock_guard lock(mu_);
  idle_exit_ = idle;
}

void llama_embedder::work() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (!cv_.wait_for(lock, idle_exit_, [&] { return stopping_ || !queue_.empty(); })
        || stopping_) {
      running_ = false; // idle (or shutting down): this thread, and its OpenMP team, end
      ended_.notify_all();
      return;
    }
    auto job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    expected<embeddings, backend_error> result = unexpected(backend_error{});
    try {
      result = run(job);
    } catch (const std::exception& e) { // std::bad_alloc
      result = unexpected(error(backend_errc::out_of_memory,
                                fmt::format("embedding for model '{}': {}", settings_.model, e.what())));
    }
    finish(job, std::move(result));
    lock.lock();
  }
}

expected<embeddings, backend_error> llama_embedder::run(const embedding_job& job) {
  if (!context_) {
    context_.reset(make_());
    if (!context_)
      return unexpected(error(backend_errc::out_of_memory,
                              fmt::format("llama.cpp could not create the embedding context of "
                                          "model '{}'",
                                          settings_.model)));
  }
  const auto dim = settings_.dimension;
  const auto cancelled = [&] { return job.cancelled && job.cancelled(); };
  embeddings out;
  out.dimension = dim;
  out.values.assign(job.inputs.size() * dim, 0.0f);
  auto* memory = llama_get_memory(context_.get());
  for (std::size_t i = 0; i < job.inputs.size(); ++i) {
    const auto& input = job.inputs[i];
    llama_memory_clear(memory, false);
    sum_.assign(dim, 0.0);
    for (std::size_t start = 0; start < input.size(); start += settings_.batch) {
      if (cancelled())
        return unexpected(error(backend_errc::device_failure, "cancelled"));
      const auto n = std::min<std::size_t>(settings_.batch, input.size() - start);
      tokens_.resize(n);
      positions_.resize(n);
      n_seq_.assign(n, 1);
      seq_.assign(n, 0);
      seq_ptr_.resize(n);
      outputs_.assign(n, 1); // every token's hidden state: they are all pooled
      for (std::size_t k = 0; k < n; ++k) {
        tokens_[k] = static_cast<llama_token>(input[start + k]);
        positions_[k] = static_cast<llama_pos>(start + k);
        seq_ptr_[k] = &seq_[k];
      }
      llama_batch batch{static_cast<std::int32_t>(n), tokens_.data(), nullptr, positions_.data(),
                        n_seq_.data(), seq_ptr_.data(), outputs_.data()};
      int rc = 0;
      {
        auto device = turns_.take();
        rc = llama_decode(context_.get(), batch);
        if (rc == 0)
          llama_synchronize(context_.get()); // a GPU's work ends before the device is handed on
      }
      batches_.fetch_add(1, std::memory_order_relaxed);
      if (rc != 0)
        return unexpected(error(rc == 1 ? backend_errc::out_of_memory : backend_errc::device_failure,
                                fmt::format("llama_decode failed ({}) embedding input {} of model "
                                            "'{}' ({} tokens at {})",
                                            rc, i, settings_.model, n, start)));
      for (std::size_t k = 0; k < n; ++k) {
        const float* h = llama_get_embeddings_ith(context_.get(), static_cast<std::int32_t>(k));
        if (h == nullptr)
          return unexpected(error(backend_errc::device_failure,
                                  fmt::format("llama.cpp gave no hidden state for token {} of "
                                              "input {} (model '{}')",
                                              start + k, i, settings_.model)));
        for (std::uint32_t d = 0; d < dim; ++d)
          sum_[d] += h[d];
      }
    }
    const std::span<float> row{out.values.data() + i * dim, dim};
    const double n = static_cast<double>(input.size());
    for (std::uint32_t d = 0; d < dim; ++d)
      row[d] = static_cast<float>(sum_[d] / n);
    if (!l2_normalize(row))
      return unexpected(error(backend_errc::device_failure,
                              fmt::format("input {} of model '{}' pooled to a vector of length 0 "
                                          "or not finite",
                                          i, settings_.model)));
  }
  llama_memory_clear(memory, false);
  return out;
}

} // namespace kvlane::backends
