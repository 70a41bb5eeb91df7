// The fused decode kernels (src/backend/cuda/fused.h) against the CPU and float64 references on
// random non-zero inputs. Label "cuda"; every test skips itself when no GPU is present.
//
// Tolerances:
//  - input stage (residual + rmsnorm + rmsnorm, through an F16 identity weight, so y = h exactly):
//    |h − h_f64| ≤ 2e-6·|h_f64| + 1e-7·max|h_f64| (Σx² in another order); the residual written
//    back likewise.
//  - Q4_0 / Q8_0 fused matvec: the activation is the stage's h quantized as cpu::quantize_act_row
//    does; |y − y_f64(ŵ, ĥ)| ≤ 2e-5·Σ|ŵ·ĥ| (as cuda_kernels_test's matvec).
//  - GELU epilogue: gate/up within that bound each, propagated through gelu_tanh·up:
//    |Δy| ≤ 1.2·|u|·εg + |gelu(g)|·εu + 1e-6·|y|.
//  - GELU·m epilogue (Gemma 4's PLE gate): |Δy| ≤ 1.2·|m|·ε + 1e-6·|y|, ε the matvec bound.
//  - fused LM head: the chosen row's float64 logit within the matvec bound of the float64 max.
//  - fused attention: against qkv_heads + attention_decode (tested against ops::attention in
//    cuda_decode_kernels_test): outputs within 2e-6·R (other split boundaries and summation
//    order), K/V caches bit-identical, over a run of positions that the fused kernel itself
//    writes; the head counters are left at zero. Gemma 4 cases: norm offset 0, v_norm, K=V
//    (v_from_k) and KV-shared layers (q_only, reading a cache another call wrote).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/quant_kernels.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/decode_kernels.h"
#include "backend/cuda/fused.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace eg {
namespace {

namespace gpu = eg::cuda;

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = d(rng);
    if (x == 0.0f) x = 1e-3f;
  }
  return v;
}

std::vector<uint8_t> make_weight(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> f = random_vec(static_cast<size_t>(rows * cols), seed, 0.05f);
  const size_t rb = dtype_row_bytes(t, cols);
  std::vector<uint8_t> w(static_cast<size_t>(rows) * rb);
  for (int64_t n = 0; n < rows; ++n) {
    const float* src = f.data() + n * cols;
    uint8_t* dst = w.data() + static_cast<size_t>(n) * rb;
    if (t == DType::F16) {
      auto* h = reinterpret_cast<uint16_t*>(dst);
      for (int64_t k = 0; k < cols; ++k) h[k] = f32_to_f16(src[k]);
    } else {
      quant::quantize_row(t, src, cols, dst);
    }
  }
  return w;
}

std::vector<float> dequant(DType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const size_t rb = dtype_row_bytes(t, cols);
  for (int64_t n = 0; n < rows; ++n) quant::dequantize_row(t, w.data() + static_cast<size_t>(n) * rb, cols, out.data() + n * cols);
  return out;
}

std::vector<float> dequant_act(const std::vector<float>& x) {
  const int64_t K = static_cast<int64_t>(x.size());
  std::vector<cpu::ActQ8> a(static_cast<size_t>(K / 32));
  cpu::quantize_act_row(DType::Q8_0, x.data(), K, a.data());
  std::vector<float> xh(x.size());
  for (int64_t k = 0; k < K; ++k) xh[k] = a[k / 32].d * static_cast<float>(a[k / 32].qs[k % 32]);
  return xh;
}

template <class T>
gpu::DeviceBuffer to_device(const std::vector<T>& v) {
  gpu::DeviceBuffer b(v.size() * sizeof(T));
  b.upload(v.data(), v.size() * sizeof(T));
  return b;
}
template <class T>
std::vector<T> to_host(const gpu::DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  b.download(v.data(), n * sizeof(T));
  return v;
}

// float64 rmsnorm with the (1 + w) offset.
std::vector<double> rms64(const std::vector<double>& x, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * (1.0 + w[i]);
  return y;
}

class CudaFused : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device";
    stream_ = std::make_unique<gpu::Stream>(0);
  }
  gpu::Stream& s() { return *stream_; }
  std::unique_ptr<gpu::Stream> stream_;
};

