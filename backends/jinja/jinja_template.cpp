#include "backends/jinja/jinja_template.hpp"

#include "backends/chat_format.hpp"

#include <chat.h>
#include <jinja/runtime.h>
#include <jinja/value.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bitset>
#include <exception>

namespace kvlane::backends {

struct jinja_template::impl {
  explicit impl(const std::string& text, const std::string& bos, const std::string& eos)
      : tmpl(text, bos, eos) {}
  common_chat_template tmpl;
};

jinja_template::jinja_template(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

jinja_template::~jinja_template() = default;

expected<std::unique_ptr<jinja_template>, backend_error>
jinja_template::parse(std::string_view text, std::string_view bos, std::string_view eos) {
  if (text.empty())
    return unexpected(backend_error{backend_errc::invalid_argument, "the chat template is empty"});
  try {
    auto p = std::make_unique<impl>(std::string(text), std::string(bos), std::string(eos));
    return std::unique_ptr<jinja_template>(new jinja_template(std::move(p)));
  } catch (const std::exception& e) {
    return unexpected(backend_error{backend_errc::invalid_argument,
                                    fmt::format("the chat template does not parse: {}", e.what())});
  }
}

namespace {

using ordered_json = nlohmann::ordered_json;
using specials_view = std::span<const std::pair<std::string, token_id>>;

backend_error invalid(std::string message) {
  return backend_error{backend_errc::invalid_argument, std::move(message)};
}

/// Finds the special tokens' texts that are markup in strings that reach a template through
/// `tojson`. Only texts a template could hold count (some vocabularies also mark whitespace
/// runs or single characters as user-defined tokens: text, not markup). A string without any
/// of their first bytes (most schema strings: no '<' or '[') costs one pass.
class markup_finder {
public:
  explicit markup_finder(specials_view specials) {
    for (const auto& sp : specials) {
      const std::string_view t = sp.first;
      if (t.size() < 3 || t.find_first_of(" \t\r\n") != std::string_view::npos)
        continue;
      texts_.push_back(&sp.first);
      first_.set(static_cast<unsigned char>(t.front()));
    }
  }

  /// The markup `s` holds, if any.
  const std::string* in(std::string_view s) const noexcept {
    if (texts_.empty() || s.size() < 3)
      return nullptr;
    const bool candidate = std::any_of(s.begin(), s.end(), [this](char c) {
      return first_.test(static_cast<unsigned char>(c));
    });
    if (!candidate)
      return nullptr;
    for (const auto* t : texts_)
      if (s.find(*t) != std::string_view::npos)
        return t;
    return nullptr;
  }

private:
  std::vector<const std::string*> texts_;
  std::bitset<256> first_;
};

/// The first special text in a key or string of `j`.
const std::string* markup_in_json(const ordered_json& j, const markup_finder& markup) {
  if (j.is_string())
    return markup.in(j.get_ref<const std::string&>());
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (const auto* sp = markup.in(k))
        return sp;
      if (const auto* sp = markup_in_json(v, markup))
        return sp;
    }
  } else if (j.is_array()) {
    for (const auto& v : j)
      if (const auto* sp = markup_in_json(v, markup))
        return sp;
  }
  return nullptr;
}

expected<ordered_json, backend_error> object_of(std::string_view text, std::string_view empty_is,
                                                const std::string& what, const markup_finder& markup) {
  auto j = ordered_json::parse(text.empty() ? empty_is : text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return unexpected(invalid(what + " must be a JSON object"));
  if (const auto* sp = markup_in_json(j, markup))
    return unexpected(invalid(fmt::format("{} hold the text of the special token '{}', which the "
                                          "model's template would write as that token",
                                          what, *sp)));
  return j;
}

/// A checked JSON object (object_of) for the template.
common_json engine_json(const ordered_json& j) {
  return common_json::parse(j.dump(-1, ' ', false, ordered_json::error_handler_t::replace));
}

/// The template's `tools` and `messages`, as llama-server passes them. Message text goes in
/// as it is (a prompt may be megabytes); only the small JSON objects (arguments, parameters)
/// go through text. Throws what common_json throws (bad_alloc).
expected<common_json, backend_error> template_input(std::span<const chat_message> messages,
                                                    std::span<const chat_tool> tools,
                                                    const markup_finder& markup) {
  common_json in = common_json::object();
  common_json list = common_json::array();
  for (const auto& m : messages) {
    common_json j = common_json::object();
    j["role"] = m.role;
    j["content"] = m.content;
    if (!m.tool_calls.empty()) {
      common_json calls = common_json::array();
      for (const auto& c : m.tool_calls) {
        auto args = object_of(c.arguments, "{}", "the arguments of the call to '" + c.name + "'",
                              markup);
        if (!args)
          return unexpected(std::move(args).error());
        if (const auto* sp = markup.in(c.name))
          return unexpected(invalid(fmt::format("the tool call name '{}' holds the special token '{}'",
                                                c.name, *sp)));
        common_json call = common_json::object();
        if (!c.id.empty())
          call["id"] = c.id;
        call["type"] = "function";
        common_json fn = common_json::object();
        fn["name"] = c.name;
        fn["arguments"] = engine_json(*args);
        call["function"] = std::move(fn);
        calls.push_back(std::move(call));
      }
      j["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id.empty())
      j["tool_call_id"] = m.tool_call_id;
    if (!m.tool_name.empty())
      j["name"] = m.tool_name;
    list.push_back(std::move(j));
  }
  in["messages"] = std::move(list);
  if (!tools.empty()) {
    common_json out = common_json::array();
    for (const auto& t : tools) {
      auto params = object_of(t.parameters, R"({"type":"object","properties":{}})",
                              "the parameters of tool '" + t.name + "'", markup);
      if (!params)
        return unexpected(std::move(params).error());
      const auto* sp = markup.in(t.name);
      sp = sp != nullptr ? sp : markup.in(t.description);
      if (sp != nullptr)
        return unexpected(invalid(fmt::format("the name or description of tool '{}' holds the text "
                                              "of the special token '{}', which the model's "
                                              "template would write as that token",
                                              t.name, *sp)));
      common_json fn = common_json::object();
      fn["name"] = t.name;
      if (!t.description.empty())
        fn["description"] = t.description;
      fn["parameters"] = engine_json(*params);
      common_json tool = common_json::object();
      tool["type"] = "function";
      tool["function"] = std::move(fn);
      out.push_back(std::move(tool));
    }
    in["tools"] = std::move(out);
  }
  return in;
}

} // namespace

expected<std::vector<rendered_part>, backend_error>
jinja_template::render(std::span<const chat_message> messages, std::span<const chat_tool> tools,
                       bool add_generation_prompt, specials_view specials) const {
  try {
    auto input = template_input(messages, tools, markup_finder{specials});
    if (!input)
      return unexpected(std::move(input).error());
    const auto& inp = *input;
    std::lock_guard lock(mutex_);
    const auto& t = impl_->tmpl;
    jinja::context ctx(t.source());
    // Messages and tools are input; the special-token texts and switches are the template's own.
    jinja::global_from_json(ctx, inp, true);
    common_json own{{"bos_token", t.bos_token()}, {"eos_token", t.eos_token()}};
    if (add_generation_prompt)
      own["add_generation_prompt"] = true;
    jinja::global_from_json(ctx, own, false);
    jinja::runtime runtime(ctx);
    const jinja::value result = runtime.execute(t.prog);
    const auto parts = jinja::runtime::gather_string_parts(result);
    std::vector<rendered_part> out;
    for (const auto& p : parts->val_str.parts) {
      if (p.val.empty())
        continue;
      if (!out.empty() && out.back().input == p.is_input)
        out.back().text += p.val;
      else
        out.push_back({p.is_input, p.val});
    }
    return out;
  } catch (const std::exception& e) {
    return unexpected(backend_error{backend_errc::invalid_argument,
                                    fmt::format("the model's chat template failed: {}", e.what())});
  }
}

std::vector<token_id> jinja_template::tokens_of(std::span<const rendered_part> parts,
                                                const tokenizer& tok,
                                                std::span<const std::pair<std::string, token_id>> specials) {
  std::vector<token_id> out;
  std::string run;
  auto flush = [&] {
    auto ids = tok.encode(run, false);
    out.insert(out.end(), ids.begin(), ids.end());
    run.clear();
  };
  for (const auto& p : parts) {
    if (p.input) {
      run += p.text;
      continue;
    }
    std::string_view rest = p.text;
    while (!rest.empty()) {
      std::size_t at = std::string_view::npos;
      const std::pair<std::string, token_id>* found = nullptr;
      for (const auto& sp : specials) { // longest first: the first found at a position wins
        const auto pos = rest.find(sp.first);
        if (pos != std::string_view::npos && (found == nullptr || pos < at)) {
          at = pos;
          found = &sp;
        }
      }
      if (found == nullptr) {
        run += rest;
        break;
      }
      run += rest.substr(0, at);
      flush();
      out.push_back(found->second);
      rest.remove_prefix(at + found->first.size());
    }
  }
  flush();
  return out;
}

} // namespace kvlane::backends
