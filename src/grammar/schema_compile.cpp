// JSON Schema (supported subset) and OpenAI tools arrays -> grammar nodes (grammar_impl.h).
// The subset and every decision are documented in docs/structured-output.md.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <set>
#include <unordered_set>
#include <utility>

#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"

namespace eg::grammar {

using ojson = nlohmann::ordered_json;

Grammar::Grammar(std::unique_ptr<GrammarDef> def) : def_(std::move(def)) {}
Grammar::~Grammar() = default;

namespace {

const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> k = {"title",    "description", "$schema",  "$id",       "$comment",
                                          "default",  "examples",    "deprecated", "readOnly", "writeOnly",
                                          "$defs",    "definitions", "strict"};
  return k;
}
const std::set<std::string>& supported_keywords() {
  static const std::set<std::string> k = {"type",  "properties", "required", "additionalProperties",
                                          "items", "minItems",   "maxItems", "enum",
                                          "const", "anyOf",      "nullable", "minLength", "maxLength"};
  return k;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool matches_type(const ojson& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer") return v.is_number_integer();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  return false;
}

// Unicode code points of a UTF-8 string (JSON Schema's string length).
int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// minLength / maxLength of `sc` (-1 when absent). Throws SchemaError unless each is an integer in
// 0..kMaxStringLength and minLength <= maxLength.
std::pair<int, int> string_bounds(const ojson& sc, const std::string& path) {
  auto get = [&](const char* kw) -> int {
    if (!sc.contains(kw)) return -1;
    const ojson& v = sc[kw];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxStringLength)
      throw SchemaError("'" + std::string(kw) + "' at " + path + " must be an integer in 0.." +
                        std::to_string(kMaxStringLength) + ", not " + v.dump());
    return static_cast<int>(v.get<int64_t>());
  };
  const int lo = get("minLength"), hi = get("maxLength");
  if (lo >= 0 && hi >= 0 && lo > hi)
    throw SchemaError("'minLength' " + std::to_string(lo) + " > 'maxLength' " + std::to_string(hi) + " at " + path);
  return {lo, hi};
}

class Compiler {
 public:
  explicit Compiler(GrammarDef& g) : g_(g) {}
  size_t size_ = 0;  // nodes + literal-trie nodes added (kMaxGrammarSize)

  int add(Node n) {
    size_ += 1 + n.lits.size();
    if (size_ > static_cast<size_t>(kMaxGrammarSize))
      throw SchemaError("the schema is too large: its grammar exceeds " + std::to_string(kMaxGrammarSize) +
                        " nodes (properties, enum characters, alternatives)");
    g_.nodes.push_back(std::move(n));
    return static_cast<int>(g_.nodes.size()) - 1;
  }

  int special(const std::string& text) {
    for (size_t k = 0; k < g_.specials.size(); ++k)
      if (g_.specials[k] == text) return 256 + static_cast<int>(k);
    g_.specials.push_back(text);
    return 256 + static_cast<int>(g_.specials.size()) - 1;
  }

  static void append_bytes(std::vector<uint16_t>& out, std::string_view s) {
    for (unsigned char c : s) out.push_back(c);
  }

  int literal(std::vector<uint16_t> syms, bool tool) {
    Node n;
    n.kind = Kind::Literal, n.tool = tool, n.lit = std::move(syms);
    return add(std::move(n));
  }
  int literal(std::string_view s, bool tool) {
    std::vector<uint16_t> v;
    append_bytes(v, s);
    return literal(std::move(v), tool);
  }

  int alt(std::vector<int> kids, bool tool) {
    if (kids.size() == 1) return kids[0];
    Node n;
    n.kind = Kind::Alt, n.tool = tool, n.kids = std::move(kids);
    return add(std::move(n));
  }

  // The shared nodes Kind::Any dispatches to, created on first use.
  int any(bool tool) {
    AnyNodes& a = g_.any[tool ? 1 : 0];
    if (a.obj >= 0) return any_node_[tool ? 1 : 0];
    Node any_n;
    any_n.kind = Kind::Any, any_n.tool = tool;
    const int any_id = add(any_n);
    any_node_[tool ? 1 : 0] = any_id;
    if (tool) g_.quote_sym = special("<|\"|>");
    Node s;
    s.kind = Kind::String, s.tool = tool;
    a.str = add(s);
    Node num;
    num.kind = Kind::Number, num.tool = tool;
    a.num = add(num);
    a.t = literal("true", tool);
    a.f = literal("false", tool);
    a.null = literal("null", tool);
    Node arr;
    arr.kind = Kind::Array, arr.tool = tool, arr.kids = {any_id};
    a.arr = add(arr);
    Node obj;
    obj.kind = Kind::Object, obj.tool = tool, obj.free_obj = true, obj.free_value = any_id;
    a.obj = add(obj);
    Node bk;
    bk.kind = Kind::BareKey, bk.tool = tool;
    a.bare_key = add(bk);
    return any_id;
  }

