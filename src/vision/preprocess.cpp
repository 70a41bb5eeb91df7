#include "vision/preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"

namespace eg::vision {

namespace {

using json = nlohmann::json;

double num(const json& j, const char* key, double def, const std::string& origin) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_number()) throw Error(origin + ": \"" + key + "\" must be a number");
  return j[key].get<double>();
}

bool flag(const json& j, const char* key, bool def, const std::string& origin) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_boolean()) throw Error(origin + ": \"" + key + "\" must be true or false");
  return j[key].get<bool>();
}

void triple(const json& j, const char* key, float* out, const std::string& origin) {
  if (!j.contains(key) || j[key].is_null()) return;
  const json& v = j[key];
  if (v.is_number()) {
    out[0] = out[1] = out[2] = v.get<float>();
    return;
  }
  if (!v.is_array() || v.size() != 3) throw Error(origin + ": \"" + key + "\" must be 3 numbers");
  for (int i = 0; i < 3; ++i) {
    if (!v[i].is_number()) throw Error(origin + ": \"" + key + "\" must be 3 numbers");
    out[i] = v[i].get<float>();
  }
}

}  // namespace

ImageProcessorConfig load_image_processor_config(const std::string& dir, bool gemma4) {
  ImageProcessorConfig c;
  c.gemma4 = gemma4;
  if (gemma4) {
    c.filter = ResizeFilter::Bicubic;
    c.do_normalize = false;
  }
  namespace fs = std::filesystem;
  std::string origin = dir + "/processor_config.json";
  json root, ip;
  if (fs::exists(origin)) {
    root = json::parse(read_file(origin), nullptr, false);
    if (root.is_discarded() || !root.is_object()) throw Error(origin + ": not a JSON object");
    ip = root.contains("image_processor") ? root["image_processor"] : json::object();
  } else if (fs::exists(dir + "/preprocessor_config.json")) {
    origin = dir + "/preprocessor_config.json";
    root = json::parse(read_file(origin), nullptr, false);
    if (root.is_discarded() || !root.is_object()) throw Error(origin + ": not a JSON object");
    ip = root;
  } else {
    if (!gemma4) c.image_seq_length = 256;
    return c;
  }
  if (!ip.is_object()) throw Error(origin + ": \"image_processor\" must be an object");
  const int resample = static_cast<int>(num(ip, "resample", gemma4 ? 3 : 2, origin));
  if (resample == 2) c.filter = ResizeFilter::Bilinear;
  else if (resample == 3) c.filter = ResizeFilter::Bicubic;
  else throw Error(origin + ": resample " + std::to_string(resample) + " is not supported (2 = bilinear, 3 = bicubic)");
  c.do_rescale = flag(ip, "do_rescale", true, origin);
  c.rescale_factor = num(ip, "rescale_factor", 1.0 / 255.0, origin);
  if (!(c.rescale_factor > 0)) throw Error(origin + ": rescale_factor must be > 0");
  c.do_normalize = flag(ip, "do_normalize", !gemma4, origin);
  triple(ip, "image_mean", c.mean, origin);
  triple(ip, "image_std", c.std, origin);
  for (float s : c.std)
    if (c.do_normalize && !(s != 0.0f)) throw Error(origin + ": image_std must be non-zero");
  c.do_pan_and_scan = flag(ip, "do_pan_and_scan", false, origin);
  c.pan_and_scan_min_crop_size =
      static_cast<int>(num(ip, "pan_and_scan_min_crop_size", c.pan_and_scan_min_crop_size, origin));
  c.pan_and_scan_max_num_crops =
      static_cast<int>(num(ip, "pan_and_scan_max_num_crops", c.pan_and_scan_max_num_crops, origin));
  c.pan_and_scan_min_ratio_to_activate =
      num(ip, "pan_and_scan_min_ratio_to_activate", c.pan_and_scan_min_ratio_to_activate, origin);
  if (c.pan_and_scan_min_crop_size < 1 || c.pan_and_scan_min_crop_size > 65536)
    throw Error(origin + ": pan_and_scan_min_crop_size must be 1..65536");
  if (c.pan_and_scan_max_num_crops < 1 || c.pan_and_scan_max_num_crops > 64)
    throw Error(origin + ": pan_and_scan_max_num_crops must be 1..64");
  if (!(c.pan_and_scan_min_ratio_to_activate > 0) || !std::isfinite(c.pan_and_scan_min_ratio_to_activate))
    throw Error(origin + ": pan_and_scan_min_ratio_to_activate must be a positive number");
  if (gemma4 && c.do_pan_and_scan) throw Error(origin + ": do_pan_and_scan is a Gemma 3 processor option");
  if (ip.contains("size") && ip["size"].is_object()) {
    c.height = static_cast<int>(num(ip["size"], "height", c.height, origin));
    c.width = static_cast<int>(num(ip["size"], "width", c.width, origin));
  }
  if (c.height <= 0 || c.width <= 0 || c.height > 8192 || c.width > 8192) throw Error(origin + ": bad image size");
  c.patch_size = static_cast<int>(num(ip, "patch_size", c.patch_size, origin));
  c.pooling_kernel = static_cast<int>(num(ip, "pooling_kernel_size", c.pooling_kernel, origin));
  c.max_soft_tokens = static_cast<int>(num(ip, "max_soft_tokens", c.max_soft_tokens, origin));
  if (c.patch_size <= 0 || c.pooling_kernel <= 0) throw Error(origin + ": patch_size / pooling_kernel_size must be > 0");
  if (gemma4) {
    const int m = c.max_soft_tokens;
    if (m != 70 && m != 140 && m != 280 && m != 560 && m != 1120)
      throw Error(origin + ": max_soft_tokens " + std::to_string(m) + " is not one of 70, 140, 280, 560, 1120");
  }
  c.image_seq_length = static_cast<int>(num(root, "image_seq_length", gemma4 ? c.max_soft_tokens : 256, origin));
  return c;
}

