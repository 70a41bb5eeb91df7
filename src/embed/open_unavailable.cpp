// TEMPORARY (branch kb): the EmbeddingGemma implementation of embed/open.h lands from another
// branch; until then opening an embedding model is a clear error. Delete this file at that merge.
#include "core/error.h"
#include "embed/open.h"

namespace eg::embed {

std::unique_ptr<Embedder> open_embedder(const std::string& path, const OpenOptions&) {
  throw Error(path + ": embedding models are not available in this build");
}

bool is_embedding_model(const std::string&) { return false; }

}  // namespace eg::embed
