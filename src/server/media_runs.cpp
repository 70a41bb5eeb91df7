#include "server/media_runs.h"

#include <algorithm>

namespace eg::server {

namespace {

bool same_run(const MediaRun& x, const std::vector<MediaRun>& other) {
  for (const MediaRun& y : other)
    if (y.begin == x.begin && y.image && x.image && y.image->id == x.image->id && y.image->n == x.image->n) return true;
  return false;
}

}  // namespace

size_t media_reusable_prefix(size_t l, const std::vector<MediaRun>& a, const std::vector<MediaRun>& b) {
  // Cutting can only move l down, which can only remove runs from consideration: one pass over
  // each side in begin order settles it (runs are sorted by begin and do not overlap).
  for (int side = 0; side < 2; ++side) {
    const auto& mine = side == 0 ? a : b;
    const auto& other = side == 0 ? b : a;
    for (const MediaRun& m : mine) {
      const size_t begin = static_cast<size_t>(m.begin);
      if (begin >= l) break;
      if (!same_run(m, other)) {
        l = begin;
        break;
      }
      if (m.image->bidirectional && l < begin + static_cast<size_t>(m.image->n)) {
        l = begin;
        break;
      }
    }
  }
  return l;
}

int media_chunk_end(const std::vector<MediaRun>& media, int pos, int end) {
  for (const MediaRun& m : media) {
    const int b = m.begin, e = m.begin + m.image->n;
    if (m.image->bidirectional && b < end && end < e) end = b > pos ? b : e;
  }
  return end;
}

std::vector<EmbedSpan> media_spans(const std::vector<MediaRun>& media, int pos, int end, int hidden) {
  std::vector<EmbedSpan> spans;
  for (const MediaRun& m : media) {
    const int b = std::max(m.begin, pos), e = std::min(m.begin + m.image->n, end);
    if (b < e)
      spans.push_back(EmbedSpan{b - pos, e - b, m.image->soft.data() + static_cast<size_t>(b - m.begin) * hidden,
                                m.image->bidirectional});
  }
  return spans;
}

}  // namespace eg::server
