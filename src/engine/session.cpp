// Session: construction, context building, the background prefill worker and cache sync.
// Generation is in session_generate.cpp, save/restore in session_file.cpp.
#include "engine/session.h"

#include <algorithm>

#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "engine/audio_prompt.h"
#include "engine/image_prompt.h"
#include "engine/memory_budget.h"
#include "engine/session_prompt.h"

namespace eg {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::ContextFull: return "context_full";
  }
  return "?";
}

namespace {

int resolve_context(const ModelConfig& cfg, int requested) {
  if (requested < 0) throw Error("session: context size must be >= 0 tokens (got " + std::to_string(requested) + ")");
  if (requested > cfg.max_position_embeddings)
    throw Error("session: context size " + std::to_string(requested) + " exceeds the model's " +
                std::to_string(cfg.max_position_embeddings) + " tokens");
  if (requested > 0) return requested;
  return std::min(4096, cfg.max_position_embeddings);
}

}  // namespace

Session::Session(std::shared_ptr<const LoadedModel> model, SessionOptions opt)
    : lm_(std::move(model)), opt_(std::move(opt)), sampler_(opt_.sampling) {
  if (!lm_) throw Error("session: no model");
  if (opt_.holdback_tokens < 0) throw Error("session: holdback_tokens must be >= 0");
  if (opt_.prefill_chunk_tokens < 1) throw Error("session: prefill_chunk_tokens must be >= 1");
  if (opt_.threads < 0) throw Error("session: threads must be >= 0");
  const ModelConfig& cfg = lm_->model().config();
  ctx_ = resolve_context(cfg, opt_.context_tokens);
  opt_.kv.max_tokens = ctx_;
  check_memory_budget(lm_->model(), opt_.memory_budget_bytes, ctx_, opt_.kv,
                      std::max(kSyncChunkTokens, opt_.prefill_chunk_tokens));
  std::string tpl = opt_.chat_template;
  if (tpl.empty()) tpl = lm_->chat_template();
  if (opt_.chat && tpl.empty())
    throw Error("session: chat mode needs a chat template and the model has none (use raw mode, "
                "or set SessionOptions::chat_template)");
  encoder_ = std::make_unique<PromptEncoder>(lm_->tokenizer(), opt_.chat ? tpl : std::string(),
                                             opt_.enable_thinking);
  opt_.chat_template = opt_.chat ? tpl : std::string();
  init_kv();
}

Session::~Session() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      shutdown_ = true;
      job_pending_ = false;
      job_cancel_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
}

void Session::init_kv() {
  kv_ = lm_->executor().new_kv_cache(opt_.kv);
  if (!ws_) ws_ = lm_->executor().new_workspace();
  cached_.clear();
  cached_media_.clear();
  logits_valid_ = false;
}

void Session::set_threads() const {
  if (opt_.threads > 0) cpu::set_num_threads(opt_.threads);
}

int Session::cached_tokens() const { return static_cast<int>(cached_.size()); }
size_t Session::kv_bytes() const { return kv_ ? kv_->bytes_reserved() : 0; }

void Session::set_sampling(const SamplingParams& p) {
  sampler_.set_params(p);
  opt_.sampling = sampler_.params();
}

// ---- context building ------------------------------------------------------------------------

void Session::set_system(const std::string& text) {
  if (!opt_.chat) throw Error("session: set_system needs chat mode");
  if (!messages_.empty() && messages_[0].role == "system") {
    if (text.empty())
      messages_.erase(messages_.begin());
    else
      messages_[0].content = text;
  } else if (!text.empty()) {
    messages_.insert(messages_.begin(), ChatMessage{"system", text});
  }
}

void Session::add_message(const std::string& role, const std::string& content,
                          std::vector<std::shared_ptr<const SessionImage>> images) {
  if (!opt_.chat) throw Error("session: add_message needs chat mode (raw mode: append_text)");
  if (role.empty()) throw Error("session: a message needs a role");
  for (const auto& im : images)
    if (!im || im->n <= 0) throw Error("session: an image of the message is empty");
  messages_.push_back(ChatMessage{role, content, std::move(images)});
}

