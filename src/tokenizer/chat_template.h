// Chat templates: rendering a conversation into the prompt text the model was trained on.
//
// Gemma 3 (../shared/templates/google-gemma-3-it.jinja, the chat_template of the official
// tokenizer_config.json): "<bos>" then per turn "<start_of_turn>{user|model}\n" + trim(content) +
// "<end_of_turn>\n"; a leading system message is not a turn of its own: its text + "\n\n" is
// prefixed to the first user turn; roles must alternate user/assistant starting with user;
// add_generation_prompt appends "<start_of_turn>model\n". As in the template, a "system" message
// after the first one is only checked for its position (odd turns must not be user turns) and
// renders as "<start_of_turn>system\n"; a system-only conversation renders as just the BOS text.
// The rendered text already begins with the BOS token text, so it must be encoded with
// add_bos = false (exactly one BOS reaches the model).
#pragma once
#include <string>
#include <vector>

namespace eg {

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;  // UTF-8 text
};

/// Renders with the Gemma 3 template. bos_token is the tokenizer's BOS text ("<bos>").
/// Throws eg::Error on an empty conversation, an unknown role, or roles that do not alternate
/// (the same conditions under which the Jinja template raises).
std::string render_gemma3_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                               const std::string& bos_token = "<bos>");

}  // namespace eg
