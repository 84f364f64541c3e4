// kvlane-make-gguf: writes a small Llama-architecture GGUF model with seeded
// random weights and a real tokenizer copied from a vocab-only GGUF file, so
// that tests and benchmarks can run a real transformer (in llama.cpp, the
// kvlane daemon or llama-server) without downloading a model.
//
// The weights are chosen so that the model is not degenerate: RMS-norm
// weights are 1, the token embeddings are uniform with standard deviation 1,
// and the attention and FFN matrices are uniform with standard deviation
// 1/sqrt(fan_in), so activations keep unit scale through the layers.
// output.weight (separate from the embeddings) has standard deviation
// 4/sqrt(embd): the logits spread with a standard deviation near 4, so greedy
// decoding yields varied tokens with clear top-1/top-2 gaps and sampling at
// temperature 1 is peaked the way a trained model's is, not flat over the
// whole vocabulary.
//
// Unless --all-tokens is given, the output.weight rows of tokens that cannot
// stand alone as text are zero: special tokens (any token type but normal, and
// every id named by a tokenizer.ggml.*_token_id key, so no end-of-generation
// token) and tokens whose bytes are not complete UTF-8 (byte-level BPE pieces
// of a multi-byte character). Their logit is then exactly 0, far below the
// top logits, so greedy decoding never picks them: generated text is valid
// UTF-8 (servers such as llama-server reject malformed output) and runs to
// the requested length.
//
// The values come from xoshiro256** seeded from --seed and the tensor's name,
// so a seed gives the same file with any compiler and standard library.
// Fixed hyperparameters: RMS-norm epsilon 1e-5 and a RoPE frequency base of
// 500000 (as in Llama 3).
//
// Exit codes: 0 written, 1 a file could not be read or written, 64 usage.

#include "common/expected.hpp"
#include "common/random.hpp"
#include "tools/make_gguf/gguf_writer.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::make_gguf {

