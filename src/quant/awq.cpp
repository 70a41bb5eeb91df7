// Activation-aware weight scaling (AWQ; Lin et al. 2023, arXiv:2306.00978). See awq.h.
#include "quant/awq.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "engine/perplexity.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace eg::quant {

const char* awq_slot_name(AwqSlot s) {
  switch (s) {
    case AwqSlot::Q: return "q";
    case AwqSlot::K: return "k";
    case AwqSlot::V: return "v";
    case AwqSlot::O: return "o";
    case AwqSlot::Gate: return "gate";
    case AwqSlot::Up: return "up";
    case AwqSlot::Down: return "down";
    case AwqSlot::InputNorm: return "input_norm";
    case AwqSlot::PreFfwNorm: return "pre_ffw_norm";
  }
  return "?";
}

std::string awq_hf_tensor_name(const std::string& prefix, int layer, AwqSlot s) {
  const std::string l = prefix + "layers." + std::to_string(layer) + ".";
  switch (s) {
    case AwqSlot::Q: return l + "self_attn.q_proj.weight";
    case AwqSlot::K: return l + "self_attn.k_proj.weight";
    case AwqSlot::V: return l + "self_attn.v_proj.weight";
    case AwqSlot::O: return l + "self_attn.o_proj.weight";
    case AwqSlot::Gate: return l + "mlp.gate_proj.weight";
    case AwqSlot::Up: return l + "mlp.up_proj.weight";
    case AwqSlot::Down: return l + "mlp.down_proj.weight";
    case AwqSlot::InputNorm: return l + "input_layernorm.weight";
    case AwqSlot::PreFfwNorm: return l + "pre_feedforward_layernorm.weight";
  }
  return l;
}

RowRoundTrip round_trip_of(DType t) {
  if (!is_quantized(t)) {
    return [t](const float* in, int64_t n, float* out) {
      if (t == DType::F32) {
        std::copy(in, in + n, out);
      } else if (t == DType::BF16) {
        for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(in[i]));
      } else {
        for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(f32_to_f16(in[i]));
      }
    };
  }
  return [t](const float* in, int64_t n, float* out) {
    std::vector<uint8_t> buf(dtype_row_bytes(t, n));
    quantize_row(t, in, n, buf.data());
    dequantize_row(t, buf.data(), n, out);
  };
}

const AwqTensor* AwqResult::find(int layer, AwqSlot slot) const {
  for (const AwqTensor& t : tensors)
    if (t.layer == layer && t.slot == slot) return &t;
  return nullptr;
}

namespace {

// y [S, N] = x [S, K] · W [N, K]ᵀ with the engine's deterministic f32 matmul.
void matmul_f32(const float* x, int64_t S, const float* W, int64_t N, int64_t K, float* y) {
  ops::Weight w{W, DType::F32, N, K};
  ops::matmul(x, S, w, y);
}

// Round trip of every row of W [N, K] into out (rows in parallel: each row independent).
void round_trip_rows(const float* W, int64_t N, int64_t K, const RowRoundTrip& q, float* out) {
  cpu::parallel_for(N, [&](int64_t n, int) { q(W + n * K, K, out + n * K); });
}

// Σ (a − b)² in double, per row in parallel then summed in row order (deterministic).
double sq_err(const float* a, const float* b, int64_t S, int64_t N) {
  std::vector<double> per(S);
  cpu::parallel_for(S, [&](int64_t s, int) {
    double e = 0;
    for (int64_t n = 0; n < N; ++n) {
      const double d = static_cast<double>(a[s * N + n]) - b[s * N + n];
      e += d * d;
    }
    per[s] = e;
  });
  double t = 0;
  for (double e : per) t += e;
  return t;
}

}  // namespace

