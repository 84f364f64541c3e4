#include "backends/split_regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace kvlane::backends {

struct split_regex::code {
  pcre2_code* re = nullptr;
  ~code() { pcre2_code_free(re); }
};

namespace {

// Per thread, reused by every split() on it: match data for the whole-match
// bounds only (one ovector pair serves any pattern) and a match context whose
// JIT stack grows on demand up to 8 MiB (a long run of whitespace against
// `\s+(?!\S)` needs more than the 32 KiB default).
struct thread_matcher {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);

  thread_matcher() {
    if (context && stack)
      pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~thread_matcher() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  thread_matcher(const thread_matcher&) = delete;
  thread_matcher& operator=(const thread_matcher&) = delete;
  bool ok() const noexcept { return data && context && stack; }
};

thread_matcher& this_thread_matcher() {
  thread_local thread_matcher m;
  return m;
}

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
  // Without JIT support PCRE2 interprets the pattern: slower, same result.
  (void)pcre2_jit_compile(c->re, PCRE2_JIT_COMPLETE);
  return split_regex(std::move(c));
}

void split_regex::split(std::string_view text,
                        const std::function<void(std::string_view)>& piece) const {
  if (text.empty())
    return;
  auto& m = this_thread_matcher();
  if (!m.ok()) {
    piece(text);
    return;
  }
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t done = 0;  // text before this is already emitted
  std::size_t start = 0; // where the next search starts
  while (start < text.size()) {
    const int rc = pcre2_match(code_->re, subject, text.size(), start, 0, m.data, m.context);
    if (rc == PCRE2_ERROR_NOMATCH)
      break;
    if (rc < 0) {
      break; // a resource limit: the rest becomes one piece below
    }
    // Copied out before any callback: a nested split() on this thread reuses m.data.
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.data);
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