namespace {

constexpr int exit_ok = 0;
constexpr int exit_io = 1;
constexpr int exit_usage = 64;

constexpr std::string_view program = "kvlane-make-gguf";

constexpr std::string_view usage_text =
    "usage: kvlane-make-gguf --vocab PATH --out PATH [options]\n"
    "\n"
    "Writes a small Llama-architecture GGUF model with seeded random weights and\n"
    "the tokenizer of a vocab-only GGUF file, for tests and benchmarks.\n"
    "\n"
    "  --vocab PATH            vocab-only GGUF whose tokenizer.* keys are copied\n"
    "                          (required), e.g. llama.cpp's models/ggml-vocab-llama-bpe.gguf\n"
    "  --out PATH              the model to write (required); written to PATH.tmp first\n"
    "                          and renamed to PATH when complete\n"
    "  --size tiny|small|bench shape preset (default tiny):\n"
    "           layers  embd    ff  heads  kv-heads  context\n"
    "    tiny        2    64   128      4         2     2048\n"
    "    small       4   256   704      8         4     4096\n"
    "    bench      12   768  2048     12         4     8192\n"
    "                          with Llama 3's 128256-token vocab: 16.5M, 68.6M and\n"
    "                          272.5M parameters, embeddings included\n"
    "  --layers N, --embd N, --ff N, --heads N, --kv-heads N, --context N\n"
    "                          override one value of the preset; --embd must be a\n"
    "                          multiple of --heads with an even quotient (the head size),\n"
    "                          and --heads a multiple of --kv-heads\n"
    "  --type f32|f16|q8_0     type of the 2-D weight matrices (default f16); the norm\n"
    "                          weights are always f32; q8_0 needs --embd and --ff to be\n"
    "                          multiples of 32 (its block size)\n"
    "  --seed N                weight seed, 0 to 2^64-1 (default 1)\n"
    "  --chat-template FILE    Jinja template stored as tokenizer.chat_template\n"
    "                          (replacing any the vocab has)\n"
    "  --name NAME             general.name (default kvlane-test-llama)\n"
    "  --all-tokens            let every token be generated; by default special tokens\n"
    "                          (end-of-generation included) and tokens that are not\n"
    "                          complete UTF-8 get all-zero output.weight rows, so greedy\n"
    "                          decoding never picks them\n"
    "  -h, --help              this text\n"
    "\n"
    "Fixed: RMS-norm epsilon 1e-5, RoPE frequency base 500000, RoPE dimensions =\n"
    "embd/heads, llama.vocab_size = the vocab's token count.\n"
    "Prints one line: the path, parameter count, file size in MiB and matrix type.\n"
    "Exit codes: 0 written, 1 a file could not be read or written, 64 usage.\n";

constexpr float rms_norm_epsilon = 1e-5f;
constexpr float rope_freq_base = 500000.0f;

// The standard deviation of the logits: output.weight's sigma is this over
// sqrt(embd), the output norm giving its input unit scale.
constexpr double logit_sigma = 4.0;

struct model_shape {
  std::int64_t layers;
  std::int64_t embd;
  std::int64_t ff;
  std::int64_t heads;
  std::int64_t kv_heads;
  std::int64_t context;
};

struct preset {
  std::string_view name;
  model_shape shape;
};

constexpr std::array presets = {
    preset{"tiny", {2, 64, 128, 4, 2, 2048}},
    preset{"small", {4, 256, 704, 8, 4, 4096}},
    preset{"bench", {12, 768, 2048, 12, 4, 8192}},
};

struct shape_flag {
  std::string_view flag;
  std::int64_t model_shape::*member;
  std::int64_t max;
};

constexpr std::array shape_flags = {
    shape_flag{"--layers", &model_shape::layers, 4096},
    shape_flag{"--embd", &model_shape::embd, 65536},
    shape_flag{"--ff", &model_shape::ff, 262144},
    shape_flag{"--heads", &model_shape::heads, 4096},
    shape_flag{"--kv-heads", &model_shape::kv_heads, 4096},
    shape_flag{"--context", &model_shape::context, std::int64_t{1} << 24},
};

struct matrix_type {
  std::string_view name;
  ggml_type type;
  std::uint32_t file_type; // llama.cpp's llama_ftype for a model of this type
};

constexpr std::array matrix_types = {
    matrix_type{"f32", GGML_TYPE_F32, 0},
    matrix_type{"f16", GGML_TYPE_F16, 1},
    matrix_type{"q8_0", GGML_TYPE_Q8_0, 7},
};

struct options {
  std::string vocab;
  std::string out;
  std::string chat_template;
  std::string name = "kvlane-test-llama";
  preset size = presets[0];
  matrix_type type = matrix_types[1];
  std::uint64_t seed = 1;
  std::array<std::optional<std::int64_t>, shape_flags.size()> overrides{};
  bool all_tokens = false;
  bool help = false;
};

std::string quoted(std::string_view s) {
  return "'" + std::string(s) + "'";
}

template <class T>
std::optional<T> parse_decimal(std::string_view text) {
  T value{};
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || ptr != end)
    return std::nullopt;
  return value;
}

expected<std::int64_t, std::string> parse_shape_value(const shape_flag& f, std::string_view text) {
  const auto value = parse_decimal<std::int64_t>(text);
  if (!value || *value < 1 || *value > f.max)
    return unexpected(std::string(f.flag) + " needs a whole number from 1 to "
                      + std::to_string(f.max) + ", not " + quoted(text));
  return *value;
}

