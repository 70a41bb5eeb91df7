/* The C API used from C (compiled as C11): load, chat with streaming, errors, save/restore.
 * Exit status 0 = pass; on failure prints what failed. Run by CTest as c_api_smoke. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "edgegemma/edgegemma.h"

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "c_api_smoke: %s:%d: %s failed (last error: %s)\n", __FILE__, __LINE__, \
              #cond, eg_last_error());                                               \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

struct collect {
  char text[4096];
  size_t len;
  int pieces;
};

static int on_piece(const char* piece, void* user) {
  struct collect* c = (struct collect*)user;
  size_t n = strlen(piece);
  if (c->len + n < sizeof c->text) {
    memcpy(c->text + c->len, piece, n);
    c->len += n;
    c->text[c->len] = '\0';
  }
  c->pieces++;
  return 0;
}

int main(void) {
  eg_model* model = NULL;
  eg_session* s = NULL;
  eg_session* t = NULL;
  eg_session_params p;
  eg_generate_params g = {12, NULL, 0};
  eg_result r;
  struct collect a, b;
  char path[512];
  int32_t n = 0;

  /* Errors are codes + messages, never crashes. */
  CHECK(eg_model_load("/nonexistent/model", &model) == EG_ERR_FAILED);
  CHECK(strstr(eg_last_error(), "/nonexistent/model") != NULL);
  CHECK(model == NULL);
  CHECK(eg_model_load(NULL, &model) == EG_ERR_INVALID_ARGUMENT);

  CHECK(eg_model_load(EG_SHARED_DIR "/models/tiny-gemma3", &model) == EG_OK);
  eg_session_params_default(&p);
  p.kv_type = EG_KV_F32;
  p.context_tokens = 256;
  CHECK(eg_session_create(model, &p, &s) == EG_OK);
  p.kv_type = 42;
  CHECK(eg_session_create(model, &p, &t) == EG_ERR_INVALID_ARGUMENT);
  p.kv_type = EG_KV_F32;

  CHECK(eg_session_set_system(s, "Be brief.") == EG_OK);
  CHECK(eg_session_update_input(s, "Tell me about") == EG_OK);
  memset(&a, 0, sizeof a);
  CHECK(eg_session_chat(s, "Tell me about the sea.", &g, on_piece, &a, &r) == EG_OK);
  CHECK(r.generated_tokens > 0 && r.generated_tokens <= 12);
  CHECK(r.finish_reason == EG_FINISH_STOP || r.finish_reason == EG_FINISH_LENGTH);
  CHECK(a.len > 0 && a.pieces > 0);
  CHECK(eg_session_count_tokens(s, "hello world", &n) == EG_OK && n > 0);

  /* Save, continue; a second session restored from the file continues identically. */
  snprintf(path, sizeof path, "/tmp/eg_c_api_smoke_%d.egsession", (int)getpid());
  CHECK(eg_session_save(s, path) == EG_OK);
  memset(&a, 0, sizeof a);
  CHECK(eg_session_chat(s, "And the night?", &g, on_piece, &a, &r) == EG_OK);
  CHECK(eg_session_create(model, &p, &t) == EG_OK);
  eg_model_free(model); /* sessions keep the model alive */
  CHECK(eg_session_restore(t, path) == EG_OK);
  memset(&b, 0, sizeof b);
  CHECK(eg_session_chat(t, "And the night?", &g, on_piece, &b, &r) == EG_OK);
  CHECK(strcmp(a.text, b.text) == 0);
  CHECK(eg_session_restore(t, "/nonexistent.egsession") == EG_ERR_FAILED);
  CHECK(strstr(eg_last_error(), "/nonexistent.egsession") != NULL);
  remove(path);

  {
    eg_stats st;
    CHECK(eg_session_stats(t, &st) == EG_OK);
    CHECK(st.generated_tokens == r.generated_tokens && st.context_size == 256);
  }
  CHECK(eg_session_cancel(t) == EG_OK);
  eg_session_free(s);
  eg_session_free(t);
  printf("c_api_smoke: ok (%s)\n", eg_version());
  return 0;
}
