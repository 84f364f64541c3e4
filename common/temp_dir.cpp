#include "common/temp_dir.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

namespace kvlane {

expected<temp_dir, std::string> temp_dir::create(std::string_view prefix) {
  std::error_code ec;
  auto base = std::filesystem::temp_directory_path(ec);
  if (ec)
    base = "/tmp";
  std::string tmpl = (base / (std::string{prefix} + "-XXXXXX")).string();
  if (!::mkdtemp(tmpl.data()))
    return unexpected("mkdtemp " + tmpl + ": " + std::strerror(errno));
  return temp_dir{std::move(tmpl)};
}

temp_dir::temp_dir(temp_dir&& o) noexcept : path_(std::exchange(o.path_, {})) {}

temp_dir& temp_dir::operator=(temp_dir&& o) noexcept {
  if (this != &o) {
    remove();
    path_ = std::exchange(o.path_, {});
  }
  return *this;
}

temp_dir::~temp_dir() {
  remove();
}

void temp_dir::remove() noexcept {
  if (path_.empty())
    return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  path_.clear();
}

expected<std::string, std::string> temp_dir::write(std::string_view name,
                                                   std::string_view content) const {
  auto file = path_ + "/" + std::string{name};
  std::ofstream out{file, std::ios::binary | std::ios::trunc};
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.flush();
  if (!out)
    return unexpected("cannot write " + file + ": " + std::strerror(errno));
  return file;
}

} // namespace kvlane
