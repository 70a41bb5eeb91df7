// Constrained decoding (src/grammar/): JSON Schema grammars over the real tiny-gemma3 (8,192)
// and Gemma 3 (262,144) vocabularies. Every walk's text must parse and validate with the
// independent validator of grammar_test_util.h; masks must equal brute force.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar_test_util.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace {

using nlohmann::json;
using namespace eg::grammar;

struct Vocab {
  eg::Tokenizer tok;
  std::shared_ptr<const TokenVocab> v;
};

std::shared_ptr<const TokenVocab> make_vocab(const eg::Tokenizer& tok) {
  std::vector<int32_t> ends = {tok.eos_id()};
  if (tok.token_id("<end_of_turn>") >= 0) ends.push_back(tok.token_id("<end_of_turn>"));
  return TokenVocab::build(tok, ends);
}

const Vocab& tiny() {
  static Vocab* v = [] {
    auto* p = new Vocab{eg::Tokenizer::load_dir(egtest::shared_dir() + "/models/tiny-gemma3"), nullptr};
    p->v = make_vocab(p->tok);
    return p;
  }();
  return *v;
}

const Vocab& big() {
  static Vocab* v = [] {
    auto* p = new Vocab{eg::Tokenizer::load_dir(egtest::shared_dir() + "/tokenizers/gemma3"), nullptr};
    p->v = make_vocab(p->tok);
    return p;
  }();
  return *v;
}

// The supported keyword list, nested.
std::vector<json> schemas() {
  return {
      json::parse(R"({"type":"string"})"),
      json::parse(R"({"type":"integer"})"),
      json::parse(R"({"type":"number"})"),
      json::parse(R"({"type":"boolean"})"),
      json::parse(R"({"type":"null"})"),
      json::parse(R"({})"),
      json::parse(R"({"type":"object"})"),
      json::parse(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
                      "required":["name"],"additionalProperties":false})"),
      json::parse(R"({"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":3},
                      "meta":{"type":"object","properties":{"ok":{"type":"boolean"},"score":{"type":"number"}},"required":["ok","score"]}},
                      "required":["tags","meta"],"title":"annotated","description":"ignored"})"),
      json::parse(R"({"enum":["red","green",1,null,{"a":[1,2]},"say \"hi\""]})"),
      json::parse(R"({"const":"fixed"})"),
      json::parse(R"({"type":"array","items":{"enum":[1,12,123,"a","ab",true,12]},"maxItems":5})"),
      json::parse(R"({"anyOf":[{"type":"string"},{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"],"additionalProperties":false}]})"),
      json::parse(R"({"type":["string","null"]})"),
      json::parse(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":4})"),
      json::parse(R"({"type":"array","maxItems":0})"),
      json::parse(R"({"type":"object","additionalProperties":{"type":"integer"}})"),
      json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}}})"),
      json::parse(R"({"type":"object","properties":{},"additionalProperties":false})"),
      json::parse(R"({"type":"string","nullable":true})"),
      json::parse(R"({"type":"object","required":["anything"]})"),
      json::parse(R"({"type":"array","items":{"anyOf":[{"type":"object","properties":{"k":{"const":1}},"required":["k"]},
                      {"type":"object","properties":{"k":{"enum":[2,3]},"v":{"type":"array","items":{"type":"number"}}},"required":["k","v"]}]}})"),
      json::parse(R"({"type":"object","properties":{"level1":{"type":"object","properties":{"level2":{"type":"object",
                      "properties":{"level3":{"type":"array","items":{"type":"array","items":{"type":"boolean"},"maxItems":2}}},
                      "required":["level3"]}},"required":["level2"]}},"required":["level1"]})"),
      // 23..: minLength / maxLength (code points)
      json::parse(R"({"type":"string","minLength":3,"maxLength":8})"),
      json::parse(R"({"type":"object","properties":{"id":{"type":"string","minLength":1,"maxLength":4},
                      "note":{"type":["string","null"],"maxLength":12},"tags":{"type":"array",
                      "items":{"type":"string","maxLength":2},"maxItems":4}},"required":["id","note","tags"]})"),
      json::parse(R"({"anyOf":[{"type":"string","maxLength":3},{"type":"string","minLength":5,"maxLength":6},{"type":"integer"}]})"),
      json::parse(R"({"type":"string","minLength":30,"maxLength":40})"),
      json::parse(R"({"type":"string","maxLength":0})"),
      json::parse(R"({"minLength":2,"maxLength":5})"),
      json::parse(R"({"type":"string","enum":["a","abc","abcdef",1],"minLength":2,"maxLength":5})"),
      json::parse(R"({"type":"string","minLength":2,"nullable":true})"),
  };
}

