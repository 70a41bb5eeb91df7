#include "server/openai_response.h"

#include <random>

namespace eg::server {

using nlohmann::json;

std::string random_id(const std::string& prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += a[rng() % 62];
  return s;
}

json usage_json(const JobResult& r) {
  return json{{"prompt_tokens", r.prompt_tokens},
              {"completion_tokens", r.completion_tokens},
              {"total_tokens", r.prompt_tokens + r.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

json timings_json(const JobResult& r) {
  const double per_s = r.completion_tokens > 1 && r.decode_ms > 0 ? (r.completion_tokens - 1) * 1000.0 / r.decode_ms : 0.0;
  return json{{"prompt_n", r.prompt_tokens - r.cached_tokens}, {"cached_n", r.cached_tokens},
              {"prompt_ms", r.prompt_ms},  {"predicted_n", r.completion_tokens},
              {"predicted_ms", r.decode_ms}, {"ttft_ms", r.ttft_ms},
              {"queue_ms", r.queue_ms},    {"predicted_per_second", per_s}};
}

json completion_json(const GenRequest& req, const std::string& id, int64_t created, const JobResult& r) {
  const bool chat = req.kind == GenRequest::Kind::Chat;
  json choice{{"index", 0}, {"finish_reason", r.finish}, {"logprobs", nullptr}};
  if (chat) {
    json msg{{"role", "assistant"}};
    msg["content"] = r.tool_calls.is_array() && r.text.empty() ? json(nullptr) : json(r.text);
    if (r.tool_calls.is_array()) msg["tool_calls"] = r.tool_calls;
    choice["message"] = msg;
  } else {
    choice["text"] = r.text;
  }
  json out{{"id", id},
            {"object", chat ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", req.model},
            {"system_fingerprint", "edgegemma"},
            {"choices", json::array({choice})},
            {"usage", usage_json(r)},
            {"timings", timings_json(r)}};
  if (!req.kb_passages.is_null()) out["kb_passages"] = req.kb_passages;
  if (!r.faq.is_null()) out["faq"] = r.faq;
  return out;
}

json chunk_json(const GenRequest& req, const std::string& id, int64_t created, const json& delta_or_text,
                const char* finish_reason) {
  const bool chat = req.kind == GenRequest::Kind::Chat;
  json choice{{"index", 0}, {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}, {"logprobs", nullptr}};
  if (chat)
    choice["delta"] = delta_or_text;
  else
    choice["text"] = delta_or_text;
  return json{{"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", req.model},
              {"system_fingerprint", "edgegemma"},
              {"choices", json::array({choice})}};
}

std::string sse(const json& j) { return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n"; }

}  // namespace eg::server
