// Gemma 4 tool calls: the tool-call grammar over tiny-gemma4's vocabulary (which has the special
// tokens <|tool_call>, <tool_call|>, <|"|>), the parser, and the round trip through the official
// chat template (../shared/templates/google-gemma-4-31B-it.jinja).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar_test_util.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;
using namespace eg::grammar;

struct G4 {
  eg::Tokenizer tok;
  std::shared_ptr<const TokenVocab> v;
};

const G4& g4() {
  static G4* p = [] {
    auto* g = new G4{eg::Tokenizer::load_dir(egtest::shared_dir() + "/models/tiny-gemma4"), nullptr};
    std::vector<int32_t> ends = {g->tok.eos_id(), g->tok.token_id("<turn|>"), g->tok.token_id("<|tool_response>")};
    g->v = TokenVocab::build(g->tok, ends);
    return g;
  }();
  return *p;
}

const json& tools() {
  static const json t = json::parse(R"([
    {"type":"function","function":{"name":"get_weather","description":"Weather for a city",
      "parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]},
                    "days":{"type":"integer"}},"required":["city"]}}},
    {"type":"function","function":{"name":"search","description":"Search",
      "parameters":{"type":"object","properties":{"query":{"type":"string"},
        "filters":{"type":"object","properties":{"Lang":{"type":"string"},"after":{"type":"number"},"exact":{"type":"boolean"}},
                   "required":["after"]},
        "tags":{"type":"array","items":{"type":"string"},"maxItems":3},
        "mode":{"anyOf":[{"type":"integer"},{"type":"array","items":{"type":"number"},"minItems":1}]}},
        "required":["query","filters"]}}},
    {"type":"function","function":{"name":"no_args","description":"No arguments"}},
    {"type":"function","function":{"name":"free_form","description":"Any object","parameters":{"type":"object"}}}
  ])");
  return t;
}

const json* params_of(const std::string& name) {
  for (const auto& t : tools())
    if (t["function"]["name"] == name) return t["function"].contains("parameters") ? &t["function"]["parameters"] : nullptr;
  return nullptr;
}

std::string template_source() { return egtest::read_file(egtest::shared_dir() + "/templates/google-gemma-4-31B-it.jinja"); }

// Renders an assistant message carrying `calls` with the official template.
std::string render_calls(const std::vector<ToolCall>& calls) {
  static const eg::ChatTemplate tpl(template_source());
  ojson tc = ojson::array();
  for (size_t k = 0; k < calls.size(); ++k)
    tc.push_back({{"id", "call_" + std::to_string(k)}, {"type", "function"},
                  {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}});
  ojson messages = ojson::array({{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"tool_calls", tc}}});
  eg::ChatOptions opt;
  opt.add_generation_prompt = false;
  opt.tools = ojson::parse(tools().dump());
  return tpl.render(messages, opt);
}

bool has_null_or_free(const ojson& v) {
  if (v.is_null()) return true;
  if (v.is_object() || v.is_array())
    for (const auto& e : v)
      if (has_null_or_free(e)) return true;
  return false;
}

void walk_tools(const std::string& only, int seeds, int* round_trips) {
  auto g = gemma4_tool_call_grammar(tools(), only);
  const auto& voc = g4();
  for (int seed = 1; seed <= seeds; ++seed) {
    Matcher m(g, voc.v);
    auto w = gtu::random_walk(m, *voc.v, 4000 + static_cast<uint64_t>(seed), 600, [&](Matcher&, const std::vector<uint64_t>& bits) {
      // Specials: only the three tool-call tokens, and end ids.
      for (int32_t id = 0; id < voc.v->size(); ++id)
        if (voc.v->is_special(id) && gtu::bit(bits, id) && !voc.v->is_end(id)) {
          const std::string p = voc.tok.piece(id);
          ASSERT_TRUE(p == "<|tool_call>" || p == "<tool_call|>" || p == "<|\"|>") << p;
        }
    });
    ASSERT_TRUE(w.ended) << "seed " << seed;
    const std::string text = gtu::walk_text(voc.tok, *voc.v, w);
    if (std::getenv("EG_GRAMMAR_PRINT")) std::printf("%s\n", text.c_str());
    ASSERT_EQ(text.rfind("<|tool_call>call:", 0), 0u) << text;
    const ParsedToolOutput out = parse_gemma4_tool_calls(text);
    EXPECT_EQ(out.content, "") << text;
    ASSERT_GE(out.calls.size(), 1u) << text;
    bool exact = true;
    for (const auto& c : out.calls) {
      if (!only.empty()) {
        EXPECT_EQ(c.name, only);
      }
      ASSERT_TRUE(c.arguments.is_object()) << text;
      const json* p = params_of(c.name);
      if (p == nullptr) {
        EXPECT_TRUE(c.arguments.empty()) << text;
      } else {
        EXPECT_EQ(gtu::validate(json::parse(c.arguments.dump()), *p), "") << text;
      }
      if (c.name == "free_form" || has_null_or_free(c.arguments)) exact = false;
    }
    // The official template writes the parsed calls back as exactly the generated text.
    if (exact) {
      const std::string rendered = render_calls(out.calls);
      EXPECT_NE(rendered.find("<|turn>model\n" + text), std::string::npos) << "generated: " << text << "\nrendered: " << rendered;
      ++*round_trips;
    }
  }
}

