// The decode-step kernels (src/backend/cuda/decode_kernels.h) against the CPU ops on random
// non-zero inputs. Label "cuda"; every test skips itself without a GPU.
//
// Tolerances (docs/cuda.md), with R = the largest |reference value| of the case:
//  - embed_row: bit-identical to cpu::to_f32 · scale.
//  - qkv_heads (rmsnorm per head + RoPE): |Δ| ≤ 1e-5·R (sum of squares order, cosf/sinf vs
//    std::cos/sin); stored K in f16/bf16: within one unit of the 16-bit rounding of the CPU value
//    (|Δ| ≤ 2^-8·|ref| bf16, 2^-10·|ref| f16, + 1e-6·R); V: bit-identical.
//  - attention (split + combine): |Δ| ≤ 2e-5·R against ops::attention on the same (rounded) K/V.
//  - its quantized output: bit-identical to cpu::quantize_act_row of the GPU's f32 output.
//  - residual_norm: |Δ| ≤ 1e-5·R; gelu_mul: |Δ| ≤ 2e-6·|ref| + 1e-7·R.
//  - Gemma 4 (plain-scale norms, w_offset 0): qkv_heads with v_norm (V: rmsnorm without a weight,
//    as attention_block.cpp's ops::rmsnorm(nullptr)), v_from_k (V = the raw k projection, before
//    k_norm and RoPE; the v slot of qkv holds NaN, so reading it shows) and q_only (q heads alone,
//    the caches untouched byte for byte, and null caches accepted): q |Δ| ≤ 1e-5·R; a stored
//    value that went through a norm (K, normed V) |Δ| ≤ u·|ref| + 1.1e-5·R against the unrounded
//    CPU value (u = 2^-8 bf16, 2^-11 f16, 0 f32: the RNE rounding after a ≤ 1e-5·R f32
//    difference); V without v_norm bit-identical to the rounded raw value; cache rows other than
//    pos untouched.
//  - residual_norm with scale != 1 (Gemma 4's layer_scalar: x = (x + rmsnorm(proj))·scale) and
//    with w_next null (y = x, bit-identical to the new x): |Δ| ≤ 1e-5·R as above.
//  - gelu_mul_by (gate and up in separate buffers): gelu_mul's bound; act bit-identical.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/decode_kernels.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace eg {
namespace {

namespace gpu = eg::cuda;

using cudatest::random_vec;
using cudatest::to_device;
using cudatest::to_host;

float max_abs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// The value a KV store of type t keeps of x (the host KVCache's conversions).
float kv_round(float x, gpu::KVElem t) {
  if (t == gpu::KVElem::F16) return f16_to_f32(f32_to_f16(x));
  if (t == gpu::KVElem::BF16) return bf16_to_f32(f32_to_bf16(x));
  return x;
}

std::vector<float> kv_from_device(const gpu::DeviceBuffer& b, size_t n, gpu::KVElem t) {
  std::vector<float> out(n);
  if (t == gpu::KVElem::F32) return to_host<float>(b, n);
  const std::vector<uint16_t> h = to_host<uint16_t>(b, n);
  for (size_t i = 0; i < n; ++i) out[i] = t == gpu::KVElem::F16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
  return out;
}

class CudaDecodeKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device";
    stream_ = std::make_unique<gpu::Stream>(0);
  }
  gpu::Stream& s() { return *stream_; }
  std::unique_ptr<gpu::Stream> stream_;
};

