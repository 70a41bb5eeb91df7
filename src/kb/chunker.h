// Splitting extracted text into overlapping passages for indexing.
//
// Sizes are in bytes of UTF-8 (a Chinese character counts 3): each chunk is at most
// `chunk_bytes`, and consecutive chunks share about `overlap_bytes`. A chunk ends at the best
// break in its last third: a blank line, else a line end, else a sentence end (". ", "。"), else
// a space, else at a character boundary. The next chunk starts `overlap_bytes` before the end,
// moved forward to the start of a word. Offsets never split a UTF-8 character; chunks of
// whitespace only are dropped. Deterministic: the same text and options give the same chunks.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace eg::kb {

struct ChunkOptions {
  int chunk_bytes = 1200;   // >= 64
  int overlap_bytes = 200;  // 0 <= overlap < chunk_bytes / 2
};

struct Chunk {
  uint64_t offset = 0;  // byte offset into the text
  uint64_t length = 0;  // bytes
};

/// Throws eg::Error for options out of range.
std::vector<Chunk> chunk_text(std::string_view text, const ChunkOptions& o);

}  // namespace eg::kb
