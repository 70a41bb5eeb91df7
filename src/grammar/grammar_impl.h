// Internal representation of a compiled grammar and the stack machine that runs it.
//
// A grammar is a graph of typed nodes (JSON object/array/string/number, literals, sequences,
// alternatives). Input symbols are bytes 0..255 and special tokens 256+k (k indexes
// GrammarDef::specials). A matcher state is a set of "threads"; each thread is a stack of frames
// (one per open node, the top one is the node being matched). Nondeterminism (anyOf, optional
// properties, whether a number ends) is handled by keeping several threads; identical threads
// are merged. Nodes are never nullable (each consumes at least one symbol), so feeding a symbol
// always terminates.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <cstddef>

namespace eg::grammar {

enum class Kind : uint8_t {
  Root,     // optional leading whitespace (JSON, pretty), then kids[0]
  Literal,  // exact symbol sequence `lit`
  Seq,      // kids in order
  Alt,      // one of kids
  Repeat,   // kids[0] repeated min..max times (max < 0: unbounded)
  Object,   // JSON or tool-format object
  Array,    // items kids[0], min..max items
  String,   // JSON string / tool-format string (<|"|>...<|"|>); min..max code points (max < 0: unbounded)
  Number,   // JSON / tool-format number; `integer` restricts to integers
  Any,      // any value (of the node's flavor)
  BareKey,  // tool format: an identifier key followed by ':' (free objects)
  LitSet,   // one of several symbol sequences (enum / const), as a trie: one thread for all
};

struct LitTrieNode {
  std::vector<std::pair<uint16_t, int32_t>> kids;  // (symbol, node)
  bool terminal = false;                           // a whole value ends here
};

struct Prop {
  int key = -1;    // Literal node: "\"name\"" (JSON) or "name:" (tool format)
  int value = -1;  // value node
  bool required = false;
};

struct Node {
  Kind kind = Kind::Literal;
  bool tool = false;     // Gemma 4 tool-call flavor (no whitespace, bare keys, <|"|> strings)
  bool integer = false;  // Number: integers only
  std::vector<uint16_t> lit;
  std::vector<int> kids;
  std::vector<Prop> props;  // Object, in emission order
  bool free_obj = false;    // Object: any keys (JSON strings / bare identifiers) ...
  int free_value = -1;      // ... with values of this node
  int min = 0, max = -1;    // Array items, Repeat count, String length in code points (minLength/maxLength)
  std::vector<LitTrieNode> lits;  // LitSet: node 0 is the root
};

/// Shared nodes Kind::Any dispatches to (one set per flavor: [0] JSON, [1] tool format).
struct AnyNodes {
  int obj = -1, arr = -1, str = -1, num = -1, t = -1, f = -1, null = -1, bare_key = -1;
};

struct GrammarDef {
  std::vector<Node> nodes;
  AnyNodes any[2];
  int root = -1;
  std::vector<std::string> specials;  // text of special symbol 256+k, e.g. "<|\"|>"
  int quote_sym = -1;                 // symbol of <|"|> (tool strings), -1 if unused
  bool pretty_ws = false;             // JSON flavor: JsonWhitespace::Pretty (else no whitespace)
};

// ---- limits (documented in docs/structured-output.md) ----
constexpr int kMaxWs = 32;            // bytes in one whitespace run (JSON flavor, pretty)
constexpr int kMaxIntDigits = 16;     // JSON integer part digits
constexpr int kMaxFracDigits = 16;    // JSON fraction digits
constexpr int kMaxExpDigits = 2;      // JSON exponent digits
constexpr int kMaxToolDigits = 15;    // tool-format number: total digits (round-trips via double)
constexpr int kMaxBareKey = 64;       // tool-format free-object key length
constexpr int kMaxStack = 48;         // frames per thread
constexpr int kMaxAnyNesting = 32;    // Any: containers only while the stack is shallower
constexpr int kMaxSchemaDepth = 24;   // schema nesting accepted by the compiler
constexpr int kMaxStringLength = 1000000;  // largest minLength / maxLength accepted
constexpr int kMaxGrammarSize = 100000;    // nodes + enum/const trie nodes of one compiled schema / tools array

struct Frame {
  int32_t node;
  uint8_t st;  // kind-specific state
  uint8_t u;   // kind-specific (UTF-8 continuation bytes pending, flags)
  uint16_t w;  // whitespace run length / small counter
  int32_t i;   // kind-specific counter
  int32_t j;   // kind-specific counter
  bool operator==(const Frame& o) const {
    return node == o.node && st == o.st && u == o.u && w == o.w && i == o.i && j == o.j;
  }
};

struct Stack {
  int n = 0;
  Frame f[kMaxStack];
  Stack() = default;
  Stack(const Stack& o) : n(o.n) {
    for (int k = 0; k < n; ++k) f[k] = o.f[k];
  }
  Stack& operator=(const Stack& o) {
    n = o.n;
    for (int k = 0; k < n; ++k) f[k] = o.f[k];
    return *this;
  }
};

/// A set of threads stored flat (no allocation once warmed up).
struct ThreadSet {
  std::vector<Frame> frames;
  std::vector<uint32_t> off{0};
  void clear() {
    frames.clear();
    off.assign(1, 0);
  }
  size_t size() const { return off.size() - 1; }
  bool empty() const { return off.size() == 1; }
  void add(const Stack& s);  // appends unless an identical thread is present
  void load(size_t t, Stack& s) const;
  bool operator==(const ThreadSet& o) const { return frames == o.frames && off == o.off; }
};

/// Runs a grammar: feeding one symbol to a thread set.
class Machine {
 public:
  explicit Machine(const GrammarDef& g) : g_(&g) {}
  /// out = every thread of `in` advanced by symbol c (bytes 0..255, specials 256+k).
  void feed(const ThreadSet& in, int c, ThreadSet& out) const;
  /// The initial state (one thread holding the root).
  void init(ThreadSet& out) const;
  /// A thread can end here (the whole value is complete).
  bool complete(const ThreadSet& s) const;
  /// Every thread is inside a JSON string body (tool=false) / tool string body (tool=true) with no
  /// pending escape, UTF-8 continuation or partial <|"|> text: any "string-safe" token keeps
  /// every thread alive in the same state class (TokenVocab's safe sets).
  bool all_in_clean_string(const ThreadSet& s, bool tool) const;
  /// For a set where all_in_clean_string holds: the most code points any thread's string may
  /// still take (maxLength minus the count so far), or INT32_MAX when some thread's string is
  /// unbounded. A string-safe token of k code points is allowed iff k <= this.
  int32_t clean_string_room(const ThreadSet& s) const;

 private:
  void step(const Stack& s, int c, ThreadSet& out) const;
  void push(Stack& s, int node) const;
  void finish(Stack& s) const;  // pops the top frame (it is complete) and updates the parents
  bool can_finish(const Frame& f) const;
  bool finishes_all(Stack s) const;
  const GrammarDef* g_;
};

}  // namespace eg::grammar
