// Jinja filters and tests, with jinja2's signatures and semantics (transformers' `tojson`).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/pystr.h"

namespace eg::jinja {

namespace {

const char* const kFilters[] = {
    "abs",  "capitalize", "count",      "d",    "default", "dictsort", "first",  "float",      "int",     "items",
    "join", "last",       "length",     "list", "lower",   "map",      "reject", "rejectattr", "replace", "reverse",
    "safe", "select",     "selectattr", "sort", "string",  "tojson",   "trim",   "unique",     "upper"};
const char* const kTests[] = {
    "boolean", "callable",  "defined",     "divisibleby", "eq",      "equalto",  "even",   "false",    "float",
    "ge",      "gt",        "greaterthan", "in",          "integer", "iterable", "le",     "lessthan", "lower",
    "lt",      "mapping",   "ne",          "none",        "number",  "odd",      "sameas", "sequence", "string",
    "true",    "undefined", "upper",       "==",          "!=",      "<",        "<=",     ">",        ">="};

bool flag(const std::optional<Value>& v, bool dflt) { return v ? v->truthy() : dflt; }

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then index 0 (item access first).
Value attr_path(const Value& item, const std::string& path) {
  Value v = item;
  for (const std::string& part : py::split(path, std::string("."), -1)) {
    if (v.is_undefined()) eval_error(v.undefined_hint());
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = get_item(v, digits ? Value(static_cast<int64_t>(std::strtoll(part.c_str(), nullptr, 10))) : Value(part));
  }
  return v;
}

// The sort key of jinja2's sort/dictsort/unique: strings lower-cased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py::lower(v.str()));
  return v;
}

std::string stripped(const std::string& s) { return py::strip(s, std::nullopt, true, true); }

// Python float(str); nullopt when Python raises ValueError.
std::optional<double> parse_float(const std::string& text) {
  std::string s = stripped(text);
  if (s.empty() || s.find_first_of("xXpP") != std::string::npos) return std::nullopt;
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return std::nullopt;
      continue;
    }
    t += s[i];
  }
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

// Python int(str) in base 10; nullopt when Python raises ValueError.
std::optional<int64_t> parse_int(const std::string& text) {
  const std::string s = stripped(text);
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  if (i == s.size()) return std::nullopt;
  std::string digits = s.substr(0, i);
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])) && i > 0 &&
        std::isdigit(static_cast<unsigned char>(s[i - 1])))
      continue;
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return std::nullopt;
    digits += s[i];
  }
  errno = 0;
  const long long v = std::strtoll(digits.c_str(), nullptr, 10);
  if (errno == ERANGE) eval_unsupported("integer beyond 64 bits");
  return v;
}

// Python str.islower()/isupper(): at least one cased character, and none of the other case.
bool has_case(const std::string& s, bool want_lower) {
  bool cased = false;
  for (char32_t c : py::decode(s)) {
    std::string one;
    py::append_utf8(one, c);
    const std::string lo = py::lower(one), up = py::upper(one);
    if (lo == up) continue;
    cased = true;
    if ((want_lower ? lo : up) != one) return false;
  }
  return cased;
}

Value to_list(const Value& x) {
  if (x.is_list()) return Value::list(x.list().items);
  return Value::list(iterate(x));
}

Value generator(std::vector<Value> items) { return Value::list(std::move(items), false, true); }

Value select_like(Interpreter& in, const std::string& name, const Value& x, CallArgs& args) {
  const bool attr = name == "selectattr" || name == "rejectattr";
  const bool keep_if = name == "select" || name == "selectattr";
  if (!args.kw.empty()) eval_unsupported(name + " with keyword arguments");
  size_t k = 0;
  std::string attribute;
  if (attr) {
    if (args.pos.empty() || !args.pos[0].is_string()) eval_error(name + "() needs an attribute name");
    attribute = args.pos[k++].str();
  }
  std::string test;
  if (k < args.pos.size()) {
    if (!args.pos[k].is_string()) eval_error(name + "() needs a test name");
    test = args.pos[k++].str();
    if (!is_known_test(test)) eval_unsupported("test " + test);
  }
  CallArgs rest;
  rest.pos.assign(args.pos.begin() + static_cast<std::ptrdiff_t>(k), args.pos.end());
  std::vector<Value> out;
  for (const Value& item : iterate(x)) {
    const Value v = attr ? attr_path(item, attribute) : item;
    CallArgs a = rest;
    const bool ok = test.empty() ? v.truthy() : apply_test(in, test, v, a);
    if (ok == keep_if) out.push_back(item);
  }
  return generator(std::move(out));
}

