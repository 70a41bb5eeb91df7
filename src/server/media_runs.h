// Media (image / audio soft-token runs) in the scheduler's KV bookkeeping: which prefix of a slot's
// KV a new prompt may reuse, where a prefill chunk may end, and the rows a chunk embeds.
//
// Placeholder ids do not say which image a run shows, so token equality is not enough: a run is
// reusable only when both sides hold the same encoded medium (SessionImage::id, the same object
// the media cache hands out for the same data) at the same position. A bidirectional run (Gemma 3:
// the image's rows see each other) is reused whole or not at all.
#pragma once
#include <cstddef>
#include <vector>

#include "engine/media.h"
#include "model/model.h"

namespace eg::server {

/// `l` (a common token prefix of two prompts) cut so that every run of `a` or `b` starting before
/// it has an identical run (same begin, same medium id) in the other, and no bidirectional run is
/// cut.
size_t media_reusable_prefix(size_t l, const std::vector<MediaRun>& a, const std::vector<MediaRun>& b);

/// A prefill chunk [pos, end) shortened (or, for a run starting at pos, lengthened) so that it
/// does not end inside a bidirectional run.
int media_chunk_end(const std::vector<MediaRun>& media, int pos, int end);

/// The soft-token rows of [pos, end), relative to pos. `hidden` is the text model's width.
std::vector<EmbedSpan> media_spans(const std::vector<MediaRun>& media, int pos, int end, int hidden);

}  // namespace eg::server
