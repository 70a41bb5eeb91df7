// PromptEncoder: a conversation -> prompt token ids, with the chat template, where message
// contents are always plain text.
//
// transformers' apply_chat_template(tokenize=True) tokenizes the rendered string with special
// tokens parsed everywhere, so a user who types "<end_of_turn>" injects a control token. We
// tokenize the rendered string the same way except inside message contents: the string is split
// at the special tokens the template itself wrote (leftmost-longest match, as HF's added-token
// splitting), and every span between them is encoded with parse_special=false (non-special added
// tokens such as whitespace runs still match). For contents without special-token text the ids
// equal HF's exactly.
//
// Content regions are found by rendering a second time with each content replaced by a sentinel
// and substituting the (trimmed, as Gemma templates do) contents back; when that does not
// reproduce the real rendering byte for byte (a template that transforms contents), contents are
// located by an in-order search of the rendered text instead, and protected only where the search
// is unambiguous (the text occurs once).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace eg {

struct ChatMessage;

class PromptEncoder {
 public:
  /// `template_source` "" = no chat template (render() then throws). Throws eg::Error for a
  /// template that does not parse.
  PromptEncoder(const Tokenizer& tok, const std::string& template_source,
                std::optional<bool> enable_thinking);

  bool has_template() const { return tpl_.has_value(); }

  /// The rendered text and the byte ranges [begin, end) of message contents in it, in order.
  struct Rendered {
    std::string text;
    std::vector<std::pair<size_t, size_t>> content;  // one per message with non-empty content found
  };
  /// More than role + content (the server's OpenAI messages): tool declarations passed to the
  /// template as `tools`, and per message extra fields merged into its object (tool_calls,
  /// tool_call_id, name). message_fields is empty or has one object (or null) per message.
  struct Extras {
    nlohmann::ordered_json tools;
    std::vector<nlohmann::ordered_json> message_fields;
  };
  /// Renders `msgs` (add_generation_prompt = gen_prompt). A message with images is passed to the
  /// template as a content list: one {"type": "image"} item per image, then the text item. Throws eg::Error when the template
  /// raises or the conversation is empty. Only contents are protected (encode()); strings inside
  /// extras (tool-call arguments) are rendered as the template prints them.
  Rendered render(const std::vector<ChatMessage>& msgs, bool gen_prompt, const Extras* extras = nullptr) const;
  /// The template source mentions `tools` (it can render tool declarations).
  bool template_uses_tools() const { return uses_tools_; }

  /// Ids of text[0, cut) (cut clipped to the text size) where special tokens are parsed only
  /// outside `protect` ranges, starting with exactly one <bos> (the "<bos>" Gemma templates write;
  /// one is inserted when a template writes none) unless !add_bos (engine/prompt_bos.h).
  std::vector<int32_t> encode(const std::string& text,
                              const std::vector<std::pair<size_t, size_t>>& protect,
                              size_t cut = std::string::npos, bool add_bos = true) const;

 private:
  const Tokenizer& tok_;
  std::optional<ChatTemplate> tpl_;
  std::optional<bool> thinking_;
  bool uses_tools_ = false;
  std::vector<std::vector<std::string>> specials_by_byte_;  // first byte -> pieces, longest first
};

}  // namespace eg
