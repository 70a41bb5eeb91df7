/* edgegemma C API: run Gemma models on the CPU from C, Swift, Kotlin (JNI/JNA), Python (ctypes)...
 *
 * Conventions
 *  - Opaque handles (eg_model, eg_session), created by *_load / *_create and released by *_free.
 *  - Every function that can fail returns an int status: EG_OK (0) or a negative EG_ERR_* code;
 *    eg_last_error() then returns a one-line message (thread-local: it describes the last failed
 *    call made on the calling thread, and stays valid until the next failing call on that thread).
 *  - No C++ exception ever crosses this boundary.
 *  - Strings are UTF-8, NUL-terminated; the library copies what it keeps. Strings the library
 *    passes to callbacks are valid only during the callback.
 *  - Threads: a session is used by one thread at a time, except eg_session_cancel(), which any
 *    thread may call. Sessions of one model may run on different threads concurrently.
 *  - Ownership: an eg_session keeps its model alive; eg_model_free() may be called while sessions
 *    of the model exist (the weights are released with the last session).
 *
 * The C++ API behind it is eg::Session (src/engine/session.h), which documents the semantics
 * (prefill-while-typing, chat templates, context overflow, save/restore) in detail.
 */
#ifndef EDGEGEMMA_H
#define EDGEGEMMA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eg_model eg_model;
typedef struct eg_session eg_session;

/* Status codes. */
#define EG_OK 0
#define EG_ERR_INVALID_ARGUMENT (-1) /* a NULL handle/pointer or an out-of-range parameter */
#define EG_ERR_FAILED (-2)           /* the operation failed (bad file, budget, template...): see eg_last_error() */
#define EG_ERR_OUT_OF_MEMORY (-3)
#define EG_ERR_INTERNAL (-4) /* an unexpected internal error (a bug): see eg_last_error() */

/* Finish reasons (eg_result.finish_reason). */
#define EG_FINISH_STOP 0         /* end-of-turn / eos token, or a stop string */
#define EG_FINISH_LENGTH 1       /* max_new_tokens reached */
#define EG_FINISH_CANCELLED 2    /* eg_session_cancel() or the callback returned non-zero */
#define EG_FINISH_CONTEXT_FULL 3 /* the context is full and the overflow policy could not help */

/* KV cache element types (eg_session_params.kv_type). */
#define EG_KV_F16 0
#define EG_KV_BF16 1
#define EG_KV_F32 2
#define EG_KV_INT8 3

/* Context overflow policies (eg_session_params.overflow). */
#define EG_OVERFLOW_DROP_OLDEST_TURNS 0
#define EG_OVERFLOW_STOP 1

/* The message of the last failed call on this thread ("" if none). Never NULL. */
const char* eg_last_error(void);
/* The library version ("0.1.0"). */
const char* eg_version(void);

/* ---- models ---- */

/* Loads a Hugging Face model directory (config.json, *.safetensors, tokenizer.json...).
 * On success *out is the new handle. */
int eg_model_load(const char* path, eg_model** out);
/* The same, with the device its steps run on: "auto" (or NULL: a GPU when this build has one and the
 * model fits, else the CPU), "cpu" or "cuda". An explicit device that this build or machine lacks
 * fails with EG_ERR_FAILED and says so in eg_last_error(). */
int eg_model_load_device(const char* path, const char* device, eg_model** out);
/* The same, plus a llama.cpp mmproj GGUF with the vision tower (Gemma 3) or the vision and audio
 * towers (Gemma 4) (`edgegemma quantize --mmproj` writes one; docs/vision.md, docs/audio.md):
 * images and clips then go through those towers, so a text GGUF + its mmproj take images and audio
 * as the Hugging Face directory does. mmproj_path NULL = none (the mmproj is never picked up by
 * itself). Fails with EG_ERR_FAILED naming the file when it is not an mmproj, its projector type is
 * unsupported, or a tensor is missing or mis-shaped; that it belongs to the text model (family,
 * width) is checked when the first image / clip is encoded ("this model has no audio tower" for a
 * vision-only mmproj). */
int eg_model_load_mmproj(const char* path, const char* mmproj_path, const char* device, eg_model** out);
/* The device the model's steps run on ("cpu", "cuda"); "" for NULL. Valid while the model lives. */
const char* eg_model_device(const eg_model* model);
/* Releases the handle (NULL is ignored). */
void eg_model_free(eg_model* model);

/* ---- sessions ---- */

