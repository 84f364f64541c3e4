#include "backends/split_regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace kvlane::backends {

struct split_regex::code {
  pcre2_code* re = nullptr;
  bool jit = false;
  ~code() { pcre2_code_free(re); }
};

namespace {

// One JIT stack per thread, grown on demand up to 8 MiB: a long run of
// whitespace against `\s+(?!\S)` needs more than the 32 KiB default.
pcre2_jit_stack* thread_jit_stack() {
  struct holder {
    pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    ~holder() { pcre2_jit_stack_free(stack); }
  };
  thread_local holder h;
  return h.stack;
}

struct match_data_deleter {
  void operator()(pcre2_match_data* m) const noexcept { pcre2_match_data_free(m); }
};
struct match_context_deleter {
  void operator()(pcre2_match_context* m) const noexcept { pcre2_match_context_free(m); }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof buffer);
  return n < 0 ? "PCRE2 error " + std::to_string(code)
               : std::string(reinterpret_cast<const char*>(buffer), static_cast<std::size_t>(n));
}

} // namespace

split_regex::split_regex(std::unique_ptr<code> c) : code_(std::move(c)) {}
split_regex::split_regex(split_regex&&) noexcept = default;
split_regex& split_regex::operator=(split_regex&&) noexcept = default;
split_regex::~split_regex() = default;

expected<split_regex, std::string> split_regex::create(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto c = std::make_unique<code>();
  c->re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (!c->re)
    return unexpected("invalid regex at offset " + std::to_string(offset) + ": "
                      + pcre2_message(error));
  c->jit = pcre2_jit_compile(c->re, PCRE2_JIT_COMPLETE) == 0;
  return split_regex(std::move(c));
}

void split_regex::split(std::string_view text,
                        const std::function<void(std::string_view)>& piece) const {
  if (text.empty())
    return;
  std::unique_ptr<pcre2_match_data, match_data_deleter> md(
      pcre2_match_data_create_from_pattern(code_->re, nullptr));
  std::unique_ptr<pcre2_match_context, match_context_deleter> mc(pcre2_match_context_create(nullptr));
  if (!md || !mc) {
    piece(text);
    return;
  }
  if (code_->jit)
    pcre2_jit_stack_assign(mc.get(), nullptr, thread_jit_stack());

  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t done = 0;  // text before this is already emitted
  std::size_t start = 0; // where the next search starts
  while (start < text.size()) {
    const int rc = pcre2_match(code_->re, subject, text.size(), start, 0, md.get(), mc.get());
    if (rc == PCRE2_ERROR_NOMATCH)
      break;
    if (rc < 0) {
      break; // a resource limit: the rest becomes one piece below
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const std::size_t b = ov[0];
    const std::size_t e = ov[1];
    if (e == b) {
      // An empty match adds no piece; step over one character (or invalid byte).
      start = b + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
        ++start;
      continue;
    }
    if (b > done)
      piece(text.substr(done, b - done));
    piece(text.substr(b, e - b));
    done = e;
    start = e;
  }
  if (done < text.size())
    piece(text.substr(done));
}

} // namespace kvlane::backends