std::vector<float> gemma3_pixel_values(const RgbImage& img, const ImageProcessorConfig& cfg) {
  const RgbImage r = resize_image(img, cfg.width, cfg.height, cfg.filter);
  const size_t plane = static_cast<size_t>(r.width) * r.height;
  std::vector<float> out(plane * 3);
  // The torchvision backend fuses rescale and normalise: mean and std are divided by the rescale
  // factor (in float32 tensors), then (x − mean) / std on float32(x).
  const float inv = static_cast<float>(1.0 / cfg.rescale_factor);
  const float rescale = static_cast<float>(cfg.rescale_factor);
  for (int c = 0; c < 3; ++c) {
    float m = 0.0f, s = 1.0f;
    if (cfg.do_normalize) {
      m = cfg.do_rescale ? cfg.mean[c] * inv : cfg.mean[c];
      s = cfg.do_rescale ? cfg.std[c] * inv : cfg.std[c];
    }
    for (size_t i = 0; i < plane; ++i) {
      const float x = static_cast<float>(r.rgb[i * 3 + c]);
      float v;
      if (cfg.do_normalize) v = (x - m) / s;
      else v = cfg.do_rescale ? x * rescale : x;
      out[c * plane + i] = v;
    }
  }
  return out;
}

std::vector<CropBox> pan_and_scan_crops(int height, int width, const ImageProcessorConfig& cfg) {
  if (height <= 0 || width <= 0) throw Error("pan-and-scan: empty image");
  const double h = height, w = width;
  const int min_crop = cfg.pan_and_scan_min_crop_size;
  int nw = 1, nh = 1;
  auto clamp_n = [&](int n) { return std::min(cfg.pan_and_scan_max_num_crops, std::max(2, n)); };
  if (width >= height) {  // square or landscape
    if (w / h < cfg.pan_and_scan_min_ratio_to_activate) return {};
    nw = static_cast<int>(std::floor(w / h + 0.5));  // half rounds up
    nw = clamp_n(std::min(static_cast<int>(std::floor(w / min_crop)), nw));
  } else {
    if (h / w < cfg.pan_and_scan_min_ratio_to_activate) return {};
    nh = static_cast<int>(std::floor(h / w + 0.5));
    nh = clamp_n(std::min(static_cast<int>(std::floor(h / min_crop)), nh));
  }
  const int cw = static_cast<int>(std::ceil(w / nw)), ch = static_cast<int>(std::ceil(h / nh));
  if (std::min(cw, ch) < min_crop) return {};
  std::vector<CropBox> out;
  for (int j = 0; j < nh; ++j)
    for (int i = 0; i < nw; ++i) {
      CropBox b{cw * i, ch * j, 0, 0};
      b.w = std::min(cw, width - b.x);  // numpy / torch slicing clamps at the border
      b.h = std::min(ch, height - b.y);
      if (b.w <= 0 || b.h <= 0)
        throw Error("pan-and-scan: an image of " + std::to_string(width) + "x" + std::to_string(height) +
                    " would give an empty crop with these settings");
      out.push_back(b);
    }
  return out;
}

