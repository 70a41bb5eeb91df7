// Parsing Gemma 4 tool calls out of model output.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace eg::grammar {

struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments;  // always a JSON object
};

struct ParsedToolOutput {
  std::string content;          // the text outside the tool calls
  std::vector<ToolCall> calls;  // in order of appearance
};

/// Splits model output (special tokens rendered as their text) into content and tool calls in
/// Gemma 4's format (chat template google-gemma-4-31B-it.jinja, macro format_argument):
///   <|tool_call>call:NAME{key:VALUE,...}<tool_call|>
/// VALUE: <|"|>raw text<|"|> (string, no escapes), true/false, null or None (-> null), numbers
/// (-> int64 when integral and in range, else double), {key:VALUE,...} (keys bare or between
/// <|"|>), [VALUE,...]. A call's closing <tool_call|> may be missing only at the very end of the
/// text (generation stopped on it). Never throws: a call that does not parse is kept verbatim in
/// `content`, and scanning continues after its <|tool_call>.
ParsedToolOutput parse_gemma4_tool_calls(std::string_view text);

}  // namespace eg::grammar
