#include "server/draft_prefill.h"

#include <algorithm>

#include "server/api_error.h"

namespace eg::server {

namespace {

bool has_image_part(const nlohmann::ordered_json& m) {
  if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) return false;
  for (const auto& part : m["content"])
    if (part.is_object() && part.contains("type") && part["type"] == "image_url") return true;
  return false;
}

}  // namespace

DraftPlan plan_draft(const nlohmann::ordered_json& body, const RequestContext& ctx, int holdback) {
  DraftPlan plan;
  nlohmann::ordered_json b = body;
  if (b.contains("messages") && b["messages"].is_array()) {
    auto& msgs = b["messages"];
    for (size_t i = 0; i < msgs.size(); ++i) {
      if (!has_image_part(msgs[i])) continue;
      plan.images_left_out = true;
      if (i == 0) return plan;  // nothing before the first image
      msgs.erase(msgs.begin() + static_cast<std::ptrdiff_t>(i), msgs.end());
      break;
    }
  }
  b.erase("stream");
  size_t draft_end = 0;
  const GenRequest r = parse_chat_request(b, ctx, &draft_end);
  plan.prompt_tokens = static_cast<int>(r.prompt.size());
  size_t stable = draft_end > static_cast<size_t>(holdback) ? draft_end - static_cast<size_t>(holdback) : 0;
  if (!r.media.empty()) stable = std::min(stable, static_cast<size_t>(r.media[0].begin));  // cannot happen
  stable = std::min(stable, r.prompt.size());
  plan.tokens.assign(r.prompt.begin(), r.prompt.begin() + static_cast<std::ptrdiff_t>(stable));
  return plan;
}

}  // namespace eg::server