typedef struct eg_session_params {
  int32_t context_tokens;      /* context size in tokens; 0 = min(4096, the model's maximum) */
  int32_t kv_type;             /* EG_KV_*; default EG_KV_F16 (a layer beyond F16's ±65504 switches to
                                  BF16 by itself; one warning on stderr per process) */
  int32_t kv_page_tokens;      /* KV page size in tokens; default 128 */
  int32_t chat;                /* 1 = chat mode (chat template; default), 0 = raw text mode */
  int32_t overflow;            /* EG_OVERFLOW_*; default EG_OVERFLOW_DROP_OLDEST_TURNS */
  uint64_t memory_budget_bytes; /* 0 = no limit; over budget: eg_session_create fails with the numbers */
  int32_t threads;             /* CPU threads; 0 = process default */
  int32_t holdback_tokens;     /* prefill-while-typing: trailing tokens not prefilled; default 3 */
  int32_t ignore_eos;          /* 1 = generate through end-of-turn / eos; default 0 */
  /* Sampling. temperature <= 0 is greedy. */
  float temperature;           /* default 0 */
  int32_t top_k;               /* 0 = off */
  float top_p;                 /* 1 = off */
  float min_p;                 /* 0 = off */
  uint64_t seed;               /* same seed -> same tokens; default 0 */
  float repeat_penalty;        /* 1 = off */
  int32_t repeat_last_n;       /* default 64 */
  float presence_penalty;      /* 0 = off */
  float frequency_penalty;     /* 0 = off */
} eg_session_params;

/* Fills *p with the defaults above. Always call it first, then change fields. */
void eg_session_params_default(eg_session_params* p);

/* Creates a session on `model` (params NULL = defaults). */
int eg_session_create(eg_model* model, const eg_session_params* params, eg_session** out);
/* Stops any background work and releases the session (NULL is ignored). */
void eg_session_free(eg_session* session);

/* Chat mode: sets the system message ("" removes it). */
int eg_session_set_system(eg_session* session, const char* text);
/* Chat mode: appends a message (role "user", "assistant", "system"...) without computing. */
int eg_session_add_message(eg_session* session, const char* role, const char* content);
/* Images (models with a vision tower: Gemma 3 4B and larger, Gemma 4; docs/vision.md). Chat mode:
 * attaches an image to the message being typed (the next user message of eg_session_generate /
 * eg_session_chat); several calls attach several images, shown before the message's text in the
 * order attached. The image is decoded and encoded by the vision tower during the call (Gemma 3:
 * 256 soft tokens on the released models; Gemma 4: up to 280, by its size), and its tokens start
 * prefilling in the background at once, so after the user presses Enter only the text remains.
 * Fails with EG_ERR_FAILED, changing nothing, when the model has no vision tower ("this model has
 * no vision tower": a text-only model, or a GGUF file without an mmproj), in raw mode, or for a bad image; a session
 * with images cannot be saved (eg_session_save fails) yet. With a memory budget
 * (memory_budget_bytes), the vision tower's weights count from the session's first image: one that
 * does not fit fails with EG_ERR_FAILED ("... too small for the vision tower: ..."); the same holds
 * for the audio tower and the first clip (eg_session_add_audio*, eg_session_append_audio).
 *
 * eg_session_add_image: an image file (JPEG, PNG, WebP, GIF first frame, BMP; the format is read
 * from its bytes; EXIF orientation applied). Unreadable, truncated, corrupt, zero-size files and
 * images above 64 Mpixels or 65536 pixels a side fail with EG_ERR_FAILED.
 *
 * eg_session_add_image_rgb: 8-bit pixels, row-major, top row first: channels 3 (R, G, B) or 4
 * (R, G, B, A; the alpha is dropped, not composited, as the Hugging Face processors do);
 * width, height > 0 (the limits above); stride_bytes is the distance between rows (0 = packed,
 * width * channels; else >= width * channels). The buffer must hold (height - 1) * stride +
 * width * channels bytes; it is copied during the call. Bad arguments (NULL pixels, channels other
 * than 3 or 4, sizes out of range, a short stride) fail with EG_ERR_INVALID_ARGUMENT. */
int eg_session_add_image(eg_session* session, const char* path);
int eg_session_add_image_rgb(eg_session* session, const uint8_t* pixels, int32_t width, int32_t height,
                             int32_t channels, int32_t stride_bytes);
