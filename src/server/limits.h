// Limits a request to `edgegemma serve` cannot exceed (docs/reliability.md lists every limit of
// the server, the chat-template interpreter, the schema compiler and session files). Exceeding
// one is HTTP 400 naming the field (413 for the body size, a server option).
#pragma once
#include <cstddef>

namespace eg::server {

/// Messages in one /v1/chat/completions request. With Gemma 4's template (whose cost grows with
/// the square of the message count) 1024 messages render well within the interpreter's step budget.
inline constexpr size_t kMaxMessages = 1024;
/// Tool declarations in one request (OpenAI's own limit).
inline constexpr size_t kMaxTools = 128;
/// Images: kMaxImagesPerRequest and kMaxImageBytes in server/image_input.h.
/// JSON of a request body (and of tool-call arguments inside it): nesting depth, and keys of one
/// object. The key limit also bounds parsing time: a key-order-preserving JSON object checks
/// each new key against the ones before it, so one object of 10^5 keys (a 1 MiB body) took 20 s.
inline constexpr int kMaxJsonDepth = 64;
inline constexpr size_t kMaxObjectKeys = 1024;
/// Stop strings in one request.
inline constexpr size_t kMaxStopStrings = 16;

}  // namespace eg::server
