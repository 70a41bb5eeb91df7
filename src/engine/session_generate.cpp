// Session::generate / chat / prefill: prompt building with the overflow policy, the decode loop,
// streaming text pieces.
#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "engine/session.h"
#include "engine/stop_strings.h"

namespace eg {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Removes the oldest whole turn (a user message and everything up to the next user message),
// keeping a leading system message and the last user message. Returns the messages removed (0:
// nothing left to drop).
int drop_oldest_turn(std::vector<ChatMessage>& msgs) {
  const size_t s = (!msgs.empty() && msgs[0].role == "system") ? 1 : 0;
  size_t last_user = msgs.size();
  for (size_t i = msgs.size(); i-- > 0;)
    if (msgs[i].role == "user") {
      last_user = i;
      break;
    }
  if (last_user == msgs.size() || s >= last_user) return 0;
  size_t e = s + 1;
  while (e < last_user && msgs[e].role != "user") ++e;
  msgs.erase(msgs.begin() + static_cast<std::ptrdiff_t>(s), msgs.begin() + static_cast<std::ptrdiff_t>(e));
  return static_cast<int>(e - s);
}

}  // namespace

TurnResult Session::chat(const std::string& user_text, const GenerateParams& params,
                         const PieceCallback& on_piece) {
  if (!opt_.chat) throw Error("session: chat() needs chat mode (raw mode: append_text + generate)");
  const std::string saved = draft_;  // the attached images (draft_images_) stay with the message
  draft_ = user_text;
  try {
    TurnResult r = generate(params, on_piece);
    if (r.finish == FinishReason::ContextFull && r.ids.empty()) draft_ = saved;
    return r;
  } catch (...) {
    draft_ = saved;
    throw;
  }
}

std::vector<float> Session::prefill() {
  end_audio();  // a clip being streamed ends here
  stop_worker_job();
  set_threads();
  std::vector<ChatMessage> msgs = messages_;
  const bool with_draft = opt_.chat && has_draft();
  if (with_draft) msgs.push_back(draft_message());
  Prompt prompt;
  if (opt_.chat) {
    if (msgs.empty()) throw Error("session: nothing to prefill (the conversation is empty)");
    prompt = render_tokens(msgs, true, nullptr);
    while (prompt.size() + 1 > static_cast<size_t>(ctx_) && opt_.overflow == OverflowPolicy::DropOldestTurns &&
           drop_oldest_turn(msgs) > 0)
      prompt = render_tokens(msgs, true, nullptr);
  } else {
    prompt = prompt_tokens(draft_, nullptr);
  }
  if (prompt.empty()) throw Error("session: nothing to prefill (empty prompt)");
  if (prompt.size() > static_cast<size_t>(ctx_))
    throw Error("session: the prompt of " + std::to_string(prompt.size()) + " tokens exceeds the context of " +
                std::to_string(ctx_) + " tokens");
  sync_cache(prompt, static_cast<int>(prompt.size()), nullptr, kSyncChunkTokens, nullptr);
  if (!logits_valid_) {  // the cache held the prompt already, but not its last logits
    truncate_cache(static_cast<int>(prompt.size()) - 1, &prompt);
    sync_cache(prompt, static_cast<int>(prompt.size()), nullptr, kSyncChunkTokens, nullptr);
  }
  if (opt_.chat) {  // turns dropped by the overflow policy stay dropped; the draft stays a draft
    if (with_draft) msgs.pop_back();
    messages_ = std::move(msgs);
  }
  return logits_;
}

