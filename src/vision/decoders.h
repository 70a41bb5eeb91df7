// The per-format decoders behind decode_image (image.h). Internal to src/vision.
// Each checks the header's size with check_image_size before decoding pixels and throws
// eg::Error naming `origin` on any failure.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "vision/image.h"

namespace eg::vision::detail {

/// libjpeg-turbo, output RGB (grey replicated), EXIF orientation applied. jpeg_decode.cpp.
RgbImage decode_jpeg(const uint8_t* data, size_t n, const std::string& origin);
/// stb_image: PNG, GIF (first frame), BMP; channels converted as image_from_pixels. image.cpp.
RgbImage decode_stb(const uint8_t* data, size_t n, const std::string& origin);
/// libwebp, alpha dropped. image.cpp.
RgbImage decode_webp(const uint8_t* data, size_t n, const std::string& origin);

}  // namespace eg::vision::detail
