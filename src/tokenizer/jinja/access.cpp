// Attribute and item access (jinja2's getattr/getitem fallbacks), slicing, the str/dict methods
// templates call, and the global functions.
#include <ctime>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/jinja.h"
#include "tokenizer/jinja/pystr.h"

namespace eg::jinja {

namespace {

// "'str object'", as jinja2 names objects in its messages.
std::string object_desc(const Value& v) {
  std::string s = "'";
  s += v.type_name();
  s += " object'";
  return s;
}

bool in_list(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

// Python attribute names of str/dict/list we do not implement: looking one up is an error
// (returning Undefined would silently change `{% if s.title %}`-like tests).
bool python_str_attr(const std::string& n) {
  return in_list(n,
                 {"casefold",   "center",    "count",        "encode",       "expandtabs", "format",    "format_map",
                  "index",      "isalnum",   "isalpha",      "isascii",      "isdecimal",  "isdigit",   "isidentifier",
                  "islower",    "isnumeric", "isprintable",  "isspace",      "istitle",    "isupper",   "ljust",
                  "maketrans",  "partition", "removeprefix", "removesuffix", "rfind",      "rindex",    "rjust",
                  "rpartition", "rsplit",    "splitlines",   "swapcase",     "title",      "translate", "zfill"});
}
bool python_dict_attr(const std::string& n) {
  return in_list(n, {"clear", "copy", "fromkeys", "pop", "popitem", "setdefault", "update"});
}
bool python_list_attr(const std::string& n) {
  return in_list(n,
                 {"append", "clear", "copy", "count", "extend", "index", "insert", "pop", "remove", "reverse", "sort"});
}

std::optional<std::string> opt_str(const std::optional<Value>& v, const char* what) {
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) eval_error(std::string(what) + " arg must be None or str");
  return v->str();
}

int64_t opt_int(const std::optional<Value>& v, int64_t dflt) {
  if (!v) return dflt;
  if (!v->is_int() && !v->is_bool()) eval_error("an integer is required, not '" + v->type_name() + "'");
  return v->int_value();
}

// startswith / endswith with a str or a tuple of str.
bool affix(const std::string& s, const Value& arg, bool prefix) {
  auto test = [&](const Value& a) {
    if (!a.is_string()) eval_error("startswith/endswith first arg must be str or a tuple of str");
    const std::string& p = a.str();
    if (p.size() > s.size()) return false;
    return prefix ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (arg.is_list() && arg.list().tuple) {
    for (const Value& a : arg.list().items)
      if (test(a)) return true;
    return false;
  }
  return test(arg);
}

Value str_method(const Value& self, const std::string& name) {
  const std::string s = self.str();
  auto method = [&](std::vector<std::string> params, std::function<Value(std::vector<std::optional<Value>>&)> f) {
    const std::string fname = "str." + name;
    return Value::function(fname, [fname, params = std::move(params), f = std::move(f)](CallArgs& a) {
      auto bound = bind_args(fname, params, a);
      return f(bound);
    });
  };
  if (name == "upper") return method({}, [s](auto&) { return Value(py::upper(s)); });
  if (name == "lower") return method({}, [s](auto&) { return Value(py::lower(s)); });
  if (name == "capitalize") return method({}, [s](auto&) { return Value(py::capitalize(s)); });
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return method({"chars"}, [s, l, r](auto& a) { return Value(py::strip(s, opt_str(a[0], "strip"), l, r)); });
  }
  if (name == "split")
    return method({"sep", "maxsplit"}, [s](auto& a) {
      std::vector<Value> parts;
      for (std::string& p : py::split(s, opt_str(a[0], "split"), opt_int(a[1], -1))) parts.emplace_back(std::move(p));
      return Value::list(std::move(parts));
    });
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return method({"prefix", "start", "end"}, [s, prefix](auto& a) {
      if (!a[0]) eval_error("startswith/endswith takes at least 1 argument");
      if (a[1] || a[2]) eval_unsupported("start/end arguments of startswith/endswith");
      return Value(affix(s, *a[0], prefix));
    });
  }
  if (name == "replace")
    return method({"old", "new", "count"}, [s](auto& a) {
      if (!a[0] || !a[1] || !a[0]->is_string() || !a[1]->is_string()) eval_error("replace() takes two strings");
      return Value(py::replace(s, a[0]->str(), a[1]->str(), opt_int(a[2], -1)));
    });
  if (name == "find")
    return method({"sub"}, [s](auto& a) {
      if (!a[0] || !a[0]->is_string()) eval_error("find() takes a string");
      const size_t k = s.find(a[0]->str());
      return Value(k == std::string::npos ? int64_t{-1} : static_cast<int64_t>(py::length(s.substr(0, k))));
    });
  if (name == "join")
    return method({"iterable"}, [s](auto& a) {
      if (!a[0]) eval_error("join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(*a[0])) {
        if (!v.is_string()) eval_error("sequence item: expected str instance, " + v.type_name() + " found");
        if (!first) out += s;
        first = false;
        out += v.str();
      }
      return Value(std::move(out));
    });
  if (python_str_attr(name)) eval_unsupported("str." + name);
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

// dict methods, or nullopt when `name` is none.
std::optional<Value> dict_method(const Value& self, const std::string& name) {
  if (name == "get")
    return Value::function("dict.get", [self](CallArgs& a) {
      auto b = bind_args("dict.get", {"key", "default"}, a);
      if (!b[0]) eval_error("get expected at least 1 argument");
      if (b[0]->is_string())
        if (const Value* v = self.dict().find(b[0]->str())) return *v;
      return b[1] ? *b[1] : Value::none();
    });
  if (name == "keys" || name == "values" || name == "items") {
    return Value::function("dict." + name, [self, name](CallArgs& a) {
      bind_args("dict." + name, {}, a);
      std::vector<Value> out;
      for (const auto& [k, v] : self.dict().items) {
        if (name == "keys")
          out.emplace_back(k);
        else if (name == "values")
          out.push_back(v);
        else
          out.push_back(Value::list({Value(k), v}, true));
      }
      return Value::list(std::move(out));
    });
  }
  if (python_dict_attr(name)) eval_unsupported("dict." + name);
  return std::nullopt;
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.type()) {
    case Value::Type::String:
      return str_method(obj, name);
    case Value::Type::Dict: {
      if (auto m = dict_method(obj, name)) return *m;
      if (const Value* v = obj.dict().find(name)) return *v;
      break;
    }
    case Value::Type::List:
      if (python_list_attr(name)) eval_unsupported("list." + name);
      break;
    case Value::Type::Object: {
      if (const Value* v = obj.object().attrs.find(name)) return *v;
      if (obj.object().kind == ObjectData::Kind::Loop && name == "changed") eval_unsupported("loop.changed");
      break;
    }
    default:
      break;
  }
  return Value::undefined(object_desc(obj) + " has no attribute '" + name + "'");
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.type()) {
    case Value::Type::Dict:
      if (key.is_string()) {
        if (const Value* v = obj.dict().find(key.str())) return *v;
        if (auto m = dict_method(obj, key.str())) return *m;
      }
      return Value::undefined("'dict object' has no attribute " + key.repr());
    case Value::Type::List:
    case Value::Type::String: {
      if (obj.is_list() && obj.list().generator) eval_unsupported("indexing a generator (add | list)");
      if (key.is_string()) return get_attr(obj, key.str());
      if (!key.is_int() && !key.is_bool()) break;
      int64_t i = key.int_value();
      if (obj.is_list()) {
        const int64_t n = static_cast<int64_t>(obj.list().items.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) break;
        return obj.list().items[static_cast<size_t>(i)];
      }
      const std::u32string u = py::decode(obj.str());
      const int64_t n = static_cast<int64_t>(u.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) break;
      std::string ch;
      py::append_utf8(ch, u[static_cast<size_t>(i)]);
      return Value(std::move(ch));
    }
    case Value::Type::Object:
      if (key.is_string()) return get_attr(obj, key.str());
      break;
    default:
      break;
  }
  return Value::undefined(object_desc(obj) + " has no attribute " + key.repr());
}

