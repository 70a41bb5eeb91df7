// Bad requests to `edgegemma serve`: each gets the right 4xx status and an OpenAI error object
// {"error": {"message", "type", ...}}, never a 5xx, and the server keeps serving.
#include <gtest/gtest.h>

#include <random>

#include "server_test_util.h"

using nlohmann::json;
using namespace egtest;

namespace {

struct Case {
  const char* name;
  const char* path;
  std::string body;
  int status;
};

std::string msgs(const std::string& content_json) {
  return R"({"messages": [{"role": "user", "content": )" + content_json + "}]}";
}

}  // namespace

TEST(ServerBadInput, Table) {
  eg::server::ServerOptions o;
  o.scheduler.slots = 1;
  o.scheduler.context_tokens = 256;
  o.max_body_bytes = 64 * 1024;
  TestServer s(shared_dir() + "/models/tiny-gemma3", o);
  std::string long_text;
  for (int i = 0; i < 400; ++i) long_text += "word ";
  std::string huge(100 * 1024, 'a');
  const std::vector<Case> cases = {
      {"malformed JSON", "/v1/chat/completions", R"({"messages": [)", 400},
      {"not an object", "/v1/chat/completions", R"([1, 2])", 400},
      {"empty body", "/v1/chat/completions", "", 400},
      {"no messages", "/v1/chat/completions", R"({"model": "x"})", 400},
      {"messages not an array", "/v1/chat/completions", R"({"messages": "hi"})", 400},
      {"empty messages", "/v1/chat/completions", R"({"messages": []})", 400},
      {"message not an object", "/v1/chat/completions", R"({"messages": ["hi"]})", 400},
      {"missing role", "/v1/chat/completions", R"({"messages": [{"content": "hi"}]})", 400},
      {"unknown role", "/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "hi"}]})", 400},
      {"role not a string", "/v1/chat/completions", R"({"messages": [{"role": 7, "content": "hi"}]})", 400},
      {"missing content", "/v1/chat/completions", R"({"messages": [{"role": "user"}]})", 400},
      {"content a number", "/v1/chat/completions", msgs("42"), 400},
      {"image part", "/v1/chat/completions", msgs(R"([{"type": "image_url", "image_url": {"url": "x"}}])"), 400},
      {"temperature a string", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"})", 400},
      {"temperature out of range", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "temperature": 7})", 400},
      {"top_p zero", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "top_p": 0})", 400},
      {"max_tokens negative", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": -5})", 400},
      {"max_tokens a float", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2.5})", 400},
      {"stream not a bool", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "stream": "yes"})", 400},
      {"stop empty string", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "stop": [""]})", 400},
      {"stop a number", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "stop": 3})", 400},
      {"n = 2", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "n": 2})", 400},
      {"seed a string", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "seed": "x"})", 400},
      {"unknown preset", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "preset": "wild"})", 400},
      {"prompt beyond the context", "/v1/chat/completions", msgs(json(long_text).dump()), 400},
      {"bad response_format", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "yaml"}})", 400},
      {"unsupported schema feature", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "format": "email"}}}})", 400},
      {"tools on a template without tools", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}]})", 400},
      {"tool_choice without tools", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"})", 400},
      {"template rejects roles", "/v1/chat/completions",
       R"({"messages": [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]})", 400},
      {"body over the limit", "/v1/chat/completions", msgs(json(huge).dump()), 413},
      {"completions: no prompt", "/v1/completions", R"({"max_tokens": 3})", 400},
      {"completions: prompt a number", "/v1/completions", R"({"prompt": 5})", 400},
      {"completions: empty prompt", "/v1/completions", R"({"prompt": ""})", 400},
      {"tokenize: no content", "/tokenize", R"({"text": "x"})", 400},
      {"detokenize: bad ids", "/detokenize", R"({"tokens": [-1]})", 400},
      {"logit_bias not an object", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "logit_bias": 5})", 400},
      {"logit_bias key not an id", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"abc": 1}})", 400},
      {"logit_bias id out of range", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"99999999": 1}})", 400},
      {"logit_bias value too large", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"5": 1000}})", 400},
      {"tokenize: flag not a bool", "/tokenize", R"({"content": "x", "add_special": "yes"})", 400},
      {"audio output", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "modalities": ["text", "audio"], "audio": {"voice": "x", "format": "wav"}})", 400},
      {"modalities not an array", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "modalities": "text"})", 400},
      {"embeddings without an embedding model", "/v1/embeddings", R"({"input": "x"})", 400},
      {"unknown route", "/v1/rerank", R"({"input": "x"})", 404},
  };
  for (const Case& c : cases) {
    auto [st, body] = s.post_raw(c.path, c.body);
    EXPECT_EQ(st, c.status) << c.name << ": " << body;
    const json j = json::parse(body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << c.name << ": not JSON: " << body;
    ASSERT_TRUE(j.contains("error")) << c.name;
    EXPECT_TRUE(j["error"]["message"].is_string()) << c.name;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty()) << c.name;
    EXPECT_TRUE(j["error"]["type"].is_string()) << c.name;
  }
  // Wrong methods and unknown paths.
  EXPECT_EQ(s.get("/v1/chat/completions").first, 404);
  EXPECT_EQ(s.get("/v1/models/other-model").first, 404);
  // Still serving.
  auto [st, r] = s.post("/v1/chat/completions", chat_body("hello", 4));
  EXPECT_EQ(st, 200);
  EXPECT_EQ(s.metric("edgegemma_slots_busy"), 0);
  EXPECT_EQ(s.metric("edgegemma_queue_length"), 0);
}

// Random bytes and truncations of a valid request never produce a 5xx.
TEST(ServerBadInput, FuzzedBodies) {
  eg::server::ServerOptions o;
  o.scheduler.slots = 1;
  o.scheduler.context_tokens = 128;
  TestServer s(shared_dir() + "/models/tiny-gemma3", o);
  const std::string valid =
      R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0.5, "stop": ["x"], "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}})";
  std::mt19937 rng(7);
  int n200 = 0;
  for (int i = 0; i < 150; ++i) {
    std::string b = valid;
    if (i % 3 == 0) b = b.substr(0, rng() % b.size());
    const int flips = 1 + rng() % 3;
    for (int f = 0; f < flips && !b.empty(); ++f) b[rng() % b.size()] = static_cast<char>(rng() % 256);
    auto [st, body] = s.post_raw("/v1/chat/completions", b);
    EXPECT_TRUE(st == 200 || (st >= 400 && st < 500)) << st << " for " << b << " -> " << body;
    if (st == 200) ++n200;
  }
  auto [st, r] = s.post("/v1/chat/completions", chat_body("hello", 2));
  EXPECT_EQ(st, 200);
  EXPECT_EQ(s.metric("edgegemma_slots_busy"), 0);
  RecordProperty("accepted", n200);
}
