#pragma once

// A small expected<T, E> for C++20 (std::expected arrives with C++23).
// Used at module boundaries: config, backends, ipc. Inside actors, CAF's own
// caf::expected / caf::error are used instead.

#include <cassert>
#include <type_traits>
#include <utility>
#include <variant>

namespace kvlane {

template <class E>
class unexpected {
public:
  explicit unexpected(E e) : error_(std::move(e)) {}
  E& error() & { return error_; }
  E&& error() && { return std::move(error_); }

private:
  E error_;
};

template <class E>
unexpected(E) -> unexpected<E>;

template <class T, class E>
class [[nodiscard]] expected {
public:
  using value_type = T;
  using error_type = E;

  template <class U = T,
            class = std::enable_if_t<std::is_constructible_v<T, U&&>
                                     && !std::is_same_v<std::decay_t<U>, expected>>>
  expected(U&& v) : data_(std::in_place_index<0>, std::forward<U>(v)) {}

  template <class G>
  expected(unexpected<G> u) : data_(std::in_place_index<1>, std::move(u).error()) {}

  bool has_value() const noexcept { return data_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& value() & { assert(has_value()); return std::get<0>(data_); }
  const T& value() const& { assert(has_value()); return std::get<0>(data_); }
  T&& value() && { assert(has_value()); return std::get<0>(std::move(data_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  E& error() & { assert(!has_value()); return std::get<1>(data_); }
  const E& error() const& { assert(!has_value()); return std::get<1>(data_); }
  E&& error() && { assert(!has_value()); return std::get<1>(std::move(data_)); }

private:
  std::variant<T, E> data_;
};

template <class E>
class [[nodiscard]] expected<void, E> {
public:
  using value_type = void;
  using error_type = E;

  expected() = default;

  template <class G>
  expected(unexpected<G> u) : error_(std::move(u).error()), ok_(false) {}

  bool has_value() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  void value() const { assert(ok_); }

  E& error() & { assert(!ok_); return error_; }
  const E& error() const& { assert(!ok_); return error_; }

private:
  E error_{};
  bool ok_ = true;
};

} // namespace kvlane
