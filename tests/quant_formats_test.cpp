// Block-quantized formats (src/quant): round-trip error bounds, dequantization of hand-built
// blocks (expected values computed here from the layout spec, ggml-common.h), Q8_0/Q4_0/Q4_1/
// Q5_0/Q5_1 bytes against an independent scalar statement of llama.cpp's reference rules, and
// Q8_0/Q4_0 (and Q5_0 where present) bytes against real tensors quantized by llama-quantize.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/dtype.h"
#include "core/error.h"
#include "format/gguf.h"
#include "quant/quant.h"

namespace {

using eg::DType;

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f, float shift = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = d(rng) + shift;
    if (x == 0.0f) x = 0.25f * scale;
  }
  return v;
}

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(eg::dtype_row_bytes(t, static_cast<int64_t>(x.size())));
  eg::quant::quantize_row(t, x.data(), static_cast<int64_t>(x.size()), q.data());
  return q;
}
std::vector<float> dequantize(DType t, const std::vector<uint8_t>& q, size_t n) {
  std::vector<float> y(n);
  eg::quant::dequantize_row(t, q.data(), static_cast<int64_t>(n), y.data());
  return y;
}
double rel_rms(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    s += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(e / s);
}

const DType kAll[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                      DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K, DType::EG_Q4_G128};

// ---- round trip: per-element bounds for the legacy types (from their rules), RMS bounds ----

// Max |x − x̂| per block for the legacy types: half a step, except the one clamped extreme of
// Q4_0/Q5_0 (up to one step), plus the f16 rounding of d (rel. 2^-11, times |q| ≤ 2^bits) and m.
TEST(QuantFormats, LegacyRoundTripWithinStepBound) {
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    for (float shift : {0.0f, 0.7f}) {
      const auto x = randn(32 * 64, 11, 1.0f, shift);
      const auto y = dequantize(t, quantize(t, x), x.size());
      for (size_t b = 0; b < x.size() / 32; ++b) {
        double amax = 0, mn = 1e30, mx = -1e30;
        for (int j = 0; j < 32; ++j) {
          const double v = x[32 * b + j];
          amax = std::max(amax, std::fabs(v));
          mn = std::min(mn, v);
          mx = std::max(mx, v);
        }
        double bound = 0;
        const double f16 = std::ldexp(1.0, -11);
        switch (t) {
          case DType::Q8_0: bound = 0.5 * amax / 127 + 127 * (amax / 127) * f16; break;
          case DType::Q4_0: bound = amax / 8 + 8 * (amax / 8) * f16; break;
          case DType::Q5_0: bound = amax / 16 + 16 * (amax / 16) * f16; break;
          case DType::Q4_1: bound = 0.5 * (mx - mn) / 15 + (mx - mn) * f16 + std::fabs(mn) * f16; break;
          case DType::Q5_1: bound = 0.5 * (mx - mn) / 31 + (mx - mn) * f16 + std::fabs(mn) * f16; break;
          default: break;
        }
        for (int j = 0; j < 32; ++j) {
          ASSERT_LE(std::fabs(static_cast<double>(x[32 * b + j]) - y[32 * b + j]), bound * 1.001 + 1e-7)
              << eg::dtype_name(t) << " block " << b << " elem " << j;
        }
      }
    }
  }
}

