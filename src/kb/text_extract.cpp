#include "kb/text_extract.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/sha256.h"
#include "tokenizer/utf8.h"

namespace eg::kb {

namespace {

std::string lower_ext(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string e = path.substr(dot + 1);
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e;
}

}  // namespace

void check_text(std::string_view s, const std::string& what) {
  if (const size_t nul = s.find('\0'); nul != std::string_view::npos)
    throw Error(what + ": not a text file (binary data: a NUL byte at offset " + std::to_string(nul) + ")");
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 1;
    if (utf8::check_char(s.substr(i), &len) != utf8::CharStatus::kValid)
      throw Error(what + ": not valid UTF-8 at byte " + std::to_string(i) +
                  " (convert it first, e.g. iconv -f latin1 -t utf-8)");
    i += len;
  }
}

Extracted extract_file(const std::string& path, const ExtractOptions& o) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(path + ": cannot read: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error(path + ": is a directory");
  if (!S_ISREG(st.st_mode)) throw Error(path + ": not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > o.max_bytes)
    throw Error(path + ": too large to index (" + std::to_string(size >> 20) + " MiB; the limit is " +
                std::to_string(o.max_bytes >> 20) + " MiB, --max-file-mb)");
  const std::string ext = lower_ext(path);
  if (ext == "pdf")
    throw Error(path + ": PDF is not supported in this build (convert it to text first, e.g. pdftotext FILE.pdf)");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot read: " + std::strerror(errno));
  Extracted e;
  e.bytes = size;
  std::string data(size, '\0');
  if (size && !f.read(data.data(), static_cast<std::streamsize>(size))) throw Error(path + ": read error");
  check_text(data, path);
  e.sha256 = sha256_hex(data);
  if (ext == "html" || ext == "htm" || ext == "xhtml") {
    e.kind = "html";
    e.text = html_to_text(data);
  } else {
    e.kind = "text";
    e.text = std::move(data);
  }
  return e;
}

}  // namespace eg::kb