TEST_F(CudaDecodeKernels, EmbedRowIsBitIdenticalToTheCpuDequantization) {
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::F16, DType::BF16}) {
    const int64_t rows = 37, cols = 256;
    const std::vector<float> f = random_vec(static_cast<size_t>(rows * cols), 3, 0.1f);
    const size_t rb = dtype_row_bytes(t, cols);
    std::vector<uint8_t> w(static_cast<size_t>(rows) * rb);
    for (int64_t r = 0; r < rows; ++r) {
      uint8_t* dst = w.data() + r * rb;
      if (t == DType::F16 || t == DType::BF16) {
        auto* h = reinterpret_cast<uint16_t*>(dst);
        for (int64_t k = 0; k < cols; ++k)
          h[k] = t == DType::F16 ? f32_to_f16(f[r * cols + k]) : f32_to_bf16(f[r * cols + k]);
      } else {
        quant::quantize_row(t, f.data() + r * cols, cols, dst);
      }
    }
    const gpu::DeviceWeight W = gpu::upload_weight(w.data(), t, rows, cols);
    for (int32_t tok : {0, 9, 36}) {
      gpu::StepArgs a{tok, 0};
      gpu::DeviceBuffer ad(sizeof a), x(cols * 4);
      ad.upload(&a, sizeof a);
      gpu::embed_row(s(), W, ad.as<const gpu::StepArgs>(), 33.941125f, x.as<float>());
      s().sync();
      std::vector<float> ref(static_cast<size_t>(cols));
      cpu::to_f32(w.data() + tok * rb, t, static_cast<size_t>(cols), ref.data());
      for (auto& v : ref) v *= 33.941125f;
      const std::vector<float> got = to_host<float>(x, static_cast<size_t>(cols));
      ASSERT_EQ(0, std::memcmp(got.data(), ref.data(), ref.size() * 4)) << dtype_name(t) << " token " << tok;
    }
  }
}

struct HeadCase {
  int nh, nkv, hd, pos;
  bool norm;
  gpu::KVElem kv;
};

TEST_F(CudaDecodeKernels, QkvHeadsMatchRmsnormRopeAndTheKvWrite) {
  const HeadCase cases[] = {{4, 1, 256, 700, true, gpu::KVElem::F16},  // gemma-3-1b
                            {8, 4, 256, 3, false, gpu::KVElem::BF16},  // gemma-2-2b (no q/k norm)
                            {4, 1, 64, 0, true, gpu::KVElem::F32},     // tiny-gemma3
                            {8, 2, 128, 4095, true, gpu::KVElem::F16}};
  for (const HeadCase& c : cases) {
    const int max_tokens = c.pos + 2;
    const int64_t qn = c.nh * c.hd, kn = c.nkv * c.hd;
    const std::vector<float> qkv = random_vec(static_cast<size_t>(qn + 2 * kn), 100 + c.hd, 2.0f);
    std::vector<float> qw = random_vec(c.hd, 5, 0.3f), kw = random_vec(c.hd, 6, 0.3f);
    std::vector<float> inv(c.hd / 2);
    ops::rope_inv_freq(c.hd == 64 ? 1e6f : 10000.0f, c.hd, 1.0f, inv.data());
    // CPU: rmsnorm per head with (1 + w), RoPE at pos.
    std::vector<float> q(qkv.begin(), qkv.begin() + qn), k(qkv.begin() + qn, qkv.begin() + qn + kn);
    const std::vector<float> v(qkv.begin() + qn + kn, qkv.end());
    if (c.norm) {
      ops::rmsnorm(q.data(), c.nh, c.hd, qw.data(), DType::F32, 1.0f, 1e-6f, q.data());
      ops::rmsnorm(k.data(), c.nkv, c.hd, kw.data(), DType::F32, 1.0f, 1e-6f, k.data());
    }
    const int32_t pos = c.pos;
    ops::rope(q.data(), 1, c.nh, c.hd, c.hd, &pos, inv.data());
    ops::rope(k.data(), 1, c.nkv, c.hd, c.hd, &pos, inv.data());

    gpu::QKVHeadArgs a;
    a.n_heads = c.nh;
    a.n_kv_heads = c.nkv;
    a.head_dim = c.hd;
    a.rope_dims = c.hd;
    gpu::DeviceBuffer qwd = to_device(qw), kwd = to_device(kw), invd = to_device(inv), qkvd = to_device(qkv);
    a.q_norm_dev = c.norm ? qwd.as<const float>() : nullptr;
    a.k_norm_dev = c.norm ? kwd.as<const float>() : nullptr;
    a.inv_freq_dev = invd.as<const float>();
    a.kv = c.kv;
    const size_t eb = c.kv == gpu::KVElem::F32 ? 4 : 2;
    gpu::DeviceBuffer kc(static_cast<size_t>(max_tokens) * kn * eb), vc(static_cast<size_t>(max_tokens) * kn * eb);
    gpu::DeviceBuffer qo(qn * 4), ad(sizeof(gpu::StepArgs));
    const gpu::StepArgs sa{0, c.pos};
    ad.upload(&sa, sizeof sa);
    gpu::qkv_heads(s(), a, qkvd.as<const float>(), ad.as<const gpu::StepArgs>(), qo.as<float>(), kc.data(), vc.data());
    s().sync();
    const std::vector<float> gq = to_host<float>(qo, static_cast<size_t>(qn));
    const float R = std::max(max_abs(q), max_abs(k));
    for (int64_t i = 0; i < qn; ++i) ASSERT_NEAR(gq[i], q[i], 1e-5f * R) << "q " << i << " hd " << c.hd;
    const std::vector<float> all_k = kv_from_device(kc, static_cast<size_t>(max_tokens) * kn, c.kv);
    const std::vector<float> all_v = kv_from_device(vc, static_cast<size_t>(max_tokens) * kn, c.kv);
    const float unit = c.kv == gpu::KVElem::BF16 ? 1.0f / 256 : c.kv == gpu::KVElem::F16 ? 1.0f / 1024 : 0.0f;
    for (int64_t i = 0; i < kn; ++i) {
      const float gk = all_k[static_cast<size_t>(c.pos) * kn + i];
      ASSERT_NEAR(gk, kv_round(k[i], c.kv), unit * std::fabs(k[i]) + 1e-5f * R) << "k " << i << " hd " << c.hd;
      ASSERT_EQ(all_v[static_cast<size_t>(c.pos) * kn + i], kv_round(v[i], c.kv)) << "v " << i;
    }
  }
}

