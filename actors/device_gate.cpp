#include "actors/device_gate.hpp"

namespace kvlane::actors {

device_gate::pass::pass(pass&& other) noexcept : gate_(other.gate_), waited_(other.waited_) {
  other.gate_ = nullptr;
}

device_gate::pass::~pass() {
  if (gate_ != nullptr)
    gate_->leave();
}

device_gate::pass device_gate::enter(gate_account& account) {
  std::unique_lock lock{mutex_};
  const std::uint64_t ticket = next_ticket_++;
  std::chrono::nanoseconds waited{0};
  if (ticket != serving_) {
    const auto since = std::chrono::steady_clock::now();
    turn_.wait(lock, [&] { return serving_ == ticket; });
    waited = std::chrono::steady_clock::now() - since;
    account.waits.fetch_add(1, std::memory_order_relaxed);
    account.wait_ns.fetch_add(static_cast<std::uint64_t>(waited.count()),
                              std::memory_order_relaxed);
  }
  account.passes.fetch_add(1, std::memory_order_relaxed);
  return pass{this, waited};
}

void device_gate::leave() noexcept {
  {
    std::lock_guard lock{mutex_};
    ++serving_;
  }
  // Every waiter checks its own ticket; there are a few (two lanes per model).
  turn_.notify_all();
}

std::uint64_t device_gate::waiting() const {
  std::lock_guard lock{mutex_};
  const auto inside = next_ticket_ - serving_; // the holder and its waiters
  return inside == 0 ? 0 : inside - 1;
}

bool device_gate::held() const {
  std::lock_guard lock{mutex_};
  return next_ticket_ != serving_;
}

std::shared_ptr<shared_device> device_registry::get(std::string_view name) {
  std::lock_guard lock{mutex_};
  // Devices nobody holds any more are forgotten here, so the map stays small.
  std::erase_if(devices_, [](const auto& d) { return d.second.expired(); });
  if (auto it = devices_.find(name); it != devices_.end())
    if (auto held = it->second.lock())
      return held;
  auto made = std::make_shared<shared_device>(std::string{name});
  devices_.insert_or_assign(std::string{name}, made);
  return made;
}

std::vector<std::string> device_registry::in_use() const {
  std::lock_guard lock{mutex_};
  std::vector<std::string> out;
  for (const auto& [name, device] : devices_)
    if (!device.expired())
      out.push_back(name);
  return out;
}

} // namespace kvlane::actors
