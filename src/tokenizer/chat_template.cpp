// Gemma 3 chat template, hand-written equivalent of shared/templates/google-gemma-3-it.jinja as
// transformers renders it (trim_blocks + lstrip_blocks; `| trim` is Python's str.strip()).
#include "tokenizer/chat_template.h"

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace eg {

namespace {

// Python str.strip(): removes leading and trailing characters for which str.isspace() is true.
std::string_view python_strip(std::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    size_t len = 0;
    const uint32_t c = utf8::decode_at(s, b, &len);
    if (!utf8::is_python_space(c)) break;
    b += len;
  }
  size_t e = s.size();
  while (e > b) {
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t len = 0;
    const uint32_t c = utf8::decode_at(s, start, &len);
    if (start + len != e) {  // not one whole character (invalid UTF-8): keep the byte
      break;
    }
    if (!utf8::is_python_space(c)) break;
    e = start;
  }
  return s.substr(b, e - b);
}

}  // namespace

std::string render_gemma3_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                               const std::string& bos_token) {
  if (messages.empty()) throw Error("chat template: the conversation is empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant")
      throw Error("chat template: message " + std::to_string(i) + " has unknown role '" + r +
                  "' (expected system, user or assistant)");
  }

  std::string out = bos_token;
  size_t first = 0;
  std::string first_user_prefix;
  if (messages[0].role == "system") {
    first_user_prefix = messages[0].content + "\n\n";  // not trimmed, as in the template
    first = 1;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const size_t k = i - first;  // loop.index0
    // The template's only check: even turns are user turns, odd turns are not.
    if ((m.role == "user") != (k % 2 == 0))
      throw Error("chat template: Conversation roles must alternate user/assistant/user/assistant/... (message " +
                  std::to_string(i) + " is '" + m.role + "')");
    out += "<start_of_turn>";
    out += m.role == "assistant" ? "model" : m.role;  // a later "system" renders as itself
    out += '\n';
    if (k == 0) out += first_user_prefix;
    out += python_strip(m.content);
    out += "<end_of_turn>\n";
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

}  // namespace eg
