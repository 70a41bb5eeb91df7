// Gemma 4 per-layer embeddings (PLE; E2B/E4B): gemma-architectures.md §3.3.1 and §3.3.2 step 7;
// transformers modeling_gemma4.py (get_per_layer_inputs / project_per_layer_inputs).
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "model/blocks.h"
#include "ops/ops.h"

namespace eg::blocks {

void ple_inputs(const Step& st, const ModelWeights& w, const int32_t* tokens, const float* x0, float* ple) {
  const ModelConfig& cfg = st.cfg;
  const int T = st.T;
  const int64_t H = cfg.hidden_size, P = cfg.ple_dim, LP = static_cast<int64_t>(cfg.n_layers) * P;
  // Context part: (x0 · W_plmpᵀ) · H^-0.5, RMSNorm (plain scale) per layer slice of width P.
  ops::matmul(x0, T, w.ple_model_proj, ple);
  const float proj_scale = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
  for (int64_t i = 0; i < T * LP; ++i) ple[i] *= proj_scale;
  ops::rmsnorm(ple, T * cfg.n_layers, P, w.ple_proj_norm.data, w.ple_proj_norm.dtype, 0.0f, cfg.rms_norm_eps, ple);
  // Token part: E_ple[id] · √P; then (context + token) · 2^-0.5.
  const float tok_scale = static_cast<float>(std::sqrt(static_cast<double>(P)));
  const float mix = static_cast<float>(std::pow(2.0, -0.5));
  const size_t row_bytes = dtype_row_bytes(w.ple_embed.dtype, LP);
  std::vector<float> row(LP);
  for (int t = 0; t < T; ++t) {
    cpu::to_f32(static_cast<const uint8_t*>(w.ple_embed.data) + tokens[t] * row_bytes, w.ple_embed.dtype, LP, row.data());
    float* pt = ple + static_cast<size_t>(t) * LP;
    for (int64_t i = 0; i < LP; ++i) pt[i] = (pt[i] + row[i] * tok_scale) * mix;
  }
}

void ple_block(const Step& st, int layer, const LayerWeights& w, const float* ple, float* x) {
  const ModelConfig& cfg = st.cfg;
  ForwardScratch& s = st.s;
  const int T = st.T;
  const int64_t H = cfg.hidden_size, P = cfg.ple_dim, LP = static_cast<int64_t>(cfg.n_layers) * P;
  if (s.gate.size() < static_cast<size_t>(T * P)) s.gate.resize(T * P);
  if (s.proj.size() < static_cast<size_t>(T * H)) s.proj.resize(T * H);
  ops::matmul(x, T, w.ple_gate, s.gate.data());  // [T, P]
  for (int t = 0; t < T; ++t)
    ops::gelu_tanh_mul(s.gate.data() + t * P, ple + t * LP + layer * P, P, s.gate.data() + t * P);
  ops::matmul(s.gate.data(), T, w.ple_proj, s.proj.data());  // [T, H]
  ops::rmsnorm(s.proj.data(), T, H, w.ple_post_norm.data, w.ple_post_norm.dtype, cfg.norm_offset,
               cfg.rms_norm_eps, s.proj.data());
  ops::add_inplace(x, s.proj.data(), T * H);
}

}  // namespace eg::blocks
