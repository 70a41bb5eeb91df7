// ChatTemplate: the template variables transformers passes, the leading-system fold rule, and
// finding a model directory's template (see chat_template.h).
#include "tokenizer/chat_template.h"

#include <filesystem>

#include "core/error.h"
#include "core/file_util.h"

namespace eg {

namespace {

using jinja::Value;

// The text of a system message's content: the string, or the concatenated text parts.
std::optional<std::string> system_text(const Value& content) {
  if (content.is_string()) return content.str();
  if (!content.is_list()) return std::nullopt;
  std::string text;
  for (const Value& part : content.list().items) {
    if (!part.is_dict()) continue;
    const Value* type = part.dict().find("type");
    const Value* t = part.dict().find("text");
    if (type != nullptr && type->is_string() && type->str() == "text" && t != nullptr && t->is_string())
      text += t->str();
  }
  return text;
}

bool has_role(const Value& msg, const char* role) {
  if (!msg.is_dict()) return false;
  const Value* r = msg.dict().find("role");
  return r != nullptr && r->is_string() && r->str() == role;
}

// [system, user, ...] -> [user with the system text in front, ...]; nullopt when not applicable.
std::optional<Value> fold_leading_system(const Value& messages) {
  if (!messages.is_list()) return std::nullopt;
  const auto& items = messages.list().items;
  if (items.size() < 2 || !has_role(items[0], "system") || !has_role(items[1], "user")) return std::nullopt;
  const Value* sc = items[0].dict().find("content");
  const std::optional<std::string> sys = sc != nullptr ? system_text(*sc) : std::nullopt;
  const Value* uc = items[1].dict().find("content");
  if (!sys || uc == nullptr) return std::nullopt;
  Value content;
  if (uc->is_string()) {
    content = Value(*sys + "\n\n" + uc->str());
  } else if (uc->is_list()) {
    std::vector<Value> parts{Value::dict({{"type", Value("text")}, {"text", Value(*sys + "\n\n")}})};
    parts.insert(parts.end(), uc->list().items.begin(), uc->list().items.end());
    content = Value::list(std::move(parts));
  } else {
    return std::nullopt;
  }
  jinja::DictData user = items[1].dict();
  user.set("content", std::move(content));
  std::vector<Value> out{Value::dict(std::move(user.items))};
  out.insert(out.end(), items.begin() + 2, items.end());
  return Value::list(std::move(out));
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source) : tpl_(source) {}

std::string ChatTemplate::render(const nlohmann::json& messages, const ChatOptions& opt) const {
  return render_value(Value::from_json(messages), opt);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const ChatOptions& opt) const {
  return render_value(Value::from_json(messages), opt);
}

std::string ChatTemplate::render_value(const Value& messages, const ChatOptions& opt) const {
  if (!messages.is_list()) throw Error("chat template: messages must be a JSON array");
  // transformers raises (IndexError) on an empty conversation before rendering.
  if (messages.list().items.empty()) throw Error("chat template: the conversation is empty");
  if (!opt.tools.is_null() && !opt.tools.is_array()) throw Error("chat template: tools must be a JSON array or null");
  if (!opt.extra.is_null() && !opt.extra.is_object()) throw Error("chat template: extra must be a JSON object");
  auto variables = [&](const Value& msgs) {
    jinja::DictData vars;
    vars.set("messages", msgs);
    vars.set("tools", opt.tools.is_null() ? Value::none() : Value::from_json(opt.tools));
    vars.set("documents", Value::none());
    vars.set("add_generation_prompt", Value(opt.add_generation_prompt));
    vars.set("bos_token", Value(opt.bos_token));
    vars.set("eos_token", Value(opt.eos_token));
    if (opt.enable_thinking) vars.set("enable_thinking", Value(*opt.enable_thinking));
    if (opt.extra.is_object())
      for (auto it = opt.extra.begin(); it != opt.extra.end(); ++it) vars.set(it.key(), Value::from_json(it.value()));
    return Value::dict(std::move(vars.items));
  };
  try {
    return tpl_.render(variables(messages));
  } catch (const jinja::TemplateRaise&) {
    if (!opt.fold_system) throw;
    const std::optional<Value> folded = fold_leading_system(messages);
    if (!folded) throw;
    return tpl_.render(variables(*folded));
  }
}

std::string load_chat_template(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  if (fs::exists(dir / "chat_template.jinja")) return read_file((dir / "chat_template.jinja").string());
  const fs::path cfg = dir / "tokenizer_config.json";
  if (fs::exists(cfg)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(cfg.string()));
    } catch (const nlohmann::json::exception& e) {
      throw Error(cfg.string() + ": invalid JSON: " + e.what());
    }
    const auto it = j.is_object() ? j.find("chat_template") : j.end();
    if (j.is_object() && it != j.end() && !it->is_null()) {
      if (it->is_string()) return it->get<std::string>();
      if (it->is_array()) {
        for (const auto& t : *it) {
          if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string())
            return t["template"].get<std::string>();
        }
        throw Error(cfg.string() + ": chat_template lists several templates and none is named 'default'");
      }
      throw Error(cfg.string() + ": chat_template must be a string or a list of {name, template}");
    }
  }
  throw Error("model has no chat template (" + model_dir +
              ": no chat_template.jinja and no chat_template in tokenizer_config.json)");
}

}  // namespace eg
