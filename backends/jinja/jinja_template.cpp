#include "backends/jinja/jinja_template.hpp"

#include "backends/chat_format.hpp"

#include <chat.h>
#include <jinja/runtime.h>
#include <jinja/value.h>

#include <fmt/format.h>

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

expected<std::vector<rendered_part>, backend_error>
jinja_template::render(std::span<const chat_message> messages, bool add_generation_prompt) const {
  common_json list = common_json::array();
  for (const auto& m : messages)
    list.push_back(common_json{{"role", m.role}, {"content", m.content}});
  try {
    std::lock_guard lock(mutex_);
    const auto& t = impl_->tmpl;
    jinja::context ctx(t.source());
    // Messages are input; the special-token texts and switches are the template's own.
    jinja::global_from_json(ctx, common_json{{"messages", std::move(list)}}, true);
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
