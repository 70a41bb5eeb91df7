// The grammar stack machine: feeding one symbol (byte or special token) to a set of threads.
// State encodings per node kind are documented at each case below.
#include <algorithm>
#include <cassert>
#include <cstdint>

#include "grammar/grammar_impl.h"

namespace eg::grammar {

namespace {

bool is_ws(int c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(int c) { return c >= '0' && c <= '9'; }
bool is_hex(int c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_ident_start(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident(int c) { return is_ident_start(c) || is_digit(c); }

Frame fresh(int node) { return Frame{node, 0, 0, 0, 0, 0}; }
Frame& top(Stack& s) { return s.f[s.n - 1]; }

// UTF-8 lead byte: sets the number of continuation bytes and the allowed range of the first one
// (excludes overlong forms, UTF-16 surrogates and code points above U+10FFFF), packed in f.i as
// lo | hi << 8 (f.j is the string's code point count). False: invalid lead.
bool utf8_lead(int c, Frame& f) {
  int n = 0, lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 1;
  } else if (c == 0xE0) {
    n = 2, lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    n = 2;
  } else if (c == 0xED) {
    n = 2, hi = 0x9F;
  } else if (c == 0xF0) {
    n = 3, lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    n = 3;
  } else if (c == 0xF4) {
    n = 3, hi = 0x8F;
  } else {
    return false;
  }
  f.u = static_cast<uint8_t>(n);
  f.i = lo | (hi << 8);
  return true;
}

// A continuation byte while f.u > 0. False: invalid.
bool utf8_cont(int c, Frame& f) {
  if (c < (f.i & 0xFF) || c > (f.i >> 8)) return false;
  --f.u;
  f.i = 0x80 | (0xBF << 8);
  return true;
}

// String length (minLength / maxLength, in code points): f.j counts the code points started so
// far. Unbounded strings count only up to min (so their threads stay identical and merge).
bool string_room(const Node& nd, const Frame& f) { return nd.max < 0 || f.j < nd.max; }
void string_count(const Node& nd, Frame& f) {
  if (nd.max >= 0 || f.j < nd.min) ++f.j;
}

bool no_required_from(const Node& nd, int from) {
  for (size_t k = static_cast<size_t>(from); k < nd.props.size(); ++k)
    if (nd.props[k].required) return false;
  return true;
}

}  // namespace

void ThreadSet::add(const Stack& s) {
  const size_t n = static_cast<size_t>(s.n);
  for (size_t t = 0; t + 1 < off.size(); ++t) {
    if (off[t + 1] - off[t] != n) continue;
    bool same = true;
    for (size_t k = 0; k < n && same; ++k) same = frames[off[t] + k] == s.f[k];
    if (same) return;
  }
  frames.insert(frames.end(), s.f, s.f + n);
  off.push_back(static_cast<uint32_t>(frames.size()));
}

void ThreadSet::load(size_t t, Stack& s) const {
  s.n = static_cast<int>(off[t + 1] - off[t]);
  for (int k = 0; k < s.n; ++k) s.f[k] = frames[off[t] + static_cast<size_t>(k)];
}

void Machine::init(ThreadSet& out) const {
  out.clear();
  Stack s;
  push(s, g_->root);
  out.add(s);
}

void Machine::push(Stack& s, int node) const {
  assert(s.n < kMaxStack);
  s.f[s.n++] = fresh(node);
}

void Machine::finish(Stack& s) const {
  --s.n;
  while (s.n > 0) {
    const Frame& p = s.f[s.n - 1];
    const Node& pn = g_->nodes[static_cast<size_t>(p.node)];
    if (pn.kind == Kind::Root || (pn.kind == Kind::Seq && p.i == static_cast<int>(pn.kids.size()))) {
      --s.n;
      continue;
    }
    break;
  }
}

bool Machine::can_finish(const Frame& f) const {
  const Node& nd = g_->nodes[static_cast<size_t>(f.node)];
  if (nd.kind == Kind::Repeat) return f.i >= nd.min;
  if (nd.kind == Kind::LitSet) return nd.lits[static_cast<size_t>(f.i)].terminal;
  if (nd.kind != Kind::Number) return false;
  if (!nd.tool) return f.st == 2 || f.st == 3 || f.st == 5 || f.st == 8;
  return f.st == 2 || (f.st == 3 && !(f.u & 1)) || (f.st == 5 && f.w == 1);
}

bool Machine::finishes_all(Stack s) const {
  while (s.n > 0 && can_finish(top(s))) finish(s);
  return s.n == 0;
}

bool Machine::complete(const ThreadSet& set) const {
  Stack s;
  for (size_t t = 0; t < set.size(); ++t) {
    set.load(t, s);
    if (s.n == 0 || finishes_all(s)) return true;
  }
  return false;
}

bool Machine::all_in_clean_string(const ThreadSet& set, bool tool) const {
  if (set.empty()) return false;
  for (size_t t = 0; t < set.size(); ++t) {
    const uint32_t n = set.off[t + 1] - set.off[t];
    if (n == 0) return false;
    const Frame& f = set.frames[set.off[t + 1] - 1];
    const Node& nd = g_->nodes[static_cast<size_t>(f.node)];
    if (nd.kind != Kind::String || nd.tool != tool || f.st != 1 || f.u != 0 || f.w != 0) return false;
  }
  return true;
}

int32_t Machine::clean_string_room(const ThreadSet& set) const {
  int32_t room = 0;
  for (size_t t = 0; t < set.size(); ++t) {
    const Frame& f = set.frames[set.off[t + 1] - 1];
    const Node& nd = g_->nodes[static_cast<size_t>(f.node)];
    if (nd.max < 0) return INT32_MAX;
    room = std::max(room, nd.max - f.j);
  }
  return room;
}

void Machine::feed(const ThreadSet& in, int c, ThreadSet& out) const {
  out.clear();
  Stack s;
  for (size_t t = 0; t < in.size(); ++t) {
    in.load(t, s);
    step(s, c, out);
  }
}

void Machine::step(const Stack& s, int c, ThreadSet& out) const {
  if (s.n == 0) return;  // finished: only end tokens follow (handled by the Matcher)
  const Frame& f = s.f[s.n - 1];
  const Node& nd = g_->nodes[static_cast<size_t>(f.node)];
  if (can_finish(f)) {  // the node may end here: let the parent try c
    Stack t = s;
    finish(t);
    step(t, c, out);
  }
  Stack t = s;
  Frame& x = top(t);
  // Whitespace (JSON flavor) in the states that allow it: consumed (true) with no thread left in
  // compact mode; in pretty mode a run of at most kMaxWs bytes, '\n' only as its first byte
  // (w counts the run).
  auto ws = [&]() -> bool {
    if (!is_ws(c)) return false;
    if (g_->pretty_ws && x.w < kMaxWs && (c == ' ' || c == '\t' || (c == '\n' && x.w == 0))) {
      ++x.w;
      out.add(t);
    }
    return true;
  };
  switch (nd.kind) {
    case Kind::Root:  // st 0: before the value (whitespace allowed)
      if (!nd.tool && ws()) return;
      x.st = 1;
      push(t, nd.kids[0]);
      step(t, c, out);
      return;
    case Kind::Literal:  // i: symbols matched
      if (c != nd.lit[static_cast<size_t>(x.i)]) return;
      if (++x.i == static_cast<int>(nd.lit.size())) finish(t);
      out.add(t);
      return;
    case Kind::Seq: {  // i: next kid to start
      const int kid = nd.kids[static_cast<size_t>(x.i++)];
      push(t, kid);
      step(t, c, out);
      return;
    }
    case Kind::Alt:
      for (int kid : nd.kids) {
        Stack b = s;
        top(b) = fresh(kid);
        step(b, c, out);
      }
      return;
    case Kind::Repeat:  // i: repetitions started
      if (nd.max >= 0 && x.i >= nd.max) return;
      ++x.i;
      push(t, nd.kids[0]);
      step(t, c, out);
      return;
    case Kind::Any: {
      const AnyNodes& a = g_->any[nd.tool ? 1 : 0];
      int target = -1;
      const bool containers = s.n < kMaxAnyNesting;
      if (c == '{' && containers) target = a.obj;
      else if (c == '[' && containers) target = a.arr;
      else if (nd.tool ? c == g_->quote_sym : c == '"') target = a.str;
      else if (c == '-' || is_digit(c)) target = a.num;
      else if (c == 't') target = a.t;
      else if (c == 'f') target = a.f;
      else if (c == 'n') target = a.null;
      if (target < 0) return;
      x = fresh(target);
      step(t, c, out);
      return;
    }
    case Kind::Object: {
      // st 0 before '{'; 1 after '{'; 2 after a key (JSON: ':' next); 3 before a value;
      // 4 after a value; 5 after ','. i: first property index still allowed; j: current property.
      const int key_done = nd.tool ? 3 : 2;
      switch (x.st) {
        case 0:
          if (c == '{') x.st = 1, out.add(t);
          return;
        case 1:
        case 5:
          if (!nd.tool && ws()) return;
          if (x.st == 1 && c == '}' && no_required_from(nd, x.i)) {
            finish(t);
            out.add(t);
            return;
          }
          if (nd.free_obj) {
            x.st = static_cast<uint8_t>(key_done), x.w = 0;
            push(t, nd.tool ? g_->any[1].bare_key : g_->any[0].str);
            step(t, c, out);
            return;
          }
          for (size_t k = static_cast<size_t>(x.i); k < nd.props.size(); ++k) {
            Stack b = t;
            Frame& y = top(b);
            y.st = static_cast<uint8_t>(key_done), y.w = 0, y.j = static_cast<int32_t>(k);
            push(b, nd.props[k].key);
            step(b, c, out);
            if (nd.props[k].required) break;
          }
          return;
        case 2:
          if (ws()) return;
          if (c == ':') x.st = 3, x.w = 0, out.add(t);
          return;
        case 3:
          if (!nd.tool && ws()) return;
          x.st = 4, x.w = 0;
          push(t, nd.free_obj ? nd.free_value : nd.props[static_cast<size_t>(x.j)].value);
          step(t, c, out);
          return;
        case 4:
          if (!nd.tool && ws()) return;
          if (c == ',' && (nd.free_obj || x.j + 1 < static_cast<int>(nd.props.size()))) {
            x.st = 5, x.w = 0, x.i = x.j + 1;
            out.add(t);
          } else if (c == '}' && (nd.free_obj || no_required_from(nd, x.j + 1))) {
            finish(t);
            out.add(t);
          }
          return;
      }
      return;
    }
    case Kind::Array:
      // st 0 before '['; 1 after '['; 2 after an item; 3 after ','. i: items started.
      switch (x.st) {
        case 0:
          if (c == '[') x.st = 1, out.add(t);
          return;
        case 1:
        case 3:
          if (!nd.tool && ws()) return;
          if (x.st == 1 && c == ']' && nd.min == 0) {
            finish(t);
            out.add(t);
            return;
          }
          if (nd.max == 0) return;
          x.st = 2, x.w = 0, ++x.i;
          push(t, nd.kids[0]);
          step(t, c, out);
          return;
        case 2:
          if (!nd.tool && ws()) return;
          if (c == ',' && (nd.max < 0 || x.i < nd.max)) {
            x.st = 3, x.w = 0;
            out.add(t);
          } else if (c == ']' && x.i >= nd.min) {
            finish(t);
            out.add(t);
          }
          return;
      }
      return;
    case Kind::String:
      if (nd.tool) {
        // st 0 before <|"|>; 1 body. u: UTF-8 continuation bytes pending (i: range of the next
        // one); w: length of the prefix of the text `<|"|>` just written (never completed);
        // j: code points so far (string_count).
        if (x.st == 0) {
          if (c == g_->quote_sym) x.st = 1, out.add(t);
          return;
        }
        if (c == g_->quote_sym) {
          if (x.u == 0 && x.j >= nd.min) finish(t), out.add(t);
          return;
        }
        if (c >= 256) return;
        if (x.u > 0) {
          if (utf8_cont(c, x)) x.w = 0, out.add(t);
          return;
        }
        if (!string_room(nd, x)) return;
        if (c >= 0x80) {
          if (utf8_lead(c, x)) x.w = 0, string_count(nd, x), out.add(t);
          return;
        }
        if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') return;
        string_count(nd, x);
        static constexpr char kQuoteText[] = "<|\"|>";
        if (c == kQuoteText[x.w]) {
          if (++x.w == 5) return;
        } else {
          x.w = (c == '<') ? 1 : 0;
        }
        out.add(t);
        return;
      }
      // JSON: st 0 before '"'; 1 body; 2 after '\'; 3 first hex digit of \u; 5 second hex digit
      // after 'D' (0-7: no surrogates); 4 remaining hex digits (w of them). j: code points so far
      // (an escape counts once, at its '\'); u, i: UTF-8 continuation (utf8_lead).
      switch (x.st) {
        case 0:
          if (c == '"') x.st = 1, out.add(t);
          return;
        case 1:
          if (c >= 256) return;
          if (x.u > 0) {
            if (utf8_cont(c, x)) out.add(t);
            return;
          }
          if (c == '"') {
            if (x.j < nd.min) return;
            finish(t);
            out.add(t);
            return;
          }
          if (!string_room(nd, x)) return;
          if (c == '\\') {
            x.st = 2, string_count(nd, x), out.add(t);
          } else if (c >= 0x80) {
            if (utf8_lead(c, x)) string_count(nd, x), out.add(t);
          } else if (c >= 0x20) {
            string_count(nd, x), out.add(t);
          }
          return;
        case 2:
          if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't')
            x.st = 1, out.add(t);
          else if (c == 'u')
            x.st = 3, out.add(t);
          return;
        case 3:
          if (c == 'd' || c == 'D') x.st = 5, out.add(t);
          else if (is_hex(c)) x.st = 4, x.w = 3, out.add(t);
          return;
        case 5:
          if (c >= '0' && c <= '7') x.st = 4, x.w = 2, out.add(t);
          return;
        case 4:
          if (!is_hex(c)) return;
          if (--x.w == 0) x.st = 1;
          out.add(t);
          return;
      }
      return;
    case Kind::Number:
      if (!nd.tool) {
        // st 0 start; 1 after '-'; 2 integer digits (i); 3 after a leading 0; 4 after '.';
        // 5 fraction digits (j); 6 after 'e'; 7 after the exponent sign; 8 exponent digits (w).
        switch (x.st) {
          case 0:
          case 1:
            if (x.st == 0 && c == '-') x.st = 1, out.add(t);
            else if (c == '0') x.st = 3, out.add(t);
            else if (is_digit(c)) x.st = 2, x.i = 1, out.add(t);
            return;
          case 2:
          case 3:
            if (is_digit(c)) {
              if (x.st == 2 && x.i < kMaxIntDigits) ++x.i, out.add(t);
            } else if (c == '.' && !nd.integer) {
              x.st = 4, out.add(t);
            } else if ((c == 'e' || c == 'E') && !nd.integer) {
              x.st = 6, out.add(t);
            }
            return;
          case 4:
            if (is_digit(c)) x.st = 5, x.j = 1, out.add(t);
            return;
          case 5:
            if (is_digit(c)) {
              if (x.j < kMaxFracDigits) ++x.j, out.add(t);
            } else if (c == 'e' || c == 'E') {
              x.st = 6, out.add(t);
            }
            return;
          case 6:
            if (c == '+' || c == '-') x.st = 7, out.add(t);
            else if (is_digit(c)) x.st = 8, x.w = 1, out.add(t);
            return;
          case 7:
            if (is_digit(c)) x.st = 8, x.w = 1, out.add(t);
            return;
          case 8:
            if (is_digit(c) && x.w < kMaxExpDigits) ++x.w, out.add(t);
            return;
        }
        return;
      }
      // Tool format (prints back identically through Python's repr): st 0 start; 1 after '-';
      // 2 integer digits; 3 after a leading 0; 4 after '.'; 5 fraction digits. i: total digits
      // (<= kMaxToolDigits); u: 1 negative, 2 integer part is 0, 4 a nonzero fraction digit seen;
      // j: leading fraction zeros after "0." (<= 3: repr switches to exponents below 1e-4);
      // w: the last digit is nonzero (a fraction may not end in 0).
      switch (x.st) {
        case 0:
        case 1:
          if (x.st == 0 && c == '-') x.st = 1, x.u |= 1, out.add(t);
          else if (c == '0' && x.st == 1 && nd.integer) return;  // "-0" would be a dead end
          else if (c == '0') x.st = 3, x.i = 1, x.u |= 2, out.add(t);
          else if (is_digit(c)) x.st = 2, x.i = 1, out.add(t);
          return;
        case 2:
        case 3:
          if (is_digit(c)) {
            if (x.st == 2 && x.i < kMaxToolDigits) ++x.i, out.add(t);
          } else if (c == '.' && !nd.integer && x.i + 1 < kMaxToolDigits) {
            x.st = 4, out.add(t);
          }
          return;
        case 4:
        case 5:
          if (!is_digit(c) || x.i >= kMaxToolDigits) return;
          if (c == '0') {
            if (x.i + 1 >= kMaxToolDigits) return;  // no room left for a final nonzero digit
            const bool leading = (x.u & 2) && !(x.u & 4);
            if (leading && x.j >= 3) return;
            if (leading) ++x.j;
            x.w = 0;
          } else {
            x.u |= 4, x.w = 1;
          }
          ++x.i, x.st = 5;
          out.add(t);
          return;
      }
      return;
    case Kind::LitSet:  // i: trie node reached; a leaf ends the node, an inner terminal may end it
      for (const auto& [sym, child] : nd.lits[static_cast<size_t>(x.i)].kids) {
        if (sym != c) continue;
        x.i = child;
        const LitTrieNode& cn = nd.lits[static_cast<size_t>(child)];
        if (cn.terminal && cn.kids.empty()) finish(t);
        out.add(t);
        return;
      }
      return;
    case Kind::BareKey:  // i: identifier length; ends with ':'
      if (c == ':' && x.i > 0) {
        finish(t);
        out.add(t);
      } else if ((x.i == 0 ? is_ident_start(c) : is_ident(c)) && x.i < kMaxBareKey) {
        ++x.i;
        out.add(t);
      }
      return;
  }
}

}  // namespace eg::grammar