// Relative RMS error on N(0,1) (and shifted) data. Uniform rounding with step Δ has RMS Δ/√12;
// for 32 Gaussian samples the range is ≈ 4σ (Q8_K: 256 samples, amax ≈ 3σ). Bounds: ≈ 1.25 × that estimate, and the K-quants
// (error-minimising scale search) must not be worse than the range-based legacy type of the same
// bit width.
TEST(QuantFormats, RoundTripRelativeRms) {
  struct Case { DType t; double bound; };
  const Case cases[] = {{DType::Q8_0, 0.0065}, {DType::Q4_0, 0.12}, {DType::Q4_1, 0.095},
                        {DType::Q5_0, 0.06},   {DType::Q5_1, 0.047}, {DType::Q4_K, 0.095},
                        {DType::Q5_K, 0.047},  {DType::Q6_K, 0.025}, {DType::Q8_K, 0.009},
                        {DType::EG_Q4_G128, 0.12}};
  for (float shift : {0.0f, 0.5f}) {
    const auto x = randn(256 * 64, 5, 1.0f, shift);
    std::map<DType, double> err;
    for (const auto& c : cases) {
      err[c.t] = rel_rms(x, dequantize(c.t, quantize(c.t, x), x.size()));
      EXPECT_LT(err[c.t], c.bound) << eg::dtype_name(c.t) << " shift " << shift;
      EXPECT_GT(err[c.t], 0.0) << eg::dtype_name(c.t);
      std::printf("%s shift %.1f: rel rms %.5f\n", eg::dtype_name(c.t), shift, err[c.t]);
    }
    EXPECT_LE(err[DType::Q4_K], err[DType::Q4_1] * 1.02) << "shift " << shift;
    EXPECT_LE(err[DType::Q5_K], err[DType::Q5_1] * 1.02) << "shift " << shift;
    EXPECT_LT(err[DType::Q6_K], err[DType::Q5_0] * 0.7) << "shift " << shift;
  }
}

TEST(QuantFormats, ZeroAndConstantRowsAreExact) {
  for (DType t : kAll) {
    const int64_t n = eg::dtype_block_elems(t) * 2;
    std::vector<float> z(n, 0.0f);
    for (float v : dequantize(t, quantize(t, z), n)) EXPECT_EQ(v, 0.0f) << eg::dtype_name(t);
  }
}

TEST(QuantFormats, BadLengthsThrow) {
  std::vector<float> x(300, 1.0f);
  std::vector<uint8_t> buf(4096);
  for (DType t : kAll) {
    const int64_t bad = eg::dtype_block_elems(t) + 1;
    EXPECT_THROW(eg::quant::quantize_row(t, x.data(), bad, buf.data()), eg::Error) << eg::dtype_name(t);
    std::vector<float> y(bad);
    EXPECT_THROW(eg::quant::dequantize_row(t, buf.data(), bad, y.data()), eg::Error) << eg::dtype_name(t);
  }
  EXPECT_THROW(eg::quant::quantize_row(DType::BF16, x.data(), 32, buf.data()), eg::Error);
  try {
    eg::quant::quantize_row(DType::Q4_0, x.data(), 33, buf.data());
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_0"), std::string::npos) << e.what();
  }
}

// ---- hand-built blocks: expected values from the layout spec, written independently ----

uint16_t h(float f) { return eg::f32_to_f16(f); }  // exact for the values used below
void put16(uint8_t* p, uint16_t v) { p[0] = v & 0xFF; p[1] = v >> 8; }

