// Images in a prompt (gemma-multimodal.md §0.3, §1.6, §2.5): the model's vision tower and image
// processor, the processor's placeholder expansion, and the soft-token rows bound to the prompt's
// placeholder positions for Model::forward (EmbedSpan).
//
// Gemma 3: every image marker "<start_of_image>" of the (rendered) prompt text becomes
// "\n\n<start_of_image>" + N × "<image_soft_token>" + "<end_of_image>\n\n" before tokenisation
// (exactly what Gemma3Processor does, so "\n" + "\n\n" merge into one token as in transformers);
// N = mm_tokens_per_image; the N placeholder rows of one image are bidirectional during prefill
// (token_type_ids). Pan-and-scan (off by default): the marker becomes the processor's sentence
// with the original's block and one block per crop, each bidirectional on its own.
// Gemma 4: every marker "<|image|>" (the placeholder itself, which the chat template writes per
// image item) becomes "<|image>" + N × "<|image|>" + "<image|>" with N the image's own soft-token
// count (Gemma4ImageProcessor: aspect-preserving, ≤ max_soft_tokens); the rows stay causal
// (use_bidirectional_attention null: E2B/E4B); with "vision" (26B/31B) each image's rows see each
// other on sliding layers only (ModelConfig::image_blocks_sliding_only, Model::forward).
// The text model's per-layer-embedding rule at media positions is Model::forward's (EmbedSpan).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/loaded_model.h"
#include "engine/media.h"
#include "model/mmproj.h"
#include "model/model.h"
#include "vision/gemma4_vision.h"
#include "vision/image.h"
#include "vision/preprocess.h"
#include "vision/siglip.h"
#include "vision/vision_config.h"

namespace eg {

class ImageEncoder {
 public:
  /// The tower and processor of the checkpoint folder `dir` that `lm` was loaded from (its tensors
  /// are `lm`'s, which must outlive the encoder). Throws eg::Error "this model has no vision
  /// tower" for a text-only checkpoint or a GGUF file (its tower: load_mmproj), and a
  /// clear error for a tower that does not fit the text model (soft-token width, token ids).
  static std::unique_ptr<ImageEncoder> load(const LoadedModel& lm, const std::string& dir);
  /// The tower of a llama.cpp mmproj file (model/mmproj.h, open_mmproj) for `lm` (typically a
  /// text GGUF): Gemma 3's SigLIP ("gemma3") or Gemma 4's tower ("gemma4v"). The image marker
  /// tokens are looked up by their text in `lm`'s vocabulary (<start_of_image>, <end_of_image>,
  /// <image_soft_token>; Gemma 4: <|image>, <image|>, <|image|>; as llama.cpp's mtmd does). Throws
  /// eg::Error naming the file when it has no vision encoder or does not belong to the text model
  /// (a Gemma 3 projector for a Gemma 4 model or the reverse, a soft-token width other than the
  /// model's hidden size, missing marker tokens).
  static std::unique_ptr<ImageEncoder> load_mmproj(const LoadedModel& lm, std::shared_ptr<const Mmproj> mm);

  /// Soft tokens [n, H] of one image (processor + tower); n = tokens_for(img).
  std::vector<float> encode(const vision::RgbImage& img) const;
  /// Gemma 3 pan-and-scan (gemma-multimodal.md §1.2.1): the crops of `img`, from the original
  /// pixels, when `pan_and_scan` is on and it activates for this image's shape (Gemma3Processor's
  /// settings, not the config's: see ImageProcessorConfig); empty otherwise. Each crop is processed and encoded like
  /// an image (encode(crop_image(img, box))) and becomes its own block of tokens_for soft tokens.
  /// Throws eg::Error when `pan_and_scan` is asked of a Gemma 4 model (a Gemma 3 processor option).
  std::vector<vision::CropBox> crops_for(const vision::RgbImage& img, bool pan_and_scan) const;
  /// Soft tokens the image becomes (Gemma 3: mm_tokens_per_image; Gemma 4: from its size).
  int tokens_for(const vision::RgbImage& img) const;
  const vision::VisionConfig& config() const { return vc_; }
  bool gemma4() const { return vc_.kind == vision::TowerKind::Gemma4; }
  /// Whether one image's rows see each other during prefill (Gemma 3: on every layer; Gemma 4
  /// with use_bidirectional_attention "vision", 26B/31B: on sliding layers) or stay causal
  /// (Gemma 4 E2B/E4B).
  bool bidirectional() const { return bidirectional_; }
  /// The image marker text of the chat template / prompt ("<start_of_image>", "<|image|>").
  const std::string& marker() const { return marker_; }
  /// The processor's replacement of one marker for an image of n soft tokens. With `crops` > 0
  /// (pan-and-scan, Gemma3Processor.replace_image_token): "Here is the original image " + SEQ +
  /// " and here are some crops to help you see better " + `crops` × SEQ joined by " ", SEQ being
  /// the expansion of one image.
  std::string expanded_marker(int n, int crops = 0) const;
  /// Bytes of the tower's weights.
  size_t weight_bytes() const;