void Session::count_tower(bool audio) const {
  bool& counted = audio ? audio_counted_ : vision_counted_;
  if (counted || opt_.memory_budget_bytes == 0) return;
  const size_t bytes = audio ? lm_->audio_encoder().weight_bytes() : lm_->image_encoder().weight_bytes();
  check_tower_budget(lm_->model(), opt_.memory_budget_bytes, ctx_, opt_.kv,
                     std::max(kSyncChunkTokens, opt_.prefill_chunk_tokens), tower_bytes_ + bytes,
                     audio ? "audio tower" : "vision tower");
  tower_bytes_ += bytes;
  counted = true;
}

std::shared_ptr<const SessionImage> Session::encode_image(const vision::RgbImage& image) const {
  count_tower(false);
  // "this model has no vision tower" for a text-only model.
  return encode_session_image(lm_->image_encoder(), image, lm_->model().config().hidden_size, opt_.pan_and_scan);
}

void Session::add_image(const vision::RgbImage& image) {
  if (!opt_.chat) throw Error("session: images need chat mode");
  auto im = encode_image(image);
  end_audio();  // a streamed clip comes before this image
  draft_images_.push_back(std::move(im));
  update_input(draft_);  // the image block prefills in the background while the user types
}

std::vector<std::shared_ptr<const SessionImage>> Session::encode_audio(const audio::Pcm& pcm) const {
  // "this model has no audio tower" for a model without one; other rates are resampled first.
  const AudioEncoder& enc = lm_->audio_encoder();
  count_tower(true);
  auto segs = encode_session_audio(enc, audio::to_model_rate(pcm), lm_->model().config().hidden_size);
  return {segs.begin(), segs.end()};
}

void Session::add_audio(const audio::Pcm& pcm) {
  if (!opt_.chat) throw Error("session: audio needs chat mode");
  auto segs = encode_audio(pcm);
  end_audio();  // a streamed clip comes before this one
  draft_images_.insert(draft_images_.end(), segs.begin(), segs.end());
  ++draft_clips_;
  update_input(draft_);  // the audio blocks prefill in the background while the user types
}

void Session::append_tokens(const std::vector<int32_t>& ids) {
  if (opt_.chat) throw Error("session: append_tokens needs raw mode (chat mode: add_message)");
  const int V = lm_->model().config().vocab_size;
  for (int32_t id : ids)
    if (id < 0 || id >= V)
      throw Error("session: token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                  std::to_string(V - 1) + ")");
  if (context_.size() + ids.size() > static_cast<size_t>(ctx_))
    throw Error("session: " + std::to_string(context_.size() + ids.size()) +
                " tokens exceed the context of " + std::to_string(ctx_) + " tokens");
  stop_worker_job();
  set_threads();
  context_.insert(context_.end(), ids.begin(), ids.end());
  sync_cache(Prompt{context_, {}}, static_cast<int>(context_.size()), nullptr, kSyncChunkTokens, nullptr);
}

void Session::append_text(const std::string& text) {
  if (opt_.chat) throw Error("session: append_text needs raw mode (chat mode: add_message)");
  std::vector<int32_t> ids = context_.empty() ? lm_->encode_prompt(text, false)
                                              : lm_->tokenizer().encode(text, false, true);
  append_tokens(ids);
}

