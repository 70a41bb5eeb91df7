// Session: one conversation (or one raw text stream) on a shared LoadedModel, with its own KV
// cache that is reused across calls, prefill-while-typing, multi-turn chat, context-overflow
// handling, save/restore, and a memory budget.
//
// The context. A session keeps the token sequence the model has seen (context_tokens()) and a KV
// cache holding the K/V of some prefix of it. Every operation computes the token sequence it
// needs ("target") and synchronises the cache with it: the KV of the longest common prefix with
// what the cache holds is kept (KVCache::truncate), and only the rest is prefilled. So a second
// chat turn prefills only the new user turn, and an edit in the middle of a draft re-prefills
// from the edit on.
//
// Two modes (SessionOptions::chat):
//  - chat mode (default): the context is the conversation (messages()) rendered with the model's
//    own chat template (ChatTemplate, add_generation_prompt before generating). Text inside
//    message contents is tokenized as plain text: "<start_of_turn>" typed by a user is never a
//    control token (only special-token text the template itself writes is). Gemma 2/3 have no
//    system turn: the system text is folded into the first user turn by the template (Gemma 3)
//    or by ChatTemplate's fold rule (Gemma 2). After generate() the answer is appended as an
//    "assistant" message whose content is the decoded answer without the end-of-turn token.
//  - raw mode: the context is a token sequence; append_text() adds text (with exactly one BOS at
//    the very start, engine/prompt_bos.h; special-token text is parsed, as `run` does) and
//    generate() continues it; the generated ids become part of the context.
//
// The draft (prefill-while-typing). update_input(text so far) sets the draft: in chat mode the
// next user message, in raw mode text appended after the context. It tokenizes the context +
// draft, keeps the KV of the longest common prefix, holds back the last `holdback_tokens` tokens
// of the draft (their tokenization may still change as the user types), and prefills the stable
// rest on the session's background worker thread (one per session), in chunks of
// `prefill_chunk_tokens`, then returns at once. A newer update_input supersedes the running job
// after its current chunk; any other call (generate, chat, prefill, save, ...) first stops the
// worker after its current chunk and keeps what it has already prefilled. generate()/chat()
// consume the draft (chat(): the given text replaces it).
//
// Context overflow (SessionOptions::overflow), applied before prefilling when the prompt plus
// max_new_tokens do not fit the context:
//  - DropOldestTurns (default, chat mode): the oldest whole turns (a user message and the answers
//    after it) are dropped, the system message is kept (Gemma 2/3 place it in the first kept user
//    turn), the kept conversation is re-rendered and the cache re-prefilled from the first token
//    that changed. Tokens generated afterwards equal those of a fresh session prefilled with the
//    kept conversation. The current user message is never dropped. In raw mode, and when nothing
//    is left to drop, generation runs until the cache is full and ends with ContextFull.
//  - Stop: nothing is dropped; generation ends with FinishReason::ContextFull when the cache is
//    full.
// With either policy, a prompt longer than the context returns ContextFull with no tokens and
// changes nothing (the draft / user text stays pending); prefill() throws instead.
//
// Threads: a Session is used by one thread at a time, except cancel(), which any thread may call.
// Different sessions may share one LoadedModel and run concurrently (the model is read-only).
// Determinism: with F32 KV the logits are bit-identical whatever the chunking, so the cache reuse
// is invisible in the results (tests/session_*_test.cpp); the same seed gives the same tokens.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/audio_stream.h"
#include "engine/loaded_model.h"
#include "engine/media.h"
#include "engine/sampler.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "audio/audio.h"
#include "vision/image.h"

