// Small helpers for tool calls: the Gemma 4 tool-call start token and OpenAI call ids.
#pragma once
#include <cstdint>
#include <string>

namespace eg {
class Tokenizer;
}

namespace eg::server {

/// Id of "<|tool_call>" in the vocabulary, or -1 (models without Gemma 4's tool tokens).
int32_t tool_call_start_id(const Tokenizer& tok);
/// A fresh id "call_" + 24 random alphanumerics, as OpenAI's.
std::string new_tool_call_id();

}  // namespace eg::server
