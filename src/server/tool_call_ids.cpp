#include "server/tool_call_ids.h"

#include "server/openai_response.h"
#include "tokenizer/tokenizer.h"

namespace eg::server {

int32_t tool_call_start_id(const Tokenizer& tok) { return tok.token_id("<|tool_call>"); }

std::string new_tool_call_id() { return random_id("call_"); }

}  // namespace eg::server