struct AttnCase {
  int nh, nkv, hd, pos, window, splits;
  float softcap;
  gpu::KVElem kv;
};

TEST_F(CudaDecodeKernels, AttentionMatchesTheCpuAttention) {
  const AttnCase cases[] = {
      {4, 1, 256, 639, 0, 20, 0.0f, gpu::KVElem::F16},     // gemma-3-1b global, 640 keys
      {4, 1, 256, 900, 512, 29, 0.0f, gpu::KVElem::F16},   // sliding window 512
      {8, 4, 256, 200, 4096, 7, 50.0f, gpu::KVElem::BF16}, // gemma-2: attention soft-cap
      {4, 1, 64, 0, 128, 16, 0.0f, gpu::KVElem::F32},      // first token, more splits than keys
      {4, 2, 64, 130, 128, 1, 50.0f, gpu::KVElem::F32},    // one split, window cuts
      {16, 8, 128, 77, 0, 3, 0.0f, gpu::KVElem::F16},
  };
  for (const AttnCase& c : cases) {
    const int n_pos = c.pos + 1;
    const int64_t qn = c.nh * c.hd, kn = c.nkv * c.hd;
    const std::vector<float> q = random_vec(static_cast<size_t>(qn), 7 + c.pos, 1.0f);
    std::vector<float> k = random_vec(static_cast<size_t>(n_pos) * kn, 8 + c.pos, 1.0f);
    std::vector<float> v = random_vec(static_cast<size_t>(n_pos) * kn, 9 + c.pos, 1.0f);
    for (auto& x : k) x = kv_round(x, c.kv);
    for (auto& x : v) x = kv_round(x, c.kv);
    ops::AttentionParams p;
    p.n_heads = c.nh;
    p.n_kv_heads = c.nkv;
    p.head_dim = c.hd;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    p.softcap = c.softcap;
    p.window = c.window;
    const int32_t pos = c.pos;
    std::vector<float> ref(static_cast<size_t>(qn));
    ops::attention(q.data(), 1, &pos, k.data(), v.data(), p, ref.data());

    auto store = [&](const std::vector<float>& x) {
      if (c.kv == gpu::KVElem::F32) return to_device(x);
      std::vector<uint16_t> h(x.size());
      for (size_t i = 0; i < x.size(); ++i) h[i] = c.kv == gpu::KVElem::F16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
      return to_device(h);
    };
    gpu::DeviceBuffer kd = store(k), vd = store(v), qd = to_device(q), ad(sizeof(gpu::StepArgs));
    const gpu::StepArgs sa{0, c.pos};
    ad.upload(&sa, sizeof sa);
    gpu::AttentionArgs a;
    a.n_heads = c.nh;
    a.n_kv_heads = c.nkv;
    a.head_dim = c.hd;
    a.scale = p.scale;
    a.softcap = c.softcap;
    a.window = c.window;
    a.n_splits = c.splits;
    a.kv = c.kv;
    gpu::DeviceBuffer part(gpu::attention_partial_floats(c.nh, c.hd, c.splits) * 4), out(qn * 4),
        act(gpu::act_q8_bytes(qn));
    gpu::attention_decode(s(), a, qd.as<const float>(), kd.data(), vd.data(), ad.as<const gpu::StepArgs>(),
                          part.as<float>(), out.as<float>(), act.data());
    s().sync();
    const std::vector<float> got = to_host<float>(out, static_cast<size_t>(qn));
    const float R = max_abs(ref);
    for (int64_t i = 0; i < qn; ++i)
      ASSERT_NEAR(got[i], ref[i], 2e-5f * R) << "i " << i << " pos " << c.pos << " splits " << c.splits;
    std::vector<cpu::ActQ8> qref(static_cast<size_t>(qn / 32));
    cpu::quantize_act_row(DType::Q8_0, got.data(), qn, qref.data());
    const std::vector<uint8_t> h = to_host<uint8_t>(act, act.bytes());
    for (int64_t b = 0; b < qn / 32; ++b) {
      ASSERT_EQ(0, std::memcmp(h.data() + b * 32, qref[b].qs, 32)) << "block " << b;
      float d;
      std::memcpy(&d, h.data() + qn + b * 8, 4);
      ASSERT_EQ(d, qref[b].d) << "block " << b;
    }
  }
}

