// simdjson DOM access for the tokenizer files, with errors that name the file (internal header).
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <simdjson.h>
#include <string>
#include <string_view>

#include "core/error.h"

namespace eg::tok {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

// Reads a whole file into simdjson's padded buffer.
inline simdjson::padded_string read_padded(const std::string& path, const char* what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error(std::string("cannot open ") + what + " " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(std::string(what) + " " + path + ": not a regular file");
  }
  simdjson::padded_string buf(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < static_cast<size_t>(st.st_size)) {
    const ssize_t r = ::read(fd, buf.data() + got, static_cast<size_t>(st.st_size) - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ::close(fd);
      throw Error(std::string("cannot read ") + what + " " + path);
    }
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  return buf;
}

// JSON access that reports errors as "<file>: <field>: <problem>".
struct Json {
  std::string file;

  [[noreturn]] void fail(const std::string& msg) const { throw Error(file + ": " + msg); }

  element parse(simdjson::dom::parser& parser, const simdjson::padded_string& buf) const {
    element root;
    if (auto err = parser.parse(buf).get(root)) fail(std::string("invalid JSON: ") + simdjson::error_message(err));
    if (root.type() != element_type::OBJECT) fail("invalid JSON: the top level is not an object");
    return root;
  }
  // Member `key` of `obj`, or a null element pointer when absent.
  bool member(const object& obj, std::string_view key, element* out) const {
    return !obj.at_key(key).get(*out);
  }
  object as_object(const element& e, const std::string& what) const {
    object o;
    if (e.get(o)) fail(what + " must be an object");
    return o;
  }
  array as_array(const element& e, const std::string& what) const {
    array a;
    if (e.get(a)) fail(what + " must be an array");
    return a;
  }
  std::string_view as_string(const element& e, const std::string& what) const {
    std::string_view s;
    if (e.get(s)) fail(what + " must be a string");
    return s;
  }
  int64_t as_int(const element& e, const std::string& what) const {
    int64_t v;
    if (e.get(v)) fail(what + " must be an integer");
    return v;
  }
  std::string_view string_field(const object& o, std::string_view key, const std::string& what) const {
    element e;
    if (!member(o, key, &e)) fail(what + "." + std::string(key) + " is missing");
    return as_string(e, what + "." + std::string(key));
  }
  bool bool_field(const object& o, std::string_view key, bool dflt, const std::string& what) const {
    element e;
    if (!member(o, key, &e) || e.is_null()) return dflt;
    bool v;
    if (e.get(v)) fail(what + "." + std::string(key) + " must be a boolean");
    return v;
  }
  // The String form of a normalizer/decoder/pre-tokenizer pattern ({"String": "..."}).
  std::string string_pattern(const object& o, const std::string& what) const {
    element p;
    if (!member(o, "pattern", &p)) fail(what + ".pattern is missing");
    object po = as_object(p, what + ".pattern");
    element s;
    if (!member(po, "String", &s)) fail(what + ": only String patterns are supported (not Regex)");
    return std::string(as_string(s, what + ".pattern.String"));
  }
};

}  // namespace eg::tok