TurnResult Session::generate(const GenerateParams& gp, const PieceCallback& on_piece) {
  if (gp.max_new_tokens < 0) throw Error("session: max new tokens must be >= 0");
  StopStringMatcher matcher(gp.stop_strings);
  const auto t0 = std::chrono::steady_clock::now();
  end_audio();  // a clip being streamed ends here (its last segment is encoded now)
  stop_worker_job();
  gen_cancel_ = false;
  set_threads();
  const ModelConfig& cfg = lm_->model().config();
  const int V = cfg.vocab_size;

  TurnResult r;
  SessionStats& st = r.stats;
  st.context_size = ctx_;
  if (opt_.chat) {
    for (const auto& m : draft_images_) {
      (m->audio ? st.audio_soft_tokens : st.image_soft_tokens) += soft_tokens_with_crops(*m);
      (m->audio ? st.audio_encode_ms : st.image_encode_ms) += m->encode_ms;
      st.images += m->audio ? 0 : 1;
    }
    st.audio_clips = static_cast<int>(draft_clips_);
  }

  // The prompt, dropping old turns while prompt + max_new_tokens does not fit.
  std::vector<ChatMessage> msgs = messages_;
  Prompt prompt;
  const bool drop = opt_.chat && opt_.overflow == OverflowPolicy::DropOldestTurns;
  if (opt_.chat) {
    if (has_draft()) msgs.push_back(draft_message());
    if (msgs.empty()) throw Error("session: nothing to generate from (the conversation is empty)");
    prompt = render_tokens(msgs, true, nullptr);
    while (drop && prompt.size() + static_cast<size_t>(gp.max_new_tokens) > static_cast<size_t>(ctx_)) {
      const int d = drop_oldest_turn(msgs);
      if (d == 0) break;
      st.dropped_messages += d;
      prompt = render_tokens(msgs, true, nullptr);
    }
  } else {
    prompt = prompt_tokens(draft_, nullptr);
    if (prompt.empty()) throw Error("session: nothing to generate from (empty context)");
  }
  st.prompt_tokens = static_cast<int>(prompt.size());
  if (prompt.size() > static_cast<size_t>(ctx_)) {  // does not fit at all: nothing changes
    r.finish = FinishReason::ContextFull;
    st.context_used = static_cast<int>(cached_.size());
    st.kv_bytes = kv_bytes();
    stats_ = st;
    return r;
  }

  // Prefill what the cache does not hold yet.
  const auto tp = std::chrono::steady_clock::now();
  sync_cache(prompt, static_cast<int>(prompt.size()), nullptr, kSyncChunkTokens, &st.prefilled_tokens);
  if (!logits_valid_) {
    truncate_cache(static_cast<int>(prompt.size()) - 1, &prompt);
    sync_cache(prompt, static_cast<int>(prompt.size()), nullptr, kSyncChunkTokens, &st.prefilled_tokens);
  }
  st.reused_tokens = st.prompt_tokens - st.prefilled_tokens;
  st.prefill_ms = ms_since(tp);

  r.finish = FinishReason::Length;
  auto cancelled = [&] {
    return gen_cancel_.load() || (gp.cancel != nullptr && gp.cancel->load());
  };
  const auto& stops = lm_->stop_ids();
  StreamingDetokenizer detok(lm_->tokenizer());
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return true;
    r.text += piece;
    return !on_piece || on_piece(piece);
  };

  if (gp.max_new_tokens > 0) {
    int32_t next = sampler_.sample(logits_.data(), V);
    st.ttft_ms = ms_since(t0);
    const auto td = std::chrono::steady_clock::now();
    for (;;) {
      r.ids.push_back(next);
      sampler_.accept(next);
      if (!opt_.ignore_eos && std::find(stops.begin(), stops.end(), next) != stops.end()) {
        r.finish = FinishReason::Stop;
        break;
      }
      if (!emit(matcher.push(detok.push(next)))) {
        r.finish = FinishReason::Cancelled;
        break;
      }
      if (matcher.stopped()) {
        r.finish = FinishReason::Stop;
        break;
      }
      if (static_cast<int>(r.ids.size()) >= gp.max_new_tokens) break;
      if (cancelled()) {
        r.finish = FinishReason::Cancelled;
        break;
      }
      if (cached_.size() >= static_cast<size_t>(ctx_)) {
        // Full. The overflow policy already dropped every turn it could before prefilling to
        // make room for max_new_tokens, so nothing more can be dropped here.
        r.finish = FinishReason::ContextFull;
        break;
      }
      lm_->executor().prefill(&next, 1, *kv_, *ws_, LogitsMode::Last, logits_);
      cached_.push_back(next);
      cached_media_.push_back(0);
      logits_valid_ = true;
      next = sampler_.sample(logits_.data(), V);
    }
    if (!matcher.stopped()) {  // what the detokenizer / stop matcher still hold
      std::string shown = matcher.push(detok.flush());
      if (!matcher.stopped()) shown += matcher.flush();
      if (r.finish == FinishReason::Cancelled)
        r.text += shown;  // the caller asked for no more pieces
      else
        emit(shown);
    }
    st.decode_ms = ms_since(td);
  } else {
    st.ttft_ms = ms_since(t0);
  }

  // Commit: the conversation (or raw context) now includes the prompt and the answer.
  if (gp.max_new_tokens > 0) {
    if (opt_.chat) {
      messages_ = std::move(msgs);
      messages_.push_back(ChatMessage{"assistant", r.text});
    }
    context_ = prompt.ids;
    context_.insert(context_.end(), r.ids.begin(), r.ids.end());
    draft_.clear();
    draft_images_.clear();
    draft_clips_ = 0;
  }
  st.generated_tokens = static_cast<int>(r.ids.size());
  if (st.prefill_ms > 0) st.prefill_tok_s = st.prefilled_tokens * 1000.0 / st.prefill_ms;
  if (r.ids.size() > 1 && st.decode_ms > 0) st.decode_tok_s = (r.ids.size() - 1) * 1000.0 / st.decode_ms;
  st.context_used = static_cast<int>(context_.size());
  st.kv_bytes = kv_bytes();
  stats_ = st;
  return r;
}

}  // namespace eg
