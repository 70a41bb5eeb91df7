#include "kb/chunker.h"

#include <algorithm>

#include "core/error.h"

namespace eg::kb {

namespace {

bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

// Moves `i` back to the start of the UTF-8 character it is in (at most 3 bytes: in text that is
// not UTF-8, a run of continuation bytes is cut anywhere).
size_t char_floor(std::string_view t, size_t i) {
  for (int k = 0; k < 3 && i > 0 && i < t.size() && is_cont(static_cast<unsigned char>(t[i])); ++k) --i;
  return i;
}

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos; }

// The best end in (lo, hi]: just after a break, by preference.
size_t best_end(std::string_view t, size_t lo, size_t hi) {
  const std::string_view w = t.substr(lo, hi - lo);
  auto after_last = [&](std::string_view pat) -> size_t {
    const size_t p = w.rfind(pat);
    return p == std::string_view::npos || p == 0 ? 0 : lo + p + pat.size();
  };
  for (std::string_view pat : {std::string_view("\n\n"), std::string_view("\n"), std::string_view(". "),
                               std::string_view("\xE3\x80\x82"), std::string_view("? "), std::string_view("! "),
                               std::string_view(" ")}) {
    if (const size_t e = after_last(pat); e > lo) return e;
  }
  return char_floor(t, hi);
}

}  // namespace

std::vector<Chunk> chunk_text(std::string_view t, const ChunkOptions& o) {
  if (o.chunk_bytes < 64 || o.chunk_bytes > (1 << 24))
    throw Error("chunk size must be 64 .. 16777216 bytes, got " + std::to_string(o.chunk_bytes));
  if (o.overlap_bytes < 0 || o.overlap_bytes >= o.chunk_bytes / 2)
    throw Error("chunk overlap must be 0 .. chunk size / 2, got " + std::to_string(o.overlap_bytes));
  std::vector<Chunk> out;
  const size_t n = t.size(), size = static_cast<size_t>(o.chunk_bytes), overlap = static_cast<size_t>(o.overlap_bytes);
  size_t start = 0;
  while (start < n) {
    size_t end = n;
    if (n - start > size) {
      end = best_end(t, start + size - size / 3, start + size);
      if (end <= start) end = char_floor(t, start + size);
      if (end <= start) end = std::min(n, start + size);  // not UTF-8 at all: a byte cut
    }
    if (!blank(t.substr(start, end - start))) out.push_back(Chunk{start, end - start});
    if (end >= n) break;
    // Next start: `overlap` before the end, at a word start, always past this start.
    size_t next = end > overlap ? end - overlap : 0;
    if (next <= start) next = end;
    if (next < end) {
      const size_t sp = t.substr(next, end - next).find_first_of(" \n\t");
      if (sp != std::string_view::npos) next += sp + 1;
      else next = char_floor(t, next);
      if (next <= start) next = end;
    }
    for (int k = 0; k < 3 && next < end && is_cont(static_cast<unsigned char>(t[next])); ++k) ++next;
    start = next;
  }
  return out;
}

}  // namespace eg::kb
