// Encoded media as the prompt carries them: the soft tokens of one image (or one audio segment)
// and where they go in a token sequence (shared by Session and the server's scheduler).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace eg {

/// An image encoded by the vision tower once, shared by every prompt that shows it.
struct SessionImage {
  uint64_t id = 0;          // unique in the process: KV reuse compares it per position
  int n = 0;                // soft tokens
  std::vector<float> soft;  // [n, H] f32 (the text model's hidden size)
  bool bidirectional = false;  // Gemma 3: the n rows see each other during prefill
  bool audio = false;          // an audio block (one ≤ 30 s segment of a clip), not an image
  double encode_ms = 0;        // time the processor / feature extractor and the tower took for it
  /// Gemma 3 pan-and-scan: the crops of this image, each its own block of soft tokens after the
  /// original's in the prompt (the processor's "Here is the original image … and here are some
  /// crops …" text); empty otherwise. encode_ms includes them.
  std::vector<std::shared_ptr<const SessionImage>> crops;
};

/// The soft-token blocks `items` put in a prompt, in order: each item, then its crops.
std::vector<std::shared_ptr<const SessionImage>> media_blocks(
    const std::vector<std::shared_ptr<const SessionImage>>& items);

/// Soft tokens of an item together with its crops.
int soft_tokens_with_crops(const SessionImage& im);

/// The image whose n soft tokens replace the placeholder ids at [begin, begin + n) of a prompt.
struct MediaRun {
  int begin = 0;
  std::shared_ptr<const SessionImage> image;
};

/// A fresh SessionImage::id.
uint64_t next_image_id();

}  // namespace eg