bool is_ws_only(const std::string& s) { return s.find_first_not_of(" \t\n\r") == std::string::npos; }

// Walks `g` over `voc`; the text must parse and validate against `schema`; specials never
// allowed except end ids when complete.
void walk_and_validate(const Vocab& voc, const std::shared_ptr<const Grammar>& g, const json& schema, uint64_t seed,
                       bool check_specials) {
  Matcher m(g, voc.v);
  const auto& v = *voc.v;
  std::vector<int32_t> specials;
  for (int32_t id = 0; id < v.size(); ++id)
    if (v.is_special(id)) specials.push_back(id);
  auto w = gtu::random_walk(m, v, seed, 400, [&](Matcher& mm, const std::vector<uint64_t>& bits) {
    if (!check_specials) return;
    for (int32_t id : specials)
      if (gtu::bit(bits, id)) {
        ASSERT_TRUE(v.is_end(id)) << "special token " << id << " allowed";
        ASSERT_TRUE(mm.complete()) << "end token allowed before complete";
      }
  });
  ASSERT_TRUE(w.ended) << "walk did not finish; schema " << schema.dump();
  const std::string text = gtu::walk_text(voc.tok, v, w);
  std::string bytes;
  for (int32_t id : w.ids)
    if (!v.is_end(id)) bytes += v.bytes(id);
  EXPECT_EQ(text, bytes) << "decode() differs from the token bytes";
  json parsed;
  try {
    parsed = json::parse(text);
  } catch (const std::exception& e) {
    FAIL() << "does not parse: " << e.what() << "\ntext: " << text << "\nschema: " << schema.dump();
  }
  EXPECT_EQ(gtu::validate(parsed, schema), "") << "text: " << text << "\nschema: " << schema.dump();
  EXPECT_FALSE(is_ws_only(text));
  if (std::getenv("EG_GRAMMAR_PRINT")) std::printf("%s\n  -> %s\n", schema.dump().c_str(), text.c_str());
}

TEST(GrammarVocab, TokenBytesMatchDecode) {
  for (const Vocab* voc : {&tiny(), &big()}) {
    const auto& v = *voc->v;
    int checked = 0;
    for (int32_t id = 0; id < v.size(); id += (v.size() > 10000 ? 7 : 1)) {
      if (v.is_special(id)) continue;
      const std::string d = voc->tok.decode({id});
      if (d.find("\xEF\xBF\xBD") != std::string::npos) continue;  // a lone byte piece: U+FFFD
      ASSERT_EQ(d, std::string(v.bytes(id))) << "id " << id;
      ++checked;
    }
    EXPECT_GT(checked, 1000);
  }
}

TEST(GrammarWalk, SchemasTinyVocab) {
  const auto all = schemas();
  for (size_t k = 0; k < all.size(); ++k) {
    SCOPED_TRACE(all[k].dump());
    auto g = json_schema_grammar(all[k]);
    for (uint64_t seed = 1; seed <= 6; ++seed) walk_and_validate(tiny(), g, all[k], seed * 1000 + k, true);
  }
}

TEST(GrammarWalk, JsonObjectTinyVocab) {
  auto g = json_object_grammar();
  for (uint64_t seed = 1; seed <= 10; ++seed) walk_and_validate(tiny(), g, json::parse(R"({"type":"object"})"), seed, true);
}

TEST(GrammarWalk, SchemasGemma3Vocab) {
  const auto all = schemas();
  for (size_t k = 0; k < all.size(); ++k) {
    SCOPED_TRACE(all[k].dump());
    auto g = json_schema_grammar(all[k]);
    walk_and_validate(big(), g, all[k], 77 + k, k % 4 == 0);
  }
}