// Applies one flag and its value to `o`; `seen` rejects a flag given twice.
expected<void, std::string> apply_flag(options& o, std::string_view flag, std::string_view value,
                                       std::vector<std::string_view>& seen) {
  for (const auto s : seen)
    if (s == flag)
      return unexpected(std::string(flag) + " is given twice");
  seen.push_back(flag);

  if (flag == "--vocab" || flag == "--out" || flag == "--chat-template" || flag == "--name") {
    if (value.empty())
      return unexpected(std::string(flag) + " needs a non-empty value");
    auto& target = flag == "--vocab"           ? o.vocab
                   : flag == "--out"           ? o.out
                   : flag == "--chat-template" ? o.chat_template
                                               : o.name;
    target = std::string(value);
    return {};
  }
  if (flag == "--size") {
    for (const auto& p : presets)
      if (p.name == value) {
        o.size = p;
        return {};
      }
    return unexpected("--size must be tiny, small or bench, not " + quoted(value));
  }
  if (flag == "--type") {
    for (const auto& t : matrix_types)
      if (t.name == value) {
        o.type = t;
        return {};
      }
    return unexpected("--type must be f32, f16 or q8_0, not " + quoted(value));
  }
  if (flag == "--seed") {
    const auto seed = parse_decimal<std::uint64_t>(value);
    if (!seed)
      return unexpected("--seed needs a whole number from 0 to 18446744073709551615, not "
                        + quoted(value));
    o.seed = *seed;
    return {};
  }
  for (std::size_t i = 0; i < shape_flags.size(); ++i)
    if (shape_flags[i].flag == flag) {
      auto parsed = parse_shape_value(shape_flags[i], value);
      if (!parsed)
        return unexpected(std::move(parsed.error()));
      o.overrides[i] = *parsed;
      return {};
    }
  return unexpected("unknown option " + quoted(flag));
}

bool takes_value(std::string_view flag) {
  constexpr std::array<std::string_view, 7> text_flags = {
      "--vocab", "--out", "--size", "--type", "--seed", "--chat-template", "--name"};
  for (const auto f : text_flags)
    if (flag == f)
      return true;
  for (const auto& f : shape_flags)
    if (f.flag == flag)
      return true;
  return false;
}

expected<options, std::string> parse_args(std::span<const std::string_view> args) {
  options o;
  std::vector<std::string_view> seen;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view flag = args[i];
    if (flag == "--help" || flag == "-h") {
      o.help = true;
      return o;
    }
    if (flag == "--all-tokens") {
      if (o.all_tokens)
        return unexpected(std::string("--all-tokens is given twice"));
      o.all_tokens = true;
      continue;
    }
    if (flag.starts_with("-") && !flag.starts_with("--"))
      return unexpected("unknown option " + quoted(flag));
    if (!flag.starts_with("--"))
      return unexpected("unexpected argument " + quoted(flag)
                        + " (every value follows its option)");
    std::optional<std::string_view> value;
    if (const auto eq = flag.find('='); eq != std::string_view::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    if (!takes_value(flag))
      return unexpected(flag == "--help" || flag == "--all-tokens"
                            ? std::string(flag) + " takes no value"
                            : "unknown option " + quoted(flag));
    if (!value) {
      if (i + 1 >= args.size() || args[i + 1].starts_with("--"))
        return unexpected(std::string(flag) + " needs a value");
      value = args[++i];
    }
    auto applied = apply_flag(o, flag, *value, seen);
    if (!applied)
      return unexpected(std::move(applied.error()));
  }
  if (o.vocab.empty())
    return unexpected(std::string("--vocab PATH is required"));
  if (o.out.empty())
    return unexpected(std::string("--out PATH is required"));
  return o;
}

model_shape resolve_shape(const options& o) {
  model_shape shape = o.size.shape;
  for (std::size_t i = 0; i < shape_flags.size(); ++i)
    if (o.overrides[i])
      shape.*shape_flags[i].member = *o.overrides[i];
  return shape;
}

// "--heads 4", followed by where the value came from when it is the preset's.
std::string describe(const options& o, const model_shape& shape, std::size_t flag_index) {
  const auto& f = shape_flags[flag_index];
  std::string text = std::string(f.flag) + " " + std::to_string(shape.*f.member);
  if (!o.overrides[flag_index])
    text += " (from --size " + std::string(o.size.name) + ")";
  return text;
}

constexpr std::size_t shape_flag_index(std::string_view flag) {
  for (std::size_t i = 0; i < shape_flags.size(); ++i)
    if (shape_flags[i].flag == flag)
      return i;
  return shape_flags.size();
}

