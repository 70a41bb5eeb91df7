#include "server/constraints.h"

#include "grammar/grammar.h"
#include "server/api_error.h"
#include "server/tool_call_ids.h"

namespace eg::server {

void build_constraints(GenRequest& req, const Tokenizer& tok) {
  try {
    const auto ws = req.pretty_json ? grammar::JsonWhitespace::Pretty : grammar::JsonWhitespace::Compact;
    if (req.format == GenRequest::Format::JsonObject) req.grammar = grammar::json_object_grammar(ws);
    if (req.format == GenRequest::Format::JsonSchema) req.grammar = grammar::json_schema_grammar(req.schema, ws);
  } catch (const Error& e) {
    throw ApiError(400, std::string("response_format: ") + e.what(), "response_format", "unsupported_schema");
  }
  if (!req.parse_tools) return;
  if (tool_call_start_id(tok) < 0)
    throw ApiError(400, "this model's vocabulary has no tool-call tokens (Gemma 4's <|tool_call>)", "tools");
  try {
    if (req.tool_choice == "required")
      req.grammar = grammar::gemma4_tool_call_grammar(req.tools);
    else if (req.tool_choice == "function")
      req.grammar = grammar::gemma4_tool_call_grammar(req.tools, req.tool_name);
    else
      req.tool_grammar = grammar::gemma4_tool_call_grammar(req.tools);
  } catch (const Error& e) {
    throw ApiError(400, std::string("tools: ") + e.what(), "tools", "unsupported_schema");
  }
}

}  // namespace eg::server
