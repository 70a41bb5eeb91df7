#include "vision/siglip.h"

#include <cmath>

#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "ops/vision_ops.h"
#include "vision/tensor_bind.h"

namespace eg::vision {

SiglipTower::SiglipTower(const VisionConfig& cfg, const TensorStore& st) : cfg_(cfg) {
  if (cfg.kind != TowerKind::Siglip) throw Error("internal: SiglipTower needs a Gemma 3 vision config");
  const std::string V = find_tensor_prefix(st, {"vision_tower.vision_model.", "vision_tower.", "model.vision_tower."},
                                    "embeddings.patch_embedding.weight", "vision_tower");
  const std::string M = find_tensor_prefix(st, {"multi_modal_projector.", "model.multi_modal_projector."},
                                    "mm_input_projection_weight", "multi_modal_projector");
  const int64_t Hv = cfg.hidden, I = cfg.intermediate, ps = cfg.patch_size, H = cfg.text_hidden;
  const int64_t side = cfg.image_size / ps, P = side * side;
  auto mat = [&](const std::string& n, int64_t r, int64_t c) {
    const TensorInfo& t = need_tensor(st, n, {r, c});
    bytes_ += t.nbytes;
    return ops::Weight{t.data, t.dtype, r, c};
  };
  auto vec = [&](const std::string& n, int64_t len) {
    const TensorInfo& t = need_tensor(st, n, {len});
    bytes_ += t.nbytes;
    return Vec{t.data, t.dtype};
  };
  {
    const TensorInfo& t = need_tensor(st, V + "embeddings.patch_embedding.weight", {Hv, 3, ps, ps});
    bytes_ += t.nbytes;
    patch_ = ops::Weight{t.data, t.dtype, Hv, 3 * ps * ps};  // [out, (c, ky, kx)]
  }
  patch_bias_ = vec(V + "embeddings.patch_embedding.bias", Hv);
  pos_ = mat(V + "embeddings.position_embedding.weight", P, Hv);
  layers_.resize(cfg.layers);
  for (int i = 0; i < cfg.layers; ++i) {
    const std::string L = V + "encoder.layers." + std::to_string(i) + ".";
    Layer& l = layers_[i];
    l.q = mat(L + "self_attn.q_proj.weight", Hv, Hv);
    l.k = mat(L + "self_attn.k_proj.weight", Hv, Hv);
    l.v = mat(L + "self_attn.v_proj.weight", Hv, Hv);
    l.o = mat(L + "self_attn.out_proj.weight", Hv, Hv);
    l.bq = vec(L + "self_attn.q_proj.bias", Hv);
    l.bk = vec(L + "self_attn.k_proj.bias", Hv);
    l.bv = vec(L + "self_attn.v_proj.bias", Hv);
    l.bo = vec(L + "self_attn.out_proj.bias", Hv);
    l.fc1 = mat(L + "mlp.fc1.weight", I, Hv);
    l.fc2 = mat(L + "mlp.fc2.weight", Hv, I);
    l.b1 = vec(L + "mlp.fc1.bias", I);
    l.b2 = vec(L + "mlp.fc2.bias", Hv);
    l.ln1_w = vec(L + "layer_norm1.weight", Hv);
    l.ln1_b = vec(L + "layer_norm1.bias", Hv);
    l.ln2_w = vec(L + "layer_norm2.weight", Hv);
    l.ln2_b = vec(L + "layer_norm2.bias", Hv);
  }
  post_w_ = vec(V + "post_layernorm.weight", Hv);
  post_b_ = vec(V + "post_layernorm.bias", Hv);
  mm_norm_ = vec(M + "mm_soft_emb_norm.weight", Hv);
  const TensorInfo& proj = need_tensor(st, M + "mm_input_projection_weight", {Hv, H});
  bytes_ += proj.nbytes;
  std::vector<float> p(static_cast<size_t>(Hv * H));
  cpu::to_f32(proj.data, proj.dtype, p.size(), p.data());
  mm_proj_t_.resize(p.size());
  for (int64_t a = 0; a < Hv; ++a)
    for (int64_t b = 0; b < H; ++b) mm_proj_t_[b * Hv + a] = p[a * H + b];
}

void SiglipTower::encode(const float* pixels, std::vector<float>& soft, std::vector<float>* tower_hidden) const {
  const int64_t Hv = cfg_.hidden, I = cfg_.intermediate, ps = cfg_.patch_size, S = cfg_.image_size;
  const int64_t side = S / ps, P = side * side, K = 3 * ps * ps, nh = cfg_.heads, hd = cfg_.head_dim;
  const float eps = cfg_.eps;

  // Patch embedding: X [P, 3·ps·ps] with the conv weight's (c, ky, kx) order.
  std::vector<float> X(static_cast<size_t>(P * K));
  for (int64_t r = 0; r < side; ++r)
    for (int64_t c = 0; c < side; ++c) {
      float* dst = X.data() + (r * side + c) * K;
      for (int64_t ch = 0; ch < 3; ++ch)
        for (int64_t ky = 0; ky < ps; ++ky)
          for (int64_t kx = 0; kx < ps; ++kx)
            dst[(ch * ps + ky) * ps + kx] = pixels[(ch * S + r * ps + ky) * S + c * ps + kx];
    }
  std::vector<float> x(static_cast<size_t>(P * Hv)), h(x.size()), q(x.size()), k(x.size()), v(x.size()),
      att(x.size()), o(x.size()), m(static_cast<size_t>(P * I));
  ops::matmul(X.data(), P, patch_, x.data());
  ops::add_bias(x.data(), P, Hv, patch_bias_.data, patch_bias_.dtype);
  {
    std::vector<float> pos(x.size());
    cpu::to_f32(pos_.data, pos_.dtype, pos.size(), pos.data());
    ops::add_inplace(x.data(), pos.data(), P * Hv);
  }

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (const Layer& l : layers_) {
    ops::layernorm(x.data(), P, Hv, l.ln1_w.data, l.ln1_w.dtype, l.ln1_b.data, l.ln1_b.dtype, eps, h.data());
    ops::matmul_fused(h.data(), P, {{&l.q, q.data()}, {&l.k, k.data()}, {&l.v, v.data()}});
    ops::add_bias(q.data(), P, Hv, l.bq.data, l.bq.dtype);
    ops::add_bias(k.data(), P, Hv, l.bk.data, l.bk.dtype);
    ops::add_bias(v.data(), P, Hv, l.bv.data, l.bv.dtype);
    ops::attention_bidirectional(q.data(), k.data(), v.data(), P, nh, hd, scale, att.data());
    ops::matmul(att.data(), P, l.o, o.data());
    ops::add_bias(o.data(), P, Hv, l.bo.data, l.bo.dtype);
    ops::add_inplace(x.data(), o.data(), P * Hv);
    ops::layernorm(x.data(), P, Hv, l.ln2_w.data, l.ln2_w.dtype, l.ln2_b.data, l.ln2_b.dtype, eps, h.data());
    ops::matmul(h.data(), P, l.fc1, m.data());
    ops::add_bias(m.data(), P, I, l.b1.data, l.b1.dtype);
    ops::gelu_tanh(m.data(), P * I);
    ops::matmul(m.data(), P, l.fc2, o.data());
    ops::add_bias(o.data(), P, Hv, l.b2.data, l.b2.dtype);
    ops::add_inplace(x.data(), o.data(), P * Hv);
  }
  ops::layernorm(x.data(), P, Hv, post_w_.data, post_w_.dtype, post_b_.data, post_b_.dtype, eps, x.data());
  if (tower_hidden) *tower_hidden = std::vector<float>(x.begin(), x.begin() + P * Hv);

  // Projector: k×k average pool over the patch grid (row-major tokens), RMSNorm (1 + w), x·W.
  const int64_t ts = static_cast<int64_t>(std::lround(std::sqrt(cfg_.mm_tokens_per_image)));
  const int64_t kp = side / ts, N = ts * ts, H = cfg_.text_hidden;
  std::vector<float> U(static_cast<size_t>(N * Hv), 0.0f);
  const float inv = 1.0f / static_cast<float>(kp * kp);
  for (int64_t pr = 0; pr < ts; ++pr)
    for (int64_t pc = 0; pc < ts; ++pc) {
      float* u = U.data() + (pr * ts + pc) * Hv;
      for (int64_t r = 0; r < kp; ++r)
        for (int64_t c = 0; c < kp; ++c) {
          const float* src = x.data() + ((pr * kp + r) * side + pc * kp + c) * Hv;
          for (int64_t i = 0; i < Hv; ++i) u[i] += src[i];
        }
      for (int64_t i = 0; i < Hv; ++i) u[i] *= inv;
    }
  ops::rmsnorm(U.data(), N, Hv, mm_norm_.data, mm_norm_.dtype, 1.0f, eps, U.data());
  soft.resize(static_cast<size_t>(N * H));
  ops::matmul(U.data(), N, ops::Weight{mm_proj_t_.data(), DType::F32, H, Hv}, soft.data());
}

}  // namespace eg::vision
