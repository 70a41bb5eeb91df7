// Decoded images: 8-bit RGB, as the Hugging Face image processors see them after
// `do_convert_rgb` (PIL `Image.convert("RGB")`).
//
// Formats (sniffed from the first bytes, never from the file name):
//   JPEG  libjpeg-turbo (Debian libjpeg62-turbo), islow IDCT + fancy upsampling: bit-identical to
//         Pillow's decode (Pillow uses libjpeg-turbo with these defaults). stb_image's own JPEG
//         decoder differs from Pillow by up to 3 steps, so it is not used for JPEG. EXIF
//         orientation (APP1 tag 0x0112) is applied, as transformers' load_image does
//         (PIL.ImageOps.exif_transpose).
//   PNG, GIF (first frame), BMP   stb_image (Debian libstb).
//   WebP  libwebp (still image; an animation's first frame).
// Channel conversion (= PIL convert("RGB"), checked bit-exact on the fixtures' RGBA and L images):
// alpha is dropped, never composited; grey is replicated to R = G = B.
//
// Bad input never crashes: an unknown format, a truncated or corrupt file, a zero-size image or
// one above kMaxImagePixels (checked from the header, before any pixel is decoded) throws
// eg::Error naming the origin (file path or "image").
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace eg::vision {

/// The largest image accepted: width·height ≤ 64 Mi pixels (192 MiB as RGB). Larger headers are
/// refused before decoding (decompression bombs).
inline constexpr int64_t kMaxImagePixels = int64_t{64} << 20;
/// Either side at most this many pixels.
inline constexpr int kMaxImageSide = 1 << 16;

/// An 8-bit RGB image, row-major, rgb[(y·width + x)·3 + c].
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;
};

enum class ImageFormat { Unknown, Jpeg, Png, Gif, Bmp, Webp };
/// The format by its magic bytes.
ImageFormat sniff_image_format(const uint8_t* data, size_t n);
const char* image_format_name(ImageFormat f);

/// Decodes an encoded image (any format above). `origin` names it in errors. Throws eg::Error.
RgbImage decode_image(const uint8_t* data, size_t n, const std::string& origin = "image");
/// Reads and decodes a file. Throws eg::Error ("cannot read PATH", or a decode error naming PATH).
RgbImage load_image_file(const std::string& path);

/// From raw pixels: channels 1 (grey), 2 (grey + alpha), 3 (RGB) or 4 (RGBA), rows packed
/// (stride = width·channels). Converted as above. Throws eg::Error on bad sizes / channels.
RgbImage image_from_pixels(const uint8_t* pixels, int width, int height, int channels);

/// EXIF orientation values 1..8 (TIFF tag 0x0112): returns the image as it should be displayed
/// (2 = mirror, 3 = rotate 180, 4 = flip, 5 = transpose, 6 = rotate 90 clockwise, 7 = transverse,
/// 8 = rotate 90 counter-clockwise; as PIL.ImageOps.exif_transpose). Other values: unchanged.
RgbImage apply_exif_orientation(RgbImage img, int orientation);

/// The orientation tag of an EXIF block (the APP1 payload after "Exif\0\0": a TIFF header), or 1
/// when absent or malformed (never throws: a bad EXIF block does not make the image unusable).
int exif_orientation(const uint8_t* tiff, size_t n);

/// "" when 0 < w, h ≤ kMaxImageSide and w·h ≤ kMaxImagePixels, else what is wrong.
std::string image_size_problem(int64_t width, int64_t height);
/// Throws eg::Error unless 0 < w, h ≤ kMaxImageSide and w·h ≤ kMaxImagePixels.
void check_image_size(int64_t width, int64_t height, const std::string& origin);

}  // namespace eg::vision
