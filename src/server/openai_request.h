// OpenAI request bodies -> GenRequest, with strict validation: any malformed field is an
// ApiError(400) naming the field (param), never an exception of another kind.
//
// /v1/chat/completions fields: model, messages (roles system, developer (= system), user,
// assistant (content and/or tool_calls), tool (tool_call_id, content); content a string, null,
// or an array of {"type": "text", "text"} parts, and in user messages {"type": "image_url",
// "image_url": {"url": "data:image/png;base64,..."}} parts (server/image_input.h: data: URLs only,
// at most 8 images, 20 MiB each; the message's images come before its text; a model without a
// vision tower is a 400)), stream, stream_options.include_usage,
// max_tokens / max_completion_tokens, temperature, top_p, seed, stop (string or array),
// presence_penalty, frequency_penalty, logit_bias, n (1 only), response_format (text, json_object,
// json_schema), tools, tool_choice; extensions: preset (precise/balanced/creative/code), top_k,
// min_p, repeat_penalty, repeat_last_n, ignore_eos (generate through end-of-turn), timeout (seconds, at most the server's),
// add_bos (boolean, default true: the prompt starts with exactly one <bos>, engine/prompt_bos.h;
// false: none is added, a "<bos>" the template or the prompt text writes stays). Unknown fields are ignored (as OpenAI-compatible servers
// do); fields we cannot honour (n > 1, logprobs, remote image URLs) are 400.
// /v1/completions: prompt (a string, or an array of one string), the same sampling fields,
// max_tokens (default 16, as OpenAI), echo false only.
//
// Defaults follow OpenAI: temperature 1, top_p 1; a preset replaces those two; explicit fields
// override the preset. Without max_tokens a chat request may use the whole context.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "engine/loaded_model.h"
#include "engine/session_prompt.h"
#include "server/request.h"

namespace eg::server {

class MediaCache;

/// What parsing needs from the server: the model, its prompt encoder (chat template), the
/// context size of a slot in tokens, and whether the template renders tools.
struct RequestContext {
  const LoadedModel& model;
  const PromptEncoder& encoder;
  std::string model_id;
  int context_tokens = 0;
  bool template_has_tools = false;
  // Encoded images kept between requests (null: none); see server/media_cache.h.
  MediaCache* media_cache = nullptr;
  // Gemma 3 pan-and-scan for the request images (serve --pan-and-scan; docs/vision.md).
  bool pan_and_scan = false;
};

/// Throws ApiError(400) for anything invalid, including a prompt that leaves no room in the
/// context (code "context_length_exceeded").
/// draft_end (optional): set to the number of prompt tokens up to the end of the last message's
/// content (what follows is the template's end of turn and generation prompt), never inside an
/// image's or audio clip's soft tokens.
GenRequest parse_chat_request(const nlohmann::ordered_json& body, const RequestContext& ctx,
                              size_t* draft_end = nullptr);
GenRequest parse_completion_request(const nlohmann::ordered_json& body, const RequestContext& ctx);

/// Parses a request body (keeping key order: JSON-schema properties are generated in the
/// client's order); malformed JSON or a non-object is ApiError(400), and so is JSON past the
/// limits of parse_json_limited.
nlohmann::ordered_json parse_body(const std::string& body);

/// JSON text -> ordered_json, refusing (ApiError(400) "<what> nests deeper than ..." / "<what> has
/// an object of more than ... keys", with `param`) nesting deeper than kMaxJsonDepth and objects
/// of more than kMaxObjectKeys keys (server/limits.h) while parsing. Malformed text gives a
/// discarded value.
nlohmann::ordered_json parse_json_limited(const std::string& text, const std::string& what, const std::string& param);

}  // namespace eg::server
