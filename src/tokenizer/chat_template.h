// Chat templates: rendering a conversation into the prompt text the model was trained on, with
// the checkpoint's OWN Jinja template (templates differ between Gemma generations, sizes and
// revisions), byte for byte as transformers' apply_chat_template(..., tokenize=False) renders it.
// The interpreter is src/tokenizer/jinja/ (jinja.h lists the supported Jinja subset).
//
// Template variables, as transformers sets them: messages, tools (None when not given),
// documents (None), add_generation_prompt, bos_token, eos_token, enable_thinking (only when
// set, so `enable_thinking is defined` behaves as in Python), then ChatOptions::extra.
//
// Messages are OpenAI-style objects; what a template reads is up to the template. The Gemma
// templates read: role (system, developer, user, assistant, tool), content (a string, or a list
// of parts {"type": "text", "text": ...} / {"type": "image"|"audio"|"video"}), tool_calls
// ([{"id", "function": {"name", "arguments": object or JSON string}}]), tool_call_id and name
// (tool messages), tool_responses (Gemma 4's native form), reasoning / reasoning_content.
//
// Leading system message rule: some templates (Gemma 2) reject a system message through
// raise_exception(). When rendering raises that way, the conversation starts with a system
// message followed by a user message, and ChatOptions::fold_system is on, the conversation is
// rendered once more with the system message folded into the first user message the way the
// Gemma 3 template does it: system text + "\n\n" + user content (a list content gets a leading
// text part instead; a system content list contributes its text parts). If that rendering fails
// too, its error is thrown. Nothing else is retried.
//
// Rendered Gemma prompts begin with the BOS text: encode them without adding another BOS.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "tokenizer/jinja/jinja.h"

namespace eg {

struct ChatOptions {
  bool add_generation_prompt = true;
  /// Passed as `enable_thinking` when set (Gemma 4: thinking on/off).
  std::optional<bool> enable_thinking;
  /// Tool declarations (a JSON array of {"type": "function", "function": {...}}); null: none.
  nlohmann::ordered_json tools;
  std::string bos_token = "<bos>";
  std::string eos_token = "<eos>";
  /// More template variables (a JSON object), e.g. a template-specific kwarg; they override the above.
  nlohmann::ordered_json extra;
  /// The leading-system-message rule above.
  bool fold_system = true;
};

class ChatTemplate {
 public:
  /// Parses the template source. Throws eg::Error on a syntax error or a Jinja feature outside
  /// the supported subset.
  explicit ChatTemplate(std::string_view source);

  /// Renders `messages` (a JSON array). Throws eg::Error when the template raises (the message
  /// is the template's) or cannot render the input. The ordered_json overload keeps each
  /// object's key order (which only matters to templates that print whole objects).
  std::string render(const nlohmann::json& messages, const ChatOptions& opt) const;
  std::string render(const nlohmann::ordered_json& messages, const ChatOptions& opt) const;

 private:
  std::string render_value(const jinja::Value& messages, const ChatOptions& opt) const;
  jinja::Template tpl_;
};

/// The chat template of a Hugging Face model directory: chat_template.jinja when present (it
/// takes precedence, as in transformers), else tokenizer_config.json's "chat_template" (a string,
/// or a list of {"name", "template"} of which "default" is taken). Throws eg::Error
/// "model has no chat template (...)" when there is none.
std::string load_chat_template(const std::string& model_dir);

}  // namespace eg