expected<void, std::string> validate_shape(const options& o, const model_shape& s) {
  constexpr auto embd = shape_flag_index("--embd");
  constexpr auto ff = shape_flag_index("--ff");
  constexpr auto heads = shape_flag_index("--heads");
  constexpr auto kv_heads = shape_flag_index("--kv-heads");
  static_assert(std::max({embd, ff, heads, kv_heads}) < shape_flags.size());
  if (s.embd % s.heads != 0)
    return unexpected(describe(o, s, embd) + " is not a multiple of " + describe(o, s, heads));
  if (s.kv_heads > s.heads)
    return unexpected(describe(o, s, kv_heads) + " exceeds " + describe(o, s, heads));
  if (s.heads % s.kv_heads != 0)
    return unexpected(describe(o, s, heads) + " is not a multiple of " + describe(o, s, kv_heads));
  if ((s.embd / s.heads) % 2 != 0)
    return unexpected("the head size " + describe(o, s, embd) + " / " + describe(o, s, heads)
                      + " = " + std::to_string(s.embd / s.heads)
                      + " is odd; RoPE needs an even head size");
  const auto block = ggml_blck_size(o.type.type);
  for (const auto index : {embd, ff})
    if (s.*shape_flags[index].member % block != 0)
      return unexpected("--type " + std::string(o.type.name) + " needs rows whose length is a "
                        + "multiple of its block size " + std::to_string(block) + ", but "
                        + describe(o, s, index) + " is not");
  return {};
}

std::uint64_t fnv1a64(std::string_view text) noexcept {
  std::uint64_t hash = 0xCBF29CE484222325ull;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001B3ull;
  }
  return hash;
}

// Values uniform in [-amplitude, amplitude), from a xoshiro256** stream that
// depends only on the seed and the tensor's name.
value_source uniform_values(std::uint64_t seed, std::string_view tensor_name, double amplitude) {
  auto state = xoshiro256_seed(mix64(seed) ^ fnv1a64(tensor_name));
  return [state, amplitude](std::span<float> values) mutable {
    for (auto& v : values)
      v = static_cast<float>((2.0 * unit_double(xoshiro256_next(state)) - 1.0) * amplitude);
  };
}

value_source constant_values(float value) {
  return [value](std::span<float> values) {
    for (auto& v : values)
      v = value;
  };
}

// The number of tokens of the vocab file's tokenizer.ggml.tokens array.
expected<std::uint32_t, std::string> vocab_token_count(const gguf_context* vocab,
                                                       const std::string& path) {
  const auto id = gguf_find_key(vocab, "tokenizer.ggml.tokens");
  if (id < 0)
    return unexpected(path + ": has no tokenizer.ggml.tokens (not a vocab GGUF file?)");
  if (gguf_get_kv_type(vocab, id) != GGUF_TYPE_ARRAY
      || gguf_get_arr_type(vocab, id) != GGUF_TYPE_STRING)
    return unexpected(path + ": tokenizer.ggml.tokens is not an array of strings");
  const auto n = gguf_get_arr_n(vocab, id);
  if (n == 0 || n > 0x7FFFFFFF)
    return unexpected(path + ": tokenizer.ggml.tokens has " + std::to_string(n)
                      + " tokens (1 to 2^31-1 are possible)");
  return static_cast<std::uint32_t>(n);
}

expected<std::string, std::string> read_text_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr)
    return unexpected(path + ": " + std::strerror(errno));
  std::string text;
  std::array<char, 65536> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), file)) > 0)
    text.append(buffer.data(), n);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed)
    return unexpected(path + ": " + std::strerror(error));
  if (text.empty())
    return unexpected(path + ": the chat template file is empty");
  if (text.find('\0') != std::string::npos)
    return unexpected(path + ": the chat template file contains a NUL byte");
  return text;
}

void set_hyperparameters(gguf_context* ctx, const options& o, const model_shape& s,
                         std::uint32_t vocab_size) {
  const auto u32 = [](std::int64_t v) { return static_cast<std::uint32_t>(v); };
  gguf_set_val_str(ctx, "general.architecture", "llama");
  gguf_set_val_str(ctx, "general.name", o.name.c_str());
  gguf_set_val_u32(ctx, "general.file_type", o.type.file_type);
  gguf_set_val_u32(ctx, "llama.vocab_size", vocab_size);
  gguf_set_val_u32(ctx, "llama.context_length", u32(s.context));
  gguf_set_val_u32(ctx, "llama.embedding_length", u32(s.embd));
  gguf_set_val_u32(ctx, "llama.block_count", u32(s.layers));
  gguf_set_val_u32(ctx, "llama.feed_forward_length", u32(s.ff));
  gguf_set_val_u32(ctx, "llama.attention.head_count", u32(s.heads));
  gguf_set_val_u32(ctx, "llama.attention.head_count_kv", u32(s.kv_heads));
  gguf_set_val_f32(ctx, "llama.attention.layer_norm_rms_epsilon", rms_norm_epsilon);
  gguf_set_val_f32(ctx, "llama.rope.freq_base", rope_freq_base);
  gguf_set_val_u32(ctx, "llama.rope.dimension_count", u32(s.embd / s.heads));
}