Value map_filter(Interpreter& in, const Value& x, CallArgs& args) {
  std::vector<Value> out;
  const bool by_attr = std::any_of(args.kw.begin(), args.kw.end(), [](auto& kv) { return kv.first == "attribute"; });
  if (by_attr) {
    auto b = bind_args("map", {"attribute", "default"}, args);
    if (!b[0]->is_string()) eval_error("map(attribute=...) needs a string");
    for (const Value& item : iterate(x)) {
      Value v = attr_path(item, b[0]->str());
      if (v.is_undefined() && b[1]) v = *b[1];
      out.push_back(std::move(v));
    }
    return generator(std::move(out));
  }
  if (args.pos.empty() || !args.pos[0].is_string()) eval_error("map() needs a filter name");
  const std::string f = args.pos[0].str();
  if (!is_known_filter(f)) eval_unsupported("filter " + f);
  CallArgs rest;
  rest.pos.assign(args.pos.begin() + 1, args.pos.end());
  rest.kw = args.kw;
  for (const Value& item : iterate(x)) {
    CallArgs a = rest;
    out.push_back(apply_filter(in, f, item, a));
  }
  return generator(std::move(out));
}

Value tojson(const Value& x, CallArgs& args) {
  auto b = bind_args("tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}, args);
  JsonStyle st;
  st.ensure_ascii = flag(b[0], false);
  if (b[1] && !b[1]->is_none()) {
    if (!b[1]->is_int()) eval_unsupported("tojson with a non-integer indent");
    st.indent = static_cast<int>(std::clamp<int64_t>(b[1]->as_int(), 0, 64));
  }
  if (b[2] && !b[2]->is_none()) {
    const Value& s = *b[2];
    if (!s.is_list() || s.list().items.size() != 2 || !s.list().items[0].is_string() || !s.list().items[1].is_string())
      eval_error("tojson separators must be a pair of strings");
    st.default_item_sep = false;
    st.item_sep = s.list().items[0].str();
    st.key_sep = s.list().items[1].str();
  }
  st.sort_keys = flag(b[3], false);
  return Value(to_json(x, st));
}

}  // namespace

bool is_known_filter(const std::string& name) {
  return std::any_of(std::begin(kFilters), std::end(kFilters), [&](const char* f) { return name == f; });
}

bool is_known_test(const std::string& name) {
  return std::any_of(std::begin(kTests), std::end(kTests), [&](const char* t) { return name == t; });
}

std::vector<std::optional<Value>> bind_args(const std::string& fname, const std::vector<std::string>& names,
                                            CallArgs& args) {
  std::vector<std::optional<Value>> out(names.size());
  if (args.pos.size() > names.size())
    eval_error(fname + "() takes at most " + std::to_string(names.size()) + " argument(s)");
  for (size_t i = 0; i < args.pos.size(); ++i) out[i] = std::move(args.pos[i]);
  for (auto& [k, v] : args.kw) {
    const auto it = std::find(names.begin(), names.end(), k);
    if (it == names.end()) eval_error(fname + "() got an unexpected keyword argument '" + k + "'");
    auto& slot = out[static_cast<size_t>(it - names.begin())];
    if (slot) eval_error(fname + "() got multiple values for argument '" + k + "'");
    slot = std::move(v);
  }
  return out;
}

