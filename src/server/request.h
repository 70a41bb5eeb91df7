// A generation request as the scheduler runs it, parsed and validated from the OpenAI JSON of
// /v1/chat/completions or /v1/completions (openai_request.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/media.h"
#include "engine/sampler.h"

namespace eg::grammar {
class Grammar;
}

namespace eg::server {

struct GenRequest {
  enum class Kind { Chat, Completion };
  enum class Format { Text, JsonObject, JsonSchema };
  Kind kind = Kind::Chat;
  std::string model;  // the model id echoed in responses
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  /// Prompt token ids (chat: the conversation rendered with the chat template, message contents
  /// as plain text; completion: the prompt text with special tokens parsed, BOS added).
  std::vector<int32_t> prompt;
  /// Chat: the images' soft tokens at their placeholder runs of `prompt` (in order).
  std::vector<MediaRun> media;
  /// Tokens to generate at most; clipped to the context left after the prompt.
  int max_tokens = 0;
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings (never part of the output)
  bool ignore_eos = false;
  /// Extension: seconds this request may take (queueing included), at most the server's
  /// --timeout; 0 = the server's.
  double timeout_s = 0;
  /// OpenAI logit_bias: added to the logits of these token ids before sampling (-100 bans, +100
  /// forces in practice).
  std::vector<std::pair<int32_t, float>> logit_bias;        // extension: keep generating through end-of-turn / eos ids
  /// response_format: text, json_object, or json_schema (`schema`).
  Format format = Format::Text;
  nlohmann::ordered_json schema;  // key order kept: properties are generated in schema order
  /// Extension response_format.whitespace "pretty": indented JSON allowed (default compact: no
  /// whitespace outside strings; grammar::JsonWhitespace).
  bool pretty_json = false;
  /// OpenAI tools (array of {"type": "function", "function": {...}}), null when none, and the
  /// tool_choice: "none", "auto", "required", or "function" (then tool_name).
  nlohmann::ordered_json tools;
  std::string tool_choice = "auto";
  std::string tool_name;
  /// The constraint enforced while decoding (response_format, or tools with tool_choice
  /// required/function); null: free text.
  std::shared_ptr<const grammar::Grammar> grammar;
  /// tool_choice auto: the tool-call grammar engaged when the model starts a tool call.
  std::shared_ptr<const grammar::Grammar> tool_grammar;
  /// Parse the output for Gemma 4 tool calls (tools given and tool_choice != none).
  bool parse_tools = false;
  /// Extension (--kb, docs/server.md): the knowledge-base passages put into the prompt, as the
  /// response reports them ("kb_passages"); null when RAG was off for this request.
  nlohmann::json kb_passages;
  /// Chat: the text of the last user message (the FAQ fallback's query, --faq).
  std::string user_text;
};

}  // namespace eg::server