// mask() equals brute force (accept on a copy) over the whole 8k vocabulary, on the states
// of random walks.
TEST(GrammarMask, ExactVsBruteForceTiny) {
  const auto all = schemas();
  const auto& v = *tiny().v;
  int states = 0;
  for (size_t k = 0; k < all.size(); ++k) {
    SCOPED_TRACE(all[k].dump());
    Matcher m(json_schema_grammar(all[k]), tiny().v);
    uint64_t step = 0;
    gtu::random_walk(m, v, 500 + k, 200, [&](Matcher& mm, const std::vector<uint64_t>& bits) {
      if (step++ % 3 != 0) return;
      ++states;
      std::vector<float> logits(static_cast<size_t>(v.size()) + 5, 1.0f);
      Matcher copy = mm;
      copy.mask(logits.data(), static_cast<int>(logits.size()));
      for (int32_t id = 0; id < v.size(); ++id) {
        Matcher c = mm;
        bool ok = true;
        try {
          c.accept(id);
        } catch (const eg::Error&) {
          ok = false;
        }
        ASSERT_EQ(gtu::bit(bits, id), ok) << "id " << id << " '" << v.bytes(id) << "'";
        ASSERT_EQ(std::isinf(logits[static_cast<size_t>(id)]), !ok) << "id " << id;
      }
      for (size_t id = static_cast<size_t>(v.size()); id < logits.size(); ++id) ASSERT_TRUE(std::isinf(logits[id]));
    });
  }
  EXPECT_GT(states, 100);
}

TEST(GrammarMask, ExactVsBruteForceGemma3Sample) {
  const auto all = schemas();
  const auto& v = *big().v;
  std::mt19937_64 rng(5);
  for (size_t k : {0u, 7u, 8u, 9u, 15u, 20u, 23u, 24u, 26u}) {
    SCOPED_TRACE(all[k].dump());
    Matcher m(json_schema_grammar(all[k]), big().v);
    uint64_t step = 0;
    gtu::random_walk(m, v, 900 + k, 60, [&](Matcher& mm, const std::vector<uint64_t>& bits) {
      if (step++ % 5 != 0) return;
      std::vector<int32_t> ids;
      for (int n = 0; n < 3000; ++n) ids.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(v.size())));
      for (int32_t id = 0; id < v.size(); ++id)
        if (gtu::bit(bits, id) && rng() % 20 == 0) ids.push_back(id);
      for (int32_t id : ids) {
        Matcher c = mm;
        bool ok = true;
        try {
          c.accept(id);
        } catch (const eg::Error&) {
          ok = false;
        }
        ASSERT_EQ(gtu::bit(bits, id), ok) << "id " << id << " '" << v.bytes(id) << "'";
      }
    });
  }
}

TEST(GrammarMask, EndOnlyWhenComplete) {
  const auto& voc = tiny();
  Matcher m(json_schema_grammar(json::parse(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})")), voc.v);
  const int32_t eos = voc.tok.eos_id();
  EXPECT_FALSE(m.allows(eos));
  EXPECT_THROW(m.accept(eos), eg::Error);
  for (int32_t id : voc.tok.encode("{\"a\":12}", false)) {  // compact: no space after the colon
    EXPECT_FALSE(m.complete());
    m.accept(id);
  }
  EXPECT_TRUE(m.complete());
  // Complete and nothing can follow: only the end ids stay.
  const auto& bits = m.allowed();
  for (int32_t id = 0; id < voc.v->size(); ++id) EXPECT_EQ(gtu::bit(bits, id), voc.v->is_end(id)) << id;
  m.accept(eos);
  EXPECT_TRUE(m.ended());
  EXPECT_FALSE(m.allows(eos));
}

TEST(GrammarMask, RejectsInvalidJson) {
  const auto& voc = tiny();
  auto g = json_schema_grammar(json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},
                                              "required":["a"],"additionalProperties":false})"));
  auto accepts = [&](const std::string& text) {
    Matcher m(g, voc.v);
    try {
      for (int32_t id : voc.tok.encode(text, false)) m.accept(id);
    } catch (const eg::Error&) {
      return false;
    }
    return m.complete();
  };
  EXPECT_TRUE(accepts("{\"a\":1}"));
  EXPECT_TRUE(accepts("{\"a\":-5,\"b\":\"x\\u00e9\\n caf\xC3\xA9\"}"));
  EXPECT_FALSE(accepts("{\"b\":\"x\"}"));          // a is required
  EXPECT_FALSE(accepts("{\"b\":\"x\",\"a\":1}"));  // schema order
  EXPECT_FALSE(accepts("{\"a\":1,\"c\":2}"));      // additionalProperties false
  EXPECT_FALSE(accepts("{\"a\":01}"));
  EXPECT_FALSE(accepts("{\"a\":1,\"b\":\"\\ud800\"}"));  // lone surrogate escape
  EXPECT_FALSE(accepts("{\"a\":1,\"b\":\"tab\there\"}"));  // raw control char
  EXPECT_FALSE(accepts("{\"a\":12345678901234567}"));  // > 16 digits
  // Compact (the default): no whitespace anywhere outside strings.
  for (const char* t : {" {\"a\":1}", "{ \"a\":1}", "{\"a\" :1}", "{\"a\": 1}", "{\"a\":1 }", "{\"a\":1\n}"})
    EXPECT_FALSE(accepts(t)) << t;
}

