// OpenAI response bodies: chat.completion, chat.completion.chunk (SSE), text_completion, with
// usage and edgegemma's "timings" extension ({prompt_n, prompt_ms, predicted_n, predicted_ms,
// ttft_ms, predicted_per_second, cached_n}).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "server/job.h"

namespace eg::server {

/// `prefix` + 24 random alphanumerics (OpenAI's id shape: "chatcmpl-…", "cmpl-…", "call_…").
std::string random_id(const std::string& prefix);
/// "chatcmpl-" / "cmpl-" + random id.
inline std::string new_completion_id(bool chat) { return random_id(chat ? "chatcmpl-" : "cmpl-"); }
nlohmann::json usage_json(const JobResult& r);
nlohmann::json timings_json(const JobResult& r);
/// The whole non-streamed response (with the "kb_passages" and "faq" extensions when set).
nlohmann::json completion_json(const GenRequest& req, const std::string& id, int64_t created, const JobResult& r);
/// One streamed chunk. Chat: delta {"role": "assistant", "content": ""} (first), {"content": text}, or
/// the final one with finish_reason (and tool_calls when any). Completions: {"text": text}.
nlohmann::json chunk_json(const GenRequest& req, const std::string& id, int64_t created,
                          const nlohmann::json& delta_or_text, const char* finish_reason);
/// "data: <json>\n\n".
std::string sse(const nlohmann::json& j);

}  // namespace eg::server
