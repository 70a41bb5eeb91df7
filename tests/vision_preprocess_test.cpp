// Image decoding and the Gemma 3 / Gemma 4 image processors against transformers 5.17 (the
// fixtures' ref_images: the processor's resized uint8 images, recovered from pixel_values and
// verified bit-exact by the fixture generator; and Pillow's decode of the JPEG). Bad input: a
// clear eg::Error for truncated, corrupt, zero-size and oversized images.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include <webp/encode.h>

#include "core/error.h"
#include "vision/image.h"
#include "vision/preprocess.h"
#include "vision/resize.h"
#include "vision_test_util.h"

using namespace eg::vision;
using egtest::read_file;

namespace {

RgbImage load(const std::string& path) { return load_image_file(path); }

int max_step(const RgbImage& a, const RgbImage& b) {
  int m = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) m = std::max(m, std::abs(int(a.rgb[i]) - int(b.rgb[i])));
  return m;
}

RgbImage decode(const std::string& bytes) {
  return decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "test image");
}

void expect_error(const std::string& bytes, const std::string& needle) {
  try {
    decode(bytes);
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(VisionDecode, JpegEqualsPillowDecode) {
  const std::string d = egtest::g3v_dir();
  const RgbImage ours = load(d + "/inputs/img_shapes_640x480.jpg");
  const RgbImage pil = load(d + "/ref_images/img_shapes_640x480.decoded_pil.png");
  ASSERT_EQ(ours.width, 640);
  ASSERT_EQ(ours.height, 480);
  ASSERT_EQ(pil.width, 640);
  EXPECT_EQ(max_step(ours, pil), 0);
}

TEST(VisionDecode, AlphaDroppedGreyReplicated) {
  const std::string d = egtest::g3v_dir();
  const RgbImage g = load(d + "/inputs/img_gray_320x240.png");
  ASSERT_EQ(g.width, 320);
  ASSERT_EQ(g.height, 240);
  bool varied = false;
  for (size_t i = 0; i < g.rgb.size(); i += 3) {
    ASSERT_EQ(g.rgb[i], g.rgb[i + 1]);
    ASSERT_EQ(g.rgb[i], g.rgb[i + 2]);
    varied |= g.rgb[i] != g.rgb[0];
  }
  EXPECT_TRUE(varied);
  // RGBA: raw pixels from a 4-channel buffer keep their RGB whatever the alpha (not composited).
  const uint8_t px[8] = {10, 20, 30, 0, 200, 100, 50, 128};
  const RgbImage r = image_from_pixels(px, 2, 1, 4);
  EXPECT_EQ(std::vector<uint8_t>(r.rgb.begin(), r.rgb.end()), (std::vector<uint8_t>{10, 20, 30, 200, 100, 50}));
}

TEST(VisionDecode, GifFirstFrameAndBmp) {
  // 2x1 GIF, 4-colour global palette (red, green, ...), two frames: (red, green) then (green, red).
  const unsigned char gif[] = {'G', 'I', 'F', '8', '9', 'a', 2, 0, 1, 0, 0x81, 0, 0,
                               255, 0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0,
                               0x2C, 0, 0, 0, 0, 2, 0, 1, 0, 0, 2, 2, 0x44, 0x0A, 0,
                               0x2C, 0, 0, 0, 0, 2, 0, 1, 0, 0, 2, 2, 0x0C, 0x0A, 0, 0x3B};
  const RgbImage g = decode(std::string(reinterpret_cast<const char*>(gif), sizeof gif));
  ASSERT_EQ(g.width, 2);
  ASSERT_EQ(g.height, 1);
  EXPECT_EQ(g.rgb, (std::vector<uint8_t>{255, 0, 0, 0, 255, 0}));
  // 2x1 24-bit BMP (bottom-up, BGR, rows padded to 4 bytes): red, blue.
  std::string bmp = "BM";
  auto u32 = [&](uint32_t v) { for (int i = 0; i < 4; ++i) bmp.push_back(char((v >> (8 * i)) & 255)); };
  auto u16 = [&](uint16_t v) { bmp.push_back(char(v & 255)); bmp.push_back(char(v >> 8)); };
  u32(54 + 8); u32(0); u32(54);
  u32(40); u32(2); u32(1); u16(1); u16(24); u32(0); u32(8); u32(2835); u32(2835); u32(0); u32(0);
  const unsigned char row[8] = {0, 0, 255, 255, 0, 0, 0, 0};
  bmp.append(reinterpret_cast<const char*>(row), 8);
  const RgbImage b = decode(bmp);
  EXPECT_EQ(b.rgb, (std::vector<uint8_t>{255, 0, 0, 0, 0, 255}));
}

TEST(VisionDecode, WebpLosslessRoundTrip) {
  const RgbImage src = load(egtest::g3v_dir() + "/inputs/img_checker_300x800.png");
  uint8_t* out = nullptr;
  const size_t n = WebPEncodeLosslessRGB(src.rgb.data(), src.width, src.height, src.width * 3, &out);
  ASSERT_GT(n, 0u);
  const std::string bytes(reinterpret_cast<const char*>(out), n);
  WebPFree(out);
  const RgbImage w = decode(bytes);
  ASSERT_EQ(w.width, src.width);
  ASSERT_EQ(w.height, src.height);
  EXPECT_EQ(w.rgb, src.rgb);
  expect_error(bytes.substr(0, bytes.size() / 2), "WebP");
}

TEST(VisionDecode, ExifOrientationRotates) {
  const std::string d = egtest::g3v_dir();
  const std::string jpg = read_file(d + "/inputs/img_shapes_640x480.jpg");
  const RgbImage plain = decode(jpg);
  for (int o : {3, 6, 8}) {
    // APP1 "Exif\0\0" + little-endian TIFF with one IFD entry: Orientation (0x0112) SHORT = o.
    const unsigned char tiff[] = {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0,
                                  0x12, 0x01, 3, 0, 1, 0, 0, 0, (unsigned char)o, 0, 0, 0, 0, 0, 0, 0};
    std::string app1 = "\xFF\xE1";
    app1.push_back(char((sizeof tiff + 2) >> 8));
    app1.push_back(char((sizeof tiff + 2) & 255));
    app1.append(reinterpret_cast<const char*>(tiff), sizeof tiff);
    const RgbImage r = decode(jpg.substr(0, 2) + app1 + jpg.substr(2));
    const bool swap = o != 3;
    ASSERT_EQ(r.width, swap ? plain.height : plain.width) << o;
    ASSERT_EQ(r.height, swap ? plain.width : plain.height) << o;
    // Output (x, y) of each rotation, as displayed: 3 = 180°, 6 = 90° clockwise, 8 = 90° ccw.
    auto src_px = [&](int x, int y) {
      int sx = x, sy = y;
      if (o == 3) { sx = plain.width - 1 - x; sy = plain.height - 1 - y; }
      if (o == 6) { sx = y; sy = plain.height - 1 - x; }
      if (o == 8) { sx = plain.width - 1 - y; sy = x; }
      return &plain.rgb[(size_t(sy) * plain.width + sx) * 3];
    };
    for (int y = 0; y < r.height; y += 7)
      for (int x = 0; x < r.width; x += 5)
        ASSERT_EQ(std::memcmp(&r.rgb[(size_t(y) * r.width + x) * 3], src_px(x, y), 3), 0) << o << " " << x << "," << y;
  }
  EXPECT_EQ(exif_orientation(nullptr, 0), 1);
  const unsigned char bad[] = {'I', 'I', 42, 0, 0xFF, 0xFF, 0, 0};  // IFD offset past the end
  EXPECT_EQ(exif_orientation(bad, sizeof bad), 1);
}

TEST(VisionDecode, BadInputIsAClearError) {
  const std::string d = egtest::g3v_dir();
  const std::string png = read_file(d + "/inputs/img_gradient_224x224.png");
  const std::string jpg = read_file(d + "/inputs/img_shapes_640x480.jpg");
  expect_error("", "empty");
  expect_error("hello, not an image", "supported format");
  expect_error(png.substr(0, png.size() / 2), "cannot decode");
  expect_error(jpg.substr(0, jpg.size() / 2), "cannot decode JPEG");
  expect_error(jpg.substr(0, 200), "cannot decode JPEG");
  std::string corrupt = png;
  for (size_t i = 100; i < corrupt.size(); i += 3) corrupt[i] = char(corrupt[i] ^ 0x5A);
  expect_error(corrupt, "cannot decode");
  // Zero width (PNG IHDR width at bytes 16..19, big-endian) and a decompression bomb (50000 x
  // 50000 = 2.5 Gpixels): refused from the header, fast.
  std::string zero = png;
  std::memset(&zero[16], 0, 4);
  expect_error(zero, "cannot decode");
  std::string bomb = png;
  const unsigned char big[8] = {0, 0, 0xC3, 0x50, 0, 0, 0xC3, 0x50};
  std::memcpy(&bomb[16], big, 8);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    decode(bomb);
    ADD_FAILURE() << "bomb decoded";
  } catch (const eg::Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.find("too large") != std::string::npos || m.find("cannot decode") != std::string::npos) << m;
  }
  // JPEG bomb: the SOF0 height/width of the fixture JPEG set to 60000 x 60000.
  std::string jbomb = jpg;
  size_t sof = jbomb.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  const unsigned char dims[4] = {0xEA, 0x60, 0xEA, 0x60};
  std::memcpy(&jbomb[sof + 5], dims, 4);
  expect_error(jbomb, "too large");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  EXPECT_THROW(image_from_pixels(nullptr, 0, 0, 3), eg::Error);
  const uint8_t px[3] = {1, 2, 3};
  EXPECT_THROW(image_from_pixels(px, 1, 1, 5), eg::Error);
  EXPECT_THROW(load_image_file(d + "/no_such_file.png"), eg::Error);
}

