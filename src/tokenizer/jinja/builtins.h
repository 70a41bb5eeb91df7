// Internal to the Jinja interpreter: operators, attribute/item access, filters, tests, methods
// and global functions, with Python's semantics (operators.cpp, access.cpp, filters.cpp).
#pragma once
#include <optional>
#include <string>

#include "tokenizer/jinja/value.h"

namespace eg::jinja {

class Interpreter;

/// Errors raised while evaluating (the interpreter adds the template line). eval_unsupported:
/// the construct is outside the supported subset (reported as such).
[[noreturn]] inline void eval_error(const std::string& msg) { throw ValueError(msg, false); }
[[noreturn]] inline void eval_unsupported(const std::string& what) { throw ValueError(what, true); }

// ---- operators.cpp -------------------------------------------------------------------------
/// a op b for op in + - * / // % ** ~.
Value binary_op(const std::string& op, const Value& a, const Value& b);
/// a op b for op in == != < <= > >= in notin.
bool compare_op(const std::string& op, const Value& a, const Value& b);
/// -a / +a.
Value unary_op(char op, const Value& a);
/// The items a `for` loop visits: a list's items, a dict's keys, a string's characters.
std::vector<Value> iterate(const Value& v);
/// len(v).
int64_t length_of(const Value& v);

// ---- access.cpp ----------------------------------------------------------------------------
/// obj.name (attribute first, then item, as jinja2's getattr); methods come back bound.
Value get_attr(const Value& obj, const std::string& name);
/// obj[key] (item first, then attribute, as jinja2's getitem).
Value get_item(const Value& obj, const Value& key);
/// obj[start:stop:step].
Value slice_of(const Value& obj, const Value& start, const Value& stop, const Value& step);
/// Adds range, namespace, dict, raise_exception, strftime_now.
void add_globals(DictData& globals);

// ---- filters.cpp ---------------------------------------------------------------------------
Value apply_filter(Interpreter& in, const std::string& name, const Value& subject, CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& subject, CallArgs& args);

/// Binds call arguments to a Python-like signature: returns one slot per name (nullopt: not
/// given). Throws ValueError for unknown keywords or too many positional arguments.
std::vector<std::optional<Value>> bind_args(const std::string& fname, const std::vector<std::string>& names,
                                            CallArgs& args);

}  // namespace eg::jinja