/* Gemma 3 pan-and-scan (off by default, as the Hugging Face processor; docs/vision.md): with
 * on = 1, each image attached from now on that is wide or tall enough (aspect ratio >= 1.2, crops
 * of >= 256 pixels on the released settings) is also shown as 2-4 crops, each another 256 soft
 * tokens on the released models; 0 turns it off (a checkpoint whose processor config sets
 * do_pan_and_scan keeps it on). Images already attached keep their crops. A Gemma 4 model then
 * fails eg_session_add_image* with EG_ERR_FAILED (a Gemma 3 processor option). */
int eg_session_set_pan_and_scan(eg_session* session, int32_t on);
/* Audio (Gemma 4 E2B/E4B, models with an audio tower; docs/audio.md). Chat mode: attaches an audio
 * clip to the message being typed, like eg_session_add_image (images and clips of one message come
 * before its text, in the order attached). The clip is resampled to 16 kHz mono and encoded by the
 * audio tower during the call (25 soft tokens per second; a clip over 30 s becomes one block per
 * 30 s), and its tokens start prefilling in the background. Fails with EG_ERR_FAILED, changing
 * nothing, when the model has no audio tower ("this model has no audio tower"), in raw mode, or
 * for a bad clip (unreadable, truncated, corrupt, empty, under 10 ms, over 10 minutes).
 *
 * eg_session_add_audio: an audio file (WAV PCM 8/16/24/32-bit or float, FLAC, OGG, MP3; any rate).
 *
 * eg_session_add_audio_pcm: n_samples mono float samples (nominally in [-1, 1]) at sample_rate Hz
 * (1000 to 384000), copied during the call. NULL samples, n_samples <= 0 or a rate out of range
 * fail with EG_ERR_INVALID_ARGUMENT; a non-finite sample with EG_ERR_FAILED. */
int eg_session_add_audio(eg_session* session, const char* path);
int eg_session_add_audio_pcm(eg_session* session, const float* samples, int64_t n_samples, int32_t sample_rate);
/* Streaming audio (encode while the user speaks; docs/audio.md). Chat mode: hands the clip being
 * recorded to the message being typed, chunk by chunk, as it arrives from the microphone. The first
 * call opens the clip; eg_session_end_audio() ends it (as do eg_session_generate, eg_session_chat,
 * eg_session_add_image* and eg_session_add_audio*, which end an open clip first). Each time 30 s of
 * the clip are complete, the audio tower encodes them in the session's background thread and their
 * block prefills, so when the user stops talking only the last (under 30 s) part and the text
 * remain. The result is exactly that of eg_session_add_audio_pcm with the whole clip.
 *
 * eg_session_append_audio: `frames` frames of `channels` interleaved float samples (nominally in
 * [-1, 1]; channels are averaged to mono) at sample_rate Hz, copied during the call, which returns
 * at once (only the resampling to 16 kHz runs on the calling thread). Every chunk of one clip has
 * the same rate. frames = 0 does nothing. NULL pcm with frames > 0, channels outside [1, 64], a rate
 * outside [1000, 384000] fail with EG_ERR_INVALID_ARGUMENT; a rate other than the open clip's, a
 * non-finite sample, a clip longer than 10 minutes, a model without an audio tower or raw mode fail
 * with EG_ERR_FAILED, keeping nothing of the chunk (the clip stays open).
 *
 * eg_session_end_audio: ends the open clip: encodes its last part during the call (and waits for
 * parts still being encoded), then its block starts prefilling in the background. No clip open:
 * EG_OK, nothing happens. A clip of under 10 ms in all fails with EG_ERR_FAILED and is discarded. */
int eg_session_append_audio(eg_session* session, const float* pcm, size_t frames, int channels, int sample_rate);
int eg_session_end_audio(eg_session* session);
/* Raw mode: appends text to the context and prefills it (an empty context gets exactly one <bos>
 * first, whatever the tokenizer's add_bos_token says; chat mode prompts start with one too). */
int eg_session_append_text(eg_session* session, const char* text);
/* Prefill-while-typing: the whole text typed so far; returns at once (background prefill). */
int eg_session_update_input(eg_session* session, const char* text);

/* Receives each piece of generated text (UTF-8 complete, NUL-terminated, never part of a stop
 * string). Return 0 to continue, non-zero to stop (finish reason EG_FINISH_CANCELLED). */
typedef int (*eg_piece_callback)(const char* piece, void* user);

