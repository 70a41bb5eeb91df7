// libFuzzer target: image decoding and preprocessing (src/vision: format sniffing, libjpeg-turbo
// with EXIF orientation, stb_image for PNG/GIF/BMP, libwebp), then both families' preprocessing
// (Gemma 3 fixed-size resize + normalise, Gemma 4 variable-resolution patches) on what decoded.
// docs/reliability.md. Built by scripts/fuzz.
//
// Checks: decode_image throws nothing but eg::Error; a decoded image has the size it claims and at
// most kMaxImagePixels; preprocessing of an image up to 1 Mi pixels gives the documented sizes and
// finite values (larger ones are only decoded, to keep executions fast).
// Seeds (EG_FUZZ_WRITE_SEEDS): the fixtures' PNG and JPEG inputs, and tiny GIF, BMP and WebP
// images encoded here (1×1 .. 3×2) so every decoder starts from a valid file.
#include <webp/encode.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_util.h"
#include "vision/image.h"
#include "vision/preprocess.h"

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) egfuzz::fail("image_fuzz", what);
}

const eg::vision::ImageProcessorConfig& config(bool gemma4) {
  static const eg::vision::ImageProcessorConfig g3 =
      eg::vision::load_image_processor_config(egfuzz::shared_dir() + "/models/tiny-gemma3-vision", false);
  static const eg::vision::ImageProcessorConfig g4 =
      eg::vision::load_image_processor_config(egfuzz::shared_dir() + "/models/tiny-gemma4-mm", true);
  return gemma4 ? g4 : g3;
}

// A 2×1 24-bit BMP (BITMAPINFOHEADER, rows padded to 4 bytes, bottom-up).
std::string tiny_bmp() {
  std::string b;
  auto u16 = [&](uint16_t v) { b.push_back(char(v & 255)); b.push_back(char(v >> 8)); };
  auto u32 = [&](uint32_t v) { for (int i = 0; i < 4; ++i) b.push_back(char((v >> (8 * i)) & 255)); };
  b += "BM"; u32(14 + 40 + 8); u32(0); u32(14 + 40);
  u32(40); u32(2); u32(1); u16(1); u16(24); u32(0); u32(8); u32(2835); u32(2835); u32(0); u32(0);
  const unsigned char px[8] = {0, 0, 255, 0, 255, 0, 0, 0};  // red, green (BGR), 2 pad bytes
  b.append(reinterpret_cast<const char*>(px), 8);
  return b;
}

// A 1×1 GIF89a (2-colour palette, LZW minimum code size 2: clear, index 1, end).
std::string tiny_gif() {
  const unsigned char g[] = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0x80, 0, 0,
                             0, 0, 0, 255, 255, 255,                 // palette: black, white
                             0x2C, 0, 0, 0, 0, 1, 0, 1, 0, 0,        // image descriptor
                             2, 2, 0x4C, 0x01, 0, 0x3B};             // LZW data, trailer
  return std::string(reinterpret_cast<const char*>(g), sizeof g);
}

std::string tiny_webp(bool lossless) {
  const uint8_t rgb[18] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30, 200, 100, 50, 0, 0, 0};
  uint8_t* out = nullptr;
  const size_t n = lossless ? WebPEncodeLosslessRGB(rgb, 3, 2, 9, &out) : WebPEncodeRGB(rgb, 3, 2, 9, 80.0f, &out);
  std::string s(reinterpret_cast<const char*>(out), n);
  WebPFree(out);
  return s;
}

void write_seeds(const std::string& dir) {
  const std::string in = egfuzz::shared_dir() + "/models/tiny-gemma4-mm/inputs/";
  for (const char* f : {"img_checker_300x800.png", "img_rgba_256x192.png", "img_gradient_224x224.png",
                        "img_shapes_640x480.jpg"})
    egfuzz::write_seed(dir, f, egfuzz::read_text(in + f));
  egfuzz::write_seed(dir, "tiny.bmp", tiny_bmp());
  egfuzz::write_seed(dir, "tiny.gif", tiny_gif());
  egfuzz::write_seed(dir, "tiny-lossy.webp", tiny_webp(false));
  egfuzz::write_seed(dir, "tiny-lossless.webp", tiny_webp(true));
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  egfuzz::maybe_write_seeds(write_seeds);
  (void)config(false);
  (void)config(true);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  eg::vision::RgbImage img;
  try {
    img = eg::vision::decode_image(data, size, "fuzz input");
  } catch (const eg::Error&) {
    return 0;
  }
  check(img.width > 0 && img.height > 0, "decoded image with a zero side");
  check(int64_t{img.width} * img.height <= eg::vision::kMaxImagePixels, "decoded image above the pixel limit");
  check(img.rgb.size() == size_t(img.width) * img.height * 3, "RGB buffer size differs from width·height·3");
  if (int64_t{img.width} * img.height > (int64_t{1} << 20)) return 0;
  try {
    const auto& c3 = config(false);
    const std::vector<float> v = eg::vision::gemma3_pixel_values(img, c3);
    check(v.size() == size_t(3) * c3.height * c3.width, "Gemma 3 pixel values of the wrong size");
    check(all_finite(v), "Gemma 3 pixel values not finite");
    const auto& c4 = config(true);
    const eg::vision::Gemma4Patches p = eg::vision::gemma4_patches(img, c4);
    const size_t patches = size_t(p.grid_h) * p.grid_w;
    check(p.pixels.size() == patches * c4.patch_size * c4.patch_size * 3, "Gemma 4 patch pixels of the wrong size");
    check(p.positions.size() == patches * 2, "Gemma 4 positions of the wrong size");
    check(p.num_soft_tokens > 0 && p.num_soft_tokens <= c4.max_soft_tokens, "Gemma 4 soft tokens outside the budget");
    check(all_finite(p.pixels), "Gemma 4 patch values not finite");
  } catch (const eg::Error&) {
    // An image the processor refuses (e.g. too thin to resize) is a clear error, not a bug.
  }
  return 0;
}