TEST_F(CudaDecodeKernels, ResidualNormMatchesNormAddNorm) {
  for (int64_t n : {256, 1152, 2304}) {
    std::vector<float> x = random_vec(static_cast<size_t>(n), 20, 3.0f);
    const std::vector<float> proj = random_vec(static_cast<size_t>(n), 21, 0.5f);
    const std::vector<float> wp = random_vec(static_cast<size_t>(n), 22, 0.2f), wn = random_vec(static_cast<size_t>(n), 23, 0.2f);
    gpu::DeviceBuffer xd = to_device(x), pd = to_device(proj), wpd = to_device(wp), wnd = to_device(wn), y(n * 4),
        act(gpu::act_q8_bytes(n));
    gpu::residual_norm(s(), n, xd.as<float>(), pd.as<const float>(), wpd.as<const float>(), wnd.as<const float>(), 1.0f,
                       1e-6f, y.as<float>(), act.data());
    s().sync();
    std::vector<float> t(static_cast<size_t>(n)), yr(static_cast<size_t>(n));
    ops::rmsnorm(proj.data(), 1, n, wp.data(), DType::F32, 1.0f, 1e-6f, t.data());
    ops::add_inplace(x.data(), t.data(), n);
    ops::rmsnorm(x.data(), 1, n, wn.data(), DType::F32, 1.0f, 1e-6f, yr.data());
    const std::vector<float> gx = to_host<float>(xd, static_cast<size_t>(n)), gy = to_host<float>(y, static_cast<size_t>(n));
    const float Rx = max_abs(x), Ry = max_abs(yr);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(gx[i], x[i], 1e-5f * Rx) << "x " << i;
      ASSERT_NEAR(gy[i], yr[i], 1e-5f * Ry) << "y " << i;
    }
    std::vector<cpu::ActQ8> qref(static_cast<size_t>(n / 32));
    cpu::quantize_act_row(DType::Q8_0, gy.data(), n, qref.data());
    const std::vector<uint8_t> h = to_host<uint8_t>(act, act.bytes());
    for (int64_t b = 0; b < n / 32; ++b) ASSERT_EQ(0, std::memcmp(h.data() + b * 32, qref[b].qs, 32)) << "block " << b;
  }
}

