// The regression driver of a fuzz target: runs its LLVMFuzzerTestOneInput over
// committed inputs, with any compiler (no libFuzzer needed), as a ctest test.
//
//   <driver> PATH...
//
// Each PATH is a file or a directory (its regular files, not recursing). Every
// file runs whole and cut at 16 evenly spaced shorter lengths (truncated input is
// where parsers break); then the inputs that need no corpus run: the empty input
// and each single byte. A crash, a sanitizer report or a target's broken
// invariant (__builtin_trap) fails the test. No file at all is an error too, so
// that a missing corpus cannot pass as a clean run.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;

constexpr std::size_t cuts_per_file = 16;

void run(const std::vector<std::uint8_t>& input, std::size_t size) {
  // A copy of exactly `size` bytes, so that a read past the end is a read past the
  // allocation (ASan sees it), as under libFuzzer.
  std::vector<std::uint8_t> copy(input.begin(), input.begin() + static_cast<std::ptrdiff_t>(size));
  LLVMFuzzerTestOneInput(copy.data(), copy.size());
}

bool read_file(const fs::path& path, std::vector<std::uint8_t>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 64;
  }
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path p{argv[i]};
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::directory_iterator(p, ec))
        if (e.is_regular_file())
          files.push_back(e.path());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    }
    if (ec) {
      std::fprintf(stderr, "%s: %s\n", argv[i], ec.message().c_str());
      return 1;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "no corpus file in the given paths: nothing would be tested\n");
    return 1;
  }
  std::sort(files.begin(), files.end()); // the same order on every run

  std::size_t inputs = 0;
  std::vector<std::uint8_t> data;
  for (const auto& f : files) {
    if (!read_file(f, data)) {
      std::fprintf(stderr, "%s: cannot read\n", f.c_str());
      return 1;
    }
    std::printf("%s (%zu bytes)\n", f.c_str(), data.size());
    std::fflush(stdout); // the last name printed is the input that crashed
    run(data, data.size());
    ++inputs;
    const std::size_t cuts = std::min(cuts_per_file, data.size());
    for (std::size_t k = 0; k < cuts; ++k) {
      run(data, data.size() * k / cuts);
      ++inputs;
    }
  }
  const std::vector<std::uint8_t> none;
  run(none, 0);
  std::vector<std::uint8_t> one(1);
  for (int b = 0; b < 256; ++b) {
    one[0] = static_cast<std::uint8_t>(b);
    run(one, 1);
  }
  inputs += 257;
  std::printf("ok: %zu inputs from %zu corpus files\n", inputs, files.size());
  return 0;
}
