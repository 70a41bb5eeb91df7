// Constrained decoding: grammars for structured output (OpenAI response_format json_object /
// json_schema) and Gemma 4 tool calls, and the per-request matcher that masks logits so the model
// can only produce text the grammar accepts. See docs/structured-output.md for the supported JSON
// Schema subset and every decision (optional properties, whitespace, number bounds, ...).
//
// Pieces:
//   Grammar     (this header)   immutable, compiled once per schema, shareable between requests;
//   TokenVocab  (token_vocab.h) per-tokenizer precomputation (token bytes, special flags, tries),
//                               built once per model;
//   Matcher     (matcher.h)     per-request state: mask(), allows(), accept(), complete();
//   parse_gemma4_tool_calls (tool_calls.h): model output text -> content + tool calls.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace eg::grammar {

/// An unsupported or invalid schema / tools array. The message names the keyword or value
/// (e.g. "unsupported JSON Schema keyword 'pattern' at /properties/name"); servers turn it into
/// HTTP 400.
struct SchemaError : eg::Error {
  using eg::Error::Error;
};

struct GrammarDef;  // grammar_impl.h

/// A compiled grammar (nodes of a pushdown automaton over bytes and special tokens). Immutable.
class Grammar {
 public:
  explicit Grammar(std::unique_ptr<GrammarDef> def);
  ~Grammar();
  const GrammarDef& def() const { return *def_; }

 private:
  std::unique_ptr<GrammarDef> def_;
};

/// Whitespace outside strings in JSON grammars (docs/structured-output.md, "Whitespace").
///   Compact (default): none at all; the output is minified JSON (`{"a":1,"b":[2,3]}`).
///   Pretty: a run of at most kMaxWs (32) bytes before the value and around `{ } [ ] , :`, made
///           of at most one '\n' (as its first byte) then spaces / tabs: indented JSON, never
///           blank lines. Nothing after the complete value in either mode.
enum class JsonWhitespace { Compact, Pretty };

/// Grammar of one JSON value valid against `schema` (the JSON Schema subset of
/// docs/structured-output.md: type (string or array of types) object/array/string/number/integer/
/// boolean/null, properties, required, additionalProperties, items, minItems, maxItems, enum,
/// const, anyOf, nullable; annotations ignored). Properties are produced in schema order;
/// properties not in `required` are optional. Throws SchemaError on anything else.
/// The ordered_json overload keeps the schema's property order; nlohmann::json stores object keys
/// sorted, so through the json overload properties come out in alphabetical order (parse request
/// bodies as ordered_json to keep the client's order).
std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::json& schema,
                                                   JsonWhitespace ws = JsonWhitespace::Compact);
std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema,
                                                   JsonWhitespace ws = JsonWhitespace::Compact);

/// Grammar of any JSON object (response_format {"type": "json_object"}).
std::shared_ptr<const Grammar> json_object_grammar(JsonWhitespace ws = JsonWhitespace::Compact);

/// Grammar of one or more Gemma 4 tool calls, back to back:
///   <|tool_call>call:NAME{key:VALUE,...}<tool_call|>
/// where NAME is one of `tools` (OpenAI array [{"type": "function", "function": {"name",
/// "description", "parameters": schema}}]) — or only `only_name` when it is not empty — and the
/// arguments follow that function's `parameters` schema (same subset as json_schema_grammar),
/// written the way Gemma 4's chat template's format_argument writes them: strings between <|"|>
/// special tokens, bare keys in the template's dictsort order (case-insensitive), no whitespace.
/// `<|tool_call>`, `<tool_call|>`, `<|"|>` are special tokens (Matcher resolves them in the vocab).
/// Throws SchemaError on a malformed tools array, an unknown only_name, or an unsupported schema.
std::shared_ptr<const Grammar> gemma4_tool_call_grammar(const nlohmann::json& tools,
                                                        const std::string& only_name = "");
std::shared_ptr<const Grammar> gemma4_tool_call_grammar(const nlohmann::ordered_json& tools,
                                                        const std::string& only_name = "");

}  // namespace eg::grammar

#include "grammar/matcher.h"      // IWYU pragma: export
#include "grammar/token_vocab.h"  // IWYU pragma: export
#include "grammar/tool_calls.h"   // IWYU pragma: export