 private:
  vision::VisionConfig vc_;
  vision::ImageProcessorConfig pc_;
  std::unique_ptr<vision::SiglipTower> siglip_;
  std::unique_ptr<vision::Gemma4VisionTower> g4_;
  std::string boi_, eoi_, image_, marker_;
  std::shared_ptr<const Mmproj> mmproj_;  // keeps the mmproj tensors alive
  bool bidirectional_ = false;
  void bind_tokens(const LoadedModel& lm, const std::string& origin);
};

/// A tokenised prompt with its images' soft tokens bound to the placeholder positions.
struct ImagePrompt {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> soft;  // per block (an image, then its pan-and-scan crops), [n, H]
  std::vector<EmbedSpan> spans;          // one per block, rows pointing into `soft`
  std::vector<int> tokens_per_image;     // per image, its crops' soft tokens included
  std::vector<int> crops_per_image;      // pan-and-scan crops per image (0: none)
};

/// `text` must hold exactly one image marker per image, in order (the chat template writes one
/// per image item). Expands them, tokenises (LoadedModel::encode_prompt), encodes every image
/// (and its crops with `pan_and_scan`) and checks that each
/// placeholder run has exactly its block's soft-token count. Throws eg::Error when the counts
/// disagree ("the prompt has 1 image marker(s) but 2 images were given").
ImagePrompt build_image_prompt(const LoadedModel& lm, const ImageEncoder& enc, const std::string& text,
                               const std::vector<vision::RgbImage>& images, bool no_bos,
                               bool pan_and_scan = false);

/// The starts of the placeholder runs of `ids`, which must be exactly counts.size() runs of
/// counts[k] placeholder ids each. Throws eg::Error otherwise (typed placeholder text, a marker
/// the template dropped, ...).
std::vector<int> image_placeholder_runs(const ImageEncoder& enc, const std::vector<int32_t>& ids,
                                        const std::vector<int>& counts);

/// The processor's expansion inside a rendered chat prompt: every image marker of `text` outside
/// the `protect` ranges (message contents: marker text a user typed stays text) is replaced by
/// expanded_marker(counts[k], crops[k]) (crops null: 0), in order; `protect` and `*cut` (when
/// given) are shifted to match.
/// Returns the end of the last expansion in the new text. Throws eg::Error when the number of
/// markers is not counts.size() ("the chat template wrote 1 image marker(s) <|image|> for 2
/// image(s)").
size_t expand_rendered_markers(const ImageEncoder& enc, std::string& text,
                               std::vector<std::pair<size_t, size_t>>& protect, const std::vector<int>& counts,
                               size_t* cut = nullptr, const std::vector<int>* crops = nullptr);

/// One image through the processor and tower, as a SessionImage with a fresh id; with
/// pan-and-scan on (`pan_and_scan` or the config) its crops too (SessionImage::crops, each with a
/// fresh id). Throws eg::Error.
std::shared_ptr<SessionImage> encode_session_image(const ImageEncoder& enc, const vision::RgbImage& img,
                                                   int hidden_size, bool pan_and_scan = false);

/// Number of non-overlapping occurrences of `marker` in `text`.
int count_markers(const std::string& text, const std::string& marker);

}  // namespace eg
