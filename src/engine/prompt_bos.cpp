#include "engine/prompt_bos.h"

namespace eg {

int apply_prompt_bos(const Tokenizer& tok, std::vector<int32_t>& ids, bool add_bos) {
  const int32_t bos = tok.bos_id();
  if (!add_bos || bos < 0) return 0;
  size_t lead = 0;
  while (lead < ids.size() && ids[lead] == bos) ++lead;
  if (lead == 1) return 0;
  if (lead == 0) {
    ids.insert(ids.begin(), bos);
    return 1;
  }
  ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(lead - 1));
  return 1 - static_cast<int>(lead);
}

}  // namespace eg