TEST(ToolCallGrammar, RandomWalksParseValidateAndRoundTrip) {
  int round_trips = 0;
  walk_tools("", 40, &round_trips);
  walk_tools("search", 15, &round_trips);
  walk_tools("get_weather", 10, &round_trips);
  EXPECT_GT(round_trips, 30);
}

TEST(ToolCallGrammar, MaskExactVsBruteForce) {
  const auto& voc = g4();
  Matcher m(gemma4_tool_call_grammar(tools()), voc.v);
  int step = 0;
  gtu::random_walk(m, *voc.v, 99, 150, [&](Matcher& mm, const std::vector<uint64_t>& bits) {
    if (step++ % 4 != 0) return;
    for (int32_t id = 0; id < voc.v->size(); ++id) {
      Matcher c = mm;
      bool ok = true;
      try {
        c.accept(id);
      } catch (const eg::Error&) {
        ok = false;
      }
      ASSERT_EQ(gtu::bit(bits, id), ok) << "id " << id << " '" << voc.tok.piece(id) << "'";
    }
  });
}

TEST(ToolCallGrammar, AcceptsTemplateTextRejectsOthers) {
  const auto& voc = g4();
  auto g = gemma4_tool_call_grammar(tools());
  auto accepts = [&](const std::string& text) {
    Matcher m(g, voc.v);
    try {
      for (int32_t id : voc.tok.encode(text, false)) m.accept(id);
    } catch (const eg::Error&) {
      return false;
    }
    return m.complete();
  };
  const std::string q = "<|\"|>";
  EXPECT_TRUE(accepts("<|tool_call>call:get_weather{city:" + q + "Paris" + q + ",days:3}<tool_call|>"));
  EXPECT_TRUE(accepts("<|tool_call>call:no_args{}<tool_call|><|tool_call>call:get_weather{city:" + q + q + "}<tool_call|>"));
  EXPECT_TRUE(accepts("<|tool_call>call:search{filters:{after:0.0001},query:" + q + "x" + q + "}<tool_call|>"));
  EXPECT_FALSE(accepts("<|tool_call>call:search{filters:{after:0.00001},query:" + q + "x" + q + "}<tool_call|>"));  // repr: 1e-05
  EXPECT_FALSE(accepts("<|tool_call>call:search{filters:{after:1.50},query:" + q + "x" + q + "}<tool_call|>"));  // repr: 1.5
  EXPECT_FALSE(accepts("<|tool_call>call:get_weather{days:3,city:" + q + "Paris" + q + "}<tool_call|>"));  // dictsort order
  EXPECT_FALSE(accepts("<|tool_call>call:get_weather{days:3}<tool_call|>"));  // city is required
  EXPECT_FALSE(accepts("<|tool_call>call:get_weather{city:\"Paris\"}<tool_call|>"));  // JSON quotes
  EXPECT_FALSE(accepts("<|tool_call>call:get_weather{ city:" + q + "Paris" + q + "}<tool_call|>"));  // whitespace
  EXPECT_FALSE(accepts("<|tool_call>call:unknown{}<tool_call|>"));
  EXPECT_FALSE(accepts("Sure! <|tool_call>call:no_args{}<tool_call|>"));
  EXPECT_FALSE(accepts("<|tool_call>call:get_weather{city:" + q + "a<|\"|>b" + q + "}<tool_call|>"));
  // Plain-text <|"|> inside a string (not the special token) is refused.
  Matcher m(g, voc.v);
  for (int32_t id : voc.tok.encode("<|tool_call>call:get_weather{city:" + q + "ab", false)) m.accept(id);
  for (int32_t id : voc.tok.encode("<|\"|", false, false)) m.accept(id);
  for (int32_t id : voc.tok.encode(">", false, false)) EXPECT_FALSE(m.allows(id));
}