// The code point starting at text[pos], advancing pos past it; nullopt (pos
// unchanged) if the bytes there are not well-formed UTF-8 (overlong forms,
// surrogates and values above U+10FFFF included).
std::optional<char32_t> next_code_point(std::string_view text, std::size_t& pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  struct sequence {
    unsigned char lead_mask; // the lead byte's length-marking bits
    unsigned char lead_bits; // their value for this length
    std::size_t length;
    char32_t min; // the smallest code point needing this length
  };
  static constexpr std::array<sequence, 4> sequences = {{
      {0x80, 0x00, 1, 0x0},
      {0xE0, 0xC0, 2, 0x80},
      {0xF0, 0xE0, 3, 0x800},
      {0xF8, 0xF0, 4, 0x10000},
  }};
  const unsigned char lead = byte(pos);
  const auto* seq = std::find_if(sequences.begin(), sequences.end(), [&](const sequence& q) {
    return (lead & q.lead_mask) == q.lead_bits;
  });
  if (seq == sequences.end())
    return std::nullopt;
  const std::size_t length = seq->length;
  char32_t cp = lead & static_cast<unsigned char>(~seq->lead_mask);
  const char32_t min = seq->min;
  if (pos + length > text.size())
    return std::nullopt;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80)
      return std::nullopt;
    cp = (cp << 6) | (byte(pos + i) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return std::nullopt;
  pos += length;
  return cp;
}

bool is_valid_utf8(std::string_view text) {
  for (std::size_t pos = 0; pos < text.size();)
    if (!next_code_point(text, pos))
      return false;
  return true;
}

// The bytes a byte-level BPE ("gpt2") token stands for. Such vocabularies
// spell each byte as one code point: the printable bytes 33-126, 161-172 and
// 174-255 as themselves, the 68 others, in increasing order, as U+0100 on.
// nullopt if the text uses any other code point.
std::optional<std::string> byte_level_bytes(std::string_view text) {
  static constexpr auto is_printable = [](unsigned b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  };
  static constexpr auto others = [] {
    std::array<unsigned char, 68> bytes{};
    std::size_t n = 0;
    for (unsigned b = 0; b < 256; ++b)
      if (!is_printable(b))
        bytes[n++] = static_cast<unsigned char>(b);
    return bytes;
  }();
  std::string bytes;
  for (std::size_t pos = 0; pos < text.size();) {
    const auto cp = next_code_point(text, pos);
    if (!cp)
      return std::nullopt;
    if (*cp < 256 && is_printable(*cp))
      bytes.push_back(static_cast<char>(*cp));
    else if (*cp >= 256 && *cp < 256 + others.size())
      bytes.push_back(static_cast<char>(others[*cp - 256]));
    else
      return std::nullopt;
  }
  return bytes;
}