Value slice_of(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  const bool is_str = obj.is_string();
  if (!is_str && !(obj.is_list() && !obj.list().generator))
    return Value::undefined(object_desc(obj) + " cannot be sliced");
  auto idx = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) eval_error("slice indices must be integers or None");
    return v.int_value();
  };
  const std::optional<int64_t> b = idx(start), e = idx(stop), st = idx(step);
  const int64_t k = st.value_or(1);
  if (k == 0) eval_error("slice step cannot be zero");
  const std::u32string u = is_str ? py::decode(obj.str()) : std::u32string();
  const int64_t n = is_str ? static_cast<int64_t>(u.size()) : static_cast<int64_t>(obj.list().items.size());
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = k < 0 ? -1 : 0;
    } else if (x >= n) {
      x = k < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t lo = adjust(b, k < 0 ? n - 1 : 0), hi = adjust(e, k < 0 ? -1 : n);
  std::u32string s;
  std::vector<Value> items;
  for (int64_t i = lo; k > 0 ? i < hi : i > hi; i += k) {
    if (is_str)
      s.push_back(u[static_cast<size_t>(i)]);
    else
      items.push_back(obj.list().items[static_cast<size_t>(i)]);
  }
  if (is_str) return Value(py::encode(s));
  return Value::list(std::move(items), obj.list().tuple);
}