  // A constant value written in the flavor's syntax.
  void value_syms(const ojson& v, bool tool, std::vector<uint16_t>& out) {
    if (!tool) {
      append_bytes(out, v.dump());
      return;
    }
    if (v.is_string()) {
      const int q = special("<|\"|>");
      g_.quote_sym = q;
      out.push_back(static_cast<uint16_t>(q));
      append_bytes(out, v.get<std::string>());
      out.push_back(static_cast<uint16_t>(q));
    } else if (v.is_object()) {
      out.push_back('{');
      bool first = true;
      std::vector<std::pair<std::string, const ojson*>> entries;
      for (auto it = v.begin(); it != v.end(); ++it) entries.emplace_back(it.key(), &it.value());
      sort_tool_keys(entries);
      for (const auto& [k, value] : entries) {
        if (!first) out.push_back(',');
        first = false;
        append_bytes(out, k);
        out.push_back(':');
        value_syms(*value, tool, out);
      }
      out.push_back('}');
    } else if (v.is_array()) {
      out.push_back('[');
      for (size_t k = 0; k < v.size(); ++k) {
        if (k) out.push_back(',');
        value_syms(v[k], tool, out);
      }
      out.push_back(']');
    } else {
      append_bytes(out, v.dump());
    }
  }

  // Keys in the order of the Gemma 4 template's dictsort (case-insensitive, stable).
  static void sort_tool_keys(std::vector<std::pair<std::string, const ojson*>>& entries) {
    std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return lower(a.first) < lower(b.first); });
  }

  static void check_tool_key(const std::string& k, const std::string& path) {
    bool ok = !k.empty();
    for (unsigned char c : k)
      if (c == ':' || c == ',' || c == '{' || c == '}' || c == '[' || c == ']' || c == '<' || c < 0x21) ok = false;
    if (!ok)
      throw SchemaError("property name '" + k + "' at " + path +
                        " cannot be written as a bare key in Gemma 4's tool-call format");
  }

  int compile(const ojson& sc, bool tool, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth)
      throw SchemaError("schema nested deeper than " + std::to_string(kMaxSchemaDepth) + " levels at " + path);
    if (sc.is_boolean()) {
      if (sc.get<bool>()) return any(tool);
      throw SchemaError("schema 'false' at " + path + " accepts nothing");
    }
    if (!sc.is_object()) throw SchemaError("schema at " + path + " must be an object, not " + sc.dump());
    for (auto it = sc.begin(); it != sc.end(); ++it) {
      if (annotation_keywords().count(it.key())) continue;
      if (!supported_keywords().count(it.key()))
        throw SchemaError("unsupported JSON Schema keyword '" + it.key() + "' at " + path);
    }
    string_bounds(sc, path);  // validates minLength / maxLength whatever the type
    int node;
    if (sc.contains("enum") || sc.contains("const")) {
      node = compile_enum(sc, tool, path);
    } else if (sc.contains("anyOf")) {
      for (auto it = sc.begin(); it != sc.end(); ++it)
        if (it.key() != "anyOf" && it.key() != "nullable" && !annotation_keywords().count(it.key()))
          throw SchemaError("'anyOf' combined with '" + it.key() + "' at " + path + " is not supported");
      const ojson& branches = sc["anyOf"];
      if (!branches.is_array() || branches.empty())
        throw SchemaError("'anyOf' at " + path + " must be a non-empty array");
      std::vector<int> kids;
      for (size_t k = 0; k < branches.size(); ++k)
        kids.push_back(compile(branches[k], tool, path + "/anyOf/" + std::to_string(k), depth + 1));
      node = alt(std::move(kids), tool);
    } else {
      std::vector<int> kids;
      for (const std::string& type : types_of(sc, path)) kids.push_back(compile_type(sc, type, tool, path, depth));
      node = kids.empty() ? any(tool) : alt(std::move(kids), tool);
    }
    if (sc.contains("nullable")) {
      if (!sc["nullable"].is_boolean()) throw SchemaError("'nullable' at " + path + " must be a boolean");
      if (sc["nullable"].get<bool>()) node = alt({node, g_.any[tool ? 1 : 0].null >= 0 ? g_.any[tool ? 1 : 0].null : literal("null", tool)}, tool);
    }
    return node;
  }

  // Declared types, or the type implied by the keywords; empty: any value.
  static std::vector<std::string> types_of(const ojson& sc, const std::string& path) {
    static const std::set<std::string> known = {"object", "array", "string", "number", "integer", "boolean", "null"};
    std::vector<std::string> types;
    if (sc.contains("type")) {
      const ojson& t = sc["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const auto& e : t) {
          if (!e.is_string()) throw SchemaError("'type' at " + path + " must be a string or an array of strings");
          types.push_back(e.get<std::string>());
        }
      } else {
        throw SchemaError("'type' at " + path + " must be a string or a non-empty array of strings");
      }
      for (const auto& ty : types)
        if (!known.count(ty)) throw SchemaError("unsupported type '" + ty + "' at " + path);
    } else if (sc.contains("properties") || sc.contains("required") || sc.contains("additionalProperties")) {
      types.push_back("object");
    } else if (sc.contains("items") || sc.contains("minItems") || sc.contains("maxItems")) {
      types.push_back("array");
    } else if (sc.contains("minLength") || sc.contains("maxLength")) {
      types.push_back("string");
    }
    return types;
  }

  int compile_enum(const ojson& sc, bool tool, const std::string& path) {
    const char* kw = sc.contains("const") ? "const" : "enum";
    for (auto it = sc.begin(); it != sc.end(); ++it)
      if (it.key() != "enum" && it.key() != "const" && it.key() != "type" && it.key() != "nullable" &&
          it.key() != "minLength" && it.key() != "maxLength" && !annotation_keywords().count(it.key()))
        throw SchemaError("'" + std::string(kw) + "' combined with '" + it.key() + "' at " + path + " is not supported");
    if (sc.contains("const") && sc.contains("enum"))
      throw SchemaError("'const' combined with 'enum' at " + path + " is not supported");
    ojson values;
    if (sc.contains("const")) {
      values = ojson::array({sc["const"]});
    } else {
      values = sc["enum"];
      if (!values.is_array() || values.empty()) throw SchemaError("'enum' at " + path + " must be a non-empty array");
    }
    // Only an explicit 'type' filters (minLength alone does not make the enum string-only).
    const std::vector<std::string> types = sc.contains("type") ? types_of(sc, path) : std::vector<std::string>{};
    // The values are what is generated; minLength / maxLength only drop string values outside
    // the bounds (as 'type' drops values of other types), so the output still validates.
    const auto [min_len, max_len] = string_bounds(sc, path);
    Node set;
    set.kind = Kind::LitSet, set.tool = tool;
    set.lits.emplace_back();
    for (const auto& v : values) {
      if (!types.empty() &&
          std::none_of(types.begin(), types.end(), [&](const std::string& ty) { return matches_type(v, ty); }))
        continue;
      if (v.is_string() && ((min_len >= 0 && code_points(v.get<std::string>()) < min_len) ||
                            (max_len >= 0 && code_points(v.get<std::string>()) > max_len)))
        continue;
      if (tool && v.is_object())
        for (auto it = v.begin(); it != v.end(); ++it) check_tool_key(it.key(), path + "/" + kw);
      std::vector<uint16_t> syms;
      value_syms(v, tool, syms);
      int32_t at = 0;  // insert into the trie (duplicates merge)
      for (uint16_t sym : syms) {
        int32_t next = -1;
        for (const auto& [s2, child] : set.lits[static_cast<size_t>(at)].kids)
          if (s2 == sym) next = child;
        if (next < 0) {
          next = static_cast<int32_t>(set.lits.size());
          set.lits[static_cast<size_t>(at)].kids.emplace_back(sym, next);
          set.lits.emplace_back();
        }
        at = next;
      }
      set.lits[static_cast<size_t>(at)].terminal = true;
    }
    if (set.lits.size() == 1)
      throw SchemaError("no '" + std::string(kw) + "' value at " + path + " matches its 'type' / 'minLength' / 'maxLength'");
    return add(std::move(set));
  }

  int compile_type(const ojson& sc, const std::string& type, bool tool, const std::string& path, int depth) {
    if (type == "object") return compile_object(sc, tool, path, depth);
    if (type == "array") return compile_array(sc, tool, path, depth);
    if (type == "string") {
      any(tool);
      const auto [lo, hi] = string_bounds(sc, path);
      if (lo <= 0 && hi < 0) return g_.any[tool ? 1 : 0].str;
      // Bounded: one node whose frame counts code points (machine.cpp), O(1) in the bounds.
      Node n;
      n.kind = Kind::String, n.tool = tool, n.min = std::max(lo, 0), n.max = hi;
      return add(n);
    }
    if (type == "number" || type == "integer") {
      Node n;
      n.kind = Kind::Number, n.tool = tool, n.integer = type == "integer";
      return add(n);
    }
    if (type == "boolean") return alt({literal("true", tool), literal("false", tool)}, tool);
    return literal("null", tool);  // "null"
  }

  int compile_object(const ojson& sc, bool tool, const std::string& path, int depth) {
    Node n;
    n.kind = Kind::Object, n.tool = tool;
    // (key, schema) in emission order. Linear in the number of properties: ordered_json's own
    // lookups are linear, so no per-property lookup into it (a schema of 10^5 properties would be
    // quadratic; found by tests/limits_test).
    std::vector<std::pair<std::string, const ojson*>> entries;
    if (auto it = sc.find("properties"); it != sc.end()) {
      if (!it->is_object()) throw SchemaError("'properties' at " + path + " must be an object");
      for (auto p = it->begin(); p != it->end(); ++p) entries.emplace_back(p.key(), &p.value());
    }
    std::unordered_set<std::string> have;
    for (const auto& e : entries) have.insert(e.first);
    std::unordered_set<std::string> required;
    if (sc.contains("required")) {
      const ojson& r = sc["required"];
      if (!r.is_array()) throw SchemaError("'required' at " + path + " must be an array of strings");
      for (const auto& e : r) {
        if (!e.is_string()) throw SchemaError("'required' at " + path + " must be an array of strings");
        // A required name without a schema in `properties`: any value (appended in order).
        static const ojson kAnyValue = true;
        if (required.insert(e.get<std::string>()).second && have.insert(e.get<std::string>()).second)
          entries.emplace_back(e.get<std::string>(), &kAnyValue);
      }
    }
    bool extras = true;
    int extra_schema = -1;
    if (sc.contains("additionalProperties")) {
      const ojson& a = sc["additionalProperties"];
      if (a.is_boolean()) {
        extras = a.get<bool>();
      } else if (a.is_object()) {
        extra_schema = compile(a, tool, path + "/additionalProperties", depth + 1);
      } else {
        throw SchemaError("'additionalProperties' at " + path + " must be a boolean or a schema");
      }
    }
    if (tool) sort_tool_keys(entries);
    for (const auto& [k, schema] : entries) {
      const std::string sub = path + "/properties/" + k;
      Prop p;
      p.required = required.count(k) > 0;
      if (tool) {
        check_tool_key(k, sub);
        p.key = literal(k + ":", tool);
      } else {
        p.key = literal(ojson(k).dump(), tool);
      }
      p.value = compile(*schema, tool, sub, depth + 1);
      n.props.push_back(p);
    }
    if (n.props.empty() && extras) {
      n.free_obj = true;
      n.free_value = extra_schema >= 0 ? extra_schema : any(tool);
      any(tool);  // the key nodes
    }
    return add(std::move(n));
  }

  int compile_array(const ojson& sc, bool tool, const std::string& path, int depth) {
    Node n;
    n.kind = Kind::Array, n.tool = tool;
    auto count = [&](const char* kw) -> int {
      if (!sc.contains(kw)) return -1;
      const ojson& v = sc[kw];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 100000)
        throw SchemaError("'" + std::string(kw) + "' at " + path + " must be an integer in 0..100000");
      return static_cast<int>(v.get<int64_t>());
    };
    n.min = std::max(0, count("minItems"));
    n.max = count("maxItems");
    if (n.max >= 0 && n.min > n.max) throw SchemaError("'minItems' > 'maxItems' at " + path);
    if (sc.contains("items")) {
      const ojson& it = sc["items"];
      if (it.is_array()) throw SchemaError("'items' as an array (tuple validation) at " + path + " is not supported");
      n.kids = {compile(it, tool, path + "/items", depth + 1)};
    } else {
      n.kids = {any(tool)};
    }
    return add(std::move(n));
  }

 private:
  GrammarDef& g_;
  int any_node_[2] = {-1, -1};
};