TEST(ToolCallGrammar, SchemaErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type":"function"})", "non-empty array"},
      {R"([])", "non-empty array"},
      {R"([{"type":"function","function":{"description":"x"}}])", "name"},
      {R"([{"type":"function","function":{"name":"a b"}}])", "a b"},
      {R"([{"type":"code_interpreter","function":{"name":"a"}}])", "code_interpreter"},
      {R"([{"type":"function","function":{"name":"a","parameters":{"type":"string"}}}])", "parameters"},
      {R"([{"type":"function","function":{"name":"a","parameters":{"type":"object","properties":{"x":{"type":"string","pattern":"a"}}}}}])", "pattern"},
      {R"([{"type":"function","function":{"name":"a","parameters":{"type":"object","properties":{"x:y":{"type":"string"}}}}}])", "x:y"},
      {R"([{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"a"}}])", "duplicate"},
  };
  for (const auto& [t, word] : cases) {
    try {
      gemma4_tool_call_grammar(json::parse(t));
      ADD_FAILURE() << "accepted " << t;
    } catch (const SchemaError& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << t << " -> " << e.what();
    }
  }
  try {
    gemma4_tool_call_grammar(tools(), "nope");
    ADD_FAILURE();
  } catch (const SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos);
  }
}

// minLength / maxLength on tool arguments (the schema compiler is shared): <|"|>...<|"|> bodies
// are counted in code points; walks parse and validate (the validator checks lengths).
TEST(ToolCallGrammar, StringLengthBounds) {
  const json bounded = json::parse(R"([{"type":"function","function":{"name":"note","parameters":{"type":"object",
      "properties":{"title":{"type":"string","minLength":2,"maxLength":5},"body":{"type":"string","maxLength":30},
                    "tags":{"type":"array","items":{"type":"string","minLength":1,"maxLength":3},"maxItems":3}},
      "required":["title","tags"]}}}])");
  const json& params = bounded[0]["function"]["parameters"];
  auto g = gemma4_tool_call_grammar(bounded);
  const auto& voc = g4();
  int round_trips = 0;
  for (int seed = 1; seed <= 25; ++seed) {
    Matcher m(g, voc.v);
    auto w = gtu::random_walk(m, *voc.v, 7000 + static_cast<uint64_t>(seed), 600, [](Matcher&, const std::vector<uint64_t>&) {});
    ASSERT_TRUE(w.ended) << "seed " << seed;
    const std::string text = gtu::walk_text(voc.tok, *voc.v, w);
    const ParsedToolOutput out = parse_gemma4_tool_calls(text);
    ASSERT_GE(out.calls.size(), 1u) << text;
    for (const auto& c : out.calls) EXPECT_EQ(gtu::validate(json::parse(c.arguments.dump()), params), "") << text;
    ++round_trips;
  }
  EXPECT_EQ(round_trips, 25);
  auto accepts = [&](const std::string& text) {
    Matcher m(g, voc.v);
    try {
      for (int32_t id : voc.tok.encode(text, false)) m.accept(id);
    } catch (const eg::Error&) {
      return false;
    }
    return m.complete();
  };
  const std::string q = "<|\"|>";
  EXPECT_TRUE(accepts("<|tool_call>call:note{tags:[],title:" + q + "ab" + q + "}<tool_call|>"));
  EXPECT_TRUE(accepts("<|tool_call>call:note{tags:[" + q + "\xC3\xA9\xC3\xA9\xC3\xA9" + q + "],title:" + q + "a\nb<|" + q + "}<tool_call|>"));
  EXPECT_FALSE(accepts("<|tool_call>call:note{tags:[],title:" + q + "a" + q + "}<tool_call|>"));
  EXPECT_FALSE(accepts("<|tool_call>call:note{tags:[],title:" + q + "abcdef" + q + "}<tool_call|>"));
  EXPECT_FALSE(accepts("<|tool_call>call:note{tags:[" + q + q + "],title:" + q + "ab" + q + "}<tool_call|>"));
  EXPECT_FALSE(accepts("<|tool_call>call:note{tags:[" + q + "abcd" + q + "],title:" + q + "ab" + q + "}<tool_call|>"));
  // Mask exactness on this grammar (brute force over the whole tiny-gemma4 vocabulary).
  Matcher m(g, voc.v);
  int step = 0;
  gtu::random_walk(m, *voc.v, 321, 120, [&](Matcher& mm, const std::vector<uint64_t>& bits) {
    if (step++ % 3 != 0) return;
    for (int32_t id = 0; id < voc.v->size(); ++id) {
      Matcher c = mm;
      bool ok = true;
      try {
        c.accept(id);
      } catch (const eg::Error&) {
        ok = false;
      }
      ASSERT_EQ(gtu::bit(bits, id), ok) << "id " << id << " '" << voc.tok.piece(id) << "'";
    }
  });
  try {
    gemma4_tool_call_grammar(json::parse(R"([{"type":"function","function":{"name":"a","parameters":{"type":"object",
        "properties":{"x":{"type":"string","minLength":3,"maxLength":2}}}}}])"));
    ADD_FAILURE() << "minLength > maxLength accepted";
  } catch (const SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("minLength"), std::string::npos) << e.what();
  }
}

