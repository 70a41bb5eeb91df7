// Small file helpers shared by the layers.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

namespace eg {

/// Reads a whole file (binary). Throws eg::Error("cannot read <path>") when it cannot be opened.
std::string read_file(const std::string& path);

/// Reads a whole stream (e.g. stdin) until EOF.
std::string read_stream(std::FILE* f);

/// Writes all n bytes of p to the file descriptor fd, retrying on EINTR and short writes.
/// Returns false with errno set on failure (a zero-byte write reports EIO).
bool write_all(int fd, const void* p, size_t n);

}  // namespace eg