TEST(QuantFormats, DequantizeHandBuiltLegacyBlocks) {
  // Q8_0: d = 0.25, qs[i] = i − 16.
  {
    uint8_t b[34];
    put16(b, h(0.25f));
    for (int i = 0; i < 32; ++i) b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i - 16));
    std::vector<float> y(32);
    eg::quant::dequantize_row(DType::Q8_0, b, 32, y.data());
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.25f * (i - 16));
  }
  // Q4_0 / Q4_1: byte j = j (low) | (15 − j) << 4 (high): element j = j, element 16+j = 15 − j.
  {
    uint8_t b[20];
    put16(b, h(0.5f));
    for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    std::vector<float> y(32);
    eg::quant::dequantize_row(DType::Q4_0, b, 32, y.data());
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], 0.5f * (j - 8));
      EXPECT_EQ(y[16 + j], 0.5f * (15 - j - 8));
    }
    put16(b, h(0.5f));
    put16(b + 2, h(-3.0f));
    for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    eg::quant::dequantize_row(DType::Q4_1, b, 32, y.data());
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], 0.5f * j - 3.0f);
      EXPECT_EQ(y[16 + j], 0.5f * (15 - j) - 3.0f);
    }
  }
  // Q5_0 / Q5_1: qh = 0xA5A5F00F (little-endian); element i gets bit i of qh as +16.
  {
    const uint32_t qh = 0xA5A5F00Fu;
    uint8_t b[24];
    put16(b, h(0.125f));
    for (int k = 0; k < 4; ++k) b[2 + k] = static_cast<uint8_t>(qh >> (8 * k));
    for (int j = 0; j < 16; ++j) b[6 + j] = static_cast<uint8_t>(((j * 7) & 15) | (((j * 3) & 15) << 4));
    std::vector<float> y(32);
    eg::quant::dequantize_row(DType::Q5_0, b, 32, y.data());
    for (int i = 0; i < 32; ++i) {
      const int nib = i < 16 ? ((i * 7) & 15) : (((i - 16) * 3) & 15);
      const int q = nib + (((qh >> i) & 1) ? 16 : 0);
      EXPECT_EQ(y[i], 0.125f * (q - 16)) << i;
    }
    put16(b, h(0.125f));
    put16(b + 2, h(1.5f));
    for (int k = 0; k < 4; ++k) b[4 + k] = static_cast<uint8_t>(qh >> (8 * k));
    for (int j = 0; j < 16; ++j) b[8 + j] = static_cast<uint8_t>(((j * 7) & 15) | (((j * 3) & 15) << 4));
    eg::quant::dequantize_row(DType::Q5_1, b, 32, y.data());
    for (int i = 0; i < 32; ++i) {
      const int nib = i < 16 ? ((i * 7) & 15) : (((i - 16) * 3) & 15);
      const int q = nib + (((qh >> i) & 1) ? 16 : 0);
      EXPECT_EQ(y[i], 0.125f * q + 1.5f) << i;
    }
  }
}

