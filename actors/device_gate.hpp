#pragma once

// kvlane::actors::device_gate — several models' lanes taking turns on one device.
//
// Problem it solves: each model has its own compute and transfer lanes (a
// failing model stops only its own), but models placed on the same device
// ([[model]] device, backends::device_of) share that device's compute engine
// and its copy engine. Without an arbiter two models would step at once as if
// each owned the device. A shared_device holds one gate per engine; a lane
// passes its gate around every backend call (steps and `sync`-mode transfers:
// the compute gate; transfers on the transfer lane: the transfer gate).
//
// Fairness: a gate is a ticket lock. Callers pass in the order they arrived,
// one call at a time, so models with pending work alternate call by call and a
// model with nothing to do takes no turn (time is shared by demand). A turn is
// one call, not a time slice: a model whose steps are longer gets more of the
// device's time.
//
// Accounting: the caller passes its own gate_account; enter() adds the pass
// and, when the gate was taken, the time waited. Callers measure their
// backend call after enter() returns, so a call's duration is the device's
// own and the wait is counted apart.
//
// Threading: enter() blocks (lanes are detached actors with a thread of their
// own: never call it on a CAF worker); every member is thread-safe. A pass
// releases the gate when destroyed, also while an exception unwinds.
// device_registry is thread-safe; the gates it hands out live as long as a
// holder does, so unloading one model never disturbs the others' gates.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::actors {

/// One caller's passes through gates, and the time it waited for them.
/// Written by that caller's thread, read by any (relaxed atomics).
struct gate_account {
  std::atomic<std::uint64_t> passes{0};  ///< calls that went through the gate
  std::atomic<std::uint64_t> waits{0};   ///< of those, the ones that found it taken
  std::atomic<std::uint64_t> wait_ns{0}; ///< total time spent waiting for it

  double wait_seconds() const noexcept {
    return static_cast<double>(wait_ns.load(std::memory_order_relaxed)) / 1e9;
  }
};

/// A FIFO gate: one holder at a time, the others pass in arrival order.
class device_gate {
public:
  /// Holding the gate; leaving it lets the next caller in.
  class [[nodiscard]] pass {
  public:
    pass(pass&& other) noexcept;
    pass& operator=(pass&&) = delete;
    pass(const pass&) = delete;
    pass& operator=(const pass&) = delete;
    ~pass();
    /// How long enter() waited for the gate (0 when it was free).
    std::chrono::nanoseconds waited() const noexcept { return waited_; }

  private:
    friend class device_gate;
    pass(device_gate* gate, std::chrono::nanoseconds waited) noexcept
      : gate_(gate), waited_(waited) {}
    device_gate* gate_;
    std::chrono::nanoseconds waited_;
  };

  device_gate() = default;
  device_gate(const device_gate&) = delete;
  device_gate& operator=(const device_gate&) = delete;

  /// Waits for the gate (after every caller that arrived before) and holds it
  /// until the returned pass is destroyed. Records the pass in `account`.
  pass enter(gate_account& account);

  /// Callers waiting for the gate now, not counting its holder.
  std::uint64_t waiting() const;
  /// Whether someone holds it now.
  bool held() const;

private:
  void leave() noexcept;

  mutable std::mutex mutex_;
  std::condition_variable turn_;
  std::uint64_t next_ticket_ = 0; ///< handed to the next caller
  std::uint64_t serving_ = 0;     ///< the ticket that may hold the gate
};

/// A device as its models see it: a name and one gate per engine.
struct shared_device {
  explicit shared_device(std::string n) : name(std::move(n)) {}
  const std::string name;
  device_gate compute;  ///< steps, and transfers that run on the compute lane
  device_gate transfer; ///< transfers on the transfer lane
};

/// The devices of one engine, by name. Gates exist while a model uses them.
class device_registry {
public:
  /// The device called `name`: the one a loaded model already uses, else a
  /// new one. Holders share it; it ends with its last holder.
  std::shared_ptr<shared_device> get(std::string_view name);

  /// Names of the devices some model holds now, sorted.
  std::vector<std::string> in_use() const;

private:
  mutable std::mutex mutex_;
  std::map<std::string, std::weak_ptr<shared_device>, std::less<>> devices_;
};

} // namespace kvlane::actors