Session::Prompt Session::render_tokens(const std::vector<ChatMessage>& msgs, bool gen_prompt,
                                       size_t* draft_end_token) const {
  PromptEncoder::Rendered r = encoder_->render(msgs, gen_prompt);
  size_t cut = r.text.size();  // the end of the last message's content (the draft)
  if (!r.content.empty()) cut = r.content.back().second;
  std::vector<std::shared_ptr<const SessionImage>> images;
  for (const ChatMessage& m : msgs) images.insert(images.end(), m.images.begin(), m.images.end());
  Prompt p;
  if (images.empty()) {
    if (draft_end_token != nullptr) *draft_end_token = encoder_->encode(r.text, r.content, cut).size();
    p.ids = encoder_->encode(r.text, r.content);
    return p;
  }
  bool any_audio = false, any_image = false;
  for (const auto& im : images) (im->audio ? any_audio : any_image) = true;
  if (any_audio) {  // images and audio blocks: the markers of both kinds, in order
    const ImageEncoder* ie = any_image ? &lm_->image_encoder() : nullptr;
    const AudioEncoder* ae = &lm_->audio_encoder();
    const size_t last_end = expand_rendered_media(ie, ae, r.text, r.content, images, &cut);
    if (!msgs.back().images.empty()) cut = std::max(cut, last_end);
    if (draft_end_token != nullptr) *draft_end_token = encoder_->encode(r.text, r.content, cut).size();
    p.ids = encoder_->encode(r.text, r.content);
    const auto blocks = media_blocks(images);  // pan-and-scan crops are runs of their own
    const std::vector<int> starts = media_placeholder_runs(ie, ae, p.ids, blocks);
    for (size_t i = 0; i < blocks.size(); ++i) p.media.push_back(Media{starts[i], blocks[i]});
    return p;
  }
  // The processor's expansion of every image marker the template wrote.
  const ImageEncoder& enc = lm_->image_encoder();
  std::vector<int> counts, crops, block_counts;
  for (const auto& im : images) {
    counts.push_back(im->n);
    crops.push_back(static_cast<int>(im->crops.size()));
  }
  const auto blocks = media_blocks(images);
  for (const auto& b : blocks) block_counts.push_back(b->n);
  const size_t last_end = expand_rendered_markers(enc, r.text, r.content, counts, &cut, &crops);
  if (!msgs.back().images.empty()) cut = std::max(cut, last_end);
  if (draft_end_token != nullptr) *draft_end_token = encoder_->encode(r.text, r.content, cut).size();
  p.ids = encoder_->encode(r.text, r.content);
  const std::vector<int> starts = image_placeholder_runs(enc, p.ids, block_counts);
  for (size_t i = 0; i < blocks.size(); ++i) p.media.push_back(Media{starts[i], blocks[i]});
  return p;
}

Session::Prompt Session::prompt_tokens(const std::string& draft, size_t* draft_end) const {
  if (opt_.chat) {
    std::vector<ChatMessage> msgs = messages_;
    if (!draft.empty() || !draft_images_.empty()) msgs.push_back(ChatMessage{"user", draft, draft_images_});
    if (msgs.empty()) {
      if (draft_end != nullptr) *draft_end = 0;
      return {};
    }
    return render_tokens(msgs, /*gen_prompt=*/true, draft_end);
  }
  Prompt t{context_, {}};
  if (!draft.empty()) {
    std::vector<int32_t> d = t.empty() ? lm_->encode_prompt(draft, false) : lm_->tokenizer().encode(draft, false, true);
    t.ids.insert(t.ids.end(), d.begin(), d.end());
  }
  if (draft_end != nullptr) *draft_end = t.size();
  return t;
}

int Session::count_tokens(const std::string& text) const {
  return static_cast<int>(lm_->tokenizer().encode(text, false, /*parse_special=*/!opt_.chat).size());
}

int Session::count_prompt_tokens(const std::string& draft) const {
  return static_cast<int>(prompt_tokens(draft, nullptr).size());
}

void Session::reset() {
  discard_stream();
  stop_worker_job();
  messages_.clear();
  context_.clear();
  draft_.clear();
  draft_images_.clear();
  draft_clips_ = 0;
  kv_->clear();
  cached_.clear();
  cached_media_.clear();
  logits_valid_ = false;
  stats_ = SessionStats{};
}

// ---- cache synchronisation ---------------------------------------------------------------------

