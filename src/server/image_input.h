// Images of OpenAI chat requests: `image_url` content parts whose url is a data: URL
// ("data:image/png;base64,...") are decoded here; the server never fetches anything (it is
// offline by design), so an http(s) URL is a 400 saying so. Limits (defaults below): at most
// kMaxImagesPerRequest images per request and kMaxImageBytes decoded bytes per image; the
// decoder's own limits (64 Mpixels, 65536 a side, checked before decoding) also apply.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "vision/image.h"

namespace eg::server {

inline constexpr int kMaxImagesPerRequest = 8;
inline constexpr size_t kMaxImageBytes = size_t{20} << 20;  // 20 MiB of encoded image data

/// The MIME types accepted in data: URLs (the format is then sniffed from the bytes).
bool supported_image_mime(const std::string& mime);

/// Standard base64 (RFC 4648, '+' '/', optional '=' padding; no whitespace) → bytes. Throws
/// eg::Error on any other character, bad padding, or output above max_bytes (checked from the
/// input length before decoding).
std::vector<uint8_t> base64_decode(const std::string& s, size_t max_bytes);

/// An image_url's url → the decoded image. Throws ApiError(400, param) for a remote URL (http,
/// https: "the server is offline by design"), any other scheme, a data: URL that is not base64
/// or not one of the supported image types, data above max_bytes, and an image that does not
/// decode (the decoder's message).
vision::RgbImage image_from_url(const std::string& url, const std::string& param, size_t max_bytes = kMaxImageBytes);

}  // namespace eg::server