// Q4_K / Q5_K scale packing (ggml-common.h): for sub-block j < 4 the 6-bit scale is bytes[j] &
// 63 and the min bytes[j+4] & 63; for j ≥ 4 the low 4 bits are in byte j+4 (scale: low nibble,
// min: high nibble) and the high 2 bits in the top bits of byte j−4 (scale) / byte j (min).
void pack_k_scales(const int sc[8], const int mn[8], uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

TEST(QuantFormats, DequantizeHandBuiltKBlocks) {
  const int sc[8] = {1, 7, 13, 63, 33, 47, 60, 5};
  const int mn[8] = {2, 63, 17, 40, 0, 31, 50, 9};
  const float d = 0.0625f, dmin = 0.03125f;
  std::vector<float> y(256);
  // Q4_K: [d][dmin][scales 12][qs 128]; element e: chunk c = e / 64, r = e % 64, byte
  // qs[32c + r % 32], low nibble for r < 32, high otherwise; sub-block e / 32.
  {
    std::vector<uint8_t> b(144);
    put16(&b[0], h(d));
    put16(&b[2], h(dmin));
    pack_k_scales(sc, mn, &b[4]);
    for (int i = 0; i < 128; ++i) b[16 + i] = static_cast<uint8_t>((i * 37 + 11) & 0xFF);
    eg::quant::dequantize_row(DType::Q4_K, b.data(), 256, y.data());
    for (int e = 0; e < 256; ++e) {
      const int c = e / 64, r = e % 64;
      const uint8_t byte = b[16 + 32 * c + r % 32];
      const int q = r < 32 ? (byte & 15) : (byte >> 4);
      const float expect = d * sc[e / 32] * q - dmin * mn[e / 32];
      EXPECT_FLOAT_EQ(y[e], expect) << "Q4_K element " << e;
    }
  }
  // Q5_K: [d][dmin][scales 12][qh 32][qs 128]; the 5th bit of element e is bit 2c (r < 32) or
  // 2c+1 (r ≥ 32) of qh[r % 32].
  {
    std::vector<uint8_t> b(176);
    put16(&b[0], h(d));
    put16(&b[2], h(dmin));
    pack_k_scales(sc, mn, &b[4]);
    for (int i = 0; i < 32; ++i) b[16 + i] = static_cast<uint8_t>((i * 91 + 5) & 0xFF);
    for (int i = 0; i < 128; ++i) b[48 + i] = static_cast<uint8_t>((i * 37 + 11) & 0xFF);
    eg::quant::dequantize_row(DType::Q5_K, b.data(), 256, y.data());
    for (int e = 0; e < 256; ++e) {
      const int c = e / 64, r = e % 64;
      const uint8_t byte = b[48 + 32 * c + r % 32];
      const int hb = (b[16 + r % 32] >> (2 * c + (r >= 32 ? 1 : 0))) & 1;
      const int q = (r < 32 ? (byte & 15) : (byte >> 4)) + 16 * hb;
      EXPECT_FLOAT_EQ(y[e], d * sc[e / 32] * q - dmin * mn[e / 32]) << "Q5_K element " << e;
    }
  }
  // Q6_K: [ql 128][qh 64][scales int8 16][d]. Element e: half hf = e / 128, r = e % 128,
  // quarter k = r / 32, l = r % 32: low 4 bits = nibble (k < 2: low, else high) of
  // ql[64 hf + l + 32 (k & 1)], high 2 bits = bits 2k..2k+1 of qh[32 hf + l]; x = d·sc[e/16]·(q − 32).
  {
    std::vector<uint8_t> b(210);
    for (int i = 0; i < 128; ++i) b[i] = static_cast<uint8_t>((i * 53 + 7) & 0xFF);
    for (int i = 0; i < 64; ++i) b[128 + i] = static_cast<uint8_t>((i * 29 + 3) & 0xFF);
    const int s6[16] = {-128, -7, 1, 2, 127, 64, -33, 5, 9, -1, 100, -100, 17, 3, 0, 45};
    for (int j = 0; j < 16; ++j) b[192 + j] = static_cast<uint8_t>(static_cast<int8_t>(s6[j]));
    put16(&b[208], h(0.0078125f));
    eg::quant::dequantize_row(DType::Q6_K, b.data(), 256, y.data());
    for (int e = 0; e < 256; ++e) {
      const int hf = e / 128, r = e % 128, k = r / 32, l = r % 32;
      const uint8_t lb = b[64 * hf + l + 32 * (k & 1)];
      const int lo = k < 2 ? (lb & 15) : (lb >> 4);
      const int hi = (b[128 + 32 * hf + l] >> (2 * k)) & 3;
      const float expect = 0.0078125f * s6[e / 16] * ((lo | (hi << 4)) - 32);
      EXPECT_FLOAT_EQ(y[e], expect) << "Q6_K element " << e;
    }
  }
  // Q8_K: [d f32][qs 256][bsums 16].
  {
    std::vector<uint8_t> b(292);
    const float dk = 0.01f;
    std::memcpy(&b[0], &dk, 4);
    for (int i = 0; i < 256; ++i) b[4 + i] = static_cast<uint8_t>(static_cast<int8_t>(i - 128));
    eg::quant::dequantize_row(DType::Q8_K, b.data(), 256, y.data());
    for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], dk * (i - 128));
  }
}

// EG_Q4_G128: [d f16][m f16][qs 64]; element 32s + i is the low nibble of qs[16s + i] (i < 16)
// or the high nibble of qs[16s + i − 16]; x = d·q + m.
TEST(QuantFormats, DequantizeHandBuiltG128) {
  std::vector<uint8_t> b(68);
  put16(&b[0], h(0.75f));
  put16(&b[2], h(-2.5f));
  for (int i = 0; i < 64; ++i) b[4 + i] = static_cast<uint8_t>((i * 71 + 13) & 0xFF);
  std::vector<float> y(128);
  eg::quant::dequantize_row(DType::EG_Q4_G128, b.data(), 128, y.data());
  for (int e = 0; e < 128; ++e) {
    const int s = e / 32, i = e % 32;
    const uint8_t byte = b[4 + 16 * s + i % 16];
    const int q = i < 16 ? (byte & 15) : (byte >> 4);
    EXPECT_EQ(y[e], 0.75f * q - 2.5f) << e;
  }
}