// Inputs of one input stage of width K: p (the projection), r (the residual), the two norms.
struct Stage {
  std::vector<float> p, r, w_post, w_norm;
  gpu::DeviceBuffer dp, dr, dwp, dwn, dro;
  explicit Stage(int64_t K, uint32_t seed)
      : p(random_vec(K, seed, 3.0f)), r(random_vec(K, seed + 1)), w_post(random_vec(K, seed + 2, 0.3f)),
        w_norm(random_vec(K, seed + 3, 0.3f)), dp(to_device(p)), dr(to_device(r)), dwp(to_device(w_post)),
        dwn(to_device(w_norm)), dro(K * 4) {}
  // mode 0: h = p; 1: h = rmsnorm(p; w_norm); 2: v = r + rmsnorm(p; w_post) → r_out, h = rmsnorm(v; w_norm);
  // 3: as 2 with v ·= kScale (Gemma 4's layer scalar).
  static constexpr float kScale = 0.37f;
  gpu::MatvecInput input(int mode) {
    gpu::MatvecInput in;
    in.src_dev = dp.as<const float>();
    if (mode >= 1) in.w_norm_dev = dwn.as<const float>();
    if (mode >= 2) {
      in.residual_dev = dr.as<const float>();
      in.w_post_dev = dwp.as<const float>();
      in.residual_out_dev = dro.as<float>();
    }
    if (mode == 3) in.scale = kScale;
    in.w_offset = 1.0f;
    in.eps = 1e-6f;
    return in;
  }
  void reference(int mode, std::vector<double>* v, std::vector<double>* h) const {
    std::vector<double> pd(p.begin(), p.end());
    *v = pd;
    if (mode >= 2) {
      const std::vector<double> n = rms64(pd, w_post, 1e-6);
      const double sc = mode == 3 ? static_cast<double>(kScale) : 1.0;
      for (size_t i = 0; i < v->size(); ++i) (*v)[i] = (r[i] + n[i]) * sc;
    }
    *h = mode >= 1 ? rms64(*v, w_norm, 1e-6) : *v;
  }
};

// An F16 identity weight: y = h bit for bit (one non-zero product per row).
gpu::DeviceWeight identity_f16(int64_t K) {
  std::vector<uint16_t> w(static_cast<size_t>(K * K), 0);
  for (int64_t i = 0; i < K; ++i) w[static_cast<size_t>(i * K + i)] = f32_to_f16(1.0f);
  return gpu::upload_weight(w.data(), DType::F16, K, K);
}

// h as the GPU's input stage computes it (through the identity weight).
std::vector<float> stage_h(gpu::Stream& s, Stage& st, int mode, int64_t K) {
  const gpu::DeviceWeight I = identity_f16(K);
  gpu::DeviceBuffer y(K * 4);
  gpu::matvec_fused(s, I, st.input(mode), y.as<float>());
  s.sync();
  return to_host<float>(y, K);
}

TEST_F(CudaFused, InputStageMatchesFloat64) {
  // 6,144 (mode 0): 48 KiB of dynamic shared memory exactly (f32 activation + one scratch copy),
  // which with the kernel's static arrays passes the default limit (E2B's BF16 down projection
  // failed to launch with "invalid argument" until 2026-12-07).
  for (int64_t K : {1152, 2304, 96, 6144}) {
    for (int mode : {0, 1, 2, 3}) {
      SCOPED_TRACE("K " + std::to_string(K) + " mode " + std::to_string(mode));
      Stage st(K, 11 + static_cast<uint32_t>(K) + mode);
      const std::vector<float> h = stage_h(s(), st, mode, K);
      std::vector<double> v_ref, h_ref;
      st.reference(mode, &v_ref, &h_ref);
      double R = 0;
      for (double x : h_ref) R = std::max(R, std::fabs(x));
      for (int64_t i = 0; i < K; ++i) ASSERT_NEAR(h[i], h_ref[i], 2e-6 * std::fabs(h_ref[i]) + 1e-7 * R) << i;
      if (mode >= 2) {
        const std::vector<float> v = to_host<float>(st.dro, K);
        double Rv = 0;
        for (double x : v_ref) Rv = std::max(Rv, std::fabs(x));
        for (int64_t i = 0; i < K; ++i) ASSERT_NEAR(v[i], v_ref[i], 2e-6 * std::fabs(v_ref[i]) + 1e-7 * Rv) << i;
      }
    }
  }
}

