// The boundary between text-embedding models and their users (the knowledge base, RAG, FAQ
// matching, `embed`, `/v1/embeddings`). An Embedder turns texts into unit-length float32 vectors.
//
// Implementations: the EmbeddingGemma path (src/embed/, from a sentence-transformers folder or a
// llama.cpp GGUF). Tests may use a deterministic double; production code only sees this interface.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace eg::embed {

struct EmbedOptions {
  // A prompt name from the model's own config (EmbeddingGemma: "query", "document", "STS", ...).
  // Empty: the model's default_prompt_name if it has one, else no prefix (as sentence-transformers'
  // encode does). An unknown name is an eg::Error listing the known ones.
  std::string task;
  // Matryoshka truncation: 0 = the full dimension; otherwise one of supported_dims(), and the
  // truncated vector is re-normalised to unit length. Anything else is an eg::Error.
  int dim = 0;
};

struct Embedding {
  std::vector<float> vector;  // unit L2 norm, size = dim (or full_dim())
  int tokens = 0;             // input tokens used, including BOS/EOS (for usage counts)
};

class Embedder {
 public:
  virtual ~Embedder() = default;
  // Full output dimension (EmbeddingGemma-300m: 768).
  virtual int full_dim() const = 0;
  // Dimensions accepted by EmbedOptions::dim besides 0 (EmbeddingGemma: 768, 512, 256, 128);
  // empty when the model does not support truncation.
  virtual std::vector<int> supported_dims() const = 0;
  // Prompt names the model defines (from its config), in a stable order.
  virtual std::vector<std::string> task_names() const = 0;
  // Most input tokens per text (EmbeddingGemma: 2048); longer inputs are an eg::Error, not cut.
  virtual int max_tokens() const = 0;
  // A stable identity of the weights (sha256 hex of the weight files), recorded by the knowledge
  // base so that vectors of different models are never mixed.
  virtual std::string model_digest() const = 0;
  // Embeds each text independently (batching is an implementation detail: results equal one at a
  // time). Throws eg::Error on bad options, over-long input or invalid UTF-8.
  virtual std::vector<Embedding> embed(const std::vector<std::string>& texts,
                                       const EmbedOptions& options) = 0;
};

}  // namespace eg::embed
