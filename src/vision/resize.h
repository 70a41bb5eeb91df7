// Antialiased image resize exactly as torchvision's CPU path for uint8 images:
// `tvF.resize(uint8 CHW tensor, [H, W], BILINEAR | BICUBIC, antialias=True)` → ATen
// `_upsample_{bilinear,bicubic}2d_aa` on uint8 (aten/src/ATen/native/cpu/UpSampleKernel.cpp,
// read to understand; not copied). This is what the Hugging Face image processors of transformers
// v5 run by default (the torchvision backend; gemma-multimodal.md §0.4, §1.2, §2.2).
//
// Per axis: PIL-style support (filter width × scale when downscaling), weights computed in double
// at the output sample centres, normalised, then rounded to int16 with one fixed-point precision
// for the whole axis (the largest that keeps the largest weight below 2^15). Width first, then
// height (an axis whose size does not change is skipped); each pass accumulates integers,
// adds half an LSB, shifts and clamps to [0, 255], storing uint8 in between.
// Filters: bilinear = triangle; bicubic = Keys cubic with a = -0.5 (as PIL).
#pragma once
#include "vision/image.h"

namespace eg::vision {

enum class ResizeFilter { Bilinear, Bicubic };

/// Resizes to out_w × out_h (both > 0; throws eg::Error otherwise). A same-size resize returns a
/// copy (torch skips both passes).
RgbImage resize_image(const RgbImage& in, int out_w, int out_h, ResizeFilter filter);

}  // namespace eg::vision
