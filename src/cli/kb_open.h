// Opening a knowledge base and its embedding model for the CLI (`kb`, `chat --kb`, `serve --kb`).
#pragma once
#include <memory>
#include <string>

#include "embed/embedder.h"
#include "kb/knowledge_base.h"

namespace eg::cli {

struct OpenedKb {
  std::unique_ptr<kb::KnowledgeBase> kb;
  std::unique_ptr<embed::Embedder> embedder;  // null: BM25 only
};

/// Opens `path` and the embedding model: `model` when given (-m), else the one recorded in the
/// base, else none (a BM25-only base). Throws eg::Error (a missing base unless `create`, a model
/// other than the recorded one, a model that cannot be opened).
OpenedKb open_kb(const std::string& path, const std::string& model, bool create, bool need_model = false);

}  // namespace eg::cli
