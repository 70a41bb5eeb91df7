// The syntax tree of a parsed Jinja template (made by parser.cpp, walked by interpreter.cpp).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace eg::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

/// One expression node. The fields used depend on the kind (see the comments per kind).
struct Expr {
  enum class Kind {
    Const,    // value
    Name,     // name
    List,     // args: the items
    Tuple,    // args: the items
    Dict,     // args: key0, value0, key1, value1, ...
    Getattr,  // args[0].name
    Getitem,  // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]] (missing parts are null)
    Call,     // args[0](args[1..], kwargs)
    Filter,   // args[0] | name(args[1..], kwargs)
    Test,     // args[0] is [not] name(args[1..], kwargs)
    Neg,      // -args[0]
    Pos,      // +args[0]
    Not,      // not args[0]
    And,      // args[0] and args[1]
    Or,       // args[0] or args[1]
    Binary,   // args[0] name args[1]; name in + - * / // % ** ~
    Compare,  // args[0] ops[0] args[1] ops[1] args[2] ...; ops in == != < <= > >= in notin
    Cond,     // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;  // Test: `is not`
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

/// A macro's or a call block's parameter: a name with an optional default.
struct Param {
  std::string name;
  ExprPtr default_value;  // null: none
};

/// One statement (or data) node.
struct Node {
  enum class Kind {
    Data,       // text
    Print,      // {{ expr }}
    If,         // branches (cond, body)...; else_body
    For,        // for targets in expr [if cond] body [else else_body]
    Set,        // targets = expr, or (attr_target) targets[0].targets[1] = expr
    SetBlock,   // {% set targets[0] %}body{% endset %}
    Macro,      // {% macro text(params) %}body{% endmacro %}
    CallBlock,  // {% call(params) expr %}body{% endcall %}
    Break,
    Continue,
    Generation,  // transformers' {% generation %}body{% endgeneration %}: renders its body
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;  // For: the loop filter
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::string> targets;
  bool attr_target = false;
  std::vector<Param> params;
};

}  // namespace eg::jinja
