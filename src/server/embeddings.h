// POST /v1/embeddings (OpenAI's request and response shape; docs/embeddings.md):
//   {"model": str, "input": str | [str, ...], "encoding_format": "float" | "base64",
//    "dimensions": int, "task": str (extension: a prompt name of the model, e.g. "query"),
//    "user": str (ignored)}
//   -> {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...] | "b64"}],
//       "model": id, "usage": {"prompt_tokens": n, "total_tokens": n}}
// base64 is the little-endian float32 bytes of the vector, standard base64 with padding (what
// the official clients decode; the Python and JS clients ask for it by default). "dimensions" is
// accepted only where the model supports Matryoshka truncation. Token-id inputs are a 400.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "embed/embedder.h"

namespace eg::server {

/// Most inputs in one request (OpenAI's limit).
constexpr size_t kMaxEmbeddingInputs = 2048;

struct EmbeddingRequest {
  std::vector<std::string> inputs;
  embed::EmbedOptions options;
  bool base64 = false;
};

/// Validates a request body. Throws ApiError(400, ..., param) naming the field.
EmbeddingRequest parse_embedding_request(const nlohmann::json& body, const embed::Embedder& e);

/// The response body for `out` (one per input, in order).
nlohmann::json embedding_response(const std::vector<embed::Embedding>& out, bool base64, const std::string& model_id);

/// Standard base64 (RFC 4648, '=' padded) of bytes.
std::string base64_encode(const uint8_t* data, size_t n);

}  // namespace eg::server
