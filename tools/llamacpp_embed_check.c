/* One-off check that llama.cpp loads an edgegemma-written gemma-embedding GGUF and gives the
 * same vectors (docs/embeddings.md). Prints one line per text: n_tokens then the normalised
 * embedding (llama.cpp pools with the file's pooling type, applies dense_2/dense_3 and we
 * L2-normalise here). Texts are argv[2...], tokenized by llama.cpp with add_special = true.
 * CHECK_F32=1 in the environment: F32 K/V, no flash attention.
 * Build against a llama.cpp checkout (not part of the CMake build):
 *   cc -O2 tools/llamacpp_embed_check.c -I LLAMA/include -I LLAMA/ggml/include \
 *      -L LLAMA_BUILD/bin -lllama -lm -Wl,-rpath,LLAMA_BUILD/bin -o /tmp/llamacpp_embed_check */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL.gguf TEXT...\n", argv[0]);
    return 2;
  }
  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  struct llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  const struct llama_vocab* vocab = llama_model_get_vocab(model);
  struct llama_context_params cp = llama_context_default_params();
  cp.embeddings = true;
  cp.pooling_type = LLAMA_POOLING_TYPE_MEAN;
  cp.n_ctx = 2048;
  cp.n_batch = 2048;
  cp.n_ubatch = 2048;
  if (getenv("CHECK_F32")) { /* keep K/V and attention in f32 (llama.cpp's default K/V type is F16) */
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  }
  const int n_out = llama_model_n_embd_out(model);
  for (int a = 2; a < argc; ++a) {
    struct llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    llama_token toks[2048];
    const int n = llama_tokenize(vocab, argv[a], (int)strlen(argv[a]), toks, 2048, true, true);
    if (n < 0) return 1;
    struct llama_batch b = llama_batch_get_one(toks, n);
    if (llama_encode(ctx, b) != 0) return 1;
    const float* e = llama_get_embeddings_seq(ctx, 0);
    if (!e) return 1;
    double ss = 0;
    for (int i = 0; i < n_out; ++i) ss += (double)e[i] * e[i];
    printf("%d", n);
    for (int i = 0; i < n_out; ++i) printf(" %.9g", e[i] / sqrt(ss));
    printf("\n");
    llama_free(ctx);
  }
  llama_model_free(model);
  return 0;
}