void add_globals(DictData& g) {
  g.set("raise_exception", Value::function("raise_exception", [](CallArgs& a) -> Value {
          auto b = bind_args("raise_exception", {"message"}, a);
          throw TemplateRaise(b[0] ? b[0]->to_str() : "");
        }));
  g.set("range", Value::function("range", [](CallArgs& a) {
          auto b = bind_args("range", {"a", "b", "step"}, a);
          if (!b[0]) eval_error("range expected at least 1 argument");
          for (auto& v : b)
            if (v && !v->is_int() && !v->is_bool()) eval_error("range() takes integers");
          int64_t lo = 0, hi = b[0]->int_value(), step = 1;
          if (b[1]) {
            lo = hi;
            hi = b[1]->int_value();
          }
          if (b[2]) step = b[2]->int_value();
          if (step == 0) eval_error("range() arg 3 must not be zero");
          std::vector<Value> out;
          for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
            if (out.size() >= 100000) eval_error("range too big (the sandbox allows 100000 items)");
            out.emplace_back(i);
          }
          return Value::list(std::move(out));
        }));
  auto kwargs_dict = [](const char* fname, CallArgs& a) {
    DictData d;
    if (a.pos.size() > 1) eval_error(std::string(fname) + " expected at most 1 positional argument");
    if (!a.pos.empty()) {
      if (!a.pos[0].is_dict()) eval_unsupported(std::string(fname) + "() from a non-dict positional argument");
      d = a.pos[0].dict();
    }
    for (auto& [k, v] : a.kw) d.set(k, v);
    return d;
  };
  g.set("namespace", Value::function("namespace", [kwargs_dict](CallArgs& a) {
          auto o = std::make_shared<ObjectData>();
          o->kind = ObjectData::Kind::Namespace;
          o->attrs = kwargs_dict("namespace", a);
          return Value::object(std::move(o));
        }));
  g.set("dict",
        Value::function("dict", [kwargs_dict](CallArgs& a) { return Value::dict(kwargs_dict("dict", a).items); }));
  g.set("strftime_now", Value::function("strftime_now", [](CallArgs& a) {
          auto b = bind_args("strftime_now", {"format"}, a);
          if (!b[0] || !b[0]->is_string()) eval_error("strftime_now() takes a format string");
          const std::time_t t = std::time(nullptr);
          std::tm tm{};
          localtime_r(&t, &tm);
          char buf[512];
          const size_t n = std::strftime(buf, sizeof buf, b[0]->str().c_str(), &tm);
          return Value(std::string(buf, n));
        }));
}

}  // namespace eg::jinja
