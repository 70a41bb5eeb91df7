// Small file helpers shared by the layers.
#pragma once
#include <cstdio>
#include <string>

namespace eg {

/// Reads a whole file (binary). Throws eg::Error("cannot read <path>") when it cannot be opened.
std::string read_file(const std::string& path);

/// Reads a whole stream (e.g. stdin) until EOF.
std::string read_stream(std::FILE* f);

}  // namespace eg
