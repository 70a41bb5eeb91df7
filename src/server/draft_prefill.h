// Draft prefill over HTTP (POST /v1/prefill, docs/server.md "Prefill while typing"): the body of a
// chat completion whose last user message is still being typed -> the prompt tokens that are
// stable, i.e. will begin the prompt of the request that follows once the user presses Enter.
//
// As Session::update_input (engine/session.h) does, the last `holdback` tokens of the draft text
// are held back (the next keystroke may change their tokenization), and so is everything after
// it (the template's end of turn and generation prompt). Images (and audio clips) are decoded and
// encoded now, into the server's media cache (ctx.media_cache, server/media_cache.h), and their
// soft tokens are prefilled with the text, so that the request after Enter, which gets the same
// encoded media from the cache, reuses the slot's KV through them.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "server/openai_request.h"

namespace eg::server {

struct DraftPlan {
  std::vector<int32_t> tokens;  // the stable prompt prefix to prefill (may be empty)
  int prompt_tokens = 0;        // tokens of the whole (text-only) draft prompt
  int images = 0;               // media runs of the draft (encoded now or found in the cache)
  std::vector<MediaRun> media;  // the runs inside `tokens` (whole runs only)
};

/// Throws ApiError(400) for a body /v1/chat/completions would refuse (same validation).
DraftPlan plan_draft(const nlohmann::ordered_json& body, const RequestContext& ctx, int holdback);

}  // namespace eg::server