Value apply_filter(Interpreter& in, const std::string& name, const Value& x, CallArgs& args) {
  if (name == "trim") {
    auto b = bind_args(name, {"chars"}, args);
    std::optional<std::string> chars;
    if (b[0] && !b[0]->is_none()) chars = b[0]->to_str();
    return Value(py::strip(x.to_str(), chars, true, true));
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "string" || name == "safe") {
    bind_args(name, {}, args);
    const std::string s = x.to_str();
    if (name == "upper") return Value(py::upper(s));
    if (name == "lower") return Value(py::lower(s));
    if (name == "capitalize") return Value(py::capitalize(s));
    return x.is_string() ? x : Value(s);
  }
  if (name == "default" || name == "d") {
    auto b = bind_args(name, {"default_value", "boolean"}, args);
    if (x.is_undefined() || (flag(b[1], false) && !x.truthy())) return b[0] ? *b[0] : Value("");
    return x;
  }
  if (name == "length" || name == "count") {
    bind_args(name, {}, args);
    return Value(length_of(x));
  }
  if (name == "list") {
    bind_args(name, {}, args);
    return to_list(x);
  }
  if (name == "first" || name == "last") {
    bind_args(name, {}, args);
    if (name == "last" && x.is_list() && x.list().generator) eval_error("'generator' object is not reversible");
    const std::vector<Value> items = iterate(x);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    auto b = bind_args(name, {"d", "attribute"}, args);
    const std::string sep = b[0] ? b[0]->to_str() : "";
    std::string out;
    bool first = true;
    for (const Value& item : iterate(x)) {
      if (!first) out += sep;
      first = false;
      out += (b[1] && !b[1]->is_none() ? attr_path(item, b[1]->to_str()) : item).to_str();
    }
    return Value(std::move(out));
  }
  if (name == "replace") {
    auto b = bind_args(name, {"old", "new", "count"}, args);
    if (!b[0] || !b[1]) eval_error("replace() needs old and new");
    int64_t count = -1;
    if (b[2] && !b[2]->is_none()) {
      if (!b[2]->is_int()) eval_error("replace() count must be an integer");
      count = b[2]->as_int();
    }
    return Value(py::replace(x.to_str(), b[0]->to_str(), b[1]->to_str(), count));
  }
  if (name == "int") {
    auto b = bind_args(name, {"default", "base"}, args);
    if (b[1] && !(b[1]->is_int() && b[1]->as_int() == 10)) eval_unsupported("int filter with a base other than 10");
    const Value dflt = b[0] ? *b[0] : Value(int64_t{0});
    if (x.is_int() || x.is_bool()) return Value(x.int_value());
    if (x.is_float()) {
      if (!std::isfinite(x.as_float())) eval_error("cannot convert float infinity/NaN to integer");
      return Value(static_cast<int64_t>(std::trunc(x.as_float())));
    }
    if (x.is_string()) {
      if (auto i = parse_int(x.str())) return Value(*i);
      if (auto d = parse_float(x.str())) {
        if (!std::isfinite(*d)) eval_error("cannot convert float infinity/NaN to integer");
        return Value(static_cast<int64_t>(std::trunc(*d)));
      }
    }
    return dflt;
  }
  if (name == "float") {
    auto b = bind_args(name, {"default"}, args);
    if (x.is_number()) return Value(x.number());
    if (x.is_string())
      if (auto d = parse_float(x.str())) return Value(*d);
    return b[0] ? *b[0] : Value(0.0);
  }
  if (name == "abs") {
    bind_args(name, {}, args);
    if (x.is_float()) return Value(std::fabs(x.as_float()));
    if (x.is_int() || x.is_bool()) return x.int_value() < 0 ? unary_op('-', x) : Value(x.int_value());
    eval_error("bad operand type for abs(): '" + x.type_name() + "'");
  }
  if (name == "items") {
    bind_args(name, {}, args);
    if (x.is_undefined()) return Value::list({});
    if (!x.is_dict()) eval_error("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, v] : x.dict().items) out.push_back(Value::list({Value(k), v}, true));
    return Value::list(std::move(out));
  }
  if (name == "dictsort") {
    auto b = bind_args(name, {"case_sensitive", "by", "reverse"}, args);
    if (!x.is_dict()) eval_error("dictsort needs a mapping, not '" + x.type_name() + "'");
    const bool cs = flag(b[0], false), rev = flag(b[2], false);
    const std::string by = b[1] ? b[1]->to_str() : "key";
    if (by != "key" && by != "value") eval_error("You can only sort by either 'key' or 'value'");
    std::vector<std::pair<Value, Value>> keyed;  // (sort key, (k, v))
    for (const auto& [k, v] : x.dict().items)
      keyed.emplace_back(sort_key(by == "key" ? Value(k) : v, cs), Value::list({Value(k), v}, true));
    std::stable_sort(keyed.begin(), keyed.end(), [rev](const auto& p, const auto& q) {
      return rev ? less(q.first, p.first) : less(p.first, q.first);
    });
    std::vector<Value> out;
    for (auto& kv : keyed) out.push_back(std::move(kv.second));
    return Value::list(std::move(out));
  }
  if (name == "sort" || name == "unique") {
    const bool sort = name == "sort";
    auto b = sort ? bind_args(name, {"reverse", "case_sensitive", "attribute"}, args)
                  : bind_args(name, {"case_sensitive", "attribute"}, args);
    const std::optional<Value>& attr = sort ? b[2] : b[1];
    const bool cs = flag(sort ? b[1] : b[0], false), rev = sort && flag(b[0], false);
    std::vector<std::pair<Value, Value>> keyed;
    for (const Value& item : iterate(x))
      keyed.emplace_back(sort_key(attr && !attr->is_none() ? attr_path(item, attr->to_str()) : item, cs), item);
    std::vector<Value> out;
    if (sort) {
      std::stable_sort(keyed.begin(), keyed.end(), [rev](const auto& p, const auto& q) {
        return rev ? less(q.first, p.first) : less(p.first, q.first);
      });
      for (auto& kv : keyed) out.push_back(std::move(kv.second));
      return Value::list(std::move(out));
    }
    std::vector<Value> seen;
    for (auto& kv : keyed) {
      const Value& k = kv.first;  // (not a structured binding: clang < 16 cannot capture one)
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, k); })) continue;
      seen.push_back(k);
      out.push_back(kv.second);
    }
    return generator(std::move(out));
  }
  if (name == "reverse") {
    bind_args(name, {}, args);
    if (x.is_string()) {
      std::u32string u = py::decode(x.str());
      std::reverse(u.begin(), u.end());
      return Value(py::encode(u));
    }
    std::vector<Value> items = iterate(x);
    std::reverse(items.begin(), items.end());
    return generator(std::move(items));
  }
  if (name == "map") return map_filter(in, x, args);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr")
    return select_like(in, name, x, args);
  if (name == "tojson") return tojson(x, args);
  eval_unsupported("filter " + name);
}

