// Image decoding entry points, stb_image / libwebp decoders, RGB conversion and EXIF orientation
// (image.h). JPEG is in jpeg_decode.cpp.
#include "vision/image.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include <stb_image.h>  // Debian libstb: the implementation is in libstb.so
#include <webp/decode.h>

#include "core/error.h"
#include "core/file_util.h"
#include "vision/decoders.h"

namespace eg::vision {

std::string image_size_problem(int64_t w, int64_t h) {
  if (w <= 0 || h <= 0)
    return "image has size " + std::to_string(w) + "x" + std::to_string(h) + " (no pixels)";
  if (w > kMaxImageSide || h > kMaxImageSide || w * h > kMaxImagePixels)
    return "image of " + std::to_string(w) + "x" + std::to_string(h) +
           " pixels is too large (limit: " + std::to_string(kMaxImagePixels >> 20) + " Mpixels, " +
           std::to_string(kMaxImageSide) + " per side)";
  return "";
}

void check_image_size(int64_t w, int64_t h, const std::string& origin) {
  const std::string p = image_size_problem(w, h);
  if (!p.empty()) throw Error(origin + ": " + p);
}

ImageFormat sniff_image_format(const uint8_t* d, size_t n) {
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return ImageFormat::Jpeg;
  if (n >= 8 && std::memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::Png;
  if (n >= 6 && (std::memcmp(d, "GIF87a", 6) == 0 || std::memcmp(d, "GIF89a", 6) == 0)) return ImageFormat::Gif;
  if (n >= 2 && d[0] == 'B' && d[1] == 'M') return ImageFormat::Bmp;
  if (n >= 12 && std::memcmp(d, "RIFF", 4) == 0 && std::memcmp(d + 8, "WEBP", 4) == 0) return ImageFormat::Webp;
  return ImageFormat::Unknown;
}

const char* image_format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::Jpeg: return "JPEG";
    case ImageFormat::Png: return "PNG";
    case ImageFormat::Gif: return "GIF";
    case ImageFormat::Bmp: return "BMP";
    case ImageFormat::Webp: return "WebP";
    case ImageFormat::Unknown: break;
  }
  return "unknown";
}

RgbImage image_from_pixels(const uint8_t* px, int w, int h, int channels) {
  check_image_size(w, h, "image");
  if (channels < 1 || channels > 4) throw Error("image: " + std::to_string(channels) + " channels (expected 1 to 4)");
  if (!px) throw Error("image: no pixel data");
  RgbImage img;
  img.width = w;
  img.height = h;
  const size_t n = static_cast<size_t>(w) * h;
  img.rgb.resize(n * 3);
  uint8_t* o = img.rgb.data();
  for (size_t i = 0; i < n; ++i, o += 3) {
    const uint8_t* p = px + i * channels;
    if (channels <= 2) o[0] = o[1] = o[2] = p[0];  // grey (+ alpha dropped)
    else { o[0] = p[0]; o[1] = p[1]; o[2] = p[2]; }  // RGB (+ alpha dropped)
  }
  return img;
}

namespace detail {

RgbImage decode_stb(const uint8_t* data, size_t n, const std::string& origin) {
  if (n > static_cast<size_t>(std::numeric_limits<int>::max())) throw Error(origin + ": file too large");
  int w = 0, h = 0, comp = 0;
  if (!stbi_info_from_memory(data, static_cast<int>(n), &w, &h, &comp))
    throw Error(origin + ": cannot decode image: " + std::string(stbi_failure_reason() ? stbi_failure_reason() : "corrupt header"));
  check_image_size(w, h, origin);  // before any pixel is decoded
  std::unique_ptr<stbi_uc, void (*)(void*)> px(stbi_load_from_memory(data, static_cast<int>(n), &w, &h, &comp, 0),
                                               stbi_image_free);
  if (!px)
    throw Error(origin + ": cannot decode image: " + std::string(stbi_failure_reason() ? stbi_failure_reason() : "corrupt data"));
  return image_from_pixels(px.get(), w, h, comp);
}

RgbImage decode_webp(const uint8_t* data, size_t n, const std::string& origin) {
  WebPBitstreamFeatures f;
  if (WebPGetFeatures(data, n, &f) != VP8_STATUS_OK) throw Error(origin + ": cannot decode WebP: corrupt header");
  check_image_size(f.width, f.height, origin);
  if (f.has_animation) throw Error(origin + ": animated WebP images are not supported");
  int w = 0, h = 0;
  std::unique_ptr<uint8_t, void (*)(void*)> px(WebPDecodeRGB(data, n, &w, &h), WebPFree);
  if (!px) throw Error(origin + ": cannot decode WebP: corrupt or truncated data");
  return image_from_pixels(px.get(), w, h, 3);
}

}  // namespace detail