TEST(VisionPreprocess, Gemma3PixelsBitExact) {
  const std::string d = egtest::g3v_dir();
  const auto ref = egtest::read_json(d + "/reference.json");
  const ImageProcessorConfig cfg = load_image_processor_config(d, false);
  EXPECT_EQ(cfg.height, 224);
  EXPECT_EQ(cfg.image_seq_length, 16);
  int n = 0;
  for (auto it = ref["images"].begin(); it != ref["images"].end(); ++it, ++n) {
    const RgbImage img = load(d + "/" + it.value()["file"].get<std::string>());
    const std::vector<float> pv = gemma3_pixel_values(img, cfg);
    const RgbImage png = load(d + "/" + it.value()["resized_rgb_png"]["file"].get<std::string>());
    ASSERT_EQ(png.width, 224);
    ASSERT_EQ(pv.size(), size_t(3 * 224 * 224));
    size_t bad = 0;
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 224 * 224; ++i) {
        const float want = (static_cast<float>(png.rgb[i * 3 + c]) - 127.5f) / 127.5f;
        bad += pv[c * 224 * 224 + i] != want;
      }
    EXPECT_EQ(bad, 0u) << it.key();
    // The resized uint8 image itself, for a readable failure.
    EXPECT_EQ(max_step(resize_image(img, 224, 224, ResizeFilter::Bilinear), png), 0) << it.key();
  }
  EXPECT_EQ(n, 5);
}

