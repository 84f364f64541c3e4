#include "backends/hf_tokenizer.hpp"

#if KVLANE_HAVE_LLAMACPP
#include "backends/jinja/jinja_template.hpp"
#endif

#include "backends/byte_level.hpp"
#include "backends/unicode_nfc.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <system_error>

namespace kvlane::backends {

using json = nlohmann::json;

struct hf_tokenizer_parts {
  bpe_model model;
  std::vector<split_regex> splits;
  bool nfc = false;
  added_tokens added;
  std::unordered_map<std::string, token_id, bpe_model::string_hash, std::equal_to<>> added_by_text;
  std::vector<std::string> bytes_of;
  std::vector<std::uint8_t> special;
  std::optional<token_id> bos;
  std::vector<token_id> stop;
  std::uint32_t size = 0;
};

namespace {

backend_error load_error(std::string message) {
  return backend_error{backend_errc::invalid_argument, std::move(message)};
}

using status = expected<void, std::string>;

std::string type_of(const json& j) {
  if (!j.is_object())
    return "";
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// A boolean option; absent or null gives `fallback`.
expected<bool, std::string> flag(const json& j, const char* key, bool fallback,
                                 const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return fallback;
  if (!it->is_boolean())
    return unexpected(where + "." + key + " must be a boolean");
  return it->get<bool>();
}

// An option that must be absent, null or one of the given harmless values.
status must_be_unset(const json& j, const char* key, const std::string& where,
                     const std::vector<json>& harmless = {}) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return {};
  for (const auto& h : harmless)
    if (*it == h)
      return {};
  return unexpected(where + "." + key + " = " + it->dump() + " is not supported");
}

std::string escape_literal(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u))
      out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

status parse_normalizer(const json& n, bool& nfc) {
  if (n.is_null())
    return {};
  const auto type = type_of(n);
  if (type == "NFC") {
    nfc = true;
    return {};
  }
  if (type == "Sequence") {
    const auto it = n.find("normalizers");
    if (it == n.end() || !it->is_array())
      return unexpected(std::string("normalizer Sequence has no normalizers array"));
    for (const auto& x : *it)
      if (auto ok = parse_normalizer(x, nfc); !ok)
        return ok;
    return {};
  }
  return unexpected("normalizer type '" + (type.empty() ? n.dump() : type)
                    + "' is not supported (supported: NFC, Sequence)");
}

status parse_pre_tokenizer(const json& p, std::vector<split_regex>& splits, bool& byte_level) {
  const auto type = type_of(p);
  if (type == "Sequence") {
    const auto it = p.find("pretokenizers");
    if (it == p.end() || !it->is_array())
      return unexpected(std::string("pre_tokenizer Sequence has no pretokenizers array"));
    for (const auto& x : *it)
      if (auto ok = parse_pre_tokenizer(x, splits, byte_level); !ok)
        return ok;
    return {};
  }
  if (byte_level)
    return unexpected("pre_tokenizer " + type + " after ByteLevel is not supported");
  if (type == "Split") {
    const std::string where = "pre_tokenizer Split";
    const auto behavior = p.find("behavior");
    if (behavior == p.end() || !behavior->is_string() || *behavior != "Isolated")
      return unexpected(where + " behavior "
                        + (behavior == p.end() ? std::string("(missing)") : behavior->dump())
                        + " is not supported (supported: \"Isolated\")");
    auto invert = flag(p, "invert", false, where);
    if (!invert)
      return unexpected(invert.error());
    if (*invert)
      return unexpected(where + ".invert = true is not supported");
    const auto pattern = p.find("pattern");
    if (pattern == p.end() || !pattern->is_object())
      return unexpected(where + " has no pattern object");
    std::string regex;
    if (const auto r = pattern->find("Regex"); r != pattern->end() && r->is_string())
      regex = r->get<std::string>();
    else if (const auto s = pattern->find("String"); s != pattern->end() && s->is_string())
      regex = escape_literal(s->get<std::string>());
    else
      return unexpected(where + ".pattern must hold a Regex or String");
    auto compiled = split_regex::create(regex);
    if (!compiled)
      return unexpected(where + ".pattern: " + compiled.error());
    splits.push_back(std::move(*compiled));
    return {};
  }
  if (type == "ByteLevel") {
    const std::string where = "pre_tokenizer ByteLevel";
    auto prefix = flag(p, "add_prefix_space", false, where);
    if (!prefix)
      return unexpected(prefix.error());
    if (*prefix)
      return unexpected(where + ".add_prefix_space = true is not supported");
    auto use_regex = flag(p, "use_regex", true, where);
    if (!use_regex)
      return unexpected(use_regex.error());
    if (*use_regex) {
      auto compiled = split_regex::create(split_regex::gpt2_pattern);
      if (!compiled)
        return unexpected(where + ": " + compiled.error());
      splits.push_back(std::move(*compiled));
    }
    byte_level = true;
    return {};
  }
  return unexpected("pre_tokenizer type '" + (type.empty() ? p.dump() : type)
                    + "' is not supported (supported: Split, ByteLevel, Sequence)");
}

status parse_decoder(const json& d) {
  const auto type = type_of(d);
  if (type == "ByteLevel")
    return {};
  if (type == "Sequence") {
    const auto it = d.find("decoders");
    if (it == d.end() || !it->is_array() || it->empty())
      return unexpected(std::string("decoder Sequence has no decoders"));
    for (const auto& x : *it)
      if (auto ok = parse_decoder(x); !ok)
        return ok;
    return {};
  }
  return unexpected("decoder type '" + (type.empty() ? d.dump() : type)
                    + "' is not supported (supported: ByteLevel)");
}

// Finds the BOS a TemplateProcessing "single" template puts before $A.
status parse_post_processor(const json& p, const hf_tokenizer_parts& ps, std::optional<token_id>& bos) {
  if (p.is_null())
    return {};
  const auto type = type_of(p);
  if (type == "ByteLevel")
    return {}; // only adjusts offsets
  if (type == "Sequence") {
    const auto it = p.find("processors");
    if (it == p.end() || !it->is_array())
      return unexpected(std::string("post_processor Sequence has no processors array"));
    for (const auto& x : *it)
      if (auto ok = parse_post_processor(x, ps, bos); !ok)
        return ok;
    return {};
  }
  if (type != "TemplateProcessing")
    return unexpected("post_processor type '" + (type.empty() ? p.dump() : type)
                      + "' is not supported (supported: TemplateProcessing, ByteLevel, Sequence)");
  const std::string where = "post_processor TemplateProcessing";
  const auto single = p.find("single");
  if (single == p.end() || !single->is_array())
    return unexpected(where + " has no single template");
  std::vector<std::string> before;
  bool sequence_seen = false;
  for (const auto& piece : *single) {
    if (piece.contains("Sequence")) {
      if (sequence_seen)
        return unexpected(where + ".single holds more than one sequence");
      sequence_seen = true;
      continue;
    }
    const auto special = piece.find("SpecialToken");
    if (special == piece.end() || !special->is_object() || !special->contains("id")
        || !(*special)["id"].is_string())
      return unexpected(where + ".single entry " + piece.dump() + " is not supported");
    if (sequence_seen)
      return unexpected(where + ".single appends " + (*special)["id"].dump()
                        + " after the sequence: not supported");
    before.push_back((*special)["id"].get<std::string>());
  }
  if (!sequence_seen)
    return unexpected(where + ".single has no sequence");
  if (before.empty())
    return {};
  if (before.size() > 1)
    return unexpected(where + ".single puts " + std::to_string(before.size())
                      + " tokens before the sequence: only one (a BOS) is supported");
  // The id comes from special_tokens when given there, else from the vocabulary.
  std::optional<token_id> id;
  if (const auto st = p.find("special_tokens"); st != p.end() && st->is_object()) {
    if (const auto e = st->find(before[0]); e != st->end()) {
      const auto ids = e->find("ids");
      if (ids == e->end() || !ids->is_array() || ids->size() != 1 || !(*ids)[0].is_number_unsigned())
        return unexpected(where + ".special_tokens[" + json(before[0]).dump()
                          + "].ids must hold exactly one id");
      id = (*ids)[0].get<token_id>();
    }
  }
  if (!id) {
    if (const auto a = ps.added_by_text.find(before[0]); a != ps.added_by_text.end())
      id = a->second;
    else if (const auto* v = ps.model.find(before[0]))
      id = *v;
  }
  if (!id || *id >= ps.size)
    return unexpected(where + " names the unknown token " + json(before[0]).dump());
  bos = id;
  return {};
}

expected<std::vector<std::pair<std::string, std::string>>, std::string> parse_merges(const json& m) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(m.size());
  for (std::size_t i = 0; i < m.size(); ++i) {
    const auto& e = m[i];
    std::string left;
    std::string right;
    if (e.is_string()) {
      const auto& s = e.get_ref<const std::string&>();
      const auto space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        return unexpected("model.merges[" + std::to_string(i) + "] = " + e.dump()
                          + " is not two tokens separated by one space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      left = e[0].get<std::string>();
      right = e[1].get<std::string>();
    } else {
      return unexpected("model.merges[" + std::to_string(i) + "] = " + e.dump()
                        + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto l = byte_level_decode(left);
    auto r = byte_level_decode(right);
    if (!l || !r || l->empty() || r->empty())
      return unexpected("model.merges[" + std::to_string(i) + "] = " + e.dump()
                        + " is not made of byte-level tokens");
    out.emplace_back(std::move(*l), std::move(*r));
  }
  return out;
}

std::string read_file(const std::filesystem::path& p, std::error_code& ec) {
  const auto size = std::filesystem::file_size(p, ec);
  if (ec)
    return {};
  if (size > hf_tokenizer::max_file_bytes) {
    ec = std::make_error_code(std::errc::file_too_large);
    return {};
  }
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    ec = std::make_error_code(std::errc::permission_denied);
    return {};
  }
  std::string s(static_cast<std::size_t>(size), '\0');
  in.read(s.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uintmax_t>(in.gcount()) != size)
    ec = std::make_error_code(std::errc::io_error);
  return s;
}

expected<json, std::string> parse_json(std::string_view text, const char* name) {
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded())
    return unexpected(std::string(name) + " is not valid JSON");
  if (!j.is_object())
    return unexpected(std::string(name) + " is not a JSON object");
  return j;
}

// The text of a bos_token / eos_token entry: a string or an AddedToken object; empty if unset.
std::string config_token_text(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end())
    return {};
  if (it->is_string())
    return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return {};
}

