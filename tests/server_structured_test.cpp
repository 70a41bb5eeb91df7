// Structured output and tool calls through `edgegemma serve`: response_format json_object /
// json_schema produce JSON that parses and validates (checked by an independent validator here);
// tools with Gemma 4's tool format give OpenAI tool_calls whose arguments validate, and tool
// results fed back as `tool` messages render and answer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "server_test_util.h"

using nlohmann::json;
using namespace egtest;

namespace {

// A JSON Schema validator for the subset the server enforces (written for this test).
bool validate(const json& v, const json& s, std::string& why) {
  auto fail = [&](const std::string& m) {
    why = m + " at " + v.dump();
    return false;
  };
  if (s.contains("anyOf")) {
    for (const json& alt : s["anyOf"]) {
      std::string w;
      if (validate(v, alt, w)) return true;
    }
    return fail("no anyOf branch matches");
  }
  if (s.contains("const") && v != s["const"]) return fail("const");
  if (s.contains("enum")) {
    bool found = false;
    for (const json& e : s["enum"]) found = found || e == v;
    if (!found) return fail("enum");
  }
  if (s.contains("type")) {
    const std::string t = s["type"];
    const bool ok = (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
                    (t == "string" && v.is_string()) || (t == "boolean" && v.is_boolean()) ||
                    (t == "null" && v.is_null()) || (t == "number" && v.is_number()) ||
                    (t == "integer" && (v.is_number_integer() || v.is_number_unsigned()));
    if (!ok) return fail("type " + t);
  }
  if (v.is_object()) {
    const json props = s.value("properties", json::object());
    for (const json& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return fail("required " + r.get<std::string>());
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        if (!validate(it.value(), props[it.key()], why)) return false;
      } else if (s.contains("additionalProperties") && s["additionalProperties"] == false) {
        return fail("additional property " + it.key());
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return fail("minItems");
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return fail("maxItems");
    if (s.contains("items"))
      for (const json& x : v)
        if (!validate(x, s["items"], why)) return false;
  }
  return true;
}

json schema_request(const std::string& user, const json& schema, double temperature, int seed) {
  json b = chat_body(user, 400);
  b["temperature"] = temperature;
  b["seed"] = seed;
  b["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "answer"}, {"schema", schema}}}};
  return b;
}

const json kSchemas = json::parse(R"([
  {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
     "member": {"type": "boolean"}}, "required": ["name", "age", "member"], "additionalProperties": false},
  {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
     "sizes": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3},
     "note": {"anyOf": [{"type": "null"}, {"const": "ok"}]}}, "required": ["color", "sizes", "note"],
     "additionalProperties": false},
  {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"},
     "ok": {"type": "boolean"}}, "required": ["id", "ok"], "additionalProperties": false},
     "minItems": 2, "maxItems": 2}
])");

}  // namespace

