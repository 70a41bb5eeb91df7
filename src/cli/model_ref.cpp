// `-m` of every command: a path on disk, or a model store reference (docs/model-store.md).
#include <filesystem>

#include "cli/commands.h"
#include "store/store.h"

namespace eg::cli {

std::string model_path(const std::string& arg) {
  if (arg.empty()) return default_model_dir();
  std::error_code ec;
  if (std::filesystem::exists(arg, ec)) return arg;  // a path that exists wins over a store name
  if (!store::is_reference(arg)) return arg;          // the loader reports the missing path
  const store::Store s(store::Store::default_root(), false);
  return s.model_path(s.resolve(arg));
}

}  // namespace eg::cli