TEST_F(CudaFused, QuantizedMatvecOnTheInputStageMatchesTheCpuScheme) {
  for (DType t : {DType::Q4_0, DType::Q8_0}) {
    for (int mode : {0, 2}) {
      const int64_t N = 1536, K = 1152;
      SCOPED_TRACE(std::string(dtype_name(t)) + " mode " + std::to_string(mode));
      Stage st(K, 40 + mode);
      const std::vector<float> h = stage_h(s(), st, mode, K);
      const std::vector<uint8_t> w = make_weight(t, N, K, 7);
      const gpu::DeviceWeight W = gpu::upload_weight(w.data(), t, N, K);
      gpu::DeviceBuffer y(N * 4);
      gpu::matvec_fused(s(), W, st.input(mode), y.as<float>());
      s().sync();
      const std::vector<float> yg = to_host<float>(y, N);
      const std::vector<float> wf = dequant(t, w, N, K), xh = dequant_act(h);
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0, S = 0;
        for (int64_t k = 0; k < K; ++k) {
          ref += static_cast<double>(wf[n * K + k]) * xh[k];
          S += std::fabs(static_cast<double>(wf[n * K + k]) * xh[k]);
        }
        ASSERT_NEAR(yg[n], ref, 2e-5 * S) << n;
      }
    }
  }
}

TEST_F(CudaFused, GeluEpilogueOfInterleavedGateUpMatchesTheCpu) {
  const int64_t I = 6912, K = 1152;
  for (DType t : {DType::Q4_0, DType::F16}) {
    SCOPED_TRACE(dtype_name(t));
    Stage st(K, 70);
    const std::vector<float> h = stage_h(s(), st, 2, K);
    const std::vector<uint8_t> g = make_weight(t, I, K, 8), u = make_weight(t, I, K, 9);
    const std::string il = gpu::interleave_gate_up(g.data(), u.data(), t, I, K);
    const gpu::DeviceWeight W = gpu::upload_weight(il.data(), t, 2 * I, K);
    gpu::DeviceBuffer y(I * 4);
    gpu::matvec_gelu_fused(s(), W, st.input(2), y.as<float>());
    s().sync();
    const std::vector<float> yg = to_host<float>(y, I);
    const std::vector<float> gf = dequant(t, g, I, K), uf = dequant(t, u, I, K);
    const std::vector<float> x = t == DType::F16 ? h : dequant_act(h);
    for (int64_t i = 0; i < I; ++i) {
      double gr = 0, ur = 0, Sg = 0, Su = 0;
      for (int64_t k = 0; k < K; ++k) {
        gr += static_cast<double>(gf[i * K + k]) * x[k];
        ur += static_cast<double>(uf[i * K + k]) * x[k];
        Sg += std::fabs(static_cast<double>(gf[i * K + k]) * x[k]);
        Su += std::fabs(static_cast<double>(uf[i * K + k]) * x[k]);
      }
      const double gl = 0.5 * gr * (1.0 + std::tanh(0.7978845608028654 * (gr + 0.044715 * gr * gr * gr)));
      const double ref = gl * ur;
      const double tol = 1.2 * std::fabs(ur) * 2e-5 * Sg + std::fabs(gl) * 2e-5 * Su + 1e-6 * std::fabs(ref) + 1e-9;
      ASSERT_NEAR(yg[i], ref, tol) << i;
    }
  }
  // Odd shapes are refused.
  std::vector<uint8_t> g6(6 * dtype_row_bytes(DType::Q4_0, 32));
  EXPECT_THROW(gpu::interleave_gate_up(g6.data(), g6.data(), DType::Q4_0, 6, 32), Error);
}