TEST(ServerStructured, JsonSchemaOutputValidates) {
  eg::server::ServerOptions o;
  o.scheduler.slots = 2;
  o.scheduler.context_tokens = 1024;
  TestServer s(shared_dir() + "/models/tiny-gemma3", o);
  int complete = 0;
  for (size_t i = 0; i < kSchemas.size(); ++i) {
    for (double temp : {0.0, 0.8}) {
      for (int seed : {1, 2}) {
        if (temp == 0.0 && seed == 2) continue;
        auto [st, r] = s.post("/v1/chat/completions", schema_request("Describe it as JSON.", kSchemas[i], temp, seed));
        ASSERT_EQ(st, 200) << r.dump();
        if (r["choices"][0]["finish_reason"] == "length") continue;  // cut by max_tokens
        ++complete;
        const std::string text = content_of(r);
        const json v = json::parse(text, nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << "schema " << i << ": not JSON: " << text;
        std::string why;
        EXPECT_TRUE(validate(v, kSchemas[i], why)) << "schema " << i << ": " << why << "\n" << text;
      }
    }
  }
  EXPECT_GE(complete, 6) << "most answers should finish within 400 tokens";
  // json_object: any object; streamed output equals the non-streamed one.
  json b = chat_body("Give me JSON.", 400);
  b["response_format"] = {{"type", "json_object"}};
  auto [st, r] = s.post("/v1/chat/completions", b);
  ASSERT_EQ(st, 200);
  if (r["choices"][0]["finish_reason"] == "stop") {
    const json v = json::parse(content_of(r), nullptr, false);
    EXPECT_TRUE(v.is_object()) << content_of(r);
  }
  b["stream"] = true;
  EXPECT_EQ(joined_deltas(s.stream("/v1/chat/completions", b)), content_of(r));
}

// Whitespace outside JSON strings: the longest run, the number of runs, and whether a run holds
// two newlines (a blank line). Written for this test (a small JSON lexer: strings and escapes).
struct WsStats {
  size_t runs = 0, longest = 0;
  bool blank_line = false;
};
WsStats ws_outside_strings(const std::string& t) {
  WsStats st;
  bool in_str = false, esc = false;
  size_t run = 0, newlines = 0;
  for (char c : t) {
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      if (run++ == 0) ++st.runs;
      if (c == '\n' && ++newlines >= 2) st.blank_line = true;
      st.longest = std::max(st.longest, run);
      continue;
    }
    run = newlines = 0;
    if (c == '"') in_str = true;
  }
  return st;
}

TEST(ServerStructured, JsonIsCompactByDefault) {
  const WsStats probe = ws_outside_strings("{ \"a\" :\n\n  1,\"b c\":2}");  // the checker itself
  EXPECT_EQ(probe.runs, 3u);
  EXPECT_EQ(probe.longest, 4u);
  EXPECT_TRUE(probe.blank_line);
  eg::server::ServerOptions o;
  o.scheduler.slots = 1;
  o.scheduler.context_tokens = 1024;
  TestServer s(shared_dir() + "/models/tiny-gemma3", o);
  const json schema = json::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":16},
      "age":{"type":"integer"},"member":{"type":"boolean"},"tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":3}},
      "required":["name","age","member","tags"],"additionalProperties":false})");
  size_t pretty_ws = 0;
  for (const char* user : {"Describe a person as JSON.", "Who was the king? Answer in JSON.", "Give me JSON."}) {
    json b = schema_request(user, schema, 0.0, 1);
    auto [st, r] = s.post("/v1/chat/completions", b);
    ASSERT_EQ(st, 200) << r.dump();
    const std::string text = content_of(r);
    ASSERT_EQ(r["choices"][0]["finish_reason"], "stop") << text;
    ASSERT_FALSE(json::parse(text, nullptr, false).is_discarded()) << text;
    EXPECT_EQ(ws_outside_strings(text).runs, 0u) << "compact JSON expected: " << text;
    // Opt-in pretty output: valid, whitespace runs bounded (<= 32 bytes, no blank lines).
    b["response_format"]["whitespace"] = "pretty";
    auto [st2, r2] = s.post("/v1/chat/completions", b);
    ASSERT_EQ(st2, 200) << r2.dump();
    const std::string pretty = content_of(r2);
    if (r2["choices"][0]["finish_reason"] != "stop") continue;
    ASSERT_FALSE(json::parse(pretty, nullptr, false).is_discarded()) << pretty;
    const WsStats w = ws_outside_strings(pretty);
    EXPECT_LE(w.longest, 32u) << pretty;
    EXPECT_FALSE(w.blank_line) << pretty;
    pretty_ws += w.runs;
    if (std::getenv("EG_PRINT_JSON")) std::printf("compact: %s\npretty:  %s\n", text.c_str(), pretty.c_str());
  }
  std::printf("whitespace runs in the pretty outputs: %zu\n", pretty_ws);
  json bad = schema_request("x", schema, 0.0, 1);
  bad["response_format"]["whitespace"] = "wide";
  auto [st3, r3] = s.post("/v1/chat/completions", bad);
  EXPECT_EQ(st3, 400) << r3.dump();
  EXPECT_EQ(r3["error"]["param"], "response_format") << r3.dump();
}

