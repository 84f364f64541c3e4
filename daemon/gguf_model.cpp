#include "daemon/gguf_model.hpp"

#include "common/model_name.hpp"

#include <fmt/format.h>

#include <sys/stat.h>

namespace kvlane::daemon {

std::string gguf_model_name(std::string_view path) {
  auto file = path.substr(path.find_last_of('/') == std::string_view::npos
                            ? 0
                            : path.find_last_of('/') + 1);
  if (file.size() > 5 && (file.ends_with(".gguf") || file.ends_with(".GGUF")))
    file.remove_suffix(5);
  std::string name;
  for (char c : file) {
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    name += ok ? c : '-';
    if (name.size() == max_model_name)
      break;
  }
  return valid_model_name(name) ? name : std::string("model");
}

expected<std::string, std::string> gguf_model_toml(std::string_view path) {
  if (path.empty() || path.front() != '/')
    return unexpected(fmt::format("--gguf: {}: must be an absolute path", path));
  std::string escaped;
  for (char c : path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return unexpected(fmt::format("--gguf: the path holds a control character"));
    if (c == '"' || c == '\\')
      escaped += '\\';
    escaped += c;
  }
  struct stat st {};
  if (::stat(std::string(path).c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return unexpected(fmt::format("--gguf: {}: no such file", path));
  return fmt::format("[[model]]\nname = \"{}\"\nbackend = \"llamacpp\"\n[model.llamacpp]\n"
                     "gguf = \"{}\"\n",
                     gguf_model_name(path), escaped);
}

} // namespace kvlane::daemon