// Gemma 4's PLE gate: y = gelu_tanh(W·h)·m on the stage that applies a scaled joint (mode 3).
TEST_F(CudaFused, GeluByEpilogueMatchesFloat64) {
  const int64_t P = 256, K = 1536;
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::F16}) {
    SCOPED_TRACE(dtype_name(t));
    Stage st(K, 75);
    const std::vector<float> h = stage_h(s(), st, 3, K);
    const std::vector<uint8_t> w = make_weight(t, P, K, 12);
    const gpu::DeviceWeight W = gpu::upload_weight(w.data(), t, P, K);
    const std::vector<float> m = random_vec(P, 13, 2.0f);
    gpu::DeviceBuffer dm = to_device(m), y(P * 4);
    gpu::matvec_gelu_by_fused(s(), W, st.input(3), dm.as<const float>(), y.as<float>());
    s().sync();
    const std::vector<float> yg = to_host<float>(y, P);
    const std::vector<float> wf = dequant(t, w, P, K);
    const std::vector<float> x = t == DType::F16 ? h : dequant_act(h);
    for (int64_t i = 0; i < P; ++i) {
      double g = 0, S = 0;
      for (int64_t k = 0; k < K; ++k) {
        g += static_cast<double>(wf[i * K + k]) * x[k];
        S += std::fabs(static_cast<double>(wf[i * K + k]) * x[k]);
      }
      const double ref = 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * m[i];
      ASSERT_NEAR(yg[i], ref, 1.2 * std::fabs(m[i]) * 2e-5 * S + 1e-6 * std::fabs(ref) + 1e-9) << i;
    }
  }
  gpu::DeviceBuffer y(8);
  const std::vector<uint8_t> w = make_weight(DType::Q4_0, 8, 64, 1);
  const gpu::DeviceWeight W = gpu::upload_weight(w.data(), DType::Q4_0, 8, 64);
  gpu::MatvecInput in;
  in.src_dev = y.as<const float>();
  EXPECT_THROW(gpu::matvec_gelu_by_fused(s(), W, in, nullptr, y.as<float>()), Error);  // no multiplier
}

TEST_F(CudaFused, LmHeadOnTheInputStagePicksTheMaximum) {
  const int64_t V = 8200, K = 1152;  // a padded last tile
  Stage st(K, 90);
  const std::vector<float> h = stage_h(s(), st, 2, K);
  const std::vector<uint8_t> w = make_weight(DType::Q8_0, V, K, 10);
  const gpu::DeviceWeight W = gpu::upload_weight(w.data(), DType::Q8_0, V, K);
  gpu::DeviceBuffer res(8), logits(V * 4);
  for (float cap : {0.0f, 30.0f}) {
    res.zero();
    gpu::lm_head_argmax_fused(s(), W, st.input(2), cap, res.as<uint64_t>(), logits.as<float>());
    s().sync();
    const uint64_t key = to_host<uint64_t>(res, 1)[0];
    const gpu::ArgmaxResult r = gpu::decode_argmax(key);
    const std::vector<float> wf = dequant(DType::Q8_0, w, V, K), xh = dequant_act(h);
    double best = -1e300, at = 0, S_at = 0;
    for (int64_t n = 0; n < V; ++n) {
      double ref = 0, S = 0;
      for (int64_t k = 0; k < K; ++k) {
        ref += static_cast<double>(wf[n * K + k]) * xh[k];
        S += std::fabs(static_cast<double>(wf[n * K + k]) * xh[k]);
      }
      if (cap > 0) ref = cap * std::tanh(ref / cap);
      best = std::max(best, ref);
      if (n == r.id) {
        at = ref;
        S_at = S;
      }
    }
    ASSERT_GE(r.id, 0);
    ASSERT_LT(r.id, V);
    EXPECT_NEAR(at, best, 4e-5 * S_at + 1e-6);
    EXPECT_NEAR(to_host<float>(logits, V)[r.id], r.value, 0.0f);
  }
}

struct AttnCase {
  const char* name;
  int nh, nkv, hd, window, splits;
  float softcap;
  bool qk_norm;
  gpu::KVElem kv;
  int steps;
  // Gemma 4 (qkv_heads' flags): norm offset 0, V = rmsnorm without a weight, V from the raw k
  // projection, a KV-shared layer (q only: the cache is written by a "source" call first).
  bool gemma4 = false, v_norm = false, v_from_k = false, q_only = false;
  int tile_keys = 0;  // attention_cluster's tile (0: its default); 4 walks several tiles per CTA
  int max_t = 64;
};