TEST(ServerStructured, ToolCallsRoundTrip) {
  eg::server::ServerOptions o;
  o.scheduler.slots = 2;
  o.scheduler.context_tokens = 1024;
  o.chat_template = read_file(shared_dir() + "/templates/google-gemma-4-31B-it.jinja");
  TestServer s(shared_dir() + "/models/tiny-gemma4", o);
  const json params = json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]},
      "days": {"type": "integer"}, "metric": {"type": "boolean"}}, "required": ["city", "days", "metric"]})");
  const json tools = json::array({json{{"type", "function"},
                                       {"function", {{"name", "get_weather"}, {"description", "Weather forecast"}, {"parameters", params}}}},
                                  json{{"type", "function"},
                                       {"function", {{"name", "get_time"}, {"description", "Local time"},
                                                     {"parameters", {{"type", "object"}, {"properties", {{"tz", {{"enum", json::array({"UTC", "CET"})}}}}}, {"required", json::array({"tz"})}}}}}}});
  for (const json& choice : {json("required"), json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}) {
    json b = chat_body("What is the weather in Paris for the next days?", 200);
    b["tools"] = tools;
    b["tool_choice"] = choice;
    auto [st, r] = s.post("/v1/chat/completions", b);
    ASSERT_EQ(st, 200) << r.dump();
    ASSERT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r.dump();
    const json& calls = r["choices"][0]["message"]["tool_calls"];
    ASSERT_GE(calls.size(), 1u);
    const json& call = calls[0];
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
    const std::string name = call["function"]["name"];
    const json args = json::parse(call["function"]["arguments"].get<std::string>());
    std::string why;
    if (choice.is_object()) EXPECT_EQ(name, "get_weather");
    const json& schema = name == "get_weather" ? params : tools[1]["function"]["parameters"];
    EXPECT_TRUE(validate(args, schema, why)) << why;

    // Streamed: the same call arrives as a tool_calls delta.
    b["stream"] = true;
    auto ev = s.stream("/v1/chat/completions", b);
    json streamed_calls;
    for (const json& e : ev)
      if (e.is_object() && !e["choices"].empty() && e["choices"][0]["delta"].contains("tool_calls"))
        streamed_calls = e["choices"][0]["delta"]["tool_calls"];
    ASSERT_TRUE(streamed_calls.is_array());
    EXPECT_EQ(streamed_calls[0]["function"]["name"], name);
    EXPECT_EQ(streamed_calls[0]["function"]["arguments"], call["function"]["arguments"]);

    // The tool result goes back as a `tool` message; the conversation renders and answers.
    json follow = b;
    follow.erase("stream");
    follow["tool_choice"] = "auto";
    follow["messages"].push_back(r["choices"][0]["message"]);
    follow["messages"].push_back(json{{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "sunny, 21 C"}});
    auto [st2, r2] = s.post("/v1/chat/completions", follow);
    ASSERT_EQ(st2, 200) << r2.dump();
    EXPECT_GT(r2["usage"]["prompt_tokens"].get<int>(), r["usage"]["prompt_tokens"].get<int>());
  }
  // tool_choice none: plain text, no tool calls.
  json b = chat_body("Hello", 16);
  b["tools"] = tools;
  b["tool_choice"] = "none";
  auto [st, r] = s.post("/v1/chat/completions", b);
  ASSERT_EQ(st, 200);
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
  // A named function that is not in tools is a 400.
  b["tool_choice"] = {{"type", "function"}, {"function", {{"name", "nope"}}}};
  EXPECT_EQ(s.post("/v1/chat/completions", b).first, 400);
}