TEST(ToolCallParser, WellFormed) {
  const std::string q = "<|\"|>";
  auto out = parse_gemma4_tool_calls("pre <|tool_call>call:f{a:1}<tool_call|> post");
  EXPECT_EQ(out.content, "pre  post");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "f");
  EXPECT_EQ(out.calls[0].arguments, ojson::parse(R"({"a":1})"));

  out = parse_gemma4_tool_calls("<|tool_call>call:f{}<tool_call|><|tool_call>call:g.v-2{x:" + q + "y, \"z\"\n" + q +
                                ",n:-1.5,e:2e3,b:true,c:false,z:None,y:null,l:[1," + q + q + "],o:{k:{}," + q + "quoted key" + q +
                                ":[]}}<tool_call|>");
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].name, "f");
  EXPECT_EQ(out.calls[0].arguments, ojson::object());
  EXPECT_EQ(out.calls[1].name, "g.v-2");
  EXPECT_EQ(out.calls[1].arguments.dump(),
            R"({"x":"y, \"z\"\n","n":-1.5,"e":2000.0,"b":true,"c":false,"z":null,"y":null,"l":[1,""],"o":{"k":{},"quoted key":[]}})");
  EXPECT_TRUE(out.calls[1].arguments["n"].is_number_float());

  // A missing <tool_call|> is accepted only at the very end.
  out = parse_gemma4_tool_calls("<|tool_call>call:f{a:" + q + "x" + q + "}");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments["a"], "x");
}

TEST(ToolCallParser, MalformedIsContent) {
  const std::string q = "<|\"|>";
  const std::vector<std::string> bad = {
      "<|tool_call>",
      "<|tool_call>call:f",
      "<|tool_call>call:{a:1}<tool_call|>",
      "<|tool_call>f{a:1}<tool_call|>",
      "<|tool_call>call:f{a:" + q + "unterminated}<tool_call|>",
      "<|tool_call>call:f{a:1,}<tool_call|>",
      "<|tool_call>call:f{a:1}garbage",
      "<|tool_call>call:f{a:[1,2}<tool_call|>",
      "<|tool_call>call:f{a:01x}<tool_call|>",
      "<|tool_call>call:f{:1}<tool_call|>",
      "<|tool_call>call:f{a:1",
      "<|tool_call>call:f{a:-}<tool_call|>",
      "<|tool_call>call:f{a:1.}<tool_call|>",
      "<|tool_call>call:f g{a:1}<tool_call|>",
      "<|tool_call>call:f{a:" + std::string(100000, '[') + "}<tool_call|>",
  };
  for (const auto& t : bad) {
    const auto out = parse_gemma4_tool_calls(t);
    EXPECT_TRUE(out.calls.empty()) << t.substr(0, 80);
    EXPECT_EQ(out.content, t) << t.substr(0, 80);
  }
  // A bad call does not hide a good one after it.
  const auto out = parse_gemma4_tool_calls("<|tool_call>oops <|tool_call>call:f{}<tool_call|>");
  EXPECT_EQ(out.content, "<|tool_call>oops ");
  ASSERT_EQ(out.calls.size(), 1u);
}

TEST(ToolCallParser, RandomFragmentsNeverCrash) {
  const std::vector<std::string> frags = {"<|tool_call>", "call:", "f", "{", "}", "[", "]", ":", ",", "<|\"|>",
                                          "<tool_call|>", "1", "-", ".", "e", "true", "None", "x", " ", "<", "|"};
  std::mt19937_64 rng(3);
  for (int n = 0; n < 20000; ++n) {
    std::string s;
    const int len = static_cast<int>(rng() % 30);
    for (int k = 0; k < len; ++k) s += frags[rng() % frags.size()];
    const auto out = parse_gemma4_tool_calls(s);
    // Every call's text is removed from content; nothing else is lost.
    EXPECT_LE(out.content.size(), s.size());
    if (out.calls.empty()) {
      EXPECT_EQ(out.content, s);
    }
  }
}

}  // namespace