bool apply_test(Interpreter& in, const std::string& name, const Value& x, CallArgs& args) {
  using T = Value::Type;
  auto one = [&]() -> Value {
    auto b = bind_args(name, {"other"}, args);
    if (!b[0]) eval_error("test '" + name + "' needs an argument");
    return *b[0];
  };
  if (name == "defined" || name == "undefined") {
    bind_args(name, {}, args);
    return x.is_undefined() == (name == "undefined");
  }
  static const char* const kUnary[] = {"none",   "boolean", "true",    "false",    "integer",  "float",
                                       "number", "string",  "mapping", "sequence", "iterable", "callable",
                                       "odd",    "even",    "lower",   "upper"};
  if (std::any_of(std::begin(kUnary), std::end(kUnary), [&](const char* n) { return name == n; })) {
    bind_args(name, {}, args);
    if (name == "none") return x.is_none();
    if (name == "boolean") return x.is_bool();
    if (name == "true") return x.is_bool() && x.as_bool();
    if (name == "false") return x.is_bool() && !x.as_bool();
    if (name == "integer") return x.is_int();
    if (name == "float") return x.is_float();
    if (name == "number") return x.is_number();
    if (name == "string") return x.is_string();
    if (name == "mapping") return x.is_dict();
    // jinja2's sequence test asks for len() and __getitem__: true for dicts and Undefined too.
    if (name == "sequence")
      return x.is_string() || x.is_dict() || x.is_undefined() || (x.is_list() && !x.list().generator);
    if (name == "iterable")
      return x.is_string() || x.is_list() || x.is_dict() || x.is_undefined() ||
             (x.is_object() && x.object().kind == ObjectData::Kind::Loop);
    if (name == "callable") return x.is_function() || x.is_undefined();
    if (name == "lower" || name == "upper") return has_case(x.to_str(), name == "lower");
    const Value m = binary_op("%", x, Value(int64_t{2}));
    return (name == "odd") == m.truthy();
  }
  if (name == "divisibleby") return !binary_op("%", x, one()).truthy();
  if (name == "eq" || name == "equalto" || name == "==") return compare_op("==", x, one());
  if (name == "ne" || name == "!=") return compare_op("!=", x, one());
  if (name == "lt" || name == "lessthan" || name == "<") return compare_op("<", x, one());
  if (name == "le" || name == "<=") return compare_op("<=", x, one());
  if (name == "gt" || name == "greaterthan" || name == ">") return compare_op(">", x, one());
  if (name == "ge" || name == ">=") return compare_op(">=", x, one());
  if (name == "in") return compare_op("in", x, one());
  if (name == "sameas") {
    const Value o = one();
    if (x.is_none() || o.is_none()) return x.is_none() && o.is_none();
    if (x.is_bool() || o.is_bool()) return x.is_bool() && o.is_bool() && x.as_bool() == o.as_bool();
    if (x.type() != o.type()) return false;
    if (x.type() == T::List || x.type() == T::Dict || x.type() == T::Object || x.type() == T::Function)
      return equal(x, o) && (x.type() != T::List || &x.list() == &o.list()) &&
             (x.type() != T::Dict || &x.dict() == &o.dict());
    eval_unsupported("sameas on numbers or strings (Python object identity)");
  }
  (void)in;
  eval_unsupported("test " + name);
}

}  // namespace eg::jinja