TEST(VisionPreprocess, Gemma4PatchesBitExact) {
  const std::string d = egtest::g4mm_dir();
  const auto ref = egtest::read_json(d + "/reference.json");
  const auto arrays = egtest::read_ref_arrays(d + "/reference_arrays.safetensors");
  const ImageProcessorConfig cfg = load_image_processor_config(d, true);
  EXPECT_EQ(cfg.max_soft_tokens, 280);
  EXPECT_EQ(cfg.filter, ResizeFilter::Bicubic);
  EXPECT_FALSE(cfg.do_normalize);
  int n = 0;
  for (auto it = ref["images"].begin(); it != ref["images"].end(); ++it, ++n) {
    const auto& info = it.value();
    const RgbImage img = load(d + "/" + info["file"].get<std::string>());
    const Gemma4Patches p = gemma4_patches(img, cfg);
    const auto& proc = info["processor"];
    EXPECT_EQ(p.resized_h, proc["resized_hw"][0].get<int>()) << it.key();
    EXPECT_EQ(p.resized_w, proc["resized_hw"][1].get<int>()) << it.key();
    EXPECT_EQ(p.grid_h, proc["patch_grid_hw"][0].get<int>());
    EXPECT_EQ(p.grid_w, proc["patch_grid_hw"][1].get<int>());
    EXPECT_EQ(p.num_soft_tokens, proc["num_soft_tokens"].get<int>());
    const auto pos = arrays.at(info["arrays"]["image_position_ids"].get<std::string>()).i32();
    EXPECT_EQ(std::vector<int32_t>(p.positions.begin(), p.positions.end()), pos) << it.key();
    const RgbImage png = load(d + "/" + info["resized_rgb_png"]["file"].get<std::string>());
    ASSERT_EQ(png.width, p.resized_w);
    ASSERT_EQ(png.height, p.resized_h);
    const float inv255 = static_cast<float>(1.0 / 255.0);
    size_t bad = 0;
    for (int r = 0; r < p.grid_h; ++r)
      for (int c = 0; c < p.grid_w; ++c)
        for (int yy = 0; yy < 16; ++yy)
          for (int xx = 0; xx < 16; ++xx)
            for (int ch = 0; ch < 3; ++ch) {
              const size_t nidx = size_t(r) * p.grid_w + c;
              const float want = static_cast<float>(png.rgb[(size_t(16 * r + yy) * png.width + 16 * c + xx) * 3 + ch]) * inv255;
              bad += p.pixels[nidx * 768 + (yy * 16 + xx) * 3 + ch] != want;
            }
    EXPECT_EQ(bad, 0u) << it.key();
    EXPECT_EQ(max_step(resize_image(img, p.resized_w, p.resized_h, ResizeFilter::Bicubic), png), 0) << it.key();
  }
  EXPECT_EQ(n, 5);
}