// For each token id, whether it may be generated: a normal token (by
// tokenizer.ggml.token_type, when present) that no tokenizer.ggml.*_token_id
// key names and whose text is non-empty, complete UTF-8 (for a byte-level BPE
// vocab, the bytes the token stands for).
std::vector<bool> generatable_tokens(const gguf_context* vocab, std::uint32_t n_tokens) {
  constexpr std::int32_t normal_token_type = 1;
  std::vector<bool> keep(n_tokens, true);

  const auto tokens = gguf_find_key(vocab, "tokenizer.ggml.tokens");
  const auto model = gguf_find_key(vocab, "tokenizer.ggml.model");
  const bool byte_level = model >= 0 && gguf_get_kv_type(vocab, model) == GGUF_TYPE_STRING
                          && std::string_view(gguf_get_val_str(vocab, model)) == "gpt2";
  for (std::uint32_t id = 0; id < n_tokens; ++id) {
    const std::string_view text = gguf_get_arr_str(vocab, tokens, id);
    if (byte_level) {
      const auto bytes = byte_level_bytes(text);
      keep[id] = bytes && !bytes->empty() && is_valid_utf8(*bytes);
    } else {
      keep[id] = !text.empty() && is_valid_utf8(text);
    }
  }

  const auto types = gguf_find_key(vocab, "tokenizer.ggml.token_type");
  if (types >= 0 && gguf_get_kv_type(vocab, types) == GGUF_TYPE_ARRAY
      && gguf_get_arr_type(vocab, types) == GGUF_TYPE_INT32
      && gguf_get_arr_n(vocab, types) == n_tokens) {
    const auto* type = static_cast<const std::int32_t*>(gguf_get_arr_data(vocab, types));
    for (std::uint32_t id = 0; id < n_tokens; ++id)
      if (type[id] != normal_token_type)
        keep[id] = false;
  }

  for (std::int64_t key = 0; key < gguf_get_n_kv(vocab); ++key) {
    const std::string_view name = gguf_get_key(vocab, key);
    if (!name.starts_with("tokenizer.ggml.") || !name.ends_with("_token_id"))
      continue;
    std::int64_t id = -1;
    if (gguf_get_kv_type(vocab, key) == GGUF_TYPE_UINT32)
      id = gguf_get_val_u32(vocab, key);
    else if (gguf_get_kv_type(vocab, key) == GGUF_TYPE_INT32)
      id = gguf_get_val_i32(vocab, key);
    if (id >= 0 && id < n_tokens)
      keep[static_cast<std::size_t>(id)] = false;
  }
  return keep;
}

// Uniform values whose rows (of row_length values) are zero where `keep` is
// false. Masked rows still consume their random values, so the other rows do
// not depend on the mask.
value_source masked_uniform_values(std::uint64_t seed, std::string_view tensor_name,
                                   double amplitude, std::int64_t row_length,
                                   std::vector<bool> keep) {
  return [uniform = uniform_values(seed, tensor_name, amplitude), row_length,
          keep = std::move(keep), row = std::size_t{0}](std::span<float> values) mutable {
    uniform(values);
    for (auto first = values.begin(); first != values.end(); first += row_length, ++row)
      if (row < keep.size() && !keep[row])
        std::fill(first, first + row_length, 0.0f);
  };
}

// One tensor of the model: ne = {row_length, rows}, or {row_length} for a norm.
struct tensor_plan {
  std::string name;
  std::int64_t row_length;
  std::int64_t rows;
  double sigma; // standard deviation of the uniform values; 0 for a norm (all ones)
  bool per_token = false; // one row per token id, subject to the generatable-token mask
};

std::vector<tensor_plan> plan_tensors(const model_shape& s, std::int64_t vocab_size) {
  const auto kv_dim = s.embd / s.heads * s.kv_heads;
  const auto fan_in = [](std::int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); };
  std::vector<tensor_plan> plan;
  plan.push_back({"token_embd.weight", s.embd, vocab_size, 1.0});
  for (std::int64_t layer = 0; layer < s.layers; ++layer) {
    const auto blk = "blk." + std::to_string(layer) + ".";
    plan.push_back({blk + "attn_norm.weight", s.embd, 1, 0.0});
    plan.push_back({blk + "attn_q.weight", s.embd, s.embd, fan_in(s.embd)});
    plan.push_back({blk + "attn_k.weight", s.embd, kv_dim, fan_in(s.embd)});
    plan.push_back({blk + "attn_v.weight", s.embd, kv_dim, fan_in(s.embd)});
    plan.push_back({blk + "attn_output.weight", s.embd, s.embd, fan_in(s.embd)});
    plan.push_back({blk + "ffn_norm.weight", s.embd, 1, 0.0});
    plan.push_back({blk + "ffn_gate.weight", s.embd, s.ff, fan_in(s.embd)});
    plan.push_back({blk + "ffn_up.weight", s.embd, s.ff, fan_in(s.embd)});
    plan.push_back({blk + "ffn_down.weight", s.ff, s.embd, fan_in(s.ff)});
  }
  plan.push_back({"output_norm.weight", s.embd, 1, 0.0});
  plan.push_back({"output.weight", s.embd, vocab_size, logit_sigma * fan_in(s.embd), true});
  return plan;
}