AwqScaleSearch awq_search_scales(const std::vector<const float*>& weights, const std::vector<int64_t>& rows,
                                 int64_t K, const float* x, int64_t S, const std::vector<double>& mean_abs,
                                 int grid, const std::vector<RowRoundTrip>& q) {
  if (grid < 1) throw Error("awq: grid must be >= 1");
  if (weights.size() != rows.size() || weights.size() != q.size() || static_cast<int64_t>(mean_abs.size()) != K)
    throw Error("awq_search_scales: inconsistent arguments");
  const size_t m = weights.size();
  // Reference outputs x·W_iᵀ.
  std::vector<std::vector<float>> ref(m);
  for (size_t i = 0; i < m; ++i) {
    ref[i].resize(static_cast<size_t>(S * rows[i]));
    matmul_f32(x, S, weights[i], rows[i], K, ref[i].data());
  }
  std::vector<double> a(K);
  for (int64_t k = 0; k < K; ++k) a[k] = std::max(mean_abs[k], 1e-4);
  AwqScaleSearch best;
  best.err_best = std::numeric_limits<double>::infinity();
  std::vector<float> s(K), xs(static_cast<size_t>(S * K)), ws, wq, y;
  for (int g = 0; g <= grid; ++g) {
    const double alpha = static_cast<double>(g) / grid;
    double smax = 0, smin = std::numeric_limits<double>::infinity();
    std::vector<double> sd(K);
    for (int64_t k = 0; k < K; ++k) {
      sd[k] = std::pow(a[k], alpha);
      smax = std::max(smax, sd[k]);
      smin = std::min(smin, sd[k]);
    }
    const double norm = std::sqrt(smax * smin);
    for (int64_t k = 0; k < K; ++k) s[k] = g == 0 ? 1.0f : static_cast<float>(sd[k] / norm);
    for (int64_t t = 0; t < S; ++t)
      for (int64_t k = 0; k < K; ++k) xs[t * K + k] = x[t * K + k] / s[k];
    double err = 0;
    for (size_t i = 0; i < m; ++i) {
      const int64_t N = rows[i];
      ws.resize(static_cast<size_t>(N * K));
      wq.resize(ws.size());
      y.resize(static_cast<size_t>(S * N));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) ws[n * K + k] = weights[i][n * K + k] * s[k];
      round_trip_rows(ws.data(), N, K, q[i], wq.data());
      matmul_f32(xs.data(), S, wq.data(), N, K, y.data());
      err += sq_err(y.data(), ref[i].data(), S, N);
    }
    if (g == 0) best.err_plain = err;
    if (err < best.err_best) {
      best.err_best = err;
      best.alpha = static_cast<float>(alpha);
      best.scales = s;
    }
  }
  return best;
}

void awq_clip_weight(float* W, int64_t N, int64_t K, const float* x, int64_t S, int64_t block, int steps,
                     const RowRoundTrip& q) {
  if (block < 1 || K % block != 0) throw Error("awq clip: row length not a multiple of the block");
  if (steps < 1) throw Error("awq clip: steps must be >= 1");
  const int64_t nb = K / block;
  cpu::parallel_for(N, [&](int64_t n, int) {
    float* w = W + n * K;
    std::vector<float> orig(w, w + K), c(K), wq(K), amax(nb);
    std::vector<double> best(nb, std::numeric_limits<double>::infinity());
    std::vector<float> best_r(nb, 1.0f);
    for (int64_t b = 0; b < nb; ++b) {
      float mx = 0;
      for (int64_t k = b * block; k < (b + 1) * block; ++k) mx = std::max(mx, std::fabs(orig[k]));
      amax[b] = mx;
    }
    for (int i = 0; i <= steps; ++i) {
      const float r = 1.0f - 0.5f * static_cast<float>(i) / static_cast<float>(steps);
      for (int64_t b = 0; b < nb; ++b) {
        const float lim = r * amax[b];
        for (int64_t k = b * block; k < (b + 1) * block; ++k) c[k] = std::clamp(orig[k], -lim, lim);
      }
      q(c.data(), K, wq.data());
      for (int64_t b = 0; b < nb; ++b) {
        double e = 0;
        for (int64_t t = 0; t < S; ++t) {
          double d = 0;
          const float* xt = x + t * K;
          for (int64_t k = b * block; k < (b + 1) * block; ++k)
            d += static_cast<double>(xt[k]) * (static_cast<double>(wq[k]) - orig[k]);
          e += d * d;
        }
        if (e < best[b]) {
          best[b] = e;
          best_r[b] = r;
        }
      }
    }
    for (int64_t b = 0; b < nb; ++b) {
      const float lim = best_r[b] * amax[b];
      for (int64_t k = b * block; k < (b + 1) * block; ++k) w[k] = std::clamp(orig[k], -lim, lim);
    }
  });
}

std::vector<int32_t> awq_calibration_tokens(const Tokenizer& tok, const std::string& text, int64_t n_tokens) {
  std::vector<int32_t> s = document_stream(tok, text);
  if (static_cast<int64_t>(s.size()) > n_tokens) s.resize(static_cast<size_t>(std::max<int64_t>(n_tokens, 0)));
  return s;
}

}  // namespace eg::quant