namespace eg {

class PromptEncoder;

enum class OverflowPolicy { DropOldestTurns, Stop };

/// Why generation ended: a stop id (end of turn / eos) or a stop string; max_new_tokens reached;
/// the caller cancelled (cancel flag, Session::cancel() or the callback returned false); the
/// context is full and the overflow policy could not make room.
enum class FinishReason { Stop, Length, Cancelled, ContextFull };
/// "stop", "length", "cancelled", "context_full".
const char* finish_reason_name(FinishReason r);

/// One chat message. role: "system", "user", "assistant" (any role the template accepts).
/// `images` (a user message) render before the text, in order, as image items of the message's
/// content list ([{"type": "image"}, ..., {"type": "text", "text": content}]), which the
/// checkpoint's template turns into its image marker (Gemma 3 <start_of_image>, Gemma 4 <|image|>).
struct ChatMessage {
  std::string role;
  std::string content;
  std::vector<std::shared_ptr<const SessionImage>> images = {};
};

struct SessionOptions {
  /// Context size in tokens (prompt + generated, all turns). 0: min(4096, the model's
  /// max_position_embeddings). Larger than the model's maximum: eg::Error.
  int context_tokens = 0;
  /// KV cache storage: type (F16 default; F32 for logits exact to the reference), page size,
  /// rollback margin. kv.max_tokens is ignored: the session sets it to the context size.
  KVCacheOptions kv;
  /// Sampling (temperature, top-k/p, min-p, penalties) and the seed of the session's RNG.
  SamplingParams sampling;
  /// Chat mode (render messages with the chat template) or raw mode (see the file comment).
  bool chat = true;
  /// Chat template source; "" = the tokenizer's (tokenizer_config.json chat_template). A model
  /// directory's chat_template.jinja is read with load_chat_template(dir) by the caller.
  std::string chat_template;
  /// Passed to the template as enable_thinking when set (Gemma 4).
  std::optional<bool> enable_thinking;
  OverflowPolicy overflow = OverflowPolicy::DropOldestTurns;
  /// Bytes the session may use (model weights resident + KV for context_tokens + scratch);
  /// 0 = no limit. Checked in the constructor (memory_budget.h): over budget is an eg::Error
  /// with the numbers and the largest context that would fit. A media tower's weights count from
  /// the first image / clip the session encodes: one that does not fit is an eg::Error there
  /// ("... is too small for the vision tower: ..."), and nothing is attached.
  size_t memory_budget_bytes = 0;
  /// CPU threads for this session's forward passes; 0 = the process default.
  int threads = 0;
  /// update_input: trailing draft tokens not prefilled in the background (their tokenization may
  /// change with the next keystroke). >= 0.
  int holdback_tokens = 3;
  /// Background prefill granularity in tokens (the cancellation latency is one chunk). >= 1.
  int prefill_chunk_tokens = 32;
  /// Keep generating through stop ids (end of turn / eos).
  bool ignore_eos = false;
  /// Gemma 3 pan-and-scan for the images this session encodes (docs/vision.md): each image that
  /// is wide or tall enough also gets 2–4 crops, each another block of soft tokens. Off by
  /// default, as transformers' Gemma3Processor (which ignores a processor config's
  /// do_pan_and_scan and pan_and_scan_* keys: its own defaults win, and so do ours). A Gemma 4
  /// model refuses it (eg::Error on the first image).
  bool pan_and_scan = false;
};

/// Per generate()/chat() call. Timings in milliseconds, rates in tokens per second.
struct SessionStats {
  int prompt_tokens = 0;     // tokens of the prompt (whole context before generating)
  int reused_tokens = 0;     // of those, already in the KV cache when the call started
  int prefilled_tokens = 0;  // prefilled by this call (prompt_tokens - reused, + overflow re-prefill)
  int generated_tokens = 0;
  int dropped_messages = 0;  // messages removed by the overflow policy during this call
  double prefill_ms = 0;     // synchronous prefill of this call
  double ttft_ms = 0;        // call start -> first token sampled (includes waiting for the worker)
  double decode_ms = 0;      // all decode steps after the first token
  double prefill_tok_s = 0;
  double decode_tok_s = 0;
  int context_used = 0;      // tokens in the context after the call
  int context_size = 0;
  size_t kv_bytes = 0;       // KV cache bytes allocated
  // Media of this turn's user message (the draft: add_image / add_audio / append_audio): count,
  // soft tokens, and the time their towers took (at attach or in the background: not part of
  // ttft_ms unless a streamed clip's last segment was encoded by this call).
  int images = 0, image_soft_tokens = 0;
  int audio_clips = 0, audio_soft_tokens = 0;
  double image_encode_ms = 0, audio_encode_ms = 0;
};

struct TurnResult {
  std::vector<int32_t> ids;  // generated ids (a stop id that ended generation included last)
  std::string text;          // the text shown: decoded ids, without the stop id / stop string
  FinishReason finish = FinishReason::Length;
  SessionStats stats;
};

struct GenerateParams {
  int max_new_tokens = 256;  // >= 0
  /// Generation ends when the text contains one of these; the callback never sees any part of
  /// it (stop_strings.h). Empty strings are an eg::Error.
  std::vector<std::string> stop_strings;
  /// Polled before each decode step; true -> FinishReason::Cancelled. May be null.
  const std::atomic<bool>* cancel = nullptr;
};

/// Receives the answer's text as it streams: UTF-8-complete pieces (StreamingDetokenizer), never
/// part of a stop string, never the end-of-turn token's text. Return false to stop (Cancelled).
using PieceCallback = std::function<bool(std::string_view piece)>;

/// warmup() result. Times in milliseconds.
struct WarmupResult {
  size_t bytes_touched = 0;  // weight bytes paged in
  double touch_ms = 0;       // time to touch every page of the weights
  double forward_ms = 0;     // one tiny forward pass after the touch
};

class Session {
 public:
  /// Creates an empty session. Throws eg::Error for invalid options (context size, sampling
  /// parameters, chat mode without a chat template) or when the memory budget is exceeded.
  Session(std::shared_ptr<const LoadedModel> model, SessionOptions opt = {});
  /// Stops and joins the background worker.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // ---- building the context ----

