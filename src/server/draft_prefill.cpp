#include "server/draft_prefill.h"

#include <algorithm>

#include "server/api_error.h"

namespace eg::server {


DraftPlan plan_draft(const nlohmann::ordered_json& body, const RequestContext& ctx, int holdback) {
  DraftPlan plan;
  nlohmann::ordered_json b = body;
  b.erase("stream");
  size_t draft_end = 0;
  const GenRequest r = parse_chat_request(b, ctx, &draft_end);
  plan.prompt_tokens = static_cast<int>(r.prompt.size());
  plan.images = static_cast<int>(r.media.size());
  size_t stable = draft_end > static_cast<size_t>(holdback) ? draft_end - static_cast<size_t>(holdback) : 0;
  stable = std::min(stable, r.prompt.size());
  // Whole media only: a run the held-back tail cuts is left for the request.
  for (const MediaRun& m : r.media) {
    const size_t b = static_cast<size_t>(m.begin), e = b + static_cast<size_t>(m.image->n);
    if (b < stable && stable < e) stable = b;
    if (e <= stable) plan.media.push_back(m);
  }
  plan.tokens.assign(r.prompt.begin(), r.prompt.begin() + static_cast<std::ptrdiff_t>(stable));
  return plan;
}

}  // namespace eg::server