TEST(GrammarMask, PrettyWhitespaceIsBounded) {
  const auto& voc = tiny();
  auto g = json_schema_grammar(json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"array","items":{"type":"string"}}},
                                              "required":["a"],"additionalProperties":false})"),
                               JsonWhitespace::Pretty);
  auto accepts = [&](const std::string& text) {
    Matcher m(g, voc.v);
    try {
      for (int32_t id : voc.tok.encode(text, false)) m.accept(id);
    } catch (const eg::Error&) {
      return false;
    }
    return m.complete();
  };
  EXPECT_TRUE(accepts("{\"a\":1}"));
  EXPECT_TRUE(accepts("{\n  \"a\": -5,\n  \"b\": [\n    \"x\"\n  ]\n}"));
  EXPECT_TRUE(accepts("\t{ \"a\" : 1 , \"b\" : [ ] }"));
  EXPECT_TRUE(accepts(std::string("{") + std::string(kMaxWs, ' ') + "\"a\":1}"));
  EXPECT_TRUE(accepts("{\n" + std::string(kMaxWs - 1, ' ') + "\"a\":1}"));
  EXPECT_FALSE(accepts(std::string("{") + std::string(kMaxWs + 1, ' ') + "\"a\":1}"));
  EXPECT_FALSE(accepts("{\n\n  \"a\":1}"));  // a blank line
  EXPECT_FALSE(accepts("{  \n\"a\":1}"));     // '\n' only first in a run
  EXPECT_FALSE(accepts("{\r\n\"a\":1}"));
  EXPECT_FALSE(accepts("{\"a\":1}\n"));        // nothing after the value
}

TEST(GrammarMask, EnumValuesThatArePrefixesOfOthers) {
  const auto& voc = tiny();
  auto g = json_schema_grammar(json::parse(R"({"enum":[1,12,123,"a"]})"));
  auto run = [&](const std::string& text) {
    Matcher m(g, voc.v);
    try {
      for (int32_t id : voc.tok.encode(text, false)) m.accept(id);
    } catch (const eg::Error&) {
      return -1;
    }
    return m.complete() ? 1 : 0;
  };
  EXPECT_EQ(run("1"), 1);
  EXPECT_EQ(run("12"), 1);
  EXPECT_EQ(run("123"), 1);
  EXPECT_EQ(run("1234"), -1);
  EXPECT_EQ(run("13"), -1);
  EXPECT_EQ(run("\"a\""), 1);
  EXPECT_EQ(run("\"a"), 0);
  EXPECT_EQ(run("\"ab\""), -1);
}