  /// Chat mode: sets the system message (replaces an existing one; "" removes it).
  void set_system(const std::string& text);
  /// Chat mode: appends a message (no computation until the next prefill/generate), with images
  /// (SessionImage, e.g. from encode_image) shown before its text.
  void add_message(const std::string& role, const std::string& content,
                   std::vector<std::shared_ptr<const SessionImage>> images = {});

  /// Chat mode: attaches an image to the message being typed (the draft: the next user message of
  /// generate()/chat()). It is encoded now (vision tower), and the background prefill starts on
  /// it at once, so after Enter only the text remains. Images of one message come before its
  /// text, in the order attached. Throws eg::Error, changing nothing, when the model has no
  /// vision tower ("this model has no vision tower"), in raw mode, or for an image the processor
  /// refuses.
  void add_image(const vision::RgbImage& image);
  /// Chat mode: attaches an audio clip (any rate: resampled to 16 kHz mono) to the draft, as
  /// add_image does for images: encoded by the audio tower at once (one block per ≤ 30 s segment)
  /// and prefilled in the background. Media of one message come before its text, in the order
  /// attached. Throws eg::Error for a model without an audio tower ("this model has no audio
  /// tower"), in raw mode, or for a clip that is too short / too long; nothing changes then.
  void add_audio(const audio::Pcm& pcm);
  /// Chat mode: streams an audio clip to the draft as it is recorded: n mono samples at `rate` Hz
  /// (the clip's rate: every chunk of one clip has the same rate). The first call opens the clip;
  /// it ends with end_audio(), or by itself at the next generate()/chat()/prefill()/add_image()/
  /// add_audio(). The samples are resampled to 16 kHz as they come; each time a whole 30 s
  /// segment is complete, the audio tower encodes it on the session's background thread and the
  /// background prefill continues through its block, so when the user stops talking only the last
  /// (partial) segment and the text remain. Exact: the ended clip's blocks are those add_audio()
  /// of the whole clip gives, bit for bit (tests/audio_stream_session_test.cpp). Returns at once (the
  /// resampling of the chunk is the only work done on the calling thread). Throws eg::Error,
  /// keeping nothing of the chunk, for a model without an audio tower, raw mode, a rate outside
  /// [1000, 384000] or other than the open clip's, a non-finite sample, or a clip that would
  /// exceed the 10-minute limit. n = 0 does nothing.
  void append_audio(const float* pcm, size_t n, int rate);
  /// Ends the clip opened by append_audio(): encodes its last segment (now, on the calling thread;
  /// waits for segments still being encoded in the background) and starts the background prefill
  /// of its block. The clip then counts in pending_audio(). Nothing open: does nothing. Throws
  /// eg::Error for a clip shorter than 10 ms in all (the clip is discarded), or when encoding a
  /// segment failed (the clip is discarded).
  void end_audio();
  /// A clip opened by append_audio() has not ended yet.
  bool streaming_audio() const { return stream_ != nullptr; }
  /// Audio clips attached to the draft so far (a clip being streamed counts once it ends).
  size_t pending_audio() const { return draft_clips_; }
  /// Encodes a clip with the model's audio tower, one SessionImage (audio = true) per segment, for
  /// ChatMessage::images of add_message. Throws eg::Error as add_audio.
  std::vector<std::shared_ptr<const SessionImage>> encode_audio(const audio::Pcm& pcm) const;
  /// Images attached to the draft so far.
  size_t pending_images() const {
    size_t n = 0;
    for (const auto& m : draft_images_) n += m->audio ? 0 : 1;
    return n;
  }
  /// Encodes an image with the model's vision tower (for add_message). Throws eg::Error as
  /// add_image.
  std::shared_ptr<const SessionImage> encode_image(const vision::RgbImage& image) const;
  /// Raw mode: tokenizes `text` and appends it to the context (exactly one BOS first when the
  /// context is empty, whatever add_bos_token says: engine/prompt_bos.h), then prefills
  /// synchronously.
  void append_text(const std::string& text);
  /// Raw mode: appends token ids (each must be < vocab size, else eg::Error) and prefills.
  void append_tokens(const std::vector<int32_t>& ids);

