// Compiles a request's structured-output and tool-call constraints into grammars (grammar/):
// response_format json_object / json_schema, tools with tool_choice required / a named function
// (the whole answer is one tool call) or auto (the tool-call grammar engages at "<|tool_call>").
#pragma once
#include "server/request.h"
#include "tokenizer/tokenizer.h"

namespace eg::server {

/// Sets req.grammar / req.tool_grammar. Throws ApiError(400) for a schema feature that cannot be
/// enforced (the message names it), or tools on a model without Gemma 4's tool-call tokens.
void build_constraints(GenRequest& req, const Tokenizer& tok);

}  // namespace eg::server
