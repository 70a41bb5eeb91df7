// The one rule for <bos> in a prompt that reaches a Gemma model.
//
// Gemma models are trained with exactly one <bos> at the start of every sequence and produce
// garbage without it. Whether Hugging Face's encode() adds one is a different question:
// tokenizer_config.json's add_bos_token (false in the released Gemma 4 -it checkpoints, whose chat
// template writes "<bos>" itself) and a GGUF's tokenizer.ggml.add_bos_token describe only that,
// so they are not consulted here. Every path that turns a prompt into ids for the model (run raw
// and --chat, chat, Session / C API, the server's completions and chat routes) ends here:
// LoadedModel::encode_prompt for raw text, PromptEncoder::encode for rendered chat templates.
// (`tokenize` and /tokenize reproduce HF's encode and so still follow add_bos_token;
// perplexity scores documents as <bos> text <eos> by its own convention.)
#pragma once
#include <cstdint>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace eg {

/// add_bos: the leading <bos> ids of `ids` (written by a template, or typed as "<bos>" text) are
/// collapsed to exactly one, inserted when there is none. !add_bos (the user's --no-bos /
/// "add_bos": false): `ids` is left as it is. A tokenizer without a <bos> token changes nothing.
/// Returns how many ids were added at the front (1, 0, or negative when duplicates were removed).
int apply_prompt_bos(const Tokenizer& tok, std::vector<int32_t>& ids, bool add_bos);

}  // namespace eg