  /// Prefill-while-typing: sets the draft to `text` (the whole text typed so far) and starts the
  /// background prefill of its stable part. Returns immediately.
  void update_input(const std::string& text);
  /// The current draft ("" after generate/chat/reset).
  const std::string& input() const { return draft_; }
  /// Blocks until the background worker has nothing left to do (for tests and benchmarks).
  void wait_idle();

  /// Synchronously prefills the whole prompt (context + draft; chat mode: with the generation
  /// prompt) and returns the logits of its last token, [vocab_size] f32. Applies the overflow
  /// policy (max_new_tokens = 1). Throws eg::Error when the prompt is empty.
  std::vector<float> prefill();

  // ---- generating ----

  /// Generates from context + draft (the draft becomes the user message in chat mode, or is
  /// appended to the context in raw mode). Streams text pieces to `on_piece` (may be empty).
  /// Chat mode: the answer is appended to messages() as an "assistant" message (also when
  /// cancelled). max_new_tokens 0 only prefills (nothing is committed). Throws eg::Error when the
  /// prompt is empty or the template fails; on an error the conversation is unchanged.
  TurnResult generate(const GenerateParams& params = {}, const PieceCallback& on_piece = {});
  /// Chat mode: add_message("user", text) (replacing any draft) + generate().
  TurnResult chat(const std::string& user_text, const GenerateParams& params = {},
                  const PieceCallback& on_piece = {});
  /// Asks the running generate() (from any thread) and the background prefill to stop. A
  /// generate() that starts later is not affected.
  void cancel();

  // ---- queries (no KV change) ----

  /// Tokens of `text` as it would be tokenized inside a message (plain text, no BOS).
  int count_tokens(const std::string& text) const;
  /// Tokens the prompt would have if `draft` were sent now (context + draft + generation prompt).
  int count_prompt_tokens(const std::string& draft) const;
  const std::vector<ChatMessage>& messages() const { return messages_; }
  /// Raw mode: the context token ids. Chat mode: the tokens of the rendered conversation as it
  /// was last synchronised.
  const std::vector<int32_t>& context_tokens() const { return context_; }
  /// Positions whose K/V the cache holds.
  int cached_tokens() const;
  int context_size() const { return ctx_; }
  const SessionStats& last_stats() const { return stats_; }
  size_t kv_bytes() const;
  const SessionOptions& options() const { return opt_; }
  /// Turns Gemma 3 pan-and-scan on or off for the images encoded from now on
  /// (SessionOptions::pan_and_scan); images already attached keep their crops.
  void set_pan_and_scan(bool on) { opt_.pan_and_scan = on; }
  const LoadedModel& model() const { return *lm_; }

  /// Replaces the sampling parameters, keeping the RNG state and penalty window (Sampler::set_params).
  void set_sampling(const SamplingParams& p);
  Sampler& sampler() { return sampler_; }

  /// Clears the conversation / context, the draft and the KV cache (options and RNG kept).
  void reset();

  // ---- persistence ----

  /// Writes the whole session state (options, conversation, context tokens, KV cache, last
  /// logits, sampler RNG + penalty window, model fingerprint) to `path` atomically: a temporary
  /// file in the same directory, fsync, rename. Format: "EGSESSN\0", version u32, payload, FNV-1a
  /// 64 checksum of the payload. The previous file stays intact if anything fails. Throws
  /// eg::Error on I/O failure.
  void save(const std::string& path);
  /// Restores a file written by save() for the same model. Throws eg::Error naming the file for
  /// a missing, truncated, damaged (checksum), wrong-version or foreign (other model) file, and
  /// then leaves the session unchanged. After a restore the session continues exactly as the
  /// saved one would have (same tokens for the same seed). The draft is not saved. A file larger
  /// than max_file_bytes() is refused before it is read.
  void restore(const std::string& path);
  /// The largest session file of this model restore() reads: 4 × the F32 KV cache of the model's
  /// whole context (any page size), + the logits, 64 bytes per context position for token ids and
  /// message text, + 64 MiB for options and the chat template (docs/reliability.md).
  size_t max_file_bytes() const;