TEST_F(CudaDecodeKernels, GeluMulMatchesTheCpu) {
  for (int64_t n : {1024, 6912}) {
    std::vector<float> gu = random_vec(static_cast<size_t>(2 * n), 30, 2.0f);
    gpu::DeviceBuffer gd = to_device(gu), out(n * 4), act(gpu::act_q8_bytes(n));
    gpu::gelu_mul(s(), gd.as<const float>(), n, out.as<float>(), act.data());
    s().sync();
    std::vector<float> ref(static_cast<size_t>(n));
    ops::gelu_tanh_mul(gu.data(), gu.data() + n, n, ref.data());
    const std::vector<float> got = to_host<float>(out, static_cast<size_t>(n));
    const float R = max_abs(ref);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], ref[i], 2e-6f * std::fabs(ref[i]) + 1e-7f * R) << i;
    std::vector<cpu::ActQ8> qref(static_cast<size_t>(n / 32));
    cpu::quantize_act_row(DType::Q8_0, got.data(), n, qref.data());
    const std::vector<uint8_t> h = to_host<uint8_t>(act, act.bytes());
    for (int64_t b = 0; b < n / 32; ++b) ASSERT_EQ(0, std::memcmp(h.data() + b * 32, qref[b].qs, 32)) << "block " << b;
  }
}

