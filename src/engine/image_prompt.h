// Images in a prompt (gemma-multimodal.md §0.3, §1.6): the model's vision tower and image
// processor, the processor's placeholder expansion, and the soft-token rows bound to the prompt's
// placeholder positions for Model::forward (EmbedSpan).
//
// Gemma 3: every image marker "<start_of_image>" of the (rendered) prompt text becomes
// "\n\n<start_of_image>" + N × "<image_soft_token>" + "<end_of_image>\n\n" before tokenisation
// (exactly what Gemma3Processor does, so "\n" + "\n\n" merge into one token as in transformers);
// the N placeholder rows of image k are its soft tokens, bidirectional within the image during
// prefill (token_type_ids). Gemma 4: not yet (a clear error).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/loaded_model.h"
#include "model/model.h"
#include "vision/image.h"
#include "vision/preprocess.h"
#include "vision/siglip.h"
#include "vision/vision_config.h"

namespace eg {

class ImageEncoder {
 public:
  /// The tower and processor of the checkpoint folder `dir` that `lm` was loaded from (its tensors
  /// are `lm`'s, which must outlive the encoder). Throws eg::Error "this model has no vision
  /// tower" for a text-only checkpoint or a GGUF file (mmproj files are not supported yet), and
  /// for a tower this build cannot run yet (Gemma 4).
  static std::unique_ptr<ImageEncoder> load(const LoadedModel& lm, const std::string& dir);

  /// Soft tokens [n, H] of one image (processor + tower); n = tokens_per_image().
  std::vector<float> encode(const vision::RgbImage& img) const;
  int tokens_per_image() const { return vc_.mm_tokens_per_image; }
  const vision::VisionConfig& config() const { return vc_; }
  /// The image marker text of the chat template / prompt ("<start_of_image>").
  const std::string& marker() const { return boi_; }
  /// The processor's replacement of one marker.
  std::string expanded_marker() const;

 private:
  vision::VisionConfig vc_;
  vision::ImageProcessorConfig pc_;
  std::unique_ptr<vision::SiglipTower> tower_;
  std::string boi_, eoi_, image_;
};

/// A tokenised prompt with its images' soft tokens bound to the placeholder positions.
struct ImagePrompt {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> soft;  // per image, [n, H]
  std::vector<EmbedSpan> spans;          // one per image, rows pointing into `soft`
};

/// `text` must hold exactly one image marker per image, in order (the chat template writes one
/// per image item). Expands them, tokenises (LoadedModel::encode_prompt), encodes every image
/// and checks that each placeholder run has exactly tokens_per_image() ids. Throws eg::Error
/// when the counts disagree ("the prompt has 1 image marker(s) but 2 images were given").
ImagePrompt build_image_prompt(const LoadedModel& lm, const ImageEncoder& enc, const std::string& text,
                               const std::vector<vision::RgbImage>& images, bool no_bos);

/// Number of non-overlapping occurrences of `marker` in `text`.
int count_markers(const std::string& text, const std::string& marker);

}  // namespace eg
