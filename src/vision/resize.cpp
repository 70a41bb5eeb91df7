#include "vision/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"

namespace eg::vision {

namespace {

double triangle(double x) {
  x = std::abs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

double keys_cubic(double x) {  // a = -0.5
  const double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
  return 0.0;
}

// The taps of one axis: output i reads inputs first[i] .. first[i] + len[i] - 1 with integer
// weights w[i·taps + j] at `precision` fractional bits.
struct Axis {
  std::vector<int> first, len;
  std::vector<int32_t> w;
  int taps = 0;
  int precision = 0;
};

Axis make_axis(int in, int out, ResizeFilter f) {
  const double scale = static_cast<double>(in) / out;
  const double width = f == ResizeFilter::Bilinear ? 2.0 : 4.0;  // the filter's interp size
  const double support = scale >= 1.0 ? width * 0.5 * scale : width * 0.5;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  Axis a;
  a.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  a.first.resize(out);
  a.len.resize(out);
  std::vector<double> wf(static_cast<size_t>(out) * a.taps, 0.0);
  double wt_max = 0.0;
  for (int i = 0; i < out; ++i) {
    const double center = scale * (i + 0.5);
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    int64_t n = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in) - lo;
    n = std::clamp<int64_t>(n, 0, a.taps);
    double* w = wf.data() + static_cast<size_t>(i) * a.taps;
    double total = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const double x = (static_cast<double>(j + lo) - center + 0.5) * invscale;
      w[j] = f == ResizeFilter::Bilinear ? triangle(x) : keys_cubic(x);
      total += w[j];
    }
    if (total != 0.0)
      for (int64_t j = 0; j < n; ++j) {
        w[j] /= total;
        wt_max = std::max(wt_max, w[j]);
      }
    a.first[i] = static_cast<int>(lo);
    a.len[i] = static_cast<int>(n);
  }
  int p = 0;
  for (; p < 22; ++p)
    if (static_cast<int>(0.5 + wt_max * (1 << (p + 1))) >= (1 << 15)) break;
  a.precision = p;
  a.w.resize(wf.size());
  for (size_t k = 0; k < wf.size(); ++k) {
    const double v = wf[k] * (1 << p);
    a.w[k] = v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v);
  }
  return a;
}

uint8_t finish(int32_t acc, int precision) {
  return static_cast<uint8_t>(std::clamp(acc >> precision, 0, 255));
}

}  // namespace

RgbImage resize_image(const RgbImage& in, int out_w, int out_h, ResizeFilter f) {
  if (out_w <= 0 || out_h <= 0 || in.width <= 0 || in.height <= 0)
    throw Error("resize: bad size " + std::to_string(in.width) + "x" + std::to_string(in.height) + " -> " +
                std::to_string(out_w) + "x" + std::to_string(out_h));
  RgbImage cur = in;
  if (out_w != cur.width) {  // horizontal pass
    const Axis a = make_axis(cur.width, out_w, f);
    RgbImage o;
    o.width = out_w;
    o.height = cur.height;
    o.rgb.resize(static_cast<size_t>(out_w) * cur.height * 3);
    const int32_t half = 1 << (a.precision - 1);
    for (int y = 0; y < cur.height; ++y) {
      const uint8_t* row = cur.rgb.data() + static_cast<size_t>(y) * cur.width * 3;
      uint8_t* dst = o.rgb.data() + static_cast<size_t>(y) * out_w * 3;
      for (int x = 0; x < out_w; ++x) {
        const int32_t* w = a.w.data() + static_cast<size_t>(x) * a.taps;
        const uint8_t* s = row + static_cast<size_t>(a.first[x]) * 3;
        for (int c = 0; c < 3; ++c) {
          int32_t acc = half;
          for (int j = 0; j < a.len[x]; ++j) acc += s[j * 3 + c] * w[j];
          dst[x * 3 + c] = finish(acc, a.precision);
        }
      }
    }
    cur = std::move(o);
  }
  if (out_h != cur.height) {  // vertical pass
    const Axis a = make_axis(cur.height, out_h, f);
    RgbImage o;
    o.width = cur.width;
    o.height = out_h;
    const size_t stride = static_cast<size_t>(cur.width) * 3;
    o.rgb.resize(stride * out_h);
    const int32_t half = 1 << (a.precision - 1);
    std::vector<int32_t> acc(stride);
    for (int y = 0; y < out_h; ++y) {
      const int32_t* w = a.w.data() + static_cast<size_t>(y) * a.taps;
      std::fill(acc.begin(), acc.end(), half);
      for (int j = 0; j < a.len[y]; ++j) {
        const uint8_t* s = cur.rgb.data() + static_cast<size_t>(a.first[y] + j) * stride;
        for (size_t k = 0; k < stride; ++k) acc[k] += s[k] * w[j];
      }
      uint8_t* dst = o.rgb.data() + static_cast<size_t>(y) * stride;
      for (size_t k = 0; k < stride; ++k) dst[k] = finish(acc[k], a.precision);
    }
    cur = std::move(o);
  }
  return cur;
}

}  // namespace eg::vision
