// Value: construction, JSON conversion, Python truthiness / str() / repr() / == / <, json.dumps.
#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "tokenizer/jinja/pystr.h"

namespace eg::jinja {

namespace {

[[noreturn]] void value_error(const std::string& msg) { throw ValueError(msg, false); }

template <class J>
Value json_to_value(const J& j) {
  switch (j.type()) {
    case J::value_t::null:
      return Value::none();
    case J::value_t::boolean:
      return Value(j.template get<bool>());
    case J::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case J::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      value_error("an integer beyond 64 bits in the input is unsupported");
    }
    case J::value_t::number_float:
      return Value(j.template get<double>());
    case J::value_t::string:
      return Value(j.template get<std::string>());
    case J::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(json_to_value(e));
      return Value::list(std::move(items));
    }
    case J::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), json_to_value(it.value()));
      return Value::dict(std::move(items));
    }
    default:
      value_error("unsupported JSON value (binary or discarded) in the input");
  }
}

}  // namespace

Value Value::undefined(std::string what) {
  Value v;
  v.v_ = UndefinedT{std::move(what)};
  return v;
}

Value Value::none() {
  Value v;
  v.v_ = NoneT{};
  return v;
}

Value Value::list(std::vector<Value> items, bool tuple, bool generator) {
  auto d = std::make_shared<ListData>();
  d->items = std::move(items);
  d->tuple = tuple;
  d->generator = generator;
  Value v;
  v.v_ = std::move(d);
  return v;
}

Value Value::dict(std::vector<std::pair<std::string, Value>> items) {
  auto d = std::make_shared<DictData>();
  d->items = std::move(items);
  Value v;
  v.v_ = std::move(d);
  return v;
}

Value Value::object(std::shared_ptr<ObjectData> o) {
  Value v;
  v.v_ = std::move(o);
  return v;
}

Value Value::function(std::string name, std::function<Value(CallArgs&)> fn) {
  auto f = std::make_shared<Function>();
  f->name = std::move(name);
  f->fn = std::move(fn);
  Value v;
  v.v_ = std::move(f);
  return v;
}

Value Value::from_json(const nlohmann::json& j) { return json_to_value(j); }
Value Value::from_json(const nlohmann::ordered_json& j) { return json_to_value(j); }

double Value::number() const {
  if (is_float()) return as_float();
  return static_cast<double>(int_value());
}

bool Value::truthy() const {
  switch (type()) {
    case Type::Undefined:
    case Type::None:
      return false;
    case Type::Bool:
      return as_bool();
    case Type::Int:
      return as_int() != 0;
    case Type::Float:
      return as_float() != 0.0;
    case Type::String:
      return !str().empty();
    case Type::List:
      return list().generator || !list().items.empty();
    case Type::Dict:
      return !dict().items.empty();
    case Type::Object:
    case Type::Function:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (type()) {
    case Type::Undefined:
      return "Undefined";
    case Type::None:
      return "NoneType";
    case Type::Bool:
      return "bool";
    case Type::Int:
      return "int";
    case Type::Float:
      return "float";
    case Type::String:
      return "str";
    case Type::List:
      return list().generator ? "generator" : list().tuple ? "tuple" : "list";
    case Type::Dict:
      return "dict";
    case Type::Object:
      return object().kind == ObjectData::Kind::Loop ? "LoopContext" : "Namespace";
    case Type::Function:
      return "function";
  }
  return "?";
}

std::string Value::to_str() const {
  switch (type()) {
    case Type::Undefined:
      return "";
    case Type::String:
      return str();
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (type()) {
    case Type::Undefined:
      return "Undefined";
    case Type::None:
      return "None";
    case Type::Bool:
      return as_bool() ? "True" : "False";
    case Type::Int:
      return std::to_string(as_int());
    case Type::Float:
      return py::float_repr(as_float());
    case Type::String:
      return py::repr(str());
    case Type::List: {
      const ListData& l = list();
      if (l.generator) throw ValueError("printing a generator (add | list)", true);
      std::string out = l.tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += l.items[i].repr();
      }
      if (l.tuple && l.items.size() == 1) out += ",";
      return out + (l.tuple ? ")" : "]");
    }
    case Type::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict().items) {
        if (!first) out += ", ";
        first = false;
        out += py::repr(k) + ": " + v.repr();
      }
      return out + "}";
    }
    case Type::Object:
    case Type::Function:
      throw ValueError("printing a " + type_name(), true);
  }
  return "";
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void DictData::set(const std::string& key, Value v) {
  for (auto& [k, old] : items) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(key, std::move(v));
}

bool equal(const Value& a, const Value& b) {
  using T = Value::Type;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.number() == b.number();
    return a.int_value() == b.int_value();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case T::Undefined:
    case T::None:
      return true;
    case T::String:
      return a.str() == b.str();
    case T::List: {
      const ListData &x = a.list(), &y = b.list();
      if (&x == &y) return true;
      if (x.generator || y.generator || x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equal(x.items[i], y.items[i])) return false;
      return true;
    }
    case T::Dict: {
      const DictData &x = a.dict(), &y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* o = y.find(k);
        if (o == nullptr || !equal(v, *o)) return false;
      }
      return true;
    }
    case T::Object:
      return &a.object() == &b.object();
    case T::Function:
      return &a.function() == &b.function();
    default:
      return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.number() < b.number();
    return a.int_value() < b.int_value();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order = code point order
  if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple && !a.list().generator && !b.list().generator) {
    const auto &x = a.list().items, &y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equal(x[i], y[i])) continue;
      return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw ValueError("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'", false);
}

namespace {

void dump_json(const Value& v, const JsonStyle& st, int level, std::string& out) {
  const std::string item_sep = st.default_item_sep ? (st.indent >= 0 ? "," : ", ") : st.item_sep;
  auto newline = [&](int lvl) {
    if (st.indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(st.indent) * static_cast<size_t>(lvl), ' ');
  };
  switch (v.type()) {
    case Value::Type::None:
      out += "null";
      return;
    case Value::Type::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Type::Int:
      out += std::to_string(v.as_int());
      return;
    case Value::Type::Float: {
      const double d = v.as_float();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d < 0 ? "-Infinity" : "Infinity";
      else
        out += py::float_repr(d);
      return;
    }
    case Value::Type::String:
      out += py::json_quote(v.str(), st.ensure_ascii);
      return;
    case Value::Type::List: {
      const ListData& l = v.list();
      if (l.generator) break;
      if (l.items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        dump_json(l.items[i], st, level + 1, out);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Type::Dict: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict().items) items.push_back(&kv);
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* x, auto* y) { return x->first < y->first; });
      if (items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        out += py::json_quote(items[i]->first, st.ensure_ascii);
        out += st.key_sep;
        dump_json(items[i]->second, st, level + 1, out);
      }
      newline(level);
      out += '}';
      return;
    }
    default:
      break;
  }
  throw ValueError("Object of type " + v.type_name() + " is not JSON serializable", false);
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  dump_json(v, style, 0, out);
  return out;
}

}  // namespace eg::jinja
