// The value type of the Jinja interpreter: Python's objects as a Jinja template sees them.
//
// A Value is one of: Undefined (a missing variable / key; falsy, prints as ""), None, bool,
// int (int64), float (double), str (UTF-8 bytes; lengths and indexes count code points), list or
// tuple, dict (insertion-ordered, string keys), an Object (a `namespace()` or a `loop`, reached
// only through attributes) or a Function (a macro, a filter-like builtin, a bound method).
// Lists and dicts are shared and immutable once built (templates run in transformers'
// ImmutableSandboxedEnvironment, which forbids mutating them); a namespace's attributes are the
// only mutable state. A list made by a lazy filter (map, select, reverse, ...) is flagged
// `generator`: like Python's generator it is truthy even when empty, and printing it, taking its
// length or indexing it is rejected rather than silently answered.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/error.h"

namespace eg::jinja {

/// An error of a value operation or a builtin. what() is complete ("chat template: ..." or
/// "chat template: unsupported Jinja feature '...'"); the interpreter re-throws it as an
/// eg::Error naming the template line.
class ValueError : public Error {
 public:
  ValueError(const std::string& detail, bool unsupported)
      : Error(unsupported ? "chat template: unsupported Jinja feature '" + detail + "'" : "chat template: " + detail),
        detail_(detail),
        unsupported_(unsupported) {}
  const std::string& detail() const { return detail_; }
  bool unsupported() const { return unsupported_; }

 private:
  std::string detail_;
  bool unsupported_;
};

class Value;
struct ListData;
struct DictData;
struct ObjectData;
struct Function;

/// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

class Value {
 public:
  enum class Type { Undefined, None, Bool, Int, Float, String, List, Dict, Object, Function };

  Value() = default;  // Undefined
  Value(bool b) : v_(b) {}
  Value(int i) : v_(int64_t{i}) {}
  Value(int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(std::string_view s) : v_(std::string(s)) {}
  Value(const char* s) : v_(std::string(s)) {}

  /// Undefined that remembers what was looked up (for error messages): "'x' is undefined".
  static Value undefined(std::string what);
  static Value none();
  static Value list(std::vector<Value> items, bool tuple = false, bool generator = false);
  static Value dict(std::vector<std::pair<std::string, Value>> items);
  static Value object(std::shared_ptr<ObjectData> o);
  static Value function(std::string name, std::function<Value(CallArgs&)> fn);

  /// JSON -> Value (objects keep their key order; nlohmann::json's is sorted, ordered_json's is
  /// the document's). Integers beyond int64 become floats, as far as they are representable.
  static Value from_json(const nlohmann::json& j);
  static Value from_json(const nlohmann::ordered_json& j);

  Type type() const { return static_cast<Type>(v_.index()); }
  bool is_undefined() const { return type() == Type::Undefined; }
  bool is_none() const { return type() == Type::None; }
  bool is_bool() const { return type() == Type::Bool; }
  bool is_int() const { return type() == Type::Int; }
  bool is_float() const { return type() == Type::Float; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python: bool is an int
  bool is_string() const { return type() == Type::String; }
  bool is_list() const { return type() == Type::List; }
  bool is_dict() const { return type() == Type::Dict; }
  bool is_object() const { return type() == Type::Object; }
  bool is_function() const { return type() == Type::Function; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  /// int or bool as int64 (bool is 0/1).
  int64_t int_value() const { return is_bool() ? (as_bool() ? 1 : 0) : as_int(); }
  /// Any number as double.
  double number() const;
  const std::string& str() const { return std::get<std::string>(v_); }
  const ListData& list() const { return *std::get<std::shared_ptr<ListData>>(v_); }
  const DictData& dict() const { return *std::get<std::shared_ptr<DictData>>(v_); }
  ObjectData& object() const { return *std::get<std::shared_ptr<ObjectData>>(v_); }
  const Function& function() const { return *std::get<std::shared_ptr<Function>>(v_); }
  /// What an Undefined stands for ("'x' is undefined"), for error messages.
  const std::string& undefined_hint() const { return std::get<UndefinedT>(v_).hint; }

  /// Python truthiness (Undefined and None are false; a generator is always true).
  bool truthy() const;
  /// Python str() — what `{{ value }}` prints. Throws eg::Error for values Python would print
  /// as an object address (functions, namespaces, generators).
  std::string to_str() const;
  /// Python repr().
  std::string repr() const;
  /// Python's type name, for messages ("str", "list", "NoneType", ...).
  std::string type_name() const;

 private:
  struct UndefinedT {
    std::string hint;
  };
  struct NoneT {};
  std::variant<UndefinedT, NoneT, bool, int64_t, double, std::string, std::shared_ptr<ListData>,
               std::shared_ptr<DictData>, std::shared_ptr<ObjectData>, std::shared_ptr<Function>>
      v_;
};

struct ListData {
  std::vector<Value> items;
  bool tuple = false;
  bool generator = false;
};

struct DictData {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  /// Replaces the value of an existing key or appends.
  void set(const std::string& key, Value v);
};

/// A namespace() (attributes assignable with `{% set ns.x = ... %}`) or a loop object.
struct ObjectData {
  enum class Kind { Namespace, Loop };
  Kind kind = Kind::Namespace;
  DictData attrs;
};

struct Function {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

/// Python ==.
bool equal(const Value& a, const Value& b);
/// Python <, for numbers, strings and lists; throws eg::Error for other pairs.
bool less(const Value& a, const Value& b);

/// json.dumps(value, ensure_ascii, indent, separators, sort_keys), as transformers' `tojson`
/// filter calls it. indent < 0: none. Throws eg::Error for values JSON cannot hold.
struct JsonStyle {
  bool ensure_ascii = false;
  int indent = -1;
  std::string item_sep;  // default: ", " without indent, "," with it
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool default_item_sep = true;
};
std::string to_json(const Value& v, const JsonStyle& style);

}  // namespace eg::jinja
