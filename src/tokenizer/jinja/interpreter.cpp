// Tree-walking evaluator (see interpreter.h).
#include "tokenizer/jinja/interpreter.h"

#include "core/error.h"
#include "tokenizer/jinja/jinja.h"

namespace eg::jinja {

namespace {

// Resource limits of one render (docs/reliability.md). A real chat template renders a conversation
// with a few thousand loop iterations into well under 1 MiB; these only stop a hostile or broken
// template from taking unbounded time or memory.
constexpr int kMaxCallDepth = 200;                // macro recursion
constexpr size_t kMaxOutput = size_t{32} << 20;   // rendered text (a 128k-token prompt is ~0.5 MiB)
constexpr int64_t kMaxSteps = 2'000'000;          // loop iterations + macro calls

[[noreturn]] void runtime_error(int line, const std::string& msg) {
  throw Error("chat template: line " + std::to_string(line) + ": " + msg);
}

// A ValueError becomes a plain eg::Error naming the line (so outer levels leave it alone).
[[noreturn]] void rethrow_with_line(const ValueError& e, int line) {
  if (e.unsupported())
    throw Error("chat template: unsupported Jinja feature '" + e.detail() + "' at line " + std::to_string(line));
  runtime_error(line, e.detail());
}

ScopePtr child_of(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

// Assigns `v` to one name or unpacks it over several.
void assign(Scope& scope, const std::vector<std::string>& names, const Value& v) {
  if (names.size() == 1) {
    scope.vars.set(names[0], v);
    return;
  }
  const std::vector<Value> items = iterate(v);
  if (items.size() != names.size())
    eval_error("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(names.size()) +
               " names");
  for (size_t i = 0; i < names.size(); ++i) scope.vars.set(names[i], items[i]);
}

}  // namespace

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get())
    if (const Value* v = s->vars.find(name)) return v;
  return nullptr;
}