TEST_F(CudaFused, AttentionEqualsTheSeparateKernels) {
  const AttnCase cases[] = {
      {"gemma-3-1b", 4, 1, 256, 0, 16, 0.0f, true, gpu::KVElem::F16, 40},
      {"gemma-3-1b window 16", 4, 1, 256, 16, 8, 0.0f, true, gpu::KVElem::F16, 40},
      {"gemma-2-2b", 8, 4, 256, 0, 3, 50.0f, false, gpu::KVElem::BF16, 20},
      {"tiny, more splits than keys", 4, 2, 64, 0, 64, 0.0f, true, gpu::KVElem::F32, 12},
      {"one split", 2, 1, 128, 0, 1, 0.0f, true, gpu::KVElem::F16, 10},
      {"head_dim 96 (E = 3), 8 kv heads", 8, 8, 96, 0, 5, 0.0f, true, gpu::KVElem::F16, 24},
      {"head_dim 512", 2, 1, 512, 0, 4, 0.0f, false, gpu::KVElem::BF16, 9},
      {"gemma-4 sliding, v_norm", 8, 1, 256, 16, 8, 0.0f, true, gpu::KVElem::F16, 30, true, true},
      {"gemma-4 full, K=V + v_norm", 8, 2, 512, 0, 6, 0.0f, true, gpu::KVElem::F16, 20, true, true, true},
      {"gemma-4 KV-shared (q only)", 8, 1, 256, 0, 8, 0.0f, true, gpu::KVElem::BF16, 20, true, true, false, true},
      {"gemma-4 KV-shared, window 8", 4, 2, 128, 8, 4, 0.0f, true, gpu::KVElem::F32, 20, true, true, false, true},
      {"gemma-3-1b, cluster tiles of 4", 4, 1, 256, 0, 16, 0.0f, true, gpu::KVElem::F16, 40, false, false, false,
       false, 4},
      {"gemma-4 K=V, window 24, tiles of 4", 8, 1, 512, 24, 6, 0.0f, true, gpu::KVElem::BF16, 40, true, true, true,
       false, 4},
      {"gemma-4 KV-shared, tiles of 8", 8, 1, 256, 0, 8, 0.0f, true, gpu::KVElem::F16, 30, true, true, false, true, 8},
      {"gemma-2-2b, 300 keys (several default tiles)", 8, 4, 256, 0, 32, 50.0f, false, gpu::KVElem::F16, 300, false,
       false, false, false, 0, 320},
  };
  // attention_cluster (sm_90) is checked against the same separate kernels where the device has it.
  gpu::QKVHeadArgs probe_q;
  gpu::AttentionArgs probe_a;
  probe_q.n_heads = probe_a.n_heads = 4;
  probe_q.n_kv_heads = probe_a.n_kv_heads = 1;
  probe_q.head_dim = probe_a.head_dim = 256;
  const bool cluster = gpu::attention_cluster_supported(probe_q, probe_a);
  if (!cluster) std::fprintf(stderr, "attention_cluster not supported on this device: not checked\n");
  for (const AttnCase& c : cases) {
    SCOPED_TRACE(c.name);
    const int max_t = c.max_t, hd = c.hd;
    const size_t eb = c.kv == gpu::KVElem::F32 ? 4 : 2;
    const size_t kv_bytes = static_cast<size_t>(max_t) * c.nkv * hd * eb;
    gpu::DeviceBuffer k1(kv_bytes), v1(kv_bytes), k2(kv_bytes), v2(kv_bytes), k3(kv_bytes), v3(kv_bytes);
    k1.zero(); v1.zero(); k2.zero(); v2.zero(); k3.zero(); v3.zero();
    const int qkv_n = (c.nh + 2 * c.nkv) * hd;
    gpu::DeviceBuffer qkv(qkv_n * 4), q(c.nh * hd * 4), out1(c.nh * hd * 4), out2(c.nh * hd * 4), out3(c.nh * hd * 4);
    const size_t act_bytes = static_cast<size_t>(c.nh) * hd + static_cast<size_t>(c.nh) * hd / 32 * 8;
    gpu::DeviceBuffer act3(act_bytes), act4(act_bytes);
    gpu::DeviceBuffer part(gpu::attention_partial_floats(c.nh, hd, c.splits) * 4);
    gpu::DeviceBuffer part2(gpu::attention_partial_floats(c.nh, hd, c.splits) * 4);
    gpu::DeviceBuffer counters(c.nh * 4);
    counters.zero();
    const std::vector<float> qn = random_vec(hd, 3, 0.3f), kn = random_vec(hd, 4, 0.3f);
    gpu::DeviceBuffer dqn = to_device(qn), dkn = to_device(kn);
    std::vector<float> inv(hd / 4);
    ops::rope_inv_freq(10000.0f, hd / 2, 1.0f, inv.data());
    gpu::DeviceBuffer dinv = to_device(inv);
    gpu::QKVHeadArgs qa;
    qa.n_heads = c.nh;
    qa.n_kv_heads = c.nkv;
    qa.head_dim = hd;
    qa.rope_dims = hd / 2;  // partial rotary: channels past rope_dims unchanged
    qa.q_norm_dev = c.qk_norm ? dqn.as<const float>() : nullptr;
    qa.k_norm_dev = c.qk_norm ? dkn.as<const float>() : nullptr;
    qa.inv_freq_dev = dinv.as<const float>();
    qa.kv = c.kv;
    if (c.gemma4) qa.w_offset = 0.0f;
    qa.v_norm = c.v_norm;
    qa.v_from_k = c.v_from_k;
    gpu::QKVHeadArgs qa_src = qa;  // the layer that owns the cache of a KV-shared one
    qa_src.v_from_k = false;
    qa.q_only = c.q_only;
    gpu::AttentionArgs aa;
    aa.n_heads = c.nh;
    aa.n_kv_heads = c.nkv;
    aa.head_dim = hd;
    aa.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    aa.softcap = c.softcap;
    aa.window = c.window;
    aa.n_splits = c.splits;
    aa.kv = c.kv;
    gpu::DeviceBuffer args(sizeof(gpu::StepArgs));
    for (int pos = 0; pos < c.steps; ++pos) {
      SCOPED_TRACE("pos " + std::to_string(pos));
      const gpu::StepArgs a{0, pos};
      args.upload(&a, sizeof a);
      qkv.upload(random_vec(qkv_n, 100 + pos, 2.0f).data(), qkv_n * 4);
      const auto* ad = args.as<const gpu::StepArgs>();
      if (c.q_only) {
        // The source layer writes position pos into both caches first (as earlier in the step).
        gpu::DeviceBuffer src(qkv_n * 4), q_src(c.nh * hd * 4);
        src.upload(random_vec(qkv_n, 500 + pos, 2.0f).data(), qkv_n * 4);
        gpu::qkv_heads(s(), qa_src, src.as<const float>(), ad, q_src.as<float>(), k1.data(), v1.data());
        gpu::qkv_heads(s(), qa_src, src.as<const float>(), ad, q_src.as<float>(), k2.data(), v2.data());
        gpu::qkv_heads(s(), qa_src, src.as<const float>(), ad, q_src.as<float>(), k3.data(), v3.data());
        s().sync();
      }
      gpu::qkv_heads(s(), qa, qkv.as<const float>(), ad, q.as<float>(), k1.data(), v1.data());
      gpu::attention_decode(s(), aa, q.as<const float>(), k1.data(), v1.data(), ad, part.as<float>(), out1.as<float>(), nullptr);
      gpu::AttentionArgs aa2 = aa;
      aa2.split_min_keys = c.splits > 4 ? 8 : 1;  // fewer splits used while the context is short
      gpu::attention_fused(s(), qa, aa2, qkv.as<const float>(), ad, k2.data(), v2.data(), part2.as<float>(),
                           counters.as<uint32_t>(), out2.as<float>());
      s().sync();
      const std::vector<float> o1 = to_host<float>(out1, c.nh * hd), o2 = to_host<float>(out2, c.nh * hd);
      float R = 0;
      for (float x : o1) R = std::max(R, std::fabs(x));
      for (size_t i = 0; i < o1.size(); ++i) ASSERT_NEAR(o2[i], o1[i], 2e-6f * R) << i;
      const std::vector<uint8_t> a1 = to_host<uint8_t>(k1, kv_bytes), a2 = to_host<uint8_t>(k2, kv_bytes);
      const std::vector<uint8_t> b1 = to_host<uint8_t>(v1, kv_bytes), b2 = to_host<uint8_t>(v2, kv_bytes);
      ASSERT_EQ(a1, a2);
      ASSERT_EQ(b1, b2);
      const std::vector<uint32_t> cnt = to_host<uint32_t>(counters, c.nh);
      for (uint32_t x : cnt) ASSERT_EQ(x, 0u);
      if (!cluster) continue;
      // Clusters of 8 and of 16 CTAs (the second writes the same K/V row again).
      // A cluster per q head (8 or 16 CTAs), or per KV group (every q head of it in one CTA).
      const int gq = c.nh / c.nkv;
      const std::vector<std::pair<int, int>> shapes = {{8, 1}, {16, 1}, {8, gq}};
      for (const auto& [ctas, hpc] : shapes) {
        SCOPED_TRACE("cluster of " + std::to_string(ctas) + ", " + std::to_string(hpc) + " heads per CTA");
        gpu::attention_cluster(s(), qa, aa, qkv.as<const float>(), ad, k3.data(), v3.data(), out3.as<float>(),
                               act3.data(), c.tile_keys, ctas, hpc);
        s().sync();
        const std::vector<float> o3 = to_host<float>(out3, c.nh * hd);
        for (size_t i = 0; i < o1.size(); ++i) ASSERT_NEAR(o3[i], o1[i], 4e-6f * R) << "cluster " << i;
        ASSERT_EQ(to_host<uint8_t>(k3, kv_bytes), a1);
        ASSERT_EQ(to_host<uint8_t>(v3, kv_bytes), b1);
        // Its quantized output is quantize_act of its f32 output, byte for byte.
        gpu::quantize_act(s(), out3.as<const float>(), static_cast<int64_t>(c.nh) * hd, act4.data());
        s().sync();
        ASSERT_EQ(to_host<uint8_t>(act3, act_bytes), to_host<uint8_t>(act4, act_bytes));
      }
    }
  }
}