RgbImage crop_image(const RgbImage& img, const CropBox& b) {
  if (b.x < 0 || b.y < 0 || b.w <= 0 || b.h <= 0 || b.x + b.w > img.width || b.y + b.h > img.height)
    throw Error("crop outside the image");
  RgbImage r;
  r.width = b.w;
  r.height = b.h;
  r.rgb.resize(static_cast<size_t>(b.w) * b.h * 3);
  for (int y = 0; y < b.h; ++y)
    std::memcpy(r.rgb.data() + static_cast<size_t>(y) * b.w * 3,
                img.rgb.data() + (static_cast<size_t>(b.y + y) * img.width + b.x) * 3, static_cast<size_t>(b.w) * 3);
  return r;
}

void gemma4_target_size(int h, int w, const ImageProcessorConfig& cfg, int& out_h, int& out_w) {
  const int k = cfg.pooling_kernel, ps = cfg.patch_size;
  const int64_t max_patches = static_cast<int64_t>(cfg.max_soft_tokens) * k * k;
  const double target_px = static_cast<double>(max_patches) * ps * ps;
  const double factor = std::sqrt(target_px / (static_cast<double>(h) * w));
  const int side = k * ps;
  int64_t th = static_cast<int64_t>(std::floor(factor * h / side)) * side;
  int64_t tw = static_cast<int64_t>(std::floor(factor * w / side)) * side;
  if (th == 0 && tw == 0)
    throw Error("image of " + std::to_string(w) + "x" + std::to_string(h) + " cannot be resized for the vision tower");
  const int64_t max_side = (max_patches / (k * k)) * side;
  if (th == 0) {
    th = side;
    tw = std::min<int64_t>(static_cast<int64_t>(std::floor(static_cast<double>(w) / h)) * side, max_side);
  } else if (tw == 0) {
    tw = side;
    th = std::min<int64_t>(static_cast<int64_t>(std::floor(static_cast<double>(h) / w)) * side, max_side);
  }
  if (th * tw > target_px)
    throw Error("image of " + std::to_string(w) + "x" + std::to_string(h) + " exceeds the patch budget when resized");
  out_h = static_cast<int>(th);
  out_w = static_cast<int>(tw);
}

Gemma4Patches gemma4_patches(const RgbImage& img, const ImageProcessorConfig& cfg) {
  Gemma4Patches p;
  gemma4_target_size(img.height, img.width, cfg, p.resized_h, p.resized_w);
  const RgbImage r = resize_image(img, p.resized_w, p.resized_h, cfg.filter);
  const int ps = cfg.patch_size, k = cfg.pooling_kernel;
  p.grid_h = r.height / ps;
  p.grid_w = r.width / ps;
  p.num_soft_tokens = (p.grid_h / k) * (p.grid_w / k);
  const size_t P = static_cast<size_t>(p.grid_h) * p.grid_w, D = static_cast<size_t>(ps) * ps * 3;
  p.pixels.resize(P * D);
  p.positions.resize(P * 2);
  const float rescale = static_cast<float>(cfg.rescale_factor);
  const float inv = static_cast<float>(1.0 / cfg.rescale_factor);
  for (int gr = 0; gr < p.grid_h; ++gr)
    for (int gc = 0; gc < p.grid_w; ++gc) {
      const size_t n = static_cast<size_t>(gr) * p.grid_w + gc;
      float* dst = p.pixels.data() + n * D;
      for (int yy = 0; yy < ps; ++yy)
        for (int xx = 0; xx < ps; ++xx)
          for (int ch = 0; ch < 3; ++ch) {
            const float x = static_cast<float>(
                r.rgb[(static_cast<size_t>(gr * ps + yy) * r.width + gc * ps + xx) * 3 + ch]);
            float v = cfg.do_rescale ? x * rescale : x;
            if (cfg.do_normalize)
              v = cfg.do_rescale ? (x - cfg.mean[ch] * inv) / (cfg.std[ch] * inv) : (x - cfg.mean[ch]) / cfg.std[ch];
            dst[(yy * ps + xx) * 3 + ch] = v;
          }
      p.positions[n * 2] = gc;
      p.positions[n * 2 + 1] = gr;
    }
  return p;
}

}  // namespace eg::vision
