// The Hugging Face image processors of Gemma 3 and Gemma 4 (transformers 5.17, torchvision
// backend, the default): decoded RGB → the tower's pixel input. gemma-multimodal.md §1.2, §2.2;
// transformers image_processing_gemma3.py / image_processing_gemma4.py (read, not copied).
// Checked bit-exact against the fixtures' resized images (tests/vision_preprocess_test.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "vision/image.h"
#include "vision/resize.h"

namespace eg::vision {

/// processor_config.json's "image_processor" block (or preprocessor_config.json), with the
/// processor defaults for what it leaves out.
struct ImageProcessorConfig {
  bool gemma4 = false;  // Gemma4ImageProcessor (variable resolution) vs Gemma3ImageProcessor
  ResizeFilter filter = ResizeFilter::Bilinear;  // resample 2 = bilinear, 3 = bicubic
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.5f, 0.5f, 0.5f};
  // Gemma 3: fixed output size (size.height × size.width).
  int height = 896, width = 896;
  // Gemma 4: patches, pooling, soft-token budget.
  int patch_size = 16, pooling_kernel = 3, max_soft_tokens = 280;
  /// Gemma 3 soft tokens per image ("image_seq_length"); Gemma 4: decided per image.
  int image_seq_length = 256;
  /// Gemma 3 pan-and-scan (§1.2.1) as the config's do_pan_and_scan / pan_and_scan_* keys give it
  /// (else Gemma3Processor's defaults): what Gemma3ImageProcessor used alone does. The engine
  /// follows Gemma3Processor instead, whose call defaults win over these keys: off unless the
  /// caller turns it on, then always 256 / 4 / 1.2 (ImageEncoder::crops_for).
  bool do_pan_and_scan = false;
  int pan_and_scan_min_crop_size = 256;
  int pan_and_scan_max_num_crops = 4;
  double pan_and_scan_min_ratio_to_activate = 1.2;
};

/// One pan-and-scan crop of the original image: columns [x, x + w), rows [y, y + h).
struct CropBox {
  int x = 0, y = 0, w = 0, h = 0;
};

/// Gemma3ImageProcessor.pan_and_scan's crops of an image of height × width pixels (transformers
/// image_processing_gemma3.py, read, not copied), in row-major order; empty when it does not
/// activate (aspect ratio below pan_and_scan_min_ratio_to_activate, or a crop side below
/// pan_and_scan_min_crop_size). Landscape/square: n = clamp(min(⌊w/h + 0.5⌋, ⌊w/min_crop⌋), 2,
/// max_num_crops) columns of ⌈w/n⌉ pixels (the last one clamped at the border); portrait: the same
/// with rows. Throws eg::Error when a crop would be empty (settings so small that HF would fail).
std::vector<CropBox> pan_and_scan_crops(int height, int width, const ImageProcessorConfig& cfg);

/// The pixels of `box` (inside img).
RgbImage crop_image(const RgbImage& img, const CropBox& box);

/// Reads <dir>/processor_config.json ({"image_processor": {...}, "image_seq_length": N}) or
/// <dir>/preprocessor_config.json (flat). Neither present: the released defaults of the family.
/// Throws eg::Error on a malformed file or an unsupported value (resample other than 2/3, Gemma 4
/// max_soft_tokens not in {70, 140, 280, 560, 1120}).
ImageProcessorConfig load_image_processor_config(const std::string& dir, bool gemma4);

/// Gemma 3: resize to height × width (aspect ratio not kept), then
/// p = (float(u8) − mean/rescale) / (std/rescale) (the fused float32 form the torchvision backend
/// uses; without normalisation p = float(u8)·float(rescale)). Returns pixel_values [3, H, W]
/// (channel-first). Pan-and-scan crops are processed the same way, each on its own (crop_image).
std::vector<float> gemma3_pixel_values(const RgbImage& img, const ImageProcessorConfig& cfg);

/// Gemma 4 target size (§2.2 step 2): aspect-preserving within max_soft_tokens·k² patches, sides
/// multiples of k·patch. Throws eg::Error when it would be 0 × 0 (HF raises too).
void gemma4_target_size(int height, int width, const ImageProcessorConfig& cfg, int& out_h, int& out_w);

/// Gemma 4 processor output for one image, without the padding rows (the tower ignores them).
struct Gemma4Patches {
  int resized_h = 0, resized_w = 0;
  int grid_h = 0, grid_w = 0;     // patches per column / row
  int num_soft_tokens = 0;        // (grid_h / k) · (grid_w / k)
  std::vector<float> pixels;      // [grid_h·grid_w, patch²·3], (y, x, channel) with channel fastest
  std::vector<int32_t> positions; // [grid_h·grid_w, 2]: (x = column, y = row)
};
/// Resize (bicubic, antialiased), rescale float32(u8)·float32(rescale) (no normalisation in the
/// released config), patchify in row-major patch order.
Gemma4Patches gemma4_patches(const RgbImage& img, const ImageProcessorConfig& cfg);

}  // namespace eg::vision