RgbImage decode_image(const uint8_t* data, size_t n, const std::string& origin) {
  if (!data || n == 0) throw Error(origin + ": empty image data");
  switch (sniff_image_format(data, n)) {
    case ImageFormat::Jpeg: return detail::decode_jpeg(data, n, origin);
    case ImageFormat::Png:
    case ImageFormat::Gif:
    case ImageFormat::Bmp: return detail::decode_stb(data, n, origin);
    case ImageFormat::Webp: return detail::decode_webp(data, n, origin);
    case ImageFormat::Unknown: break;
  }
  throw Error(origin + ": not an image in a supported format (JPEG, PNG, WebP, GIF, BMP)");
}

RgbImage load_image_file(const std::string& path) {
  const std::string bytes = read_file(path);
  return decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

// --- EXIF orientation --------------------------------------------------------------------------

int exif_orientation(const uint8_t* t, size_t n) {
  if (!t || n < 8) return 1;
  const bool le = t[0] == 'I' && t[1] == 'I';
  if (!le && !(t[0] == 'M' && t[1] == 'M')) return 1;
  auto u16 = [&](size_t o) -> uint32_t { return le ? t[o] | (t[o + 1] << 8) : (t[o] << 8) | t[o + 1]; };
  auto u32 = [&](size_t o) -> uint32_t {
    return le ? t[o] | (t[o + 1] << 8) | (t[o + 2] << 16) | (uint32_t{t[o + 3]} << 24)
              : (uint32_t{t[o]} << 24) | (t[o + 1] << 16) | (t[o + 2] << 8) | t[o + 3];
  };
  if (u16(2) != 42) return 1;
  const size_t ifd = u32(4);
  if (ifd > n || n - ifd < 2) return 1;
  const size_t count = u16(ifd);
  for (size_t i = 0; i < count; ++i) {
    const size_t e = ifd + 2 + i * 12;
    if (e > n || n - e < 12) return 1;
    if (u16(e) == 0x0112) {
      const uint32_t type = u16(e + 2);
      const uint32_t v = type == 3 ? u16(e + 8) : type == 4 ? u32(e + 8) : 1;
      return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
    }
  }
  return 1;
}

RgbImage apply_exif_orientation(RgbImage in, int o) {
  if (o < 2 || o > 8) return in;
  const int W = in.width, H = in.height;
  const bool swap = o >= 5;  // 5..8 exchange width and height
  RgbImage out;
  out.width = swap ? H : W;
  out.height = swap ? W : H;
  out.rgb.resize(in.rgb.size());
  for (int y = 0; y < out.height; ++y)
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;  // source pixel of output (x, y)
      switch (o) {
        case 2: sx = W - 1 - x; break;                   // mirror left-right
        case 3: sx = W - 1 - x; sy = H - 1 - y; break;   // rotate 180
        case 4: sy = H - 1 - y; break;                   // flip top-bottom
        case 5: sx = y; sy = x; break;                   // transpose
        case 6: sx = y; sy = H - 1 - x; break;           // rotate 90 clockwise
        case 7: sx = W - 1 - y; sy = H - 1 - x; break;   // transverse
        case 8: sx = W - 1 - y; sy = x; break;           // rotate 90 counter-clockwise
      }
      std::memcpy(&out.rgb[(static_cast<size_t>(y) * out.width + x) * 3],
                  &in.rgb[(static_cast<size_t>(sy) * W + sx) * 3], 3);
    }
  return out;
}

}  // namespace eg::vision
