// libFuzzer target: OpenAI request bodies through the server's parser and validator, without a
// socket: parse_body, parse_chat_request / parse_completion_request (messages through the chat
// template and the tokenizer), build_constraints (response_format and tools grammars), exactly
// the path of http_routes.cpp before a job reaches the scheduler. docs/reliability.md. Built by
// scripts/fuzz.
//
// Input: byte 0 bit 0: /v1/chat/completions (0) or /v1/completions (1); bit 1: tiny-gemma3 with
// its own template (0) or tiny-gemma4 with Gemma 4's official template, which renders tools (1).
// The rest is the request body.
// Checks: the only exception is ApiError with a 4xx status (the server answers anything else with
// a 5xx, which a bad request must never get); an accepted request has a prompt of 1 ..
// context - 1 tokens, all in the vocabulary, and 1 <= max_tokens <= the room left.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/loaded_model.h"
#include "engine/session_prompt.h"
#include "fuzz_util.h"
#include "server/api_error.h"
#include "server/constraints.h"
#include "server/openai_request.h"

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) egfuzz::fail("request_fuzz", what);
}

constexpr int kContext = 512;

struct Served {
  std::shared_ptr<const eg::LoadedModel> lm;
  std::unique_ptr<eg::PromptEncoder> enc;
};

const Served& served(bool gemma4) {
  auto load = [](const char* dir, const std::string& tpl) {
    Served s;
    s.lm = eg::LoadedModel::load_dir(egfuzz::shared_dir() + "/models/" + dir);
    s.enc = std::make_unique<eg::PromptEncoder>(s.lm->tokenizer(), tpl.empty() ? s.lm->chat_template() : tpl, std::nullopt);
    return s;
  };
  static const Served g3 = load("tiny-gemma3", ""),
                      g4 = load("tiny-gemma4", egfuzz::read_text(egfuzz::shared_dir() + "/templates/google-gemma-4-31B-it.jinja"));
  return gemma4 ? g4 : g3;
}

void write_seeds(const std::string& dir) {
  const char* chat[] = {
      R"({"messages": [{"role": "user", "content": "Tell me a fortune."}], "max_tokens": 40})",
      R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "again"}], "stream": true, "stream_options": {"include_usage": true}, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 42, "stop": ["\n\n", "END"], "presence_penalty": 0.5, "frequency_penalty": -0.5, "repeat_penalty": 1.1, "repeat_last_n": 32, "logit_bias": {"5": -100, "17": 2.5}, "preset": "balanced"})",
      R"({"messages": [{"role": "user", "content": "json"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "string", "maxLength": 5}}}, "required": ["a"]}}}})",
      R"({"messages": [{"role": "user", "content": "obj"}], "response_format": {"type": "json_object"}, "max_completion_tokens": 8, "ignore_eos": true, "timeout": 5, "add_bos": false})",
      R"({"messages": [{"role": "user", "content": "weather?"}, {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}, {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "sunny"}], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}], "tool_choice": "auto"})",
      R"({"messages": [{"role": "developer", "content": "x"}, {"role": "user", "content": "call"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"n": {"type": "number"}}}}}], "tool_choice": {"type": "function", "function": {"name": "f"}}})",
  };
  const char* completion[] = {
      R"({"prompt": "Once upon a time", "max_tokens": 16})",
      R"({"prompt": ["It was"], "max_tokens": 4, "stream": true, "temperature": 0, "stop": "."})",
  };
  int k = 0;
  for (const char* b : chat)
    for (char m : {'\0', '\2'}) egfuzz::write_seed(dir, "chat-" + std::to_string(k++), std::string(1, m) + b);
  for (const char* b : completion)
    for (char m : {'\1', '\3'}) egfuzz::write_seed(dir, "completion-" + std::to_string(k++), std::string(1, m) + b);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  egfuzz::maybe_write_seeds(write_seeds);
  (void)served(false);
  (void)served(true);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Served& s = served(data[0] & 2);
  const eg::server::RequestContext ctx{*s.lm, *s.enc, "tiny", kContext, s.enc->template_uses_tools()};
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const auto b = eg::server::parse_body(body);
    eg::server::GenRequest r =
        (data[0] & 1) ? eg::server::parse_completion_request(b, ctx) : eg::server::parse_chat_request(b, ctx);
    eg::server::build_constraints(r, s.lm->tokenizer());
    const int n = static_cast<int>(r.prompt.size());
    check(n >= 1 && n < kContext, "accepted prompt length " + std::to_string(n));
    for (int32_t id : r.prompt) check(id >= 0 && id < s.lm->tokenizer().vocab_size(), "prompt id out of range");
    check(r.max_tokens >= 1 && r.max_tokens <= kContext - n, "max_tokens " + std::to_string(r.max_tokens));
  } catch (const eg::server::ApiError& e) {
    check(e.status() >= 400 && e.status() < 500, "ApiError with status " + std::to_string(e.status()));
  } catch (const std::exception& e) {
    egfuzz::fail("request_fuzz", std::string("exception other than ApiError (a 5xx): ") + e.what());
  }
  return 0;
}
