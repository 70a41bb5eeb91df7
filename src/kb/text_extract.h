// Turning a file into the text the knowledge base indexes.
//
// Kinds, by extension: .html/.htm/.xhtml -> HTML stripped to text (html_to_text); .pdf -> refused
// (PDF extraction is not built in: convert with `pdftotext` first); everything else is read as
// UTF-8 text (Markdown is indexed as written). Plain text is kept byte for byte, so chunk offsets
// are byte offsets into the file; for HTML they are byte offsets into the extracted text.
//
// Refused with an eg::Error naming the file: a file over max_bytes (checked before reading), a
// directory or unreadable file, binary data (a NUL byte), invalid UTF-8 (with the byte offset).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace eg::kb {

struct ExtractOptions {
  uint64_t max_bytes = 64ull << 20;  // 64 MiB; `kb add --max-file-mb`
};

struct Extracted {
  std::string kind;   // "text" or "html"
  std::string text;   // valid UTF-8
  std::string sha256; // of the file's bytes
  uint64_t bytes = 0; // file size
};

Extracted extract_file(const std::string& path, const ExtractOptions& o = {});

/// Checks that `bytes` are text: throws eg::Error "<what>: not a text file (a NUL byte at N)" or
/// "<what>: not valid UTF-8 at byte N ...".
void check_text(std::string_view bytes, const std::string& what);

/// HTML -> plain text: tags dropped (block elements and <br> become line breaks), <script>,
/// <style>, <template> and comments dropped with their content, character references decoded
/// (named: the common ones; numeric: any valid code point, else U+FFFD), runs of spaces and tabs
/// collapsed, at most one blank line in a row. Valid UTF-8 in, valid UTF-8 out, never longer than
/// the input. Never throws.
std::string html_to_text(std::string_view html);

}  // namespace eg::kb
