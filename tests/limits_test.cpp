// The resource limits a hostile input cannot exceed (docs/reliability.md), each tested just past
// the limit (a clear error naming it) and, where the limit is about a count, at it (accepted).
// The chat-template interpreter's limits are in jinja_test (Jinja.ResourceLimits); the request
// body size (413) in server_bad_input_test and tests/node/bad_input.test.mjs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "engine/loaded_model.h"
#include "engine/session.h"
#include "engine/session_prompt.h"
#include "grammar/grammar.h"
#include "server/api_error.h"
#include "server/limits.h"
#include "server/openai_request.h"
#include "test_util.h"

namespace {

using ojson = nlohmann::ordered_json;

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const eg::Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::shared_ptr<const eg::LoadedModel> model(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const eg::LoadedModel>> cache;
  auto& m = cache[name];
  if (!m) m = eg::LoadedModel::load_dir(egtest::shared_dir() + "/models/" + name);
  return m;
}

// --- schema → grammar: at most 100,000 nodes + enum trie nodes ---------------------------------

TEST(ResourceLimits, SchemaGrammarSize) {
  // anyOf of n booleans: 3 nodes each (an alternative of two literals) + 1: 30,000 are accepted,
  // 40,000 refused.
  auto branches = [](int n) {
    ojson b = ojson::array();
    for (int i = 0; i < n; ++i) b.push_back({{"type", "boolean"}});
    return ojson{{"anyOf", b}};
  };
  EXPECT_NO_THROW(eg::grammar::json_schema_grammar(branches(30000)));
  EXPECT_NE(error_of([&] { eg::grammar::json_schema_grammar(branches(40000)); }).find("the schema is too large"), std::string::npos);
  // An enum is a trie of its characters: 1,000 values of 50 distinct characters are 50,000
  // trie nodes (accepted); 3,000 such values are 150,000 (refused). Also through tools.
  auto big_enum = [](int n) {
    ojson values = ojson::array();
    for (int i = 0; i < n; ++i) values.push_back(std::to_string(i) + std::string(48, 'a' + i % 26));
    return ojson{{"enum", values}};
  };
  EXPECT_NO_THROW(eg::grammar::json_schema_grammar(big_enum(1000)));
  EXPECT_NE(error_of([&] { eg::grammar::json_schema_grammar(big_enum(3000)); }).find("exceeds 100000 nodes"), std::string::npos);
  const ojson tools = ojson::array({ojson{{"type", "function"},
                                          {"function", {{"name", "f"}, {"parameters", {{"type", "object"}, {"properties", {{"x", big_enum(3000)}}}}}}}}});
  EXPECT_NE(error_of([&] { eg::grammar::gemma4_tool_call_grammar(tools); }).find("the schema is too large"), std::string::npos);
}

// --- session files: at most Session::max_file_bytes(), checked before reading ------------------

TEST(ResourceLimits, SessionFileSize) {
  eg::SessionOptions o;
  o.context_tokens = 64;
  o.chat = false;
  eg::Session s(model("tiny-gemma3"), o);
  const size_t limit = s.max_file_bytes();
  // Independent lower bound: the F32 KV of the whole context (2 · layers · kv heads · head dim ·
  // 4 bytes per position, every layer at most) must fit.
  const eg::ModelConfig& c = s.model().model().config();
  size_t kv = 0;
  for (const eg::LayerConfig& l : c.layers) kv += 2 * static_cast<size_t>(l.n_kv_heads) * l.head_dim * 4;
  EXPECT_GE(limit, kv * static_cast<size_t>(c.max_position_embeddings));
  // A file of limit + 1 bytes (sparse: no disk used) starting like a session file is refused
  // before it is read, and the session is unchanged.
  s.append_text("Hello");
  s.prefill();
  const std::string path = egtest::make_temp_dir() + "/huge.egsession";
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "EGSESSN\0\1\0\0\0", 12), 12);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(limit + 1)), 0);
  ::close(fd);
  const std::string msg = error_of([&] { s.restore(path); });
  EXPECT_NE(msg.find("is larger than any session of this model can be"), std::string::npos) << msg;
  EXPECT_EQ(s.cached_tokens(), static_cast<int>(s.context_tokens().size()));
  EXPECT_FALSE(s.context_tokens().empty());
}

// --- OpenAI requests: messages, tools, stop strings ---------------------------------------------

struct Served {
  std::shared_ptr<const eg::LoadedModel> lm;
  eg::PromptEncoder enc;
  eg::server::RequestContext ctx() const { return {*lm, enc, "m", 1 << 20, enc.template_uses_tools()}; }
};