int Session::truncate_cache(int n, const Prompt* target) {
  int kept = kv_->truncate(n);
  for (bool moved = true; moved && target != nullptr;) {  // never keep half a bidirectional block
    moved = false;
    for (const Media& m : target->media)
      if (m.image->bidirectional && m.begin < kept && kept < m.begin + m.image->n) {
        kept = kv_->truncate(m.begin);
        moved = true;
      }
  }
  cached_.resize(static_cast<size_t>(kept));
  cached_media_.resize(static_cast<size_t>(kept));
  logits_valid_ = false;
  return kept;
}

bool Session::sync_cache(const Prompt& target, int upto, const std::atomic<bool>* cancel, int chunk, int* prefilled,
                         bool want_logits) {
  upto = std::min<int>(upto, static_cast<int>(target.size()));
  if (upto > ctx_)
    throw Error("session: " + std::to_string(upto) + " tokens exceed the context of " + std::to_string(ctx_) + " tokens");
  const int H = lm_->model().config().hidden_size;
  std::vector<uint64_t> keys(target.size(), 0);  // per position: the image id, 0 for text
  for (const Media& m : target.media) {
    if (m.image->soft.size() != static_cast<size_t>(m.image->n) * H)  // e.g. a streamed segment that failed
      throw Error("session: a media block has no soft tokens (its encoding failed)");
    std::fill(keys.begin() + m.begin, keys.begin() + m.begin + m.image->n, m.image->id);
    // A bidirectional block is prefilled whole or not at all.
    if (m.image->bidirectional && m.begin < upto && upto < m.begin + m.image->n) upto = m.begin;
  }
  size_t common = 0;
  while (common < cached_.size() && common < static_cast<size_t>(upto) && cached_[common] == target.ids[common] &&
         cached_media_[common] == keys[common])
    ++common;
  if (common < cached_.size()) truncate_cache(static_cast<int>(common), &target);
  const StepExecutor& exec = lm_->executor();
  std::vector<EmbedSpan> spans;
  while (cached_.size() < static_cast<size_t>(upto)) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) return false;
    const int pos = static_cast<int>(cached_.size());
    int end = std::min<int>(pos + chunk, upto);
    spans.clear();
    for (const Media& m : target.media) {
      const int b = m.begin, e = m.begin + m.image->n;
      if (m.image->bidirectional && b < end && end < e) end = b > pos ? b : e;  // never split the block
    }
    for (const Media& m : target.media) {
      const int b = std::max(m.begin, pos), e = std::min(m.begin + m.image->n, end);
      if (b < e)
        spans.push_back(EmbedSpan{b - pos, e - b, m.image->soft.data() + static_cast<size_t>(b - m.begin) * H,
                                  m.image->bidirectional});
    }
    const int n = end - pos;
    const int32_t* ids = target.ids.data() + pos;
    // The LM head (vocab x hidden) only for the last chunk of a synchronous sync: the background
    // worker's chunks need no logits (generate() recomputes the last token if it must).
    const bool last = end == upto && want_logits;
    try {
      if (spans.empty())
        exec.prefill(ids, n, *kv_, *ws_, last ? LogitsMode::Last : LogitsMode::None, logits_);
      else
        exec.prefill_media(ids, n, spans, *kv_, *ws_, last ? LogitsMode::Last : LogitsMode::None, logits_);
    } catch (...) {
      // The cache may hold part of the chunk: start over from a clean state.
      kv_->clear();
      cached_.clear();
      cached_media_.clear();
      logits_valid_ = false;
      throw;
    }
    cached_.insert(cached_.end(), ids, ids + n);
    cached_media_.insert(cached_media_.end(), keys.begin() + pos, keys.begin() + end);
    logits_valid_ = last;
    if (prefilled != nullptr) *prefilled += n;
  }
  return true;
}