typedef struct eg_generate_params {
  int32_t max_new_tokens;            /* default 256 */
  const char* const* stop_strings;   /* may be NULL */
  int32_t n_stop_strings;
} eg_generate_params;

typedef struct eg_result {
  int32_t finish_reason;     /* EG_FINISH_* */
  int32_t generated_tokens;
  int32_t prompt_tokens;     /* the whole context before generating */
  int32_t reused_tokens;     /* of those, already in the KV cache */
} eg_result;

/* Generates from the context + the current input (chat mode: the input becomes the user
 * message; the answer is appended as the assistant message). params NULL = defaults; callback
 * and result may be NULL. */
int eg_session_generate(eg_session* session, const eg_generate_params* params, eg_piece_callback callback,
                        void* user, eg_result* result);
/* Chat mode: adds `user_text` as the user message and generates the answer. */
int eg_session_chat(eg_session* session, const char* user_text, const eg_generate_params* params,
                    eg_piece_callback callback, void* user, eg_result* result);
/* Asks a running generation (and the background prefill) to stop. Any thread; never fails for
 * a valid handle. */
int eg_session_cancel(eg_session* session);
/* Tokens of `text` inside a message (no KV change). */
int eg_session_count_tokens(eg_session* session, const char* text, int32_t* out);
/* Clears the conversation and the KV cache. */
int eg_session_reset(eg_session* session);

/* Saves the session to `path` atomically / restores it (same model only; on failure the session
 * is unchanged and eg_last_error() says why: missing, truncated, damaged, other model, version). */
int eg_session_save(eg_session* session, const char* path);
int eg_session_restore(eg_session* session, const char* path);

typedef struct eg_stats {
  int32_t prompt_tokens, reused_tokens, prefilled_tokens, generated_tokens;
  double prefill_ms, ttft_ms, decode_ms; /* milliseconds */
  double prefill_tok_s, decode_tok_s;    /* tokens per second */
  int32_t context_used, context_size;    /* tokens */
  uint64_t kv_bytes;                     /* KV cache bytes reserved */
} eg_stats;

/* Statistics of the last generate/chat call. */
int eg_session_stats(eg_session* session, eg_stats* out);

/* ---- the model store (docs/model-store.md) ----
 * Versions of a model by name, content-addressed by SHA-256, with a `current` and a `previous`
 * pointer per name: an app downloads a new version (itself), adds it (verified: digests, headers,
 * a short smoke generation), and rolls back in one step when it misbehaves. Every change is
 * crash-safe (an interrupted call leaves the store consistent; the old current stays current
 * unless the switch completed) and takes the store's lock file (calls from several processes or
 * threads are serialised). A handle may be used from several threads. */

typedef struct eg_store eg_store;

/* Opens (creating it when missing) the store in the folder `dir`; NULL or "": $EDGEGEMMA_STORE,
 * else $XDG_DATA_HOME/edgegemma/models, else ~/.local/share/edgegemma/models. */
int eg_store_open(const char* dir, eg_store** out);
/* Releases the handle (NULL is ignored). Nothing on disk changes. */
void eg_store_free(eg_store* store);
/* Adds the Hugging Face folder or .gguf file at `path` as model `name`, version `version` (NULL
 * or "": the next free "vN"), copying it into the store while hashing, then checks it (headers,
 * load, smoke generation) and makes it current (the old current becomes previous). On a failed
 * check nothing changes and eg_last_error() says why. The version tag is written to version_out
 * (NUL-terminated, at most version_out_size bytes) when version_out is not NULL. */
int eg_store_add(eg_store* store, const char* path, const char* name, const char* version, char* version_out,
                 size_t version_out_size);
/* Verifies NAME:VERSION (SHA-256 of every file, headers, smoke generation), then makes it current.
 * On failure `current` is untouched. */
int eg_store_use(eg_store* store, const char* name, const char* version);
/* Makes the previous version current again (after the same checks); EG_ERR_FAILED when there is
 * no previous version. */
int eg_store_rollback(eg_store* store, const char* name);
/* The current version of `name`: its tag into version_out and the path to give eg_model_load()
 * into path_out (each NUL-terminated within its size; either may be NULL). EG_ERR_FAILED when
 * the model is unknown or has no current version, EG_ERR_INVALID_ARGUMENT when a buffer is too
 * small. */
int eg_store_current(eg_store* store, const char* name, char* version_out, size_t version_out_size, char* path_out,
                     size_t path_out_size);

#ifdef __cplusplus
}
#endif

#endif /* EDGEGEMMA_H */