TEST(GrammarSchema, UnsupportedKeywordsAreErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type":"string","pattern":"^a"})", "pattern"},
      {R"({"type":"string","format":"date"})", "format"},
      {R"({"type":"integer","minimum":0})", "minimum"},
      {R"({"type":"number","maximum":1})", "maximum"},
      {R"({"type":"number","exclusiveMinimum":1})", "exclusiveMinimum"},
      {R"({"type":"number","multipleOf":2})", "multipleOf"},
      {R"({"$ref":"https://example.com/s.json"})", "$ref"},
      {R"({"$ref":"#/$defs/a","$defs":{"a":{"type":"string"}}})", "$ref"},
      {R"({"oneOf":[{"type":"string"}]})", "oneOf"},
      {R"({"allOf":[{"type":"string"}]})", "allOf"},
      {R"({"not":{"type":"string"}})", "not"},
      {R"({"type":"object","patternProperties":{"a":{}}})", "patternProperties"},
      {R"({"type":"object","minProperties":1})", "minProperties"},
      {R"({"type":"array","uniqueItems":true})", "uniqueItems"},
      {R"({"type":"array","prefixItems":[{}]})", "prefixItems"},
      {R"({"type":"array","items":[{"type":"string"}]})", "items"},
      {R"({"type":"array","contains":{}})", "contains"},
      {R"({"if":{},"then":{}})", "if"},
      {R"({"type":"object","properties":{"a":{"type":"string","pattern":"x"}}})", "pattern"},
      {R"({"type":"date"})", "date"},
      {R"({"type":"array","minItems":3,"maxItems":1})", "minItems"},
      {R"({"enum":[]})", "enum"},
      {R"({"anyOf":[]})", "anyOf"},
      {R"({"enum":["a"],"minLength":2})", "minLength"},  // no enum value long enough
      {R"({"type":"string","minLength":-1})", "minLength"},
      {R"({"type":"string","maxLength":2.5})", "maxLength"},
      {R"({"type":"string","maxLength":"3"})", "maxLength"},
      {R"({"type":"string","minLength":true})", "minLength"},
      {R"({"type":"string","maxLength":1000001})", "maxLength"},
      {R"({"type":"string","minLength":5,"maxLength":4})", "minLength"},
      {R"({"type":"object","properties":{"a":{"type":"string","maxLength":-2}}})", "/properties/a"},
      {R"({"anyOf":[{"type":"string"}],"maxLength":3})", "maxLength"},
      {R"({"type":"integer","minLength":-1})", "minLength"},  // validated even where it does not apply
      {R"({"type":"integer","enum":["a"]})", "enum"},
      {R"(false)", "false"},
      {R"(3)", "must be an object"},
  };
  for (const auto& [schema, word] : cases) {
    try {
      json_schema_grammar(json::parse(schema));
      ADD_FAILURE() << "accepted " << schema;
    } catch (const SchemaError& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << schema << " -> " << e.what();
    }
  }
}

// minLength / maxLength count Unicode code points of the decoded string: a multi-byte UTF-8
// character or an escape (\n, \u00e9) is one.
TEST(GrammarLength, CountsCodePoints) {
  const auto& voc = tiny();
  auto run = [&](const std::shared_ptr<const Grammar>& g, const std::string& text) {
    Matcher m(g, voc.v);
    try {
      for (int32_t id : voc.tok.encode(text, false)) m.accept(id);
    } catch (const eg::Error&) {
      return -1;  // rejected
    }
    return m.complete() ? 1 : 0;  // 0: a valid prefix
  };
  auto g = json_schema_grammar(json::parse(R"({"type":"string","minLength":3,"maxLength":4})"));
  EXPECT_EQ(run(g, "\"ab\""), -1);
  EXPECT_EQ(run(g, "\"abc\""), 1);
  EXPECT_EQ(run(g, "\"abcd\""), 1);
  EXPECT_EQ(run(g, "\"abcde"), -1);
  EXPECT_EQ(run(g, "\"ab"), 0);
  EXPECT_EQ(run(g, "\"\xC3\xA9\xC3\xA9\xC3\xA9\""), 1);           // é x3: 6 bytes, 3 characters
  EXPECT_EQ(run(g, "\"\xF0\x9F\x98\x80\xE2\x82\xAC\xC3\xA9" "a\""), 1);  // 4+3+2+1 bytes, 4 characters
  EXPECT_EQ(run(g, "\"\xF0\x9F\x98\x80\xE2\x82\xAC\xC3\xA9" "ab\""), -1);
  EXPECT_EQ(run(g, "\"\\u00e9\\n\\\"\""), 1);                  // \u00e9 \n \" : 3 characters
  EXPECT_EQ(run(g, "\"\\u00e9\\n\\\"\\/\\t\""), -1);              // 5
  EXPECT_EQ(run(g, "\"\\u00e9\\n\""), -1);                        // 2
  auto empty = json_schema_grammar(json::parse(R"({"type":"string","maxLength":0})"));
  EXPECT_EQ(run(empty, "\"\""), 1);
  EXPECT_EQ(run(empty, "\"a\""), -1);
  // Large bounds are one node (a counter), not one node per character.
  const size_t plain = json_schema_grammar(json::parse(R"({"type":"string"})"))->def().nodes.size();
  auto big_g = json_schema_grammar(json::parse(R"({"type":"string","minLength":9999,"maxLength":10000})"));
  EXPECT_LE(big_g->def().nodes.size(), plain + 1);
  const std::string body(9999, 'x');
  EXPECT_EQ(run(big_g, "\"" + body.substr(1) + "\""), -1);
  EXPECT_EQ(run(big_g, "\"" + body + "\""), 1);
  EXPECT_EQ(run(big_g, "\"" + body + "\\u00e9\""), 1);
  EXPECT_EQ(run(big_g, "\"" + body + "\\u00e9\\n"), -1);
  // Keys of free-form objects and unbounded strings are unaffected.
  auto free_obj = json_schema_grammar(json::parse(R"({"type":"object","additionalProperties":{"type":"string","maxLength":1}})"));
  EXPECT_EQ(run(free_obj, "{\"a long key\":\"x\"}"), 1);
  EXPECT_EQ(run(free_obj, "{\"k\":\"xy\"}"), -1);
  // enum with bounds: values outside them are dropped; the others are generated as they are.
  auto e = json_schema_grammar(json::parse(R"({"enum":["a","abc",7],"minLength":2})"));
  EXPECT_EQ(run(e, "\"abc\""), 1);
  EXPECT_EQ(run(e, "7"), 1);
  EXPECT_EQ(run(e, "\"a\""), -1);
}