TEST(QuantFormats, ToF32DequantizesBlockTypes) {
  const auto x = randn(512, 3);
  for (DType t : kAll) {
    const auto q = quantize(t, x);
    std::vector<float> a(512), b(512);
    eg::quant::dequantize_row(t, q.data(), 512, a.data());
    eg::cpu::to_f32(q.data(), t, 512, b.data());
    EXPECT_EQ(a, b) << eg::dtype_name(t);
  }
}

// ---- bytes: an independent scalar statement of llama.cpp's reference quantizers ----

std::vector<uint8_t> ref_legacy(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> out;
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const float* v = &x[32 * b];
    float amax = 0, smax = 0, mn = v[0], mx = v[0];
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(v[j]) > amax) { amax = std::fabs(v[j]); smax = v[j]; }
      mn = std::min(mn, v[j]);
      mx = std::max(mx, v[j]);
    }
    auto push16 = [&](float f) { uint16_t u = eg::f32_to_f16(f); out.push_back(u & 0xFF); out.push_back(u >> 8); };
    uint8_t nib[32];
    if (t == DType::Q8_0) {
      const float d = amax / 127, id = d ? 1 / d : 0;
      push16(d);
      for (int j = 0; j < 32; ++j) out.push_back(static_cast<uint8_t>(static_cast<int8_t>(roundf(v[j] * id))));
      continue;
    }
    const bool asym = t == DType::Q4_1 || t == DType::Q5_1;
    const int bits = (t == DType::Q4_0 || t == DType::Q4_1) ? 4 : 5;
    const int top = (1 << bits) - 1;
    const float d = asym ? (mx - mn) / top : smax / -(1 << (bits - 1));
    const float id = d ? 1 / d : 0;
    push16(d);
    if (asym) push16(mn);
    for (int j = 0; j < 32; ++j) {
      int q = asym ? static_cast<int>((v[j] - mn) * id + 0.5f)
                   : static_cast<int>(v[j] * id + (1 << (bits - 1)) + 0.5f);
      if (!(t == DType::Q5_1)) q = std::min(top, q);
      nib[j] = static_cast<uint8_t>(q);
    }
    if (bits == 5) {
      uint32_t qh = 0;
      for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((nib[j] >> 4) & 1) << j;
      for (int k = 0; k < 4; ++k) out.push_back(static_cast<uint8_t>(qh >> (8 * k)));
    }
    for (int j = 0; j < 16; ++j) out.push_back(static_cast<uint8_t>((nib[j] & 15) | ((nib[j + 16] & 15) << 4)));
  }
  return out;
}

TEST(QuantFormats, LegacyBytesMatchReferenceRule) {
  auto x = randn(32 * 200, 21, 0.05f);
  // Edge cases: an all-zero block, a constant block, exact half-steps, a negative extreme.
  for (int j = 0; j < 32; ++j) x[j] = 0.0f;
  for (int j = 0; j < 32; ++j) x[32 + j] = 0.3f;
  for (int j = 0; j < 32; ++j) x[64 + j] = 0.125f * (j - 16);
  x[96] = -1.0f;
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    EXPECT_EQ(quantize(t, x), ref_legacy(t, x)) << eg::dtype_name(t);
  }
}

// ---- bytes of real llama.cpp files ----

std::string gguf_dir() { return std::string(EG_SHARED_DIR) + "/models/gguf/tiny-gemma3/"; }