// tokenizer_config.json's chat_template: a string, or a list of {name, template} of which
// the "default" one is the chat template.
expected<std::string, std::string> config_chat_template(const json& config) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null())
    return std::string();
  if (it->is_string())
    return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& t : *it)
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template")
          && t["template"].is_string())
        return t["template"].get<std::string>();
    return std::string();
  }
  return unexpected(std::string("tokenizer_config.json: chat_template is neither a string nor a "
                                "list of named templates"));
}

// The id of an eos_token entry of tokenizer_config.json: a string or an AddedToken object.
expected<std::optional<token_id>, std::string> config_token(const json& config, const char* key,
                                                            const hf_tokenizer& tok) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null())
    return std::optional<token_id>{};
  std::string text;
  if (it->is_string())
    text = it->get<std::string>();
  else if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    text = (*it)["content"].get<std::string>();
  else
    return unexpected(std::string("tokenizer_config.json: ") + key + " = " + it->dump()
                      + " is neither a string nor a token object");
  const auto id = tok.special_token(text);
  if (!id)
    return unexpected(std::string("tokenizer_config.json: ") + key + " " + json(text).dump()
                      + " is not an added token of tokenizer.json");
  return std::optional<token_id>{*id};
}

expected<hf_tokenizer_parts, std::string> build(const json& root) {
  for (const char* key : {"truncation", "padding"})
    if (auto ok = must_be_unset(root, key, "tokenizer.json"); !ok)
      return unexpected(ok.error());

  // Model.
  const auto mi = root.find("model");
  if (mi == root.end() || !mi->is_object())
    return unexpected(std::string("tokenizer.json has no model object"));
  const json& model = *mi;
  if (type_of(model) != "BPE")
    return unexpected("model type '" + (type_of(model).empty() ? std::string("(missing)") : type_of(model))
                      + "' is not supported (supported: BPE)");
  const std::vector<std::pair<const char*, std::vector<json>>> unsupported_options{
      {"dropout", {}},
      {"unk_token", {}},
      {"continuing_subword_prefix", {json("")}},
      {"end_of_word_suffix", {json("")}},
      {"byte_fallback", {json(false)}}};
  for (const auto& [key, harmless] : unsupported_options)
    if (auto ok = must_be_unset(model, key, "model", harmless); !ok)
      return unexpected(ok.error());
  auto ignore_merges = flag(model, "ignore_merges", false, "model");
  if (!ignore_merges)
    return unexpected(ignore_merges.error());
  const auto vi = model.find("vocab");
  if (vi == model.end() || !vi->is_object())
    return unexpected(std::string("model.vocab must be an object"));
  const auto mgi = model.find("merges");
  if (mgi == model.end() || !mgi->is_array())
    return unexpected(std::string("model.merges must be an array"));

  std::uint32_t size = 0;
  std::vector<std::pair<token_id, std::string>> by_id;
  by_id.reserve(vi->size());
  bpe_model::vocab_map vocab;
  vocab.reserve(vi->size());
  for (const auto& [key, value] : vi->items()) {
    if (!value.is_number_unsigned() || value.get<std::uint64_t>() >= hf_tokenizer::max_token_id)
      return unexpected("model.vocab[" + json(key).dump() + "] = " + value.dump()
                        + " is not an id below " + std::to_string(hf_tokenizer::max_token_id));
    const auto id = value.get<token_id>();
    auto bytes = byte_level_decode(key);
    std::string raw = bytes ? std::move(*bytes) : key; // not byte-level: the text itself
    vocab.try_emplace(raw, id);
    by_id.emplace_back(id, std::move(raw));
    size = std::max(size, id + 1);
  }
  auto merges = parse_merges(*mgi);
  if (!merges)
    return unexpected(merges.error());
  auto bpe = bpe_model::create(std::move(vocab), *merges, *ignore_merges);
  if (!bpe)
    return unexpected("model.merges: " + bpe.error());

  // Added tokens.
  std::vector<std::tuple<token_id, std::string, bool>> added_list;
  if (const auto ai = root.find("added_tokens"); ai != root.end() && !ai->is_null()) {
    if (!ai->is_array())
      return unexpected(std::string("added_tokens must be an array"));
    for (std::size_t i = 0; i < ai->size(); ++i) {
      const auto& a = (*ai)[i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned()
          || !a.contains("content") || !a["content"].is_string())
        return unexpected(where + " needs a numeric id and a string content");
      if (a["id"].get<std::uint64_t>() >= hf_tokenizer::max_token_id)
        return unexpected(where + ".id " + a["id"].dump() + " is not below "
                          + std::to_string(hf_tokenizer::max_token_id));
      for (const char* key : {"single_word", "lstrip", "rstrip"}) {
        auto v = flag(a, key, false, where);
        if (!v)
          return unexpected(v.error());
        if (*v)
          return unexpected(where + " (" + a["content"].dump() + ")." + key
                            + " = true is not supported");
      }
      auto special = flag(a, "special", false, where);
      if (!special)
        return unexpected(special.error());
      auto content = a["content"].get<std::string>();
      if (content.empty())
        return unexpected(where + " has an empty content");
      added_list.emplace_back(a["id"].get<token_id>(), std::move(content), *special);
    }
  }
  for (const auto& [id, content, special] : added_list)
    size = std::max(size, id + 1);

  hf_tokenizer_parts ps{std::move(*bpe), {}, false, {}, {}, {}, {}, {}, {}, size};
  ps.bytes_of.resize(size);
  ps.special.resize(size, 0);
  for (auto& [id, raw] : by_id)
    ps.bytes_of[id] = std::move(raw);
  for (const auto& [id, content, special] : added_list) {
    ps.added.add(content, id);
    ps.added_by_text[content] = id;
    ps.special[id] = special ? 1 : 0;
    ps.bytes_of[id] = special ? std::string() : content;
  }

  // Pipeline.
  if (const auto n = root.find("normalizer"); n != root.end())
    if (auto ok = parse_normalizer(*n, ps.nfc); !ok)
      return unexpected(ok.error());
  bool byte_level = false;
  const auto pre = root.find("pre_tokenizer");
  if (pre == root.end() || pre->is_null())
    return unexpected(std::string("pre_tokenizer is missing: a byte-level BPE needs ByteLevel"));
  if (auto ok = parse_pre_tokenizer(*pre, ps.splits, byte_level); !ok)
    return unexpected(ok.error());
  if (!byte_level)
    return unexpected(std::string("pre_tokenizer has no ByteLevel step: only byte-level BPE is supported"));
  const auto dec = root.find("decoder");
  if (dec == root.end() || dec->is_null())
    return unexpected(std::string("decoder is missing: a byte-level BPE needs ByteLevel"));
  if (auto ok = parse_decoder(*dec); !ok)
    return unexpected(ok.error());
  if (const auto post = root.find("post_processor"); post != root.end())
    if (auto ok = parse_post_processor(*post, ps, ps.bos); !ok)
      return unexpected(ok.error());
  return ps;
}

} // namespace

