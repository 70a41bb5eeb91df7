// Audio clips in a prompt (gemma-multimodal.md §3.2, §3.3, §3.7): the model's audio tower and
// feature extractor, the processor's placeholder expansion, and prompts that mix images and clips.
//
// Gemma 4 E2B/E4B: every marker "<|audio|>" of the (rendered) prompt text (the chat template writes
// one per audio item) becomes "<|audio>" + n × "<|audio|>" + "<audio|>", n = ⌈⌈frames/2⌉/2⌉ (25 per
// second of 16 kHz audio), exactly as Gemma4Processor. Audio rows are causal; the per-layer
// embedding uses the pad row at their positions (Model::forward's EmbedSpan rule, as for images).
// Clips are resampled to 16 kHz mono first (transformers 5.17 does not resample; audio/audio.h).
// Longer than 30 s: transformers truncates to 30 s; we split the clip into consecutive 30 s
// segments, each its own "<|audio>" … "<audio|>" block (a clip of ≤ 30 s is exactly transformers');
// a trailing piece shorter than one frame (10 ms) is dropped.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "audio/audio.h"
#include "audio/features.h"
#include "audio/gemma4_audio.h"
#include "engine/image_prompt.h"
#include "engine/loaded_model.h"
#include "engine/media.h"

namespace eg {

class AudioEncoder {
 public:
  /// The tower and feature extractor of the checkpoint folder `dir` that `lm` was loaded from.
  /// Throws eg::Error "this model has no audio tower" for a checkpoint without one (text-only,
  /// Gemma 3, Gemma 4 26B/31B) or a GGUF file (its tower: load_mmproj), and a clear error when the tower does not fit the
  /// text model (soft-token width, token ids, family).
  static std::unique_ptr<AudioEncoder> load(const LoadedModel& lm, const std::string& dir);
  /// The audio tower of a Gemma 4 llama.cpp mmproj file (model/mmproj.h, projector type
  /// "gemma4a") for `lm` (typically a text GGUF), with the Gemma 4 log-mel front end and
  /// audio_seq_length 750. The marker tokens are looked up by their text (<|audio>, <audio|>,
  /// <|audio|>). Throws eg::Error naming the file when it has no audio encoder ("this model has
  /// no audio tower") or does not belong to the text model (family, soft-token width, tokens).
  static std::unique_ptr<AudioEncoder> load_mmproj(const LoadedModel& lm, std::shared_ptr<const Mmproj> mm);

  /// Soft tokens per segment of a clip of n samples at 16 kHz (one entry per ≤ 30 s segment).
  /// Throws eg::Error for a clip shorter than one frame (10 ms) or longer than the limit.
  std::vector<int> tokens_for(int64_t n) const;
  /// Soft tokens [Σ tokens_for(n), H] of one 16 kHz mono clip (segments concatenated).
  std::vector<float> encode(const audio::Pcm& pcm16k) const;
  /// The marker the chat template writes per audio item ("<|audio|>").
  const std::string& marker() const { return marker_; }
  /// The processor's replacement of one marker for a clip with these segment token counts.
  std::string expanded_marker(const std::vector<int>& segments) const;
  const audio::AudioConfig& config() const { return ac_; }
  size_t weight_bytes() const { return tower_->weight_bytes(); }
  /// 16 kHz samples of one segment (30 s: transformers' cap; longer clips are split).
  int64_t segment_samples() const { return fe_->config().max_samples; }
  /// Longest clip accepted, seconds.
  double max_seconds() const { return max_seconds_; }

 private:
  audio::AudioConfig ac_;
  std::unique_ptr<audio::FeatureExtractor> fe_;
  std::unique_ptr<audio::Gemma4AudioTower> tower_;
  int seq_length_ = 750;
  double max_seconds_ = audio::kDefaultMaxSeconds;
  std::string boa_, eoa_, marker_;
  std::shared_ptr<const Mmproj> mmproj_;  // keeps the mmproj tensors alive
};

/// One medium of a prompt, in the order of its marker: an image or a 16 kHz mono clip.
struct PromptMedium {
  enum class Kind { Image, Audio } kind = Kind::Image;
  vision::RgbImage image;
  audio::Pcm audio;
  // The server's media cache (server/media_cache.h): the medium's key, and its soft tokens (one
  // per 30 s segment of a clip) when they were found there; then `image` / `audio` are empty and
  // the tower does not run again.
  std::string source;
  std::vector<std::shared_ptr<SessionImage>> encoded;
};

/// A tokenised prompt with the soft tokens of its images and clips bound to their placeholders.
struct MediaPrompt {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> soft;  // per image block (an image, then its crops) / clip, [n, H]
  std::vector<EmbedSpan> spans;          // in prompt order, rows pointing into `soft`
  std::vector<int> tokens_per_medium;    // soft tokens per medium (all segments of a clip)
  double image_encode_ms = 0, audio_encode_ms = 0;
};

/// `text` must hold, in order, one image marker per image and one audio marker per clip of
/// `media` (images bind to image markers in order, clips to audio markers in order). `images` /
/// `audio` may be null when the media hold none of that kind. Throws eg::Error when the counts
/// disagree, when an encoder is missing for a medium ("this model has no audio tower"), or when
/// a placeholder run does not match its medium (placeholder text typed in the prompt).
/// `pan_and_scan` (Gemma 3): images also get their crops (ImageEncoder::crops_for), one block each;
/// tokens_per_medium counts them.
MediaPrompt build_media_prompt(const LoadedModel& lm, const ImageEncoder* images, const AudioEncoder* audio,
                               const std::string& text, const std::vector<PromptMedium>& media, bool no_bos,
                               bool pan_and_scan = false);

/// One clip through the extractor and tower, as SessionImages (the soft-token holder shared with
/// images), one per ≤ 30 s segment, each with a fresh id. Throws eg::Error.
std::vector<std::shared_ptr<SessionImage>> encode_session_audio(const AudioEncoder& enc, const audio::Pcm& pcm16k,
                                                                int hidden_size);

/// The processor's expansion of a rendered chat prompt whose media are `items` (images and audio
/// segments, in order; the template wrote one marker per item): every image / audio marker of
/// `text` outside the `protect` ranges is replaced, in order, by its item's expansion; `protect`
/// and `*cut` are shifted to match. Returns the end of the last expansion. Throws eg::Error when
/// the markers do not match the items in number or kind, or an encoder a kind needs is null.
size_t expand_rendered_media(const ImageEncoder* images, const AudioEncoder* audio, std::string& text,
                             std::vector<std::pair<size_t, size_t>>& protect,
                             const std::vector<std::shared_ptr<const SessionImage>>& items, size_t* cut = nullptr);

/// The start of each item's placeholder run in `ids` (images and audio segments in order; pass
/// media_blocks(items) when images carry pan-and-scan crops: each crop is its own run). Throws
/// eg::Error when the runs do not match the items (placeholder text typed in the prompt, ...).
std::vector<int> media_placeholder_runs(const ImageEncoder* images, const AudioEncoder* audio,
                                        const std::vector<int32_t>& ids,
                                        const std::vector<std::shared_ptr<const SessionImage>>& items);

}  // namespace eg
