#pragma once

// A stand-in for Mobilint's <qbruntime/qbruntime.h>, written from the documented API
// (names, types and status numbers as listed in kvlane's docs/backends.md); it declares
// only what kvlane's qbr_shim.cpp calls. FAKE_QBR_API selects the surface:
//   100: qbruntime 1.0.0 (no BatchParam, whole-cache dump/load only);
//   120: adds BatchParam and per-cache_id dump/load in one guessed form.
//
// The "model file" is a small TOML file (its keys: src/fake_qbruntime.cpp) and the model
// runs on kvlane's simulated NPU.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#ifndef FAKE_QBR_API
#define FAKE_QBR_API 120
#endif

namespace mobilint {

/// Status numbers as documented (qbruntime 1.0.0's status_code.h, as kvlane's design notes
/// and docs/backends.md "Errors" list them; tests/unit/backends/qbruntime checks them). The
/// names of the numbers the documentation does not name, and ShapeMismatched's 70 and the
/// Fake_ numbers >= 200, are this stand-in's own.
enum class StatusCode : int {
  OK = 0,
  Model_NotLaunched = 9,
  Fake_InvalidArgument = 13,
  Fake_OutOfMemory = 32,
  Fake_Timeout = 35,
  BadAlloc = 39,
  Acc_NPUTimeout = 42,
  Fake_DeviceMemory = 44,
  Model_CacheOverflow = 53,
  Model_NoCache = 54,
  Model_NumCacheMismatched = 60,
  Model_BufferSizeMismatched = 63,
  Model_ShapeMismatched = 70,   ///< input floats are not rows of the expected embedding
  Fake_ConcurrentCall = 200,    ///< strict mode: two calls on one Model overlapped
  Fake_ModelFile = 201,         ///< the model file is missing or invalid
};

inline bool operator!(StatusCode sc) { return sc != StatusCode::OK; }

/// A tensor: owning, or a non-owning view of caller memory.
template <typename T>
class NDArray {
public:
  NDArray() = default;
  NDArray(T* data, std::vector<int64_t> shape) : data_(data), shape_(std::move(shape)) {}
  explicit NDArray(std::vector<int64_t> shape)
    : owned_(std::make_shared<std::vector<T>>(count(shape))), shape_(std::move(shape)) {
    data_ = owned_->data();
  }
  T* data() const { return data_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  std::size_t size() const { return count(shape_); }

private:
  static std::size_t count(const std::vector<int64_t>& shape) {
    std::size_t n = shape.empty() ? 0 : 1;
    for (auto d : shape)
      n *= d > 0 ? static_cast<std::size_t>(d) : 0;
    return n;
  }
  std::shared_ptr<std::vector<T>> owned_;
  T* data_ = nullptr;
  std::vector<int64_t> shape_;
};

enum class Cluster : int { Cluster0 = 1 << 16, Cluster1 = 2 << 16 };
enum class Core : int { Core0 = 1, Core1 = 2, Core2 = 4, Core3 = 8 };

struct CoreId {
  Cluster cluster;
  Core core;
};

class ModelConfig {
public:
  bool setSingleCoreMode(int num_cores);
  bool setSingleCoreMode(std::vector<CoreId> core_ids);
  bool setGlobal4CoreMode(std::vector<Cluster> clusters);
  bool setGlobal8CoreMode();
#if FAKE_QBR_API >= 110
  bool setAutoCoreMode();
#endif
  /// Stand-in only: the cores a single-core mode was given.
  const std::vector<CoreId>& coreIds() const { return core_ids_; }

private:
  std::vector<CoreId> core_ids_;
};

struct BufferInfo {
  uint32_t original_height = 0;
  uint32_t original_width = 0;
  uint32_t original_channel = 0;
  uint32_t max_width = 0;      ///< most tokens one infer may carry
  uint32_t max_cache_size = 0; ///< context length of the KV cache
};

enum class CacheType : int { Default = 0, Batch = 1 };

struct CacheInfo {
  CacheType cache_type = CacheType::Default;
  std::string name;
  uint64_t layer_hash = 0;
  uint64_t size = 0;        ///< bytes of this cache layer
  uint32_t num_batches = 1; ///< KV slots of a Batch model
};

#if FAKE_QBR_API >= 120
struct BatchParam {
  int sequence_length = 0;
  int cache_size = 0;
  int cache_id = 0;
};
#endif

class Accelerator {
public:
  static std::unique_ptr<Accelerator> create(int dev_no, StatusCode& sc);
  int devNo() const { return dev_no_; }

private:
  explicit Accelerator(int dev_no) : dev_no_(dev_no) {}
  int dev_no_;
};

class Model {
public:
  static std::unique_ptr<Model> create(const std::string& mxq_path, const ModelConfig& mc,
                                       StatusCode& sc);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  StatusCode launch(Accelerator& acc);
  StatusCode dispose();

  StatusCode infer(const std::vector<NDArray<float>>& input, std::vector<NDArray<float>>& output,
                   uint32_t cache_size);
#if FAKE_QBR_API >= 120
  StatusCode infer(const std::vector<NDArray<float>>& input, std::vector<NDArray<float>>& output,
                   const std::vector<BatchParam>& params);
#endif

  std::vector<std::vector<int64_t>> getModelInputShape() const;
  std::vector<std::vector<int64_t>> getModelOutputShape() const;
  std::vector<BufferInfo> getInputBufferInfo() const;
  std::vector<CacheInfo> getCacheInfos() const;

  StatusCode dumpCacheMemory(std::vector<std::vector<int8_t>>& bufs);
  StatusCode loadCacheMemory(const std::vector<std::vector<int8_t>>& bufs);
#if FAKE_QBR_API >= 120
  StatusCode dumpCacheMemory(std::vector<std::vector<int8_t>>& bufs, int cache_id);
  StatusCode loadCacheMemory(const std::vector<std::vector<int8_t>>& bufs, int cache_id);
#endif

  struct Impl;

private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

std::string getQbRuntimeVersion();

} // namespace mobilint
