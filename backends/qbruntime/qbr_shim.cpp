// The only translation unit that includes the qbruntime SDK. KVLANE_QBR_BATCH_FORM and
// KVLANE_QBR_SLOT_FORM name the call forms cmake/Qbruntime.cmake found (0 = none); a new
// SDK form is a new number there and a new branch here.

#include "backends/qbruntime/qbr_shim.hpp"

#include <qbruntime/qbruntime.h>

#include <utility>

#ifndef KVLANE_QBR_BATCH_FORM
#error "KVLANE_QBR_BATCH_FORM must be defined (cmake/Qbruntime.cmake)"
#endif
#ifndef KVLANE_QBR_SLOT_FORM
#error "KVLANE_QBR_SLOT_FORM must be defined (cmake/Qbruntime.cmake)"
#endif

namespace kvlane::backends::qbr {

namespace {

runtime_error error_of(mobilint::StatusCode sc) {
  runtime_error e;
  e.code = static_cast<int>(sc);
#if KVLANE_QBR_HAS_STATUS_STRING
  e.text = mobilint::statusCodeToString(sc);
#else
  e.text = "status " + std::to_string(e.code);
#endif
  return e;
}

status check(mobilint::StatusCode sc) {
  if (!sc)
    return unexpected(error_of(sc));
  return {};
}

mobilint::CoreId core_id(std::uint32_t core) {
  const auto cluster = core / 4 == 0 ? mobilint::Cluster::Cluster0 : mobilint::Cluster::Cluster1;
  constexpr mobilint::Core cores[] = {mobilint::Core::Core0, mobilint::Core::Core1,
                                      mobilint::Core::Core2, mobilint::Core::Core3};
  return mobilint::CoreId{cluster, cores[core % 4]};
}

} // namespace

std::string runtime_version() {
  return mobilint::getQbRuntimeVersion();
}

bool has_batch_infer() noexcept {
  return KVLANE_QBR_BATCH_FORM != 0;
}

bool has_slot_transfer() noexcept {
  return KVLANE_QBR_SLOT_FORM != 0;
}

bool has_auto_core_mode() noexcept {
  return KVLANE_QBR_HAS_AUTO_CORE != 0;
}

struct device::impl {
  std::unique_ptr<mobilint::Accelerator> acc;
};

device::device(std::unique_ptr<impl> i) : impl_(std::move(i)) {}
device::~device() = default;

expected<std::unique_ptr<device>, runtime_error> device::open(int dev_no) {
  mobilint::StatusCode sc{};
  auto acc = mobilint::Accelerator::create(dev_no, sc);
  if (!sc || !acc)
    return unexpected(error_of(sc));
  auto i = std::make_unique<impl>();
  i->acc = std::move(acc);
  return std::unique_ptr<device>(new device(std::move(i)));
}

struct model_handle::impl {
  std::unique_ptr<mobilint::Model> model;
  std::vector<mobilint::NDArray<float>> input;
  std::vector<mobilint::NDArray<float>> output;
  std::vector<std::int64_t> input_shape; ///< scratch: the model's rank with the token count
#if KVLANE_QBR_BATCH_FORM != 0
  std::vector<mobilint::BatchParam> params;
#endif

