// Feed-forward sub-block: dense GeGLU MLP, and Gemma 4's mixture of experts beside it
// (gemma-architectures.md §0.2, §3.3.2 step 6, §3.3.5).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/kernels.h"
#include "model/blocks.h"
#include "ops/ops.h"

namespace eg::blocks {

namespace {

// y [T, H] = down(gelu_tanh(gate(h)) ⊙ up(h)) for h [T, H].
void mlp(int T, const ops::Weight& gate, const ops::Weight& up, const ops::Weight& down, const float* h,
         std::vector<float>& g, std::vector<float>& u, float* y) {
  const int64_t I = gate.rows;
  grow(g, static_cast<size_t>(T) * I);
  grow(u, static_cast<size_t>(T) * I);
  ops::matmul_fused(h, T, {{&gate, g.data()}, {&up, u.data()}});  // one dispatch
  ops::matmul_gelu_mul(g.data(), u.data(), T, down, y);  // the product is quantized row by row
}

// MoE(r) for every token: router on the un-normed residual, softmax over all experts, top-K,
// renormalise, × per-expert scale; experts read RMSNorm(r; pre_feedforward_layernorm_2).
void moe(const Step& st, const LayerWeights& w, const float* r, float* y) {
  const ModelConfig& cfg = st.cfg;
  ForwardScratch& s = st.s;
  const int T = st.T;
  const int64_t H = cfg.hidden_size, E = cfg.n_experts, K = cfg.top_k_experts, Im = cfg.moe_intermediate_size;
  const float eps = cfg.rms_norm_eps;
  grow(s.moe_in, static_cast<size_t>(T) * H);
  std::vector<float> z(H), scale(H), per_expert(E), logits(E), gu(2 * Im), ye(H);
  cpu::to_f32(w.router_scale.data, w.router_scale.dtype, H, scale.data());
  cpu::to_f32(w.per_expert_scale.data, w.per_expert_scale.dtype, E, per_expert.data());
  const float inv_sqrt_h = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
  norm_rows(r, T, w.pre_ffw_norm_2, 0.0f, eps, s.moe_in.data());
  std::vector<int> order(E);
  for (int t = 0; t < T; ++t) {
    const float* rt = r + static_cast<size_t>(t) * H;
    ops::rmsnorm(rt, 1, H, nullptr, DType::F32, 0.0f, eps, z.data());
    for (int64_t i = 0; i < H; ++i) z[i] = z[i] * scale[i] * inv_sqrt_h;
    ops::matmul(z.data(), 1, w.router, logits.data());
    ops::softmax(logits.data(), E);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int a, int b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    float top_sum = 0.0f;
    for (int64_t k = 0; k < K; ++k) top_sum += logits[order[k]];
    float* yt = y + static_cast<size_t>(t) * H;
    std::fill(yt, yt + H, 0.0f);
    const float* ut = s.moe_in.data() + static_cast<size_t>(t) * H;
    for (int64_t k = 0; k < K; ++k) {
      const int e = order[k];
      const float weight = logits[e] / top_sum * per_expert[e];
      ops::matmul(ut, 1, w.expert_gate_up(e, Im, H), gu.data());
      ops::gelu_tanh_mul(gu.data(), gu.data() + Im, Im, gu.data());
      ops::matmul(gu.data(), 1, w.expert_down(e, Im, H), ye.data());
      for (int64_t i = 0; i < H; ++i) yt[i] += weight * ye[i];
    }
  }
}

}  // namespace

void feed_forward(const Step& st, const LayerConfig& lc, const LayerWeights& w, float* x) {
  const ModelConfig& cfg = st.cfg;
  ForwardScratch& s = st.s;
  const int T = st.T;
  const int64_t H = cfg.hidden_size;
  const float eps = cfg.rms_norm_eps, off = cfg.norm_offset;
  grow(s.h, static_cast<size_t>(T) * H);
  grow(s.proj, static_cast<size_t>(T) * H);
  norm_rows(x, T, w.pre_ffw_norm, off, eps, s.h.data());
  mlp(T, w.gate, w.up, w.down, s.h.data(), s.gate, s.up, s.proj.data());
  if (cfg.n_experts > 0) {
    grow(s.moe_out, static_cast<size_t>(T) * H);
    moe(st, w, x, s.moe_out.data());
    norm_rows(s.proj.data(), T, w.post_ffw_norm_1, off, eps, s.proj.data());
    norm_rows(s.moe_out.data(), T, w.post_ffw_norm_2, off, eps, s.moe_out.data());
    ops::add_inplace(s.proj.data(), s.moe_out.data(), T * H);
  }
  norm_rows(s.proj.data(), T, w.post_ffw_norm, off, eps, s.proj.data());
  ops::add_inplace(x, s.proj.data(), T * H);
  (void)lc;
}

}  // namespace eg::blocks
