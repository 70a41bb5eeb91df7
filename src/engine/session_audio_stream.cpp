// Session::append_audio / end_audio: audio encoded while the user speaks (engine/session.h).
//
// Completed 30 s segments (AudioStream) become blocks of the draft at once: their soft-token
// count is known from their length, so the prompt can be rendered with them while the worker
// thread runs the tower (queued EncodeTask, always before the next prefill job), and the
// background prefill then continues through them. The last, partial segment is encoded by
// end_audio() on the calling thread.
#include <algorithm>

#include "core/error.h"
#include "engine/audio_prompt.h"
#include "engine/session.h"

namespace eg {

void Session::append_audio(const float* pcm, size_t n, int rate) {
  if (!opt_.chat) throw Error("session: audio needs chat mode");
  const AudioEncoder& enc = lm_->audio_encoder();  // "this model has no audio tower"
  count_tower(true);
  if (n > 0 && pcm == nullptr) throw Error("session: append_audio: no samples (NULL)");
  if (stream_ && stream_->rate() != rate)
    throw Error("session: append_audio: the clip being streamed is at " + std::to_string(stream_->rate()) +
                " Hz, this chunk at " + std::to_string(rate) + " Hz (end_audio() first)");
  if (n == 0) return;
  std::unique_ptr<AudioStream> fresh;
  AudioStream* st = stream_.get();
  if (st == nullptr) {
    fresh = std::make_unique<AudioStream>(rate, enc.segment_samples(), enc.max_seconds());
    st = fresh.get();
  }
  st->append(pcm, n);  // throws, keeping nothing of the chunk
  if (fresh) {
    stream_ = std::move(fresh);
    stream_first_ = draft_images_.size();
  }
  if (!stream_->has_segment()) return;
  const int H = lm_->model().config().hidden_size;
  std::vector<EncodeTask> tasks;
  while (stream_->has_segment()) {
    EncodeTask t;
    t.pcm16k = stream_->take_segment();
    t.out = std::make_shared<SessionImage>();
    t.out->id = next_image_id();
    t.out->n = enc.tokens_for(static_cast<int64_t>(t.pcm16k.size())).at(0);
    t.out->audio = true;
    t.out->soft.reserve(static_cast<size_t>(t.out->n) * H);
    draft_images_.push_back(t.out);
    tasks.push_back(std::move(t));
  }
  ensure_worker();
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (EncodeTask& t : tasks) encode_queue_.push_back(std::move(t));
  }
  cv_.notify_all();
  update_input(draft_);  // the prefill follows the tower through the new blocks
}

void Session::discard_stream() {
  if (!stream_) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    encode_queue_.clear();
  }
  stop_worker_job();  // the worker may still be writing a block's soft tokens
  {
    std::lock_guard<std::mutex> lk(mu_);
    encode_error_.clear();
  }
  draft_images_.resize(std::min(stream_first_, draft_images_.size()));
  stream_.reset();
}

void Session::end_audio() {
  if (!stream_) return;
  std::vector<float> rest = stream_->finish();
  const AudioEncoder& enc = lm_->audio_encoder();
  const int64_t done = stream_->segments_taken();
  // The rest only counts when it has a whole frame (as AudioEncoder::tokens_for drops a shorter
  // trailing piece); a clip with neither is too short.
  std::shared_ptr<SessionImage> last;
  try {
    bool has_frame = !rest.empty();
    if (has_frame && done > 0) {
      try {
        (void)enc.tokens_for(static_cast<int64_t>(rest.size()));
      } catch (const Error&) {
        has_frame = false;  // under one frame after whole segments: dropped
      }
    }
    if (done == 0 && !has_frame)
      throw Error("audio clip of " + std::to_string(rest.size()) +
                  " samples is too short (at least 161 samples, about 10 ms, at 16 kHz)");
    if (has_frame) {
      auto segs = encode_session_audio(enc, audio::Pcm{std::move(rest), audio::kModelRate},
                                       lm_->model().config().hidden_size);
      if (segs.size() != 1) throw Error("internal: the last streamed segment gave " + std::to_string(segs.size()) + " blocks");
      last = std::move(segs[0]);
    }
    stop_worker_job();  // waits for the segments still being encoded
    std::string err;
    {
      std::lock_guard<std::mutex> lk(mu_);
      err = encode_error_;
    }
    if (!err.empty()) throw Error("audio: encoding a streamed segment failed: " + err);
  } catch (...) {
    discard_stream();
    throw;
  }
  if (last) draft_images_.push_back(std::move(last));
  stream_.reset();
  ++draft_clips_;
  update_input(draft_);
}

}  // namespace eg
