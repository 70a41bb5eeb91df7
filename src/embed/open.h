// Opening an embedding model by path: a sentence-transformers folder in EmbeddingGemma's layout
// (modules.json, config.json, 1_Pooling, 2_Dense, 3_Dense) or llama.cpp's `gemma-embedding` GGUF.
#pragma once

#include <memory>
#include <string>

#include "embed/embedder.h"

namespace eg::embed {

struct OpenOptions {
  int threads = 0;  // 0 = the engine's default
};

// Throws eg::Error (file missing, not an embedding model, corrupt) with the path in the message.
std::unique_ptr<Embedder> open_embedder(const std::string& path, const OpenOptions& options = {});

// True when `path` looks like an embedding model (cheap: reads only headers/config), so that
// `serve -m PATH` can tell an embedding model from a chat model.
bool is_embedding_model(const std::string& path);

}  // namespace eg::embed