// Declares the planned tensors; `generatable` masks the rows of per-token
// tensors, or is empty for none.
expected<void, std::string> add_tensors(gguf_writer& writer, const options& o,
                                        std::span<const tensor_plan> plan,
                                        const std::vector<bool>& generatable) {
  for (const auto& t : plan) {
    auto added = [&] {
      if (t.sigma == 0.0) {
        const std::array<std::int64_t, 1> ne{t.row_length};
        return writer.add_tensor(t.name, GGML_TYPE_F32, ne, constant_values(1.0f));
      }
      const std::array<std::int64_t, 2> ne{t.row_length, t.rows};
      const double amplitude = std::sqrt(3.0) * t.sigma;
      if (t.per_token && !generatable.empty())
        return writer.add_tensor(
            t.name, o.type.type, ne,
            masked_uniform_values(o.seed, t.name, amplitude, t.row_length, generatable));
      return writer.add_tensor(t.name, o.type.type, ne, uniform_values(o.seed, t.name, amplitude));
    }();
    if (!added)
      return added;
  }
  return {};
}

std::string format_summary(const std::string& path, std::uint64_t parameters, std::uint64_t bytes,
                           std::string_view type) {
  std::array<char, 128> numbers{};
  std::snprintf(numbers.data(), numbers.size(), "%llu parameters (%.1fM), %.2f MiB",
                static_cast<unsigned long long>(parameters), static_cast<double>(parameters) / 1e6,
                static_cast<double>(bytes) / (1024.0 * 1024.0));
  return path + ": " + numbers.data() + ", " + std::string(type);
}

int fail(std::ostream& err, int code, const std::string& message) {
  err << program << ": " << message << "\n";
  if (code == exit_usage)
    err << "try '" << program << " --help'\n";
  return code;
}

int make_gguf_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  const auto parsed = parse_args(args);
  if (!parsed)
    return fail(err, exit_usage, parsed.error());
  const options& o = *parsed;
  if (o.help) {
    out << usage_text;
    return exit_ok;
  }
  const model_shape shape = resolve_shape(o);
  if (auto valid = validate_shape(o, shape); !valid)
    return fail(err, exit_usage, valid.error());

  std::optional<std::string> chat_template;
  if (!o.chat_template.empty()) {
    auto text = read_text_file(o.chat_template);
    if (!text)
      return fail(err, exit_io, text.error());
    chat_template = std::move(*text);
  }

  const auto vocab = read_gguf_metadata(o.vocab);
  if (!vocab)
    return fail(err, exit_io, vocab.error());
  const auto vocab_size = vocab_token_count(vocab->get(), o.vocab);
  if (!vocab_size)
    return fail(err, exit_io, vocab_size.error());

  gguf_writer writer;
  set_hyperparameters(writer.metadata(), o, shape, *vocab_size);
  if (auto copied = writer.copy_keys(vocab->get(), "tokenizer."); !copied)
    return fail(err, exit_io, o.vocab + ": " + copied.error());
  if (chat_template)
    gguf_set_val_str(writer.metadata(), "tokenizer.chat_template", chat_template->c_str());
  const auto generatable =
      o.all_tokens ? std::vector<bool>{} : generatable_tokens(vocab->get(), *vocab_size);
  if (auto added = add_tensors(writer, o, plan_tensors(shape, *vocab_size), generatable); !added)
    return fail(err, exit_usage, added.error());

  const auto bytes = writer.write(o.out);
  if (!bytes)
    return fail(err, exit_io, bytes.error());
  out << format_summary(o.out, writer.value_count(), *bytes, o.type.name) << "\n";
  return exit_ok;
}

} // namespace

} // namespace kvlane::tools::make_gguf

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  return kvlane::tools::make_gguf::make_gguf_main(args, std::cout, std::cerr);
}