// At every remaining room 0..40 of a maxLength string, the mask at the 262k vocabulary matches
// brute force on every token whose length is near the room (the safe-token bitsets by length) and
// on a random sample.
TEST(GrammarLength, MaskExactNearTheBoundGemma3) {
  const auto& voc = big();
  const auto& v = *voc.v;
  std::vector<int> len(static_cast<size_t>(v.size()), -1);
  for (int32_t id = 0; id < v.size(); ++id) {
    if (v.is_special(id)) continue;
    int n = 0;
    for (unsigned char c : v.bytes(id)) n += (c & 0xC0) != 0x80;
    len[static_cast<size_t>(id)] = n;
  }
  for (const char* schema : {R"({"type":"string","minLength":3,"maxLength":40})",
                             R"({"anyOf":[{"type":"string","maxLength":40},{"type":"string","maxLength":20}]})"}) {
    SCOPED_TRACE(schema);
    Matcher m(json_schema_grammar(json::parse(schema)), voc.v);
    m.accept(voc.tok.token_id("\""));
    std::mt19937_64 rng(11);
    const int32_t a = voc.tok.encode("a", false).at(0);
    for (int used = 0; used <= 40; ++used) {
      const int room = 40 - used;
      const std::vector<uint64_t> bits = m.allowed();
      int checked = 0;
      for (int32_t id = 0; id < v.size(); ++id) {
        const int l = len[static_cast<size_t>(id)];
        if (!(std::abs(l - room) <= 2 || std::abs(l - (20 - used)) <= 1 || rng() % 100 == 0)) continue;
        Matcher c = m;
        bool ok = true;
        try {
          c.accept(id);
        } catch (const eg::Error&) {
          ok = false;
        }
        ASSERT_EQ(gtu::bit(bits, id), ok) << "room " << room << " id " << id << " '" << v.bytes(id) << "'";
        ++checked;
      }
      EXPECT_GT(checked, 1000);
      if (room > 0) m.accept(a);
    }
  }
}

TEST(GrammarSchema, PropertyOrderOfOrderedJson) {
  const auto& voc = tiny();
  const auto s = nlohmann::ordered_json::parse(R"({"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"integer"}},"required":["z","a"]})");
  Matcher m(json_schema_grammar(s), voc.v);
  for (int32_t id : voc.tok.encode("{\"z\":1,\"a\":2}", false)) m.accept(id);
  EXPECT_TRUE(m.complete());
}

TEST(GrammarMatcher, ToolGrammarNeedsGemma4Tokens) {
  auto g = gemma4_tool_call_grammar(json::parse(R"([{"type":"function","function":{"name":"f"}}])"));
  EXPECT_THROW(Matcher(g, tiny().v), eg::Error);
}

}  // namespace
