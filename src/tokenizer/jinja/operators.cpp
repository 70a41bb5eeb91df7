// Python operator semantics: arithmetic, concatenation, comparisons, membership, iteration.
#include <cmath>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/pystr.h"

namespace eg::jinja {

namespace {

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  eval_error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

bool is_int_like(const Value& v) { return v.is_int() || v.is_bool(); }

void overflow_check(bool overflow) {
  if (overflow) eval_unsupported("integer arithmetic beyond 64 bits");
}

Value repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    if (n > 0 && seq.str().size() * static_cast<size_t>(n) > (size_t{64} << 20))
      eval_error("string repetition beyond 64 MiB");
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out));
  }
  std::vector<Value> out;
  if (n > 0 && seq.list().items.size() * static_cast<size_t>(n) > 1000000) eval_error("list repetition too large");
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().items.begin(), seq.list().items.end());
  return Value::list(std::move(out), seq.list().tuple);
}

bool is_plain_seq(const Value& v) { return v.is_list() && !v.list().generator; }

bool contains(const Value& hay, const Value& needle) {
  switch (hay.type()) {
    case Value::Type::Undefined:
      return false;
    case Value::Type::String:
      if (!needle.is_string()) eval_error("'in <string>' requires string as left operand, not " + needle.type_name());
      return hay.str().find(needle.str()) != std::string::npos;
    case Value::Type::List:
      for (const Value& v : hay.list().items)
        if (equal(v, needle)) return true;
      return false;
    case Value::Type::Dict:
      if (needle.is_list() || needle.is_dict()) eval_error("unhashable type: '" + needle.type_name() + "'");
      return needle.is_string() && hay.dict().find(needle.str()) != nullptr;
    default:
      eval_error("argument of type '" + hay.type_name() + "' is not iterable");
  }
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.to_str() + b.to_str());
  if (a.is_undefined()) eval_error(a.undefined_hint());
  if (b.is_undefined()) eval_error(b.undefined_hint());
  const bool nums = a.is_number() && b.is_number();
  const bool ints = is_int_like(a) && is_int_like(b);
  int64_t r = 0;
  if (op == "+") {
    if (ints) {
      overflow_check(__builtin_add_overflow(a.int_value(), b.int_value(), &r));
      return Value(r);
    }
    if (nums) return Value(a.number() + b.number());
    if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
    if (is_plain_seq(a) && is_plain_seq(b) && a.list().tuple == b.list().tuple) {
      std::vector<Value> items = a.list().items;
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      return Value::list(std::move(items), a.list().tuple);
    }
    if (a.is_string()) eval_error("can only concatenate str (not \"" + b.type_name() + "\") to str");
    if (is_plain_seq(a)) eval_error("can only concatenate list (not \"" + b.type_name() + "\") to list");
    bad_operands("+", a, b);
  }
  if (op == "-") {
    if (ints) {
      overflow_check(__builtin_sub_overflow(a.int_value(), b.int_value(), &r));
      return Value(r);
    }
    if (nums) return Value(a.number() - b.number());
    bad_operands("-", a, b);
  }
  if (op == "*") {
    if (ints) {
      overflow_check(__builtin_mul_overflow(a.int_value(), b.int_value(), &r));
      return Value(r);
    }
    if (nums) return Value(a.number() * b.number());
    if ((a.is_string() || is_plain_seq(a)) && is_int_like(b)) return repeat(a, b.int_value());
    if ((b.is_string() || is_plain_seq(b)) && is_int_like(a)) return repeat(b, a.int_value());
    bad_operands("*", a, b);
  }
  if (op == "/") {
    if (!nums) bad_operands("/", a, b);
    if (b.number() == 0) eval_error("division by zero");
    return Value(a.number() / b.number());
  }
  if (op == "//" || op == "%") {
    if (a.is_string() && op == "%") eval_unsupported("string formatting with %");
    if (!nums) bad_operands(op, a, b);
    if (b.number() == 0) eval_error(op == "%" ? "modulo by zero" : "integer division or modulo by zero");
    if (ints) {
      const int64_t x = a.int_value(), y = b.int_value();
      if (x == INT64_MIN && y == -1) eval_unsupported("integer arithmetic beyond 64 bits");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value(op == "//" ? q : m);
    }
    const double x = a.number(), y = b.number();
    if (op == "//") return Value(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value(m);
  }
  if (op == "**") {
    if (!nums) bad_operands("**", a, b);
    if (ints && b.int_value() >= 0) {
      const int64_t base = a.int_value();
      int64_t e = b.int_value(), result = 1;
      if (base == 0) return Value(int64_t{e == 0 ? 1 : 0});
      if (base == 1) return Value(int64_t{1});
      if (base == -1) return Value(int64_t{e % 2 == 0 ? 1 : -1});
      for (; e > 0; --e)  // |base| >= 2: overflows within 63 steps
        if (__builtin_mul_overflow(result, base, &result)) eval_unsupported("integer arithmetic beyond 64 bits");
      return Value(result);
    }
    if (a.number() == 0 && b.number() < 0) eval_error("0.0 cannot be raised to a negative power");
    return Value(std::pow(a.number(), b.number()));
  }
  eval_unsupported("operator " + op);
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined()) eval_error(a.undefined_hint());
  if (b.is_undefined()) eval_error(b.undefined_hint());
  const bool ok = (a.is_number() && b.is_number()) || (a.is_string() && b.is_string()) ||
                  (is_plain_seq(a) && is_plain_seq(b) && a.list().tuple == b.list().tuple);
  if (!ok)
    eval_error("'" + op + "' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return !less(b, a);
  if (op == ">=") return !less(a, b);
  eval_unsupported("operator " + op);
}

Value unary_op(char op, const Value& a) {
  if (a.is_undefined()) eval_error(a.undefined_hint());
  if (is_int_like(a)) {
    if (op == '+') return Value(a.int_value());
    if (a.int_value() == INT64_MIN) eval_unsupported("integer arithmetic beyond 64 bits");
    return Value(-a.int_value());
  }
  if (a.is_float()) return Value(op == '-' ? -a.as_float() : a.as_float());
  eval_error(std::string("bad operand type for unary ") + op + ": '" + a.type_name() + "'");
}

std::vector<Value> iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined:
      return {};
    case Value::Type::List:
      return v.list().items;
    case Value::Type::Dict: {
      std::vector<Value> keys;
      keys.reserve(v.dict().items.size());
      for (const auto& kv : v.dict().items) keys.emplace_back(kv.first);
      return keys;
    }
    case Value::Type::String: {
      std::vector<Value> chars;
      for (char32_t c : py::decode(v.str())) {
        std::string s;
        py::append_utf8(s, c);
        chars.emplace_back(std::move(s));
      }
      return chars;
    }
    default:
      eval_error("'" + v.type_name() + "' object is not iterable");
  }
}

int64_t length_of(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined:
      return 0;
    case Value::Type::String:
      return static_cast<int64_t>(py::length(v.str()));
    case Value::Type::List:
      if (v.list().generator) eval_unsupported("length of a generator (add | list)");
      return static_cast<int64_t>(v.list().items.size());
    case Value::Type::Dict:
      return static_cast<int64_t>(v.dict().items.size());
    default:
      eval_error("object of type '" + v.type_name() + "' has no len()");
  }
}

}  // namespace eg::jinja