// Every tensor of type Q8_0/Q4_0/Q5_0/... in `quantized` must equal our quantization of the same
// tensor of the F32 file, byte for byte. Returns the number of tensors compared per type.
std::map<DType, int> compare_file(const std::string& quantized) {
  const auto f32 = eg::GGUFFile::open(gguf_dir() + "tiny-gemma3-f32.gguf");
  const auto q = eg::GGUFFile::open(gguf_dir() + quantized);
  std::map<DType, int> counts;
  for (const auto& t : q->tensors()) {
    if (t.dtype != DType::Q8_0 && t.dtype != DType::Q4_0 && t.dtype != DType::Q4_1 &&
        t.dtype != DType::Q5_0 && t.dtype != DType::Q5_1) {
      continue;
    }
    const eg::GGUFTensor* src = f32->find_tensor(t.name);
    if (!src || src->dtype != DType::F32) {
      ADD_FAILURE() << t.name << " missing in the F32 file";
      continue;
    }
    std::vector<float> x(static_cast<size_t>(src->numel()));
    std::memcpy(x.data(), src->data, x.size() * 4);
    std::vector<uint8_t> mine(t.nbytes);
    const int64_t row = t.ne[0], rows = src->numel() / row;
    const size_t rb = eg::dtype_row_bytes(t.dtype, row);
    for (int64_t r = 0; r < rows; ++r) {
      eg::quant::quantize_row(t.dtype, x.data() + r * row, row, mine.data() + r * rb);
    }
    EXPECT_EQ(0, std::memcmp(mine.data(), t.data, t.nbytes)) << quantized << ": " << t.name;
    ++counts[t.dtype];
  }
  for (const auto& [dt, n] : counts) std::printf("%s: %d %s tensors byte-equal\n", quantized.c_str(), n, eg::dtype_name(dt));
  return counts;
}

TEST(QuantFormats, Q8_0BytesEqualLlamaQuantize) {
  const auto c = compare_file("tiny-gemma3-q8_0.gguf");
  EXPECT_GE(c.count(DType::Q8_0) ? c.at(DType::Q8_0) : 0, 10);
}

TEST(QuantFormats, Q4_0BytesEqualLlamaQuantize) {
  const auto c = compare_file("tiny-gemma3-q4_0.gguf");
  EXPECT_GE(c.count(DType::Q4_0) ? c.at(DType::Q4_0) : 0, 10);
}

// K-quant dequantization of llama.cpp's own Q4_K/Q5_K/Q6_K tensors must reproduce the F32
// tensor to within the format's error (a wrong bit layout gives relative errors near 1).
TEST(QuantFormats, KQuantTensorsOfLlamaFileDequantizeCloseToF32) {
  const auto f32 = eg::GGUFFile::open(gguf_dir() + "tiny-gemma3-f32.gguf");
  const auto q = eg::GGUFFile::open(gguf_dir() + "tiny-gemma3-q4_k_m.gguf");
  std::map<DType, int> counts;
  for (const auto& t : q->tensors()) {
    if (t.dtype != DType::Q4_K && t.dtype != DType::Q5_K && t.dtype != DType::Q6_K) continue;
    const eg::GGUFTensor* src = f32->find_tensor(t.name);
    ASSERT_TRUE(src != nullptr) << t.name;
    std::vector<float> x(static_cast<size_t>(src->numel())), y(x.size());
    std::memcpy(x.data(), src->data, x.size() * 4);
    eg::quant::dequantize_row(t.dtype, t.data, static_cast<int64_t>(x.size()), y.data());
    const double bound = t.dtype == DType::Q4_K ? 0.12 : t.dtype == DType::Q5_K ? 0.06 : 0.03;
    EXPECT_LT(rel_rms(x, y), bound) << t.name << " " << eg::dtype_name(t.dtype);
    ++counts[t.dtype];
  }
  EXPECT_GT(counts[DType::Q4_K], 0);
  EXPECT_GT(counts[DType::Q6_K], 0);
}

}  // namespace