TEST(VisionPreprocess, Gemma4TargetSizeTable) {
  // gemma-multimodal.md §2.2 table (computed from the HF formula).
  ImageProcessorConfig cfg;
  cfg.gemma4 = true;
  struct Row { int h, w, S, oh, ow; };
  for (const Row& r : {Row{896, 896, 70, 384, 384}, Row{896, 896, 280, 768, 768}, Row{1080, 1920, 280, 576, 1056},
                       Row{672, 960, 280, 672, 960}, Row{1080, 1920, 1120, 1200, 2112}, Row{896, 896, 560, 1104, 1104}}) {
    cfg.max_soft_tokens = r.S;
    int oh = 0, ow = 0;
    gemma4_target_size(r.h, r.w, cfg, oh, ow);
    EXPECT_EQ(oh, r.oh) << r.h << "x" << r.w << " S=" << r.S;
    EXPECT_EQ(ow, r.ow) << r.h << "x" << r.w << " S=" << r.S;
  }
  // Extreme aspect: 10 x 20000 → height 48, width capped at S·48.
  cfg.max_soft_tokens = 280;
  int oh = 0, ow = 0;
  gemma4_target_size(10, 20000, cfg, oh, ow);
  EXPECT_EQ(oh, 48);
  EXPECT_EQ(ow, 280 * 48);
}

TEST(VisionPreprocess, ResizeSameSizeAndUpscale) {
  const RgbImage img = load(egtest::g3v_dir() + "/inputs/img_gradient_224x224.png");
  EXPECT_EQ(resize_image(img, 224, 224, ResizeFilter::Bilinear).rgb, img.rgb);
  // A constant image stays constant through any resize (weights sum to one at every precision).
  RgbImage flat;
  flat.width = 37;
  flat.height = 11;
  flat.rgb.assign(37 * 11 * 3, 173);
  for (ResizeFilter f : {ResizeFilter::Bilinear, ResizeFilter::Bicubic})
    for (auto [w, h] : {std::pair{300, 5}, std::pair{4, 97}, std::pair{1, 1}}) {
      const RgbImage r = resize_image(flat, w, h, f);
      for (uint8_t v : r.rgb) ASSERT_EQ(v, 173);
    }
  EXPECT_THROW(resize_image(img, 0, 10, ResizeFilter::Bilinear), eg::Error);
}
