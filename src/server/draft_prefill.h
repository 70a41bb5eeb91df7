// Draft prefill over HTTP (POST /v1/prefill, docs/server.md "Prefill while typing"): the body of a
// chat completion whose last user message is still being typed -> the prompt tokens that are
// stable, i.e. will begin the prompt of the request that follows once the user presses Enter.
//
// As Session::update_input (engine/session.h) does, the last `holdback` tokens of the draft text
// are held back (the next keystroke may change their tokenization), and so is everything after
// it (the template's end of turn and generation prompt). Text only: messages from the first one
// with an image_url part on are left out (images are never decoded or encoded for a draft, and a
// draft never puts image tokens in a slot or the prefix cache).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "server/openai_request.h"

namespace eg::server {

struct DraftPlan {
  std::vector<int32_t> tokens;  // the stable prompt prefix to prefill (may be empty)
  int prompt_tokens = 0;        // tokens of the whole (text-only) draft prompt
  bool images_left_out = false; // messages were cut at the first one with an image
};

/// Throws ApiError(400) for a body /v1/chat/completions would refuse (same validation), except
/// that image parts are never looked at beyond their type.
DraftPlan plan_draft(const nlohmann::ordered_json& body, const RequestContext& ctx, int holdback);

}  // namespace eg::server