hf_tokenizer::hf_tokenizer(hf_tokenizer_parts p)
  : model_(std::move(p.model)), splits_(std::move(p.splits)), nfc_(p.nfc),
    added_(std::move(p.added)), added_by_text_(std::move(p.added_by_text)),
    bytes_of_(std::move(p.bytes_of)), special_(std::move(p.special)), bos_(p.bos),
    stop_(std::move(p.stop)), size_(p.size) {}

expected<std::unique_ptr<hf_tokenizer>, backend_error>
hf_tokenizer::parse(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                    std::string_view generation_config_json) {
  try {
    auto root = parse_json(tokenizer_json, "tokenizer.json");
    if (!root)
      return unexpected(load_error(root.error()));
    auto ps = build(*root);
    if (!ps)
      return unexpected(load_error("tokenizer.json: " + ps.error()));
    std::unique_ptr<hf_tokenizer> tok(new hf_tokenizer(std::move(*ps)));

    auto add_stop = [&](token_id id) {
      if (std::find(tok->stop_.begin(), tok->stop_.end(), id) == tok->stop_.end())
        tok->stop_.push_back(id);
    };
    if (!generation_config_json.empty()) {
      auto gen = parse_json(generation_config_json, "generation_config.json");
      if (!gen)
        return unexpected(load_error(gen.error()));
      if (const auto e = gen->find("eos_token_id"); e != gen->end() && !e->is_null()) {
        const json ids = e->is_array() ? *e : json::array({*e});
        for (const auto& id : ids) {
          if (!id.is_number_unsigned() || id.get<std::uint64_t>() >= tok->size_)
            return unexpected(load_error("generation_config.json: eos_token_id " + id.dump()
                                         + " is not a token id below "
                                         + std::to_string(tok->size_)));
          add_stop(id.get<token_id>());
        }
      }
    }
    if (!tokenizer_config_json.empty()) {
      auto config = parse_json(tokenizer_config_json, "tokenizer_config.json");
      if (!config)
        return unexpected(load_error(config.error()));
      auto eos = config_token(*config, "eos_token", *tok);
      if (!eos)
        return unexpected(load_error(eos.error()));
      if (*eos)
        add_stop(**eos);
      auto tmpl = config_chat_template(*config);
      if (!tmpl)
        return unexpected(load_error(tmpl.error()));
      tok->chat_template_ = std::move(*tmpl);
      tok->bos_text_ = config_token_text(*config, "bos_token");
      tok->eos_text_ = config_token_text(*config, "eos_token");
    }
    // A rendered template's own text is split at every added token, special or not, as Hugging
    // Face tokenizes it (Qwen's <tool_call> is added but not special).
    for (const auto& [text, id] : tok->added_by_text_)
      tok->special_texts_.emplace_back(text, id);
    std::sort(tok->special_texts_.begin(), tok->special_texts_.end(),
              [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
#if KVLANE_HAVE_LLAMACPP
    if (!tok->chat_template_.empty()) {
      auto parsed = jinja_template::parse(tok->chat_template_, tok->bos_text_, tok->eos_text_);
      if (parsed)
        tok->jinja_ = std::shared_ptr<const jinja_template>(std::move(*parsed));
      else
        tok->jinja_error_ = parsed.error().message;
    }
#endif
    return tok;
  } catch (const json::exception& e) {
    return unexpected(load_error(std::string("tokenizer files: ") + e.what()));
  } catch (const std::bad_alloc&) {
    return unexpected(backend_error{backend_errc::out_of_memory, "tokenizer files: out of memory"});
  }
}

expected<std::vector<token_id>, backend_error>
hf_tokenizer::apply_chat_template(std::span<const chat_message> messages,
                                  std::span<const chat_tool> tools, bool add_generation_prompt) const {
  if (chat_template_.empty())
    return unexpected(load_error("tokenizer_config.json carries no chat_template"));
#if KVLANE_HAVE_LLAMACPP
  if (!jinja_)
    return unexpected(load_error(jinja_error_));
  auto parts = jinja_->render(messages, tools, add_generation_prompt, special_texts_);
  if (!parts)
    return unexpected(std::move(parts).error());
  return jinja_template::tokens_of(*parts, *this, special_texts_);
#else
  (void)messages;
  (void)tools;
  (void)add_generation_prompt;
  return unexpected(load_error("this build has no Jinja engine (it comes with llama.cpp: "
                               "scripts/llama-cpp, -DKVLANE_LLAMACPP=on)"));
#endif
}

expected<std::unique_ptr<hf_tokenizer>, backend_error>
hf_tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  const bool is_dir = std::filesystem::is_directory(path, ec);
  const auto dir = is_dir ? path : path.parent_path();
  const auto main_file = is_dir ? path / "tokenizer.json" : path;
  auto main_text = read_file(main_file, ec);
  if (ec)
    return unexpected(load_error("cannot read " + main_file.string() + ": " + ec.message()));
  auto optional_file = [&](const char* name) -> expected<std::string, backend_error> {
    const auto p = dir / name;
    std::error_code e;
    if (!std::filesystem::exists(p, e))
      return std::string();
    auto text = read_file(p, e);
    if (e)
      return unexpected(load_error("cannot read " + p.string() + ": " + e.message()));
    return text;
  };
  auto config = optional_file("tokenizer_config.json");
  if (!config)
    return unexpected(std::move(config.error()));
  auto generation = optional_file("generation_config.json");
  if (!generation)
    return unexpected(std::move(generation.error()));
  auto tok = parse(main_text, *config, *generation);
  if (!tok)
    return unexpected(backend_error{tok.error().code, main_file.string() + ": " + tok.error().message});
  return tok;
}

std::optional<token_id> hf_tokenizer::special_token(std::string_view text) const noexcept {
  const auto it = added_by_text_.find(text);
  if (it == added_by_text_.end())
    return std::nullopt;
  return it->second;
}

void hf_tokenizer::split_from(std::size_t level, std::string_view text,
                              std::vector<token_id>& out) const {
  if (level == splits_.size()) {
    model_.encode_word(text, out);
    return;
  }
  splits_[level].split(text, [&](std::string_view piece) { split_from(level + 1, piece, out); });
}

void hf_tokenizer::encode_text(std::string_view text, std::vector<token_id>& out) const {
  if (text.empty())
    return;
  if (nfc_) {
    const std::string normalized = to_nfc(text);
    split_from(0, normalized, out);
  } else {
    split_from(0, text, out);
  }
}

std::vector<token_id> hf_tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<token_id> out;
  out.reserve(text.size() / 3 + 1);
  if (!parse_special) {
    encode_text(text, out);
    return out;
  }
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto m = added_.find(text, pos);
    if (!m) {
      encode_text(text.substr(pos), out);
      break;
    }
    encode_text(text.substr(pos, m->begin - pos), out);
    out.push_back(m->id);
    pos = m->begin + m->length;
  }
  return out;
}

std::string hf_tokenizer::decode(std::span<const token_id> tokens) const {
  std::string out;
  for (const token_id t : tokens)
    if (t < bytes_of_.size())
      out += bytes_of_[t];
  return out;
}

} // namespace kvlane::backends