TEST_F(CudaFused, BadArgumentsThrow) {
  const std::vector<uint8_t> w = make_weight(DType::Q4_0, 8, 64, 1);
  const gpu::DeviceWeight W = gpu::upload_weight(w.data(), DType::Q4_0, 8, 64);
  gpu::DeviceBuffer x(64 * 4), y(8 * 4);
  gpu::MatvecInput in;
  EXPECT_THROW(gpu::matvec_fused(s(), W, in, y.as<float>()), Error);  // no input
  in.src_dev = x.as<const float>();
  in.residual_dev = x.as<const float>();
  EXPECT_THROW(gpu::matvec_fused(s(), W, in, y.as<float>()), Error);  // residual without w_post
  in.w_post_dev = x.as<const float>();
  in.residual_out_dev = x.as<float>();
  EXPECT_THROW(gpu::matvec_fused(s(), W, in, y.as<float>()), Error);  // aliasing
  gpu::AttentionArgs aa;
  gpu::QKVHeadArgs qa;
  aa.n_heads = qa.n_heads = 4;
  aa.n_kv_heads = qa.n_kv_heads = 1;
  aa.head_dim = 64;
  qa.head_dim = 128;
  EXPECT_THROW(gpu::attention_fused(s(), qa, aa, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), Error);
  EXPECT_FALSE(gpu::attention_cluster_supported(qa, aa));  // head_dim differs
  EXPECT_THROW(gpu::attention_cluster(s(), qa, aa, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), Error);
  aa.head_dim = qa.head_dim = 160;  // head_dim / 32 = 5: no kernel
  EXPECT_FALSE(gpu::attention_cluster_supported(qa, aa));
}

}  // namespace
}  // namespace eg
