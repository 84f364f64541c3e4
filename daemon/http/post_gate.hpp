#pragma once

// kvlane::daemon::http::post_gate — posts work to the HTTP thread while it exists.
//
// Problem it solves: engine callbacks run on CAF worker threads and may come
// after the HTTP server has stopped; posting to a destroyed io_context would
// be a use after free. The server closes the gate before it stops its loop;
// later posts are dropped.
//
// Threading: post() from any thread; close() from the owner.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/post.hpp>

#include <mutex>
#include <utility>

namespace kvlane::daemon::http {

class post_gate {
public:
  explicit post_gate(boost::asio::any_io_executor ex) : ex_(std::move(ex)) {}

  template <class F>
  void post(F&& f) {
    std::lock_guard lock{mu_};
    if (open_)
      boost::asio::post(ex_, std::forward<F>(f));
  }

  void close() {
    std::lock_guard lock{mu_};
    open_ = false;
  }

private:
  std::mutex mu_;
  bool open_ = true;
  boost::asio::any_io_executor ex_;
};

} // namespace kvlane::daemon::http