// tiny-gemma4 with Gemma 4's official template: it renders tools, and its cost grows with the
// square of the message count (it scans back over earlier messages), the worst case we know.
const Served& gemma4() {
  static const Served s{model("tiny-gemma4"),
                        eg::PromptEncoder(model("tiny-gemma4")->tokenizer(),
                                          egtest::read_file(egtest::shared_dir() + "/templates/google-gemma-4-31B-it.jinja"),
                                          std::nullopt)};
  return s;
}

ojson conversation(size_t n) {
  ojson msgs = ojson::array();
  for (size_t i = 0; i < n; ++i) msgs.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "m" + std::to_string(i)}});
  return msgs;
}

std::string request_error(const ojson& body) {
  try {
    eg::server::parse_chat_request(body, gemma4().ctx());
  } catch (const eg::server::ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param() + ": " + e.what();
  }
  return "(accepted)";
}

TEST(ResourceLimits, MessagesPerRequest) {
  // The most messages a request may have render (within the template's step budget) ...
  EXPECT_EQ(request_error({{"messages", conversation(eg::server::kMaxMessages - 1)}}), "(accepted)");
  ojson at = conversation(eg::server::kMaxMessages);
  at.back()["role"] = "user";
  EXPECT_EQ(request_error({{"messages", at}}), "(accepted)");
  // ... one more is refused, naming the field.
  EXPECT_EQ(request_error({{"messages", conversation(eg::server::kMaxMessages + 1)}}),
            "messages: at most 1024 messages, got 1025");
}

TEST(ResourceLimits, ToolsPerRequest) {
  auto tools = [](size_t n) {
    ojson t = ojson::array();
    for (size_t i = 0; i < n; ++i)
      t.push_back({{"type", "function"}, {"function", {{"name", "f" + std::to_string(i)}, {"parameters", {{"type", "object"}}}}}});
    return t;
  };
  EXPECT_EQ(request_error({{"messages", conversation(1)}, {"tools", tools(eg::server::kMaxTools)}}), "(accepted)");
  EXPECT_EQ(request_error({{"messages", conversation(1)}, {"tools", tools(eg::server::kMaxTools + 1)}}),
            "tools: at most 128 tools, got 129");
}

// --- request JSON: nesting depth 64, 1024 keys per object, while parsing ------------------------

std::string body_error(const std::string& body) {
  try {
    eg::server::parse_body(body);
  } catch (const eg::server::ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.what();
  }
  return "(accepted)";
}

TEST(ResourceLimits, RequestJsonDepthAndKeys) {
  auto nested = [](int depth) { return "{\"a\": " + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}"; };
  EXPECT_EQ(body_error(nested(eg::server::kMaxJsonDepth + 1)), "(accepted)");  // depth 0 .. 64
  EXPECT_EQ(body_error(nested(eg::server::kMaxJsonDepth + 2)), "the request body nests deeper than 64 levels");
  EXPECT_EQ(body_error(std::string(300000, '[')), "the request body nests deeper than 64 levels");
  auto keys = [](size_t n) {
    std::string s = "{";
    for (size_t i = 0; i < n; ++i) s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": 0";
    return s + "}";
  };
  EXPECT_EQ(body_error(keys(eg::server::kMaxObjectKeys)), "(accepted)");
  EXPECT_EQ(body_error(keys(eg::server::kMaxObjectKeys + 1)), "the request body has an object of more than 1024 keys");
  // The keys limit is also what keeps parsing fast: a 1 MiB body of one object with 10^5 keys is
  // refused after 1025 of them (parsing it whole took 20 s).
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(body_error(keys(100000)), "(accepted)");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  // Tool-call arguments (a JSON string inside the body) are parsed under the same limits.
  ojson m = conversation(1);
  m.push_back({{"role", "assistant"},
               {"tool_calls", ojson::array({{{"id", "c"}, {"type", "function"},
                                             {"function", {{"name", "f"}, {"arguments", "{\"x\": " + std::string(100, '[') + "}"}}}}})}});
  m.push_back({{"role", "user"}, {"content", "next"}});
  EXPECT_EQ(request_error({{"messages", m}}), "messages[1].tool_calls: tool call arguments nests deeper than 64 levels");
}

TEST(ResourceLimits, StopStringsPerRequest) {
  ojson stop = ojson::array();
  for (size_t i = 0; i < eg::server::kMaxStopStrings; ++i) stop.push_back("s" + std::to_string(i));
  EXPECT_EQ(request_error({{"messages", conversation(1)}, {"stop", stop}}), "(accepted)");
  stop.push_back("one more");
  EXPECT_EQ(request_error({{"messages", conversation(1)}, {"stop", stop}}), "stop: at most 16 stop strings");
}

}  // namespace
