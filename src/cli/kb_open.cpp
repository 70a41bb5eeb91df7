#include "cli/kb_open.h"

#include "core/error.h"
#include "embed/open.h"

namespace eg::cli {

OpenedKb open_kb(const std::string& path, const std::string& model, bool create, bool need_model) {
  OpenedKb o;
  kb::KbOpenOptions ko;
  ko.create = create;
  o.kb = kb::KnowledgeBase::open(path, ko);
  std::string m = model;
  if (m.empty()) m = o.kb->info().model_path;
  if (m.empty()) {
    if (need_model) throw Error("an embedding model is needed (-m MODEL)");
    return o;
  }
  o.embedder = embed::open_embedder(m);
  o.kb->use_embedder(o.embedder.get(), m);
  return o;
}

}  // namespace eg::cli
