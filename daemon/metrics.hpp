#pragma once

// kvlane::daemon::metrics — what Prometheus (and `kvlane metrics`) scrapes.
//
// Request outcomes and latency histograms are recorded as requests end (from
// the engine's completion hook, on actor threads); everything else is read at
// scrape time from the schedulers' and the store's statistics, so the hot path
// pays only a few relaxed atomic increments per finished request.
//
// Threading: record() is thread-safe and lock-free; render() may run on any
// thread concurrently with record().

#include "actors/engine.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::daemon {

/// A fixed-bucket histogram of seconds.
class histogram {
public:
  static constexpr std::array<double, 14> bounds{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                 0.5,   1.0,   2.5,  5.0,   10.0, 30.0, 60.0};
  void observe(double seconds) noexcept;

  struct snapshot {
    std::array<std::uint64_t, bounds.size() + 1> cumulative{}; ///< last is +Inf (= count)
    double sum = 0;
  };
  snapshot read() const noexcept;

private:
  std::array<std::atomic<std::uint64_t>, bounds.size() + 1> buckets_{}; // non-cumulative
  std::atomic<std::uint64_t> sum_micros_{0};
};

/// One lane of a loaded model and what it waited for its device while other
/// models on the same device used it (docs/architecture.md, "Models sharing a device").
struct device_wait {
  std::string model;
  std::string device;
  std::string lane; ///< "compute" or "transfer"
  double seconds = 0;
};

/// The lanes of every loaded model in `models`, compute then transfer.
std::vector<device_wait>
device_waits_of(const std::vector<std::shared_ptr<const actors::model_entry>>& models);

class metrics {
public:
  /// `http_identities`: the names of the HTTP API's identities (docs/http.md, "Identities"),
  /// from the config, so that their label values are a bounded set.
  explicit metrics(std::vector<std::string> models, std::vector<std::string> http_identities = {});

  /// Records one finished request.
  void record(const actors::completion& c) noexcept;

  /// The Prometheus text exposition (version 0.0.4) of everything.
  std::string render(const std::vector<actors::scheduler_stats>& schedulers,
                     const ipc::store_stats& store, std::uint64_t clients_connected,
                     const std::vector<device_wait>& waits = {}) const;

private:
  struct per_model {
    std::string name;
    std::array<std::atomic<std::uint64_t>, 4> outcomes{}; // by end_reason
    histogram ttft, tpot, e2e;
  };
  per_model* find(std::string_view model) noexcept;

  struct per_identity {
    std::string name;
    std::array<std::atomic<std::uint64_t>, 4> outcomes{}; // by end_reason
  };
  /// The identity an HTTP request's client ("http:NAME" or "http:NAME/SESSION") names.
  per_identity* find_identity(std::string_view client) noexcept;

  std::vector<std::unique_ptr<per_model>> models_;
  std::vector<std::unique_ptr<per_identity>> identities_;
};

} // namespace kvlane::daemon
