// edgegemma — the one exception type of the C++ API.
//
// Bad input (files, arguments, requests) is expected: every layer reports it by throwing
// eg::Error with a one-line, human-readable message that names the offending file/field.
// Internal invariants use assert(). Frontends catch eg::Error, print the message, exit non-zero.
#pragma once
#include <stdexcept>
#include <string>

namespace eg {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

}  // namespace eg
