// libFuzzer target: JSON schema -> grammar compilation (json_schema_grammar,
// gemma4_tool_call_grammar) and the Matcher over arbitrary token sequences, docs/reliability.md.
// Built by scripts/fuzz.
//
// Input: byte 0 chooses the grammar (mod 3: 0 a JSON schema, 1 a Gemma 4 tools array, 2 the
// json_object grammar), then JSON text, a NUL byte, and token choices (2 bytes each). A choice
// with its top bit clear picks the (value mod count)-th token the matcher allows (a walk along
// accepted paths); with the top bit set it is a raw id mod the vocabulary size, which accept()
// must either take (when allows() says so) or refuse with eg::Error.
// Vocabularies: tiny-gemma3 (JSON grammars) and tiny-gemma4 (tool calls, which need its
// <|tool_call>, <tool_call|>, <|"|> tokens); end ids are each tokenizer's eos.
// At most kMaxSteps (48) tokens per input. Checks, at every step: mask() leaves exactly the ids allowed() has set finite, and allows(id)
// agrees with allowed() for the chosen id and 16 others; an end id is allowed only when
// complete(); after an end id nothing is allowed. When a JSON grammar is complete(), the bytes
// produced parse as JSON (nlohmann); when a tools grammar is complete, parse_gemma4_tool_calls
// finds at least one call in the text and no call text is left in `content`.
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "fuzz_util.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace {

using ojson = nlohmann::ordered_json;

void check(bool ok, const std::string& what) {
  if (!ok) egfuzz::fail("grammar_fuzz", what);
}

struct Vocab {
  eg::Tokenizer tok;
  std::shared_ptr<const eg::grammar::TokenVocab> v;
};

const Vocab& vocab(bool gemma4) {
  auto load = [](const char* dir) {
    eg::Tokenizer t = eg::Tokenizer::load_dir(egfuzz::shared_dir() + "/models/" + dir);
    auto v = eg::grammar::TokenVocab::build(t, {t.eos_id()});
    return Vocab{std::move(t), std::move(v)};
  };
  static const Vocab g3 = load("tiny-gemma3"), g4 = load("tiny-gemma4");
  return gemma4 ? g4 : g3;
}

// Tokens per input: each step computes allowed() over the whole vocabulary (~5 ms with ASan and
// coverage), so long walks would make the target slow; 48 tokens reach every grammar construct.
constexpr size_t kMaxSteps = 48;

bool bit(const std::vector<uint64_t>& b, int32_t id) { return (b[static_cast<size_t>(id) / 64] >> (id % 64)) & 1; }

void walk(const std::shared_ptr<const eg::grammar::Grammar>& g, const Vocab& voc, bool tools, std::string_view choices) {
  eg::grammar::Matcher m(g, voc.v);
  const int32_t n = voc.v->size();
  std::vector<float> logits(static_cast<size_t>(n));
  std::string text;  // bytes produced; special tokens as their text
  for (size_t step = 0; step + 1 < choices.size() && step < 2 * kMaxSteps; step += 2) {
    uint16_t c;
    std::memcpy(&c, choices.data() + step, 2);
    const std::vector<uint64_t> allowed = m.allowed();  // a copy: accept() changes it
    check(allowed.size() * 64 >= static_cast<size_t>(n), "allowed() too short");
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < n; ++id)
      if (bit(allowed, id)) ids.push_back(id);
    if (step % 32 == 0) {  // mask() against allowed(): the whole vocabulary (costly: not every step)
      std::fill(logits.begin(), logits.end(), 0.0f);
      m.mask(logits.data(), n);
      for (int32_t id = 0; id < n; ++id) check(std::isfinite(logits[static_cast<size_t>(id)]) == bit(allowed, id), "mask() != allowed()");
    }
    for (int32_t id : voc.v->end_ids()) check(!bit(allowed, id) || m.complete(), "an end id is allowed before complete()");
    if (m.ended()) check(ids.empty(), "tokens allowed after the end");
    int32_t id;
    if ((c & 0x8000) == 0) {
      if (ids.empty()) break;
      id = ids[c % ids.size()];
    } else {
      id = static_cast<int32_t>(c & 0x7fff) % n;
    }
    for (int k = 0; k < 16; ++k) {
      const int32_t o = static_cast<int32_t>((static_cast<uint32_t>(id) * 2654435761u + k * 977u) % static_cast<uint32_t>(n));
      check(m.allows(o) == bit(allowed, o), "allows() != allowed()");
    }
    if (bit(allowed, id)) {
      m.accept(id);
      text += voc.v->is_special(id) ? voc.tok.piece(id) : std::string(voc.v->bytes(id));
    } else {
      bool threw = false;
      try {
        m.accept(id);
      } catch (const eg::Error&) {
        threw = true;
      }
      check(threw, "accept() took a token that allowed() refuses");
    }
    if (m.complete() && !m.ended()) {
      if (!tools) {
        check(!ojson::parse(text, nullptr, false).is_discarded(), "complete() but the text is not JSON: " + text);
      } else {
        const eg::grammar::ParsedToolOutput p = eg::grammar::parse_gemma4_tool_calls(text);
        check(!p.calls.empty(), "complete() but no tool call parses: " + text);
        check(p.content.find("<|tool_call>") == std::string::npos, "complete() but a call stays in content: " + text);
      }
    }
  }
}

void write_seeds(const std::string& dir) {
  const char* schemas[] = {
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}}, "required": ["name"]})",
      R"({"type": "array", "items": {"enum": ["red", "green", 3, null]}, "minItems": 1, "maxItems": 3})",
      R"({"anyOf": [{"type": "number"}, {"type": "boolean"}, {"const": "x"}], "nullable": true})",
      R"({"type": "object", "additionalProperties": {"type": ["string", "null"], "minLength": 2}})",
      R"({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "array", "items": {"type": "integer"}}}}}, "additionalProperties": false})",
  };
  const char* tools[] = {
      R"([{"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}])",
      R"([{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "b", "parameters": {"type": "object", "properties": {"x": {"type": "array", "items": {"type": "boolean"}}, "y": {"enum": ["p", "q"]}}}}}])",
  };
  std::string walk;
  for (int i = 0; i < 40; ++i) walk += std::string("\x01\x00", 2);  // mostly the second allowed token
  int k = 0;
  for (const char* s : schemas) egfuzz::write_seed(dir, "schema-" + std::to_string(k++), std::string(1, '\0') + s + std::string(1, '\0') + walk);
  for (const char* t : tools) egfuzz::write_seed(dir, "tools-" + std::to_string(k++), std::string(1, '\1') + t + std::string(1, '\0') + walk);
  egfuzz::write_seed(dir, "object", std::string("\2{}", 3) + std::string(1, '\0') + walk);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  egfuzz::maybe_write_seeds(write_seeds);
  (void)vocab(false);
  (void)vocab(true);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int mode = data[0] % 3;
  const auto [js, choices] = egfuzz::split(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1),
                                           std::string_view("\0", 1));
  std::shared_ptr<const eg::grammar::Grammar> g;
  try {
    if (mode == 2) {
      g = eg::grammar::json_object_grammar();
    } else {
      const ojson j = ojson::parse(js.begin(), js.end(), nullptr, false);
      if (j.is_discarded()) return 0;
      g = mode == 0 ? eg::grammar::json_schema_grammar(j) : eg::grammar::gemma4_tool_call_grammar(j);
    }
  } catch (const eg::Error&) {
    return 0;
  }
  walk(g, vocab(mode == 1), mode == 1, choices);
  return 0;
}