std::string Interpreter::render(const Body& body, const Value& variables) {
  auto globals = std::make_shared<Scope>();
  add_globals(globals->vars);
  auto root = child_of(globals);
  root->vars = variables.dict();
  std::string out;
  exec(body, root, out);
  return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const NodePtr& n : body) {
    const Flow f = exec_node(*n, scope, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_node(const Node& n, const ScopePtr& scope, std::string& out) {
  try {
    switch (n.kind) {
      case Node::Kind::Data:
        out += n.text;
        break;
      case Node::Kind::Print:
        out += eval(*n.expr, scope).to_str();
        break;
      case Node::Kind::If:
        for (const auto& [cond, body] : n.branches)
          if (eval(*cond, scope).truthy()) return exec(body, scope, out);
        return exec(n.else_body, scope, out);
      case Node::Kind::For:
        exec_for(n, scope, out);
        break;
      case Node::Kind::Set:
        exec_set(n, scope);
        break;
      case Node::Kind::SetBlock: {
        std::string captured;
        exec(n.body, child_of(scope), captured);
        scope->vars.set(n.targets[0], Value(std::move(captured)));
        break;
      }
      case Node::Kind::Macro:
        scope->vars.set(n.text, make_macro(n, scope, n.text));
        break;
      case Node::Kind::CallBlock: {
        const Expr& call = *n.expr;
        const Value fn = eval(*call.args[0], scope);
        CallArgs args = eval_args(call, 1, scope);
        args.kw.emplace_back("caller", make_macro(n, scope, "caller"));
        out += this->call(fn, args).to_str();
        break;
      }
      case Node::Kind::Break:
        return Flow::Break;
      case Node::Kind::Continue:
        return Flow::Continue;
      case Node::Kind::Generation:
        exec(n.body, child_of(scope), out);
        break;
    }
  } catch (const ValueError& e) {
    rethrow_with_line(e, n.line);
  }
  if (out.size() > kMaxOutput) runtime_error(n.line, "the rendered text exceeds 32 MiB");
  return Flow::Normal;
}

void Interpreter::step() {
  if (++steps_ > kMaxSteps)
    eval_error("the template ran more than " + std::to_string(kMaxSteps) + " loop iterations and macro calls");
}

void Interpreter::exec_for(const Node& n, const ScopePtr& scope, std::string& out) {
  std::vector<Value> items = iterate(eval(*n.expr, scope));
  if (n.cond) {
    std::vector<Value> kept;
    for (Value& v : items) {
      step();
      auto s = child_of(scope);
      assign(*s, n.targets, v);
      if (eval(*n.cond, s).truthy()) kept.push_back(std::move(v));
    }
    items = std::move(kept);
  }
  const int64_t len = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < len; ++i) {
    step();
    auto s = child_of(scope);
    assign(*s, n.targets, items[static_cast<size_t>(i)]);
    auto loop = std::make_shared<ObjectData>();
    loop->kind = ObjectData::Kind::Loop;
    DictData& a = loop->attrs;
    a.items.reserve(12);
    a.items.emplace_back("index0", Value(i));
    a.items.emplace_back("index", Value(i + 1));
    a.items.emplace_back("revindex0", Value(len - i - 1));
    a.items.emplace_back("revindex", Value(len - i));
    a.items.emplace_back("first", Value(i == 0));
    a.items.emplace_back("last", Value(i == len - 1));
    a.items.emplace_back("length", Value(len));
    a.items.emplace_back("depth", Value(1));
    a.items.emplace_back("depth0", Value(0));
    if (i > 0) a.items.emplace_back("previtem", items[static_cast<size_t>(i - 1)]);
    if (i + 1 < len) a.items.emplace_back("nextitem", items[static_cast<size_t>(i + 1)]);
    a.items.emplace_back("cycle", Value::function("loop.cycle", [i](CallArgs& args) {
                           if (args.pos.empty()) eval_error("no items for cycling given");
                           return args.pos[static_cast<size_t>(i) % args.pos.size()];
                         }));
    s->vars.set("loop", Value::object(std::move(loop)));
    if (exec(n.body, s, out) == Flow::Break) break;
  }
  if (len == 0) exec(n.else_body, child_of(scope), out);
}

void Interpreter::exec_set(const Node& n, const ScopePtr& scope) {
  Value v = eval(*n.expr, scope);
  if (!n.attr_target) {
    assign(*scope, n.targets, v);
    return;
  }
  const Value* target = scope->find(n.targets[0]);
  if (target == nullptr || !target->is_object() || target->object().kind != ObjectData::Kind::Namespace)
    eval_error("cannot assign attribute on non-namespace object");
  target->object().attrs.set(n.targets[1], std::move(v));
}

Value Interpreter::make_macro(const Node& n, const ScopePtr& scope, const std::string& name) {
  std::weak_ptr<Scope> defined_in = scope;
  const Node* node = &n;
  return Value::function(
      name, [this, node, defined_in, name](CallArgs& args) { return call_macro(*node, defined_in, name, args); });
}

Value Interpreter::call_macro(const Node& n, const std::weak_ptr<Scope>& defined_in, const std::string& name,
                              CallArgs& args) {
  ScopePtr parent = defined_in.lock();
  if (!parent) eval_unsupported("calling macro '" + name + "' outside the scope that defined it");
  if (call_depth_ >= kMaxCallDepth) eval_error("macro recursion deeper than " + std::to_string(kMaxCallDepth));
  step();
  auto s = child_of(parent);
  if (args.pos.size() > n.params.size())
    eval_error("macro '" + name + "' takes not more than " + std::to_string(n.params.size()) + " argument(s)");
  std::vector<const Value*> given(n.params.size(), nullptr);
  for (size_t i = 0; i < args.pos.size(); ++i) given[i] = &args.pos[i];
  for (const auto& [key, v] : args.kw) {
    if (key == "caller") {
      s->vars.set("caller", v);
      continue;
    }
    size_t k = 0;
    while (k < n.params.size() && n.params[k].name != key) ++k;
    if (k == n.params.size()) eval_error("macro '" + name + "' takes no keyword argument '" + key + "'");
    if (given[k] != nullptr) eval_error("macro '" + name + "' got multiple values for argument '" + key + "'");
    given[k] = &v;
  }
  for (size_t i = 0; i < n.params.size(); ++i) {
    const Param& p = n.params[i];
    if (given[i] != nullptr)
      s->vars.set(p.name, *given[i]);
    else if (p.default_value)
      s->vars.set(p.name, eval(*p.default_value, s));
    else
      s->vars.set(p.name, Value::undefined("parameter '" + p.name + "' was not provided"));
  }
  ++call_depth_;
  std::string out;
  try {
    exec(n.body, s, out);
  } catch (...) {
    --call_depth_;
    throw;
  }
  --call_depth_;
  return Value(std::move(out));
}

Value Interpreter::call(const Value& fn, CallArgs& args) {
  if (fn.is_undefined()) eval_error(fn.undefined_hint());
  if (!fn.is_function()) eval_error("'" + fn.type_name() + "' object is not callable");
  return fn.function().fn(args);
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first, const ScopePtr& scope) {
  CallArgs a;
  for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i], scope));
  for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v, scope));
  return a;
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  try {
    return eval_inner(e, scope);
  } catch (const ValueError& err) {
    rethrow_with_line(err, e.line);
  }
}