  /// Pages in every weight byte (one read per page) and runs a one-token forward pass on a
  /// scratch cache, so the first real prompt does not pay page faults.
  WarmupResult warmup();

  /// Tokens per forward pass of a synchronous prefill (generate/chat/prefill/append): bounds the
  /// scratch buffers; the memory budget counts scratch for max(this, prefill_chunk_tokens).
  static constexpr int kSyncChunkTokens = 256;

  /// Test hook: called by save() after half of the file is written; a throw simulates a crash.
  std::function<void()> save_fault_hook;

 private:
  /// The prompt tokens of an operation, with the images bound to their placeholder runs.
  using Media = MediaRun;
  struct Prompt {
    std::vector<int32_t> ids;
    std::vector<Media> media;  // in order, non-overlapping
    size_t size() const { return ids.size(); }
    bool empty() const { return ids.empty(); }
  };
  // Worker control.
  void worker_main();
  void stop_worker_job();  // cancel the running background job, keep its finished chunks
  // Cache synchronisation: makes the KV hold `target[0, upto)`; returns false when cancelled.
  // want_logits: compute the logits of the last token when it is prefilled here.
  // A bidirectional image block is never split across calls (nor left half in the cache).
  bool sync_cache(const Prompt& target, int upto, const std::atomic<bool>* cancel,
                  int chunk, int* prefilled, bool want_logits = true);
  Prompt render_tokens(const std::vector<ChatMessage>& msgs, bool gen_prompt, size_t* draft_end_token) const;
  Prompt prompt_tokens(const std::string& draft, size_t* draft_end) const;
  /// Truncates the cache to at most n positions (never inside a bidirectional image block of
  /// `target`, when given) and returns the positions kept.
  int truncate_cache(int n, const Prompt* target = nullptr);
  bool has_draft() const { return !draft_.empty() || !draft_images_.empty(); }
  ChatMessage draft_message() const { return ChatMessage{"user", draft_, draft_images_}; }
  void set_threads() const;
  void init_kv();
  void ensure_worker();
  /// Counts the vision (audio = false) or audio tower's weights in the memory budget the first
  /// time this session uses it; throws eg::Error (nothing counted) when they do not fit.
  void count_tower(bool audio) const;
  void discard_stream();  // drops the open streamed clip and its blocks (under no lock)
  friend struct SessionFile;

  std::shared_ptr<const LoadedModel> lm_;
  SessionOptions opt_;
  int ctx_ = 0;
  Sampler sampler_;
  std::unique_ptr<PromptEncoder> encoder_;

  // Conversation state (caller thread only).
  std::vector<ChatMessage> messages_;
  std::vector<int32_t> context_;  // see context_tokens()
  std::string draft_;
  std::vector<std::shared_ptr<const SessionImage>> draft_images_;
  size_t draft_clips_ = 0;
  SessionStats stats_;

  // KV state: touched by the worker while a job runs, by the caller thread otherwise.
  std::unique_ptr<KVCache> kv_;
  std::unique_ptr<StepWorkspace> ws_;  // activation buffers of this session's steps
  std::vector<int32_t> cached_;  // tokens whose K/V the cache holds (== kv_->n_past())
  std::vector<uint64_t> cached_media_;  // per cached position: SessionImage::id, 0 for text
  std::vector<float> logits_;    // logits of cached_.back() when logits_valid_
  bool logits_valid_ = false;

  // Worker.
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool job_pending_ = false;
  bool worker_busy_ = false;
  bool shutdown_ = false;
  Prompt job_target_;
  int job_upto_ = 0;
  std::atomic<bool> job_cancel_{false};
  // Streamed audio (append_audio): the open clip, its blocks in draft_images_ from this index on,
  // and the completed segments waiting for the tower. The worker encodes every queued segment
  // before it takes a prefill job; stop_worker_job() waits until the queue is empty, so the
  // caller thread never reads a block's soft tokens before they are written.
  struct EncodeTask {
    std::vector<float> pcm16k;
    std::shared_ptr<SessionImage> out;
  };
  std::unique_ptr<AudioStream> stream_;
  size_t stream_first_ = 0;
  std::vector<EncodeTask> encode_queue_;  // under mu_
  std::string encode_error_;              // under mu_: the first failed background encode
  // Tower weights counted in the memory budget (count_tower; caller thread only).
  mutable size_t tower_bytes_ = 0;
  mutable bool vision_counted_ = false, audio_counted_ = false;
  std::atomic<bool> gen_cancel_{false};
};

}  // namespace eg