// Norm weights of Gemma 4 (plain scale, w_offset 0): uniform in [0.9, 1.1).
std::vector<float> around_one(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(0.9f, 1.1f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Bytes of a device buffer all equal to `b` (a cache nothing may write).
bool all_bytes(const gpu::DeviceBuffer& d, uint8_t b) {
  const std::vector<uint8_t> h = to_host<uint8_t>(d, d.bytes());
  return std::all_of(h.begin(), h.end(), [b](uint8_t x) { return x == b; });
}

struct G4HeadCase {
  int nh, nkv, hd, rope_pairs, pos;
  bool v_norm, v_from_k, q_only;
  gpu::KVElem kv;
};

TEST_F(CudaDecodeKernels, QkvHeadsGemma4VNormKEqVAndQOnly) {
  const float nan = std::nanf("");
  const G4HeadCase cases[] = {
      {8, 1, 256, 128, 37, true, false, false, gpu::KVElem::F16},   // gemma-4-e2b sliding layer
      {8, 1, 512, 64, 600, true, false, false, gpu::KVElem::BF16},  // e2b full layer: hd 512, 64 rotated pairs
      {4, 1, 128, 16, 5, true, true, false, gpu::KVElem::F32},      // K=V full layer (v_norm of the raw k)
      {8, 2, 256, 128, 11, true, true, false, gpu::KVElem::F16},
      {8, 2, 256, 128, 0, false, true, false, gpu::KVElem::BF16},   // v_from_k alone: V = raw k, rounded
      {8, 1, 512, 64, 900, false, false, true, gpu::KVElem::F16},   // KV-shared layer: q heads only
      {4, 2, 256, 128, 3, true, false, true, gpu::KVElem::F32},     // q_only wins over v_norm
  };
  for (const G4HeadCase& c : cases) {
    const int max_tokens = c.pos + 2;
    const int64_t qn = c.nh * c.hd, kn = c.nkv * c.hd;
    std::vector<float> qkv = random_vec(static_cast<size_t>(qn + 2 * kn), 200 + c.hd + c.pos, 2.0f);
    // What the kernel must not read is NaN: the v slot (v_from_k), the k and v slots (q_only).
    if (c.v_from_k || c.q_only) std::fill(qkv.begin() + qn + kn, qkv.end(), nan);
    if (c.q_only) std::fill(qkv.begin() + qn, qkv.begin() + qn + kn, nan);
    const std::vector<float> qw = around_one(c.hd, 7), kw = around_one(c.hd, 8);
    std::vector<float> inv(c.hd / 2);
    ops::rope_inv_freq(c.rope_pairs == c.hd / 2 ? 10000.0f : 1e6f, c.hd, 1.0f, inv.data());
    std::fill(inv.begin() + c.rope_pairs, inv.end(), 0.0f);  // as Model builds them (proportional RoPE)
    // CPU (attention_block.cpp's project_qkv): V from the raw k when v_from_k, then q/k norms
    // with w (offset 0) and RoPE, V scale-less rmsnorm when v_norm.
    std::vector<float> q(qkv.begin(), qkv.begin() + qn), k(qkv.begin() + qn, qkv.begin() + qn + kn);
    std::vector<float> v = c.v_from_k ? k : std::vector<float>(qkv.begin() + qn + kn, qkv.end());
    const int32_t pos = c.pos;
    ops::rmsnorm(q.data(), c.nh, c.hd, qw.data(), DType::F32, 0.0f, 1e-6f, q.data());
    ops::rope(q.data(), 1, c.nh, c.hd, c.hd, &pos, inv.data());
    if (!c.q_only) {
      ops::rmsnorm(k.data(), c.nkv, c.hd, kw.data(), DType::F32, 0.0f, 1e-6f, k.data());
      ops::rope(k.data(), 1, c.nkv, c.hd, c.hd, &pos, inv.data());
      if (c.v_norm) ops::rmsnorm(v.data(), c.nkv, c.hd, nullptr, DType::F32, 0.0f, 1e-6f, v.data());
    }

    gpu::QKVHeadArgs a;
    a.n_heads = c.nh;
    a.n_kv_heads = c.nkv;
    a.head_dim = c.hd;
    a.rope_dims = c.hd;
    gpu::DeviceBuffer qwd = to_device(qw), kwd = to_device(kw), invd = to_device(inv), qkvd = to_device(qkv);
    a.q_norm_dev = qwd.as<const float>();
    a.k_norm_dev = c.q_only ? nullptr : kwd.as<const float>();
    a.w_offset = 0.0f;
    a.inv_freq_dev = invd.as<const float>();
    a.kv = c.kv;
    a.v_norm = c.v_norm;
    a.v_from_k = c.v_from_k;
    a.q_only = c.q_only;
    const size_t eb = c.kv == gpu::KVElem::F32 ? 4 : 2, cache_bytes = static_cast<size_t>(max_tokens) * kn * eb;
    constexpr uint8_t kSentinel = 0x5a;
    gpu::DeviceBuffer kc(cache_bytes), vc(cache_bytes), qo(qn * 4), ad(sizeof(gpu::StepArgs));
    const std::vector<uint8_t> fill(cache_bytes, kSentinel);
    kc.upload(fill.data(), cache_bytes);
    vc.upload(fill.data(), cache_bytes);
    const gpu::StepArgs sa{0, c.pos};
    ad.upload(&sa, sizeof sa);
    gpu::qkv_heads(s(), a, qkvd.as<const float>(), ad.as<const gpu::StepArgs>(), qo.as<float>(), kc.data(), vc.data());
    s().sync();
    const std::string what = "hd " + std::to_string(c.hd) + " pos " + std::to_string(c.pos) + (c.v_norm ? " v_norm" : "") +
                             (c.v_from_k ? " v_from_k" : "") + (c.q_only ? " q_only" : "");
    const std::vector<float> gq = to_host<float>(qo, static_cast<size_t>(qn));
    const float Rq = max_abs(q);
    for (int64_t i = 0; i < qn; ++i) ASSERT_NEAR(gq[i], q[i], 1e-5f * Rq) << "q " << i << " " << what;
    if (c.q_only) {
      EXPECT_TRUE(all_bytes(kc, kSentinel)) << "q_only wrote the K cache, " << what;
      EXPECT_TRUE(all_bytes(vc, kSentinel)) << "q_only wrote the V cache, " << what;
      // A KV-shared layer has no caches of its own: null is accepted.
      gpu::qkv_heads(s(), a, qkvd.as<const float>(), ad.as<const gpu::StepArgs>(), qo.as<float>(), nullptr, nullptr);
      s().sync();
      EXPECT_EQ(to_host<float>(qo, static_cast<size_t>(qn)), gq) << what;
      continue;
    }
    // Rows other than pos keep the sentinel.
    const std::vector<uint8_t> kb = to_host<uint8_t>(kc, cache_bytes), vb = to_host<uint8_t>(vc, cache_bytes);
    const size_t row = static_cast<size_t>(kn) * eb;
    for (size_t i = 0; i < cache_bytes; ++i)
      if (i / row != static_cast<size_t>(c.pos)) {
        ASSERT_EQ(kb[i], kSentinel) << "K byte " << i << " outside row pos, " << what;
        ASSERT_EQ(vb[i], kSentinel) << "V byte " << i << " outside row pos, " << what;
      }
    const std::vector<float> all_k = kv_from_device(kc, static_cast<size_t>(max_tokens) * kn, c.kv);
    const std::vector<float> all_v = kv_from_device(vc, static_cast<size_t>(max_tokens) * kn, c.kv);
    const float u = c.kv == gpu::KVElem::BF16 ? 1.0f / 256 : c.kv == gpu::KVElem::F16 ? 1.0f / 2048 : 0.0f;
    const float Rk = max_abs(k), Rv = max_abs(v);
    for (int64_t i = 0; i < kn; ++i) {
      const float gk = all_k[static_cast<size_t>(c.pos) * kn + i], gv = all_v[static_cast<size_t>(c.pos) * kn + i];
      ASSERT_NEAR(gk, k[i], u * std::fabs(k[i]) + 1.1e-5f * Rk) << "k " << i << " " << what;
      if (c.v_norm) {
        ASSERT_NEAR(gv, v[i], u * std::fabs(v[i]) + 1.1e-5f * Rv) << "v " << i << " " << what;
      } else {
        ASSERT_EQ(gv, kv_round(v[i], c.kv)) << "v " << i << " " << what;
      }
    }
  }
}

TEST_F(CudaDecodeKernels, ResidualNormGemma4ScaleAndNoNextNorm) {
  for (int64_t n : {256, 1536, 2560}) {
    for (const bool next : {true, false}) {
      const float scale = next ? 0.73f : 0.41f, off = 0.0f;
      std::vector<float> x = random_vec(static_cast<size_t>(n), 40 + next, 3.0f);
      const std::vector<float> proj = random_vec(static_cast<size_t>(n), 41, 0.5f);
      const std::vector<float> wp = around_one(static_cast<size_t>(n), 42), wn = around_one(static_cast<size_t>(n), 43);
      gpu::DeviceBuffer xd = to_device(x), pd = to_device(proj), wpd = to_device(wp), wnd = to_device(wn), y(n * 4),
          act(gpu::act_q8_bytes(n));
      gpu::residual_norm(s(), n, xd.as<float>(), pd.as<const float>(), wpd.as<const float>(),
                         next ? wnd.as<const float>() : nullptr, off, 1e-6f, y.as<float>(), act.data(), scale);
      s().sync();
      // CPU: x = (x + rmsnorm(proj; wp))·scale (model.cpp's add, then layer_scalar's multiply), y = rmsnorm(x; wn).
      std::vector<float> t(static_cast<size_t>(n)), yr(static_cast<size_t>(n));
      ops::rmsnorm(proj.data(), 1, n, wp.data(), DType::F32, off, 1e-6f, t.data());
      ops::add_inplace(x.data(), t.data(), n);
      for (auto& v : x) v *= scale;
      if (next) ops::rmsnorm(x.data(), 1, n, wn.data(), DType::F32, off, 1e-6f, yr.data());
      else yr = x;
      const std::vector<float> gx = to_host<float>(xd, static_cast<size_t>(n)), gy = to_host<float>(y, static_cast<size_t>(n));
      const float Rx = max_abs(x), Ry = max_abs(yr);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(gx[i], x[i], 1e-5f * Rx) << "x " << i << " n " << n << " next " << next;
        ASSERT_NEAR(gy[i], yr[i], 1e-5f * Ry) << "y " << i << " n " << n << " next " << next;
      }
      if (!next) {
        EXPECT_EQ(gy, gx) << "w_next null: y must be the new x, n " << n;
      }
      std::vector<cpu::ActQ8> qref(static_cast<size_t>(n / 32));
      cpu::quantize_act_row(DType::Q8_0, gy.data(), n, qref.data());
      const std::vector<uint8_t> h = to_host<uint8_t>(act, act.bytes());
      for (int64_t b = 0; b < n / 32; ++b) {
        ASSERT_EQ(0, std::memcmp(h.data() + b * 32, qref[b].qs, 32)) << "block " << b << " n " << n;
        float d;
        std::memcpy(&d, h.data() + n + b * 8, 4);
        ASSERT_EQ(d, qref[b].d) << "block " << b << " n " << n;
      }
    }
  }
}

TEST_F(CudaDecodeKernels, GeluMulByMatchesTheCpu) {
  for (int64_t n : {256, 1536, 6144}) {
    const std::vector<float> gate = random_vec(static_cast<size_t>(n), 50, 2.0f), up = random_vec(static_cast<size_t>(n), 51);
    gpu::DeviceBuffer gd = to_device(gate), ud = to_device(up), out(n * 4), act(gpu::act_q8_bytes(n)),
        act2(gpu::act_q8_bytes(n));
    gpu::gelu_mul_by(s(), gd.as<const float>(), ud.as<const float>(), n, out.as<float>(), act.data());
    gpu::gelu_mul_by(s(), gd.as<const float>(), ud.as<const float>(), n, nullptr, act2.data());  // act only
    s().sync();
    std::vector<float> ref(static_cast<size_t>(n));
    ops::gelu_tanh_mul(gate.data(), up.data(), n, ref.data());
    const std::vector<float> got = to_host<float>(out, static_cast<size_t>(n));
    const float R = max_abs(ref);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], ref[i], 2e-6f * std::fabs(ref[i]) + 1e-7f * R) << i << " n " << n;
    std::vector<cpu::ActQ8> qref(static_cast<size_t>(n / 32));
    cpu::quantize_act_row(DType::Q8_0, got.data(), n, qref.data());
    const std::vector<uint8_t> h = to_host<uint8_t>(act, act.bytes());
    for (int64_t b = 0; b < n / 32; ++b) {
      ASSERT_EQ(0, std::memcmp(h.data() + b * 32, qref[b].qs, 32)) << "block " << b;
      float d;
      std::memcpy(&d, h.data() + n + b * 8, 4);
      ASSERT_EQ(d, qref[b].d) << "block " << b;
    }
    const size_t ab = static_cast<size_t>(n + n / 32 * 8);  // n int8, then n/32 {d, s}
    EXPECT_EQ(to_host<uint8_t>(act2, ab), std::vector<uint8_t>(h.begin(), h.begin() + ab)) << "out null changed act, n " << n;
  }
}

TEST_F(CudaDecodeKernels, BadShapesThrow) {
  gpu::QKVHeadArgs a;
  a.n_heads = 4;
  a.n_kv_heads = 1;
  a.head_dim = 48;  // not a multiple of 32
  EXPECT_THROW(gpu::qkv_heads(s(), a, nullptr, nullptr, nullptr, nullptr, nullptr), Error);
  gpu::AttentionArgs b;
  b.n_heads = 3;
  b.n_kv_heads = 2;
  b.head_dim = 64;
  EXPECT_THROW(gpu::attention_decode(s(), b, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), Error);
  EXPECT_THROW(gpu::gelu_mul(s(), nullptr, 33, nullptr, reinterpret_cast<void*>(16)), Error);
  EXPECT_THROW(gpu::gelu_mul_by(s(), nullptr, nullptr, 33, nullptr, reinterpret_cast<void*>(16)), Error);
  EXPECT_THROW(gpu::residual_norm(s(), 33, nullptr, nullptr, nullptr, nullptr, 0.0f, 1e-6f, nullptr,
                                  reinterpret_cast<void*>(16), 0.5f),
               Error);
}

}  // namespace
}  // namespace eg