Value Interpreter::eval_inner(const Expr& e, const ScopePtr& scope) {
  using K = Expr::Kind;
  auto defined = [](const Value& v) -> const Value& {
    if (v.is_undefined()) eval_error(v.undefined_hint());
    return v;
  };
  switch (e.kind) {
    case K::Const:
      return e.value;
    case K::Name: {
      if (const Value* v = scope->find(e.name)) return *v;
      return Value::undefined("'" + e.name + "' is undefined");
    }
    case K::List:
    case K::Tuple: {
      std::vector<Value> items;
      for (const auto& a : e.args) items.push_back(eval(*a, scope));
      return Value::list(std::move(items), e.kind == K::Tuple);
    }
    case K::Dict: {
      DictData d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const Value k = eval(*e.args[i], scope);
        if (!k.is_string()) eval_unsupported("dict literal with a non-string key");
        d.set(k.str(), eval(*e.args[i + 1], scope));
      }
      return Value::dict(std::move(d.items));
    }
    case K::Getattr:
      return get_attr(defined(eval(*e.args[0], scope)), e.name);
    case K::Getitem: {
      const Value obj = eval(*e.args[0], scope);
      return get_item(defined(obj), eval(*e.args[1], scope));
    }
    case K::Slice: {
      const Value obj = eval(*e.args[0], scope);
      Value parts[3];
      for (int i = 0; i < 3; ++i) parts[i] = e.args[i + 1] ? eval(*e.args[i + 1], scope) : Value::none();
      return slice_of(defined(obj), parts[0], parts[1], parts[2]);
    }
    case K::Call: {
      const Value fn = eval(*e.args[0], scope);
      CallArgs args = eval_args(e, 1, scope);
      return call(fn, args);
    }
    case K::Filter: {
      const Value subject = eval(*e.args[0], scope);
      CallArgs args = eval_args(e, 1, scope);
      return apply_filter(*this, e.name, subject, args);
    }
    case K::Test: {
      const Value subject = eval(*e.args[0], scope);
      CallArgs args = eval_args(e, 1, scope);
      return Value(apply_test(*this, e.name, subject, args) != e.negated);
    }
    case K::Neg:
    case K::Pos:
      return unary_op(e.kind == K::Neg ? '-' : '+', eval(*e.args[0], scope));
    case K::Not:
      return Value(!eval(*e.args[0], scope).truthy());
    case K::And: {
      Value a = eval(*e.args[0], scope);
      return a.truthy() ? eval(*e.args[1], scope) : a;
    }
    case K::Or: {
      Value a = eval(*e.args[0], scope);
      return a.truthy() ? a : eval(*e.args[1], scope);
    }
    case K::Binary:
      return binary_op(e.name, eval(*e.args[0], scope), eval(*e.args[1], scope));
    case K::Compare: {
      Value left = eval(*e.args[0], scope);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i + 1], scope);
        if (!compare_op(e.ops[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case K::Cond:
      if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined("the conditional expression had no else branch");
  }
  return Value();
}

}  // namespace eg::jinja