  void set_input(std::span<float> data, std::uint32_t tokens, std::int64_t hidden) {
    // (1, 1, seq, H) for rank 4, (1, seq, H) for rank 3: the token axis is second to last.
    for (auto& d : input_shape)
      d = 1;
    input_shape[input_shape.size() - 2] = tokens;
    input_shape.back() = hidden;
    input.assign(1, mobilint::NDArray<float>(data.data(), input_shape));
  }
};

model_handle::model_handle(std::unique_ptr<impl> i, geometry g)
  : impl_(std::move(i)), geometry_(std::move(g)) {}
model_handle::~model_handle() = default;

expected<std::unique_ptr<model_handle>, runtime_error>
model_handle::open(device& dev, const std::string& mxq_path, const placement& where) {
  mobilint::ModelConfig mc;
  switch (where.mode) {
    case core_mode::single: {
      std::vector<mobilint::CoreId> ids;
      for (auto c : where.cores)
        ids.push_back(core_id(c));
      if (ids.empty())
        ids.push_back(core_id(0));
      mc.setSingleCoreMode(ids);
      break;
    }
    case core_mode::global4:
      mc.setGlobal4CoreMode({mobilint::Cluster::Cluster0});
      break;
    case core_mode::global8:
      mc.setGlobal8CoreMode();
      break;
    case core_mode::automatic:
#if KVLANE_QBR_HAS_AUTO_CORE
      mc.setAutoCoreMode();
#else
      return unexpected(runtime_error{-1, "this qbruntime has no automatic core mode (1.1+)"});
#endif
      break;
  }
  mobilint::StatusCode sc{};
  auto model = mobilint::Model::create(mxq_path, mc, sc);
  if (!sc || !model)
    return unexpected(error_of(sc));
  if (auto ok = check(model->launch(*dev.get().acc)); !ok)
    return unexpected(ok.error());

  geometry g;
  const auto caches = model->getCacheInfos();
  for (const auto& c : caches) {
    g.layers.push_back({c.layer_hash, c.size});
    if (c.cache_type == mobilint::CacheType::Batch) {
      g.batch = true;
      g.num_batches = c.num_batches;
    }
  }
  const auto buffers = model->getInputBufferInfo();
  if (!buffers.empty()) {
    g.max_width = buffers[0].max_width;
    g.max_cache_size = buffers[0].max_cache_size;
  }
  const auto inputs = model->getModelInputShape();
  const auto outputs = model->getModelOutputShape();
  if (!inputs.empty())
    g.input_shape.assign(inputs[0].begin(), inputs[0].end());
  if (!outputs.empty())
    g.output_shape.assign(outputs[0].begin(), outputs[0].end());

  auto i = std::make_unique<impl>();
  i->model = std::move(model);
  i->input_shape.assign(std::max<std::size_t>(g.input_shape.size(), 2), 1);
  return std::unique_ptr<model_handle>(new model_handle(std::move(i), std::move(g)));
}

status model_handle::infer(std::span<float> input, std::uint32_t tokens, std::uint32_t cache_size) {
  impl_->set_input(input, tokens, geometry_.input_shape.empty() ? 0 : geometry_.input_shape.back());
  return check(impl_->model->infer(impl_->input, impl_->output, cache_size));
}

status model_handle::infer_batch([[maybe_unused]] std::span<float> input,
                                 [[maybe_unused]] std::uint32_t tokens,
                                 [[maybe_unused]] std::span<const batch_row> rows) {
#if KVLANE_QBR_BATCH_FORM == 0
  return unexpected(runtime_error{-1, "this build found no batch infer"});
#else
  impl_->set_input(input, tokens, geometry_.input_shape.empty() ? 0 : geometry_.input_shape.back());
  impl_->params.clear();
  for (const auto& r : rows) {
    mobilint::BatchParam p{};
    p.sequence_length = static_cast<int>(r.sequence_length);
    p.cache_size = static_cast<int>(r.cache_size);
    p.cache_id = static_cast<int>(r.cache_id);
    impl_->params.push_back(p);
  }
#if KVLANE_QBR_BATCH_FORM == 1
  return check(impl_->model->infer(impl_->input, impl_->output, impl_->params));
#elif KVLANE_QBR_BATCH_FORM == 2
  return check(impl_->model->infer(impl_->input, impl_->output, 0, impl_->params));
#elif KVLANE_QBR_BATCH_FORM == 3
  mobilint::StatusCode sc{};
  impl_->output = impl_->model->infer(impl_->input, impl_->params, sc);
  return check(sc);
#else
#error "unknown KVLANE_QBR_BATCH_FORM"
#endif
#endif
}

output_view model_handle::output() const noexcept {
  if (impl_->output.empty())
    return {};
  return {impl_->output[0].data(), impl_->output[0].size()};
}

status model_handle::dump(std::vector<std::vector<std::int8_t>>& layers) {
  return check(impl_->model->dumpCacheMemory(layers));
}

status model_handle::load(const std::vector<std::vector<std::int8_t>>& layers) {
  return check(impl_->model->loadCacheMemory(layers));
}

status model_handle::dump_slot([[maybe_unused]] std::uint32_t cache_id,
                               [[maybe_unused]] std::vector<std::vector<std::int8_t>>& layers) {
#if KVLANE_QBR_SLOT_FORM == 0
  return unexpected(runtime_error{-1, "this build found no per-slot dump"});
#elif KVLANE_QBR_SLOT_FORM == 1
  return check(impl_->model->dumpCacheMemory(layers, static_cast<int>(cache_id)));
#elif KVLANE_QBR_SLOT_FORM == 2
  return check(impl_->model->dumpCacheMemory(static_cast<int>(cache_id), layers));
#else
#error "unknown KVLANE_QBR_SLOT_FORM"
#endif
}

status model_handle::load_slot([[maybe_unused]] std::uint32_t cache_id,
                               [[maybe_unused]] const std::vector<std::vector<std::int8_t>>& layers) {
#if KVLANE_QBR_SLOT_FORM == 0
  return unexpected(runtime_error{-1, "this build found no per-slot load"});
#elif KVLANE_QBR_SLOT_FORM == 1
  return check(impl_->model->loadCacheMemory(layers, static_cast<int>(cache_id)));
#elif KVLANE_QBR_SLOT_FORM == 2
  return check(impl_->model->loadCacheMemory(static_cast<int>(cache_id), layers));
#endif
}

} // namespace kvlane::backends::qbr
