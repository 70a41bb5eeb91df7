// A Jinja2 interpreter for the subset of the language that chat templates use, rendering byte
// for byte what transformers' apply_chat_template renders (jinja2's ImmutableSandboxedEnvironment
// with trim_blocks, lstrip_blocks, the loopcontrols extension, its `tojson` and the globals
// raise_exception and strftime_now).
//
// Supported:
//   statements   if/elif/else; for (tuple targets, `if` filter, else, loop.index/index0/revindex/
//                revindex0/first/last/length/depth/previtem/nextitem/cycle, break/continue);
//                set (names, tuples, namespace attributes, block set); macro (defaults,
//                keyword arguments, recursion) and call blocks with caller(); generation blocks
//   expressions  literals (str, int, float, true/false/none, list, tuple, dict), + - * / // % **
//                ~, comparisons (chained), in / not in, and/or/not, `x if c else y`,
//                attribute and item access, slices, calls with keyword arguments
//   filters      abs capitalize count d default dictsort first float int items join last length
//                list lower map reject rejectattr replace reverse safe select selectattr sort
//                string tojson trim unique upper
//   tests        boolean callable defined divisibleby eq equalto even false float ge gt
//                greaterthan in integer iterable le lessthan lower lt mapping ne none number odd
//                sameas sequence string true undefined upper == != < <= > >=
//   methods      str: upper lower capitalize strip lstrip rstrip split startswith endswith
//                replace find join; dict: get keys values items
//   globals      range namespace dict raise_exception strftime_now
// Anything else fails with eg::Error "chat template: unsupported Jinja feature '...' at line N"
// (at parse time for statements, filters and tests; when reached for methods and operators).
// Limits of one render (eg::Error when exceeded; docs/reliability.md): macro recursion 200 deep,
// 2,000,000 loop iterations + macro calls, 32 MiB of rendered text, one string repetition 64 MiB,
// one list repetition 1,000,000 items, range() 100,000 items; parsing: nesting 200 deep.
// Undefined values behave as jinja2's default Undefined: falsy, printed as "", an error when
// used in arithmetic, called, or looked into.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "core/error.h"
#include "tokenizer/jinja/value.h"

namespace eg::jinja {

/// The template called raise_exception(message). what() is "chat template: " + message.
class TemplateRaise : public Error {
 public:
  explicit TemplateRaise(const std::string& message) : Error("chat template: " + message), message_(message) {}
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

struct Node;

class Template {
 public:
  /// Parses the template. Throws eg::Error on a syntax error or an unsupported construct.
  explicit Template(std::string_view source);
  ~Template();
  Template(const Template&) = default;
  Template& operator=(const Template&) = default;

  /// Renders with `variables` (a dict Value: name -> value). Throws TemplateRaise when the
  /// template calls raise_exception(), eg::Error for any other failure.
  std::string render(const Value& variables) const;

 private:
  struct Parsed;
  std::shared_ptr<const Parsed> parsed_;
};

}  // namespace eg::jinja