std::shared_ptr<const Grammar> finish_json(std::unique_ptr<GrammarDef> def, int value, JsonWhitespace ws) {
  def->pretty_ws = ws == JsonWhitespace::Pretty;
  Node root;
  root.kind = Kind::Root, root.kids = {value};
  def->nodes.push_back(root);
  def->root = static_cast<int>(def->nodes.size()) - 1;
  return std::make_shared<const Grammar>(std::move(def));
}

}  // namespace

std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema, JsonWhitespace ws) {
  auto def = std::make_unique<GrammarDef>();
  Compiler c(*def);
  const int v = c.compile(schema, false, "#", 0);
  return finish_json(std::move(def), v, ws);
}

std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::json& schema, JsonWhitespace ws) {
  return json_schema_grammar(nlohmann::ordered_json::parse(schema.dump()), ws);
}

std::shared_ptr<const Grammar> json_object_grammar(JsonWhitespace ws) {
  auto def = std::make_unique<GrammarDef>();
  Compiler c(*def);
  c.any(false);
  const int obj = def->any[0].obj;
  return finish_json(std::move(def), obj, ws);
}

std::shared_ptr<const Grammar> gemma4_tool_call_grammar(const nlohmann::ordered_json& tools,
                                                        const std::string& only_name) {
  if (!tools.is_array() || tools.empty()) throw SchemaError("'tools' must be a non-empty array");
  auto def = std::make_unique<GrammarDef>();
  Compiler c(*def);
  const int open = c.special("<|tool_call>");
  const int close = c.special("<tool_call|>");
  std::vector<int> calls;
  std::set<std::string> names;
  for (size_t k = 0; k < tools.size(); ++k) {
    const std::string path = "tools[" + std::to_string(k) + "]";
    const ojson& t = tools[k];
    if (!t.is_object()) throw SchemaError(path + " must be an object");
    if (t.contains("type") && t["type"] != "function")
      throw SchemaError(path + ".type " + t["type"].dump() + " is not supported (only \"function\")");
    if (!t.contains("function") || !t["function"].is_object())
      throw SchemaError(path + ".function must be an object");
    const ojson& fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string()) throw SchemaError(path + ".function.name must be a string");
    const std::string name = fn["name"].get<std::string>();
    bool ok = !name.empty();
    for (unsigned char ch : name)
      if (!(std::isalnum(ch) || ch == '_' || ch == '-' || ch == '.')) ok = false;
    if (!ok) throw SchemaError(path + ".function.name '" + name + "' must match [A-Za-z0-9_.-]+");
    if (!names.insert(name).second) throw SchemaError("duplicate function name '" + name + "' in tools");
    if (!only_name.empty() && name != only_name) continue;
    // Compile even functions that are filtered out? No: only the ones that can be called.
    int args;
    const std::string ppath = path + ".function.parameters";
    if (!fn.contains("parameters") || fn["parameters"].is_null()) {
      Node n;
      n.kind = Kind::Object, n.tool = true;  // no properties, no extras: "{}"
      def->nodes.push_back(n);
      args = static_cast<int>(def->nodes.size()) - 1;
    } else {
      const ojson& p = fn["parameters"];
      if (!p.is_object() || (p.contains("type") && p["type"] != "object"))
        throw SchemaError(ppath + " must be an object schema with type \"object\"");
      for (const char* kw : {"enum", "const", "anyOf", "nullable"})
        if (p.contains(kw)) throw SchemaError("'" + std::string(kw) + "' at " + ppath + " is not supported");
      ojson obj = p;
      obj["type"] = "object";
      args = c.compile(obj, true, ppath, 0);
    }
    std::vector<uint16_t> head = {static_cast<uint16_t>(open)};
    Compiler::append_bytes(head, "call:" + name);
    Node seq;
    seq.kind = Kind::Seq, seq.tool = true;
    seq.kids = {c.literal(std::move(head), true), args, c.literal(std::vector<uint16_t>{static_cast<uint16_t>(close)}, true)};
    def->nodes.push_back(seq);
    calls.push_back(static_cast<int>(def->nodes.size()) - 1);
  }
  if (calls.empty()) throw SchemaError("tool_choice names function '" + only_name + "', which is not in 'tools'");
  c.any(true);  // registers <|"|> so every tool grammar names the same three special tokens
  Node rep;
  rep.kind = Kind::Repeat, rep.tool = true, rep.min = 1, rep.max = -1;
  rep.kids = {c.alt(std::move(calls), true)};
  def->nodes.push_back(rep);
  def->root = static_cast<int>(def->nodes.size()) - 1;
  return std::make_shared<const Grammar>(std::move(def));
}

std::shared_ptr<const Grammar> gemma4_tool_call_grammar(const nlohmann::json& tools, const std::string& only_name) {
  return gemma4_tool_call_grammar(nlohmann::ordered_json::parse(tools.dump()), only_name);
}

}  // namespace eg::grammar