// ---- background worker -------------------------------------------------------------------------
//
// Ownership of the KV state (kv_, ws_, cached_, logits_, logits_valid_): the worker touches
// it only between taking a job (job_pending_ -> worker_busy_ = true, under mu_) and finishing it
// (worker_busy_ = false, under mu_). The caller thread touches it only after stop_worker_job()
// has seen worker_busy_ == false with job_pending_ cleared, under mu_, and before it posts the
// next job (update_input, under mu_). So the two never overlap, and the mutex hand-offs order
// their accesses. The conversation state (messages_, context_, draft_, opt_ except reads of
// constant fields) belongs to the caller thread alone; the worker gets its target by value.

void Session::worker_main() {
  set_threads();
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return job_pending_ || !encode_queue_.empty() || shutdown_; });
    if (shutdown_) return;
    if (!encode_queue_.empty()) {  // streamed audio segments first: the jobs' targets show them
      EncodeTask task = std::move(encode_queue_.front());
      encode_queue_.erase(encode_queue_.begin());
      worker_busy_ = true;
      lk.unlock();
      std::string err;
      try {
        auto segs = encode_session_audio(lm_->audio_encoder(), audio::Pcm{std::move(task.pcm16k), audio::kModelRate},
                                         lm_->model().config().hidden_size);
        if (segs.size() != 1 || segs[0]->n != task.out->n) throw Error("internal: a streamed segment changed size");
        task.out->soft = std::move(segs[0]->soft);
        task.out->encode_ms = segs[0]->encode_ms;
      } catch (const std::exception& e) {
        err = e.what();
      }
      lk.lock();
      if (!err.empty() && encode_error_.empty()) encode_error_ = err;
      worker_busy_ = false;
      cv_.notify_all();
      continue;
    }
    Prompt target = std::move(job_target_);
    const int upto = job_upto_;
    job_pending_ = false;
    worker_busy_ = true;
    job_cancel_ = false;
    lk.unlock();
    try {
      sync_cache(target, upto, &job_cancel_, opt_.prefill_chunk_tokens, nullptr, /*want_logits=*/false);
    } catch (...) {
      // Nothing to report to: the same prompt fails again, synchronously, in generate().
    }
    lk.lock();
    worker_busy_ = false;
    cv_.notify_all();
  }
}

void Session::stop_worker_job() {
  if (!worker_.joinable()) return;
  std::unique_lock<std::mutex> lk(mu_);
  job_pending_ = false;
  job_cancel_ = true;
  cv_.wait(lk, [&] { return !worker_busy_ && encode_queue_.empty(); });
}

void Session::wait_idle() {
  if (!worker_.joinable()) return;
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return !job_pending_ && !worker_busy_ && encode_queue_.empty(); });
}

void Session::update_input(const std::string& text) {
  draft_ = text;
  if (!has_draft()) return;  // nothing new to prefill; keep what the cache holds
  size_t draft_end = 0;
  Prompt target;
  try {
    target = prompt_tokens(text, &draft_end);
  } catch (const Error&) {
    return;  // e.g. a template that rejects this conversation: generate() reports it
  }
  // The stable part: everything before the draft's last holdback tokens (never past the context).
  const size_t fixed = opt_.chat ? 0 : context_.size();
  size_t upto = draft_end > static_cast<size_t>(opt_.holdback_tokens) ? draft_end - opt_.holdback_tokens : 0;
  upto = std::max(upto, std::min(fixed, target.size()));
  // The draft's images are stable up to their end marker: prefill them whatever the holdback.
  if (!target.media.empty()) {
    const Media& m = target.media.back();
    upto = std::max(upto, std::min(static_cast<size_t>(m.begin + m.image->n + 1), target.size()));
  }
  upto = std::min(upto, static_cast<size_t>(ctx_));
  ensure_worker();
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_target_ = std::move(target);
    job_upto_ = static_cast<int>(upto);
    job_pending_ = true;
    job_cancel_ = true;  // supersede the running job after its current chunk
  }
  cv_.notify_all();
}

void Session::ensure_worker() {
  if (!worker_.joinable()) worker_ = std::thread([this] { worker_main(); });
}

void Session::cancel() {
  gen_cancel_ = true;
  job_cancel_ = true;
}

}  // namespace eg
