// The CUDA executor's decode steps (cuda_executor_impl.h): the step of separate kernels
// (EG_CUDA_FUSED=0), the fused graph step (Gemma 2/3/4) and the persistent step (Gemma 2/3;
// EG_CUDA_STEP).
#include <algorithm>
#include <utility>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "exec/cuda_executor_impl.h"

namespace eg::cudaexec {

void CudaExecutor::matvec(const gpu::Stream& s, const gpu::DeviceWeight& W, const float* x, const void* act, float* y) const {
  gpu::matvec(s, W, x, act, y);
}

template <class F>
void CudaExecutor::op(CudaWorkspace& w, bool prof, int g, F&& f) const {
  if (!prof) {
    f();
    return;
  }
  w.timer->start();
  f();
  w.timer->stop();
  w.group_ms[g] += w.timer->elapsed_ms();
}

void CudaExecutor::enqueue_step(CudaKV& st, CudaWorkspace& w, bool prof) const {
  const gpu::Stream& s = w.stream;
  const int64_t H = cfg_.hidden_size;
  const float eps = cfg_.rms_norm_eps, off = cfg_.norm_offset;
  const auto* args = w.args.as<const gpu::StepArgs>();
  float* x = w.x.as<float>();
  float* h = w.h.as<float>();
  void* act = w.act.data();
  const int n_splits = splits(st.max_tokens);
  op(w, prof, 0, [&] { gpu::embed_row(s, embed_, args, embed_scale_, x); });
  if (ple_LP_ > 0) {
    op(w, prof, 10, [&] {
      ple_inputs(s, 1, x, act, w.ple_tok.as<const float>(), w.ple.as<float>(), nullptr, nullptr, nullptr);
    });
  }
  op(w, prof, 0, [&] { gpu::rmsnorm(s, x, 1, H, layers_[0].input_norm.as<const float>(), off, eps, h, act); });
  for (int li = 0; li < cfg_.n_layers; ++li) {
    const LayerConfig& lc = cfg_.layers[li];
    const DevLayer& d = layers_[li];
    const int64_t hd = lc.head_dim, qn = cfg_.n_heads * hd, kn = lc.n_kv_heads * hd;
    float* qkv = w.qkv.as<float>();
    op(w, prof, 1, [&] {
      if (d.qkv_fused) {
        matvec(s, d.qkv, h, act, qkv);
      } else {
        matvec(s, d.q, h, act, qkv);
        if (d.k.rows > 0) matvec(s, d.k, h, act, qkv + qn);
        if (d.v.rows > 0) matvec(s, d.v, h, act, qkv + qn + kn);
      }
    });
    const gpu::QKVHeadArgs qa = qkv_args(lc, d, st.elem);
    op(w, prof, 2, [&] { gpu::qkv_heads(s, qa, qkv, args, w.q.as<float>(), st.k[li].data(), st.v[li].data()); });
    const gpu::AttentionArgs aa = attn_args(lc, st.elem, n_splits);
    const bool o_quant = is_quantized(d.o.dtype);
    const int kl = d.kv_layer;  // itself, or the source of a KV-shared layer
    op(w, prof, 3, [&] {
      gpu::attention_decode(s, aa, w.q.as<const float>(), st.k[kl].data(), st.v[kl].data(), args,
                            w.partial.as<float>(), w.attn.as<float>(), o_quant ? act : nullptr);
    });
    op(w, prof, 4, [&] { matvec(s, d.o, w.attn.as<const float>(), act, w.proj.as<float>()); });
    op(w, prof, 5, [&] {
      gpu::residual_norm(s, H, x, w.proj.as<const float>(), d.post_attn_norm.as<const float>(),
                         d.pre_ffw_norm.as<const float>(), off, eps, h, act);
    });
    const int64_t I = lc.intermediate_size;
    float* gu = w.gu.as<float>();
    op(w, prof, 6, [&] {
      if (d.gu_fused) {
        matvec(s, d.gu, h, act, gu);
      } else {
        matvec(s, d.gate, h, act, gu);
        matvec(s, d.up, h, act, gu + I);
      }
    });
    const bool down_quant = is_quantized(d.down.dtype);
    op(w, prof, 7, [&] { gpu::gelu_mul(s, gu, I, down_quant ? nullptr : w.g.as<float>(), down_quant ? act : nullptr); });
    op(w, prof, 8, [&] { matvec(s, d.down, w.g.as<const float>(), act, w.proj.as<float>()); });
    const float* next = li + 1 < cfg_.n_layers ? layers_[li + 1].input_norm.as<const float>()
                                               : final_norm_.as<const float>();
    if (gemma4_) {
      layer_end_step(w, prof, li, next);
      continue;
    }
    op(w, prof, 5, [&] {
      gpu::residual_norm(s, H, x, w.proj.as<const float>(), d.post_ffw_norm.as<const float>(), next, off, eps, h, act);
    });
  }
  op(w, prof, 9, [&] {
    gpu::lm_head_argmax(s, embed_, h, act, cfg_.final_softcap, w.result.as<uint64_t>(), w.logits.as<float>());
  });
}

void CudaExecutor::ensure_partial(CudaWorkspace& w, const CudaKV& st) const {
  if (w.partial.data() && w.partial.bytes() >= partial_bytes(st.max_tokens)) return;
  w.graphs.clear();
  w.partial = gpu::DeviceBuffer(partial_bytes(st.max_tokens));
}

gpu::Graph& CudaExecutor::step_graph(CudaKV& st, CudaWorkspace& w) const {
  ensure_partial(w, st);
  ++w.graph_clock;
  for (auto& c : w.graphs) {
    if (c.kv == st.serial && c.long_keys == w.long_keys) {
      c.used = w.graph_clock;
      return *c.graph;
    }
  }
  auto g = std::make_unique<gpu::Graph>();
  g->begin_capture(w.stream);
  try {
    if (fused_) enqueue_step_fused(st, w, false);
    else enqueue_step(st, w, false);
  } catch (...) {
    try { g->end_capture(); } catch (...) {}
    throw;
  }
  g->end_capture();
  ++w.graph_captures;
  if (w.graphs.size() >= max_graphs_) {
    auto lru = std::min_element(w.graphs.begin(), w.graphs.end(),
                                [](const auto& a, const auto& b) { return a.used < b.used; });
    w.graphs.erase(lru);
  }
  w.graphs.push_back({st.serial, w.long_keys, w.graph_clock, std::move(g)});
  return *w.graphs.back().graph;
}

void CudaExecutor::layer_end_step(CudaWorkspace& w, bool prof, int li, const float* w_next) const {
  const gpu::Stream& s = w.stream;
  const DevLayer& d = layers_[li];
  const int64_t H = cfg_.hidden_size;
  const float eps = cfg_.rms_norm_eps, off = cfg_.norm_offset;
  float* x = w.x.as<float>();
  float* h = w.h.as<float>();
  float* proj = w.proj.as<float>();
  void* act = w.act.data();
  if (ple_LP_ == 0) {
    op(w, prof, 5, [&] { gpu::residual_norm(s, H, x, proj, d.post_ffw_norm.as<const float>(), w_next, off, eps, h, act, d.scalar); });
    return;
  }
  const int64_t P = cfg_.ple_dim;
  op(w, prof, 5, [&] { gpu::residual_norm(s, H, x, proj, d.post_ffw_norm.as<const float>(), nullptr, off, eps, h, act); });
  op(w, prof, 10, [&] {
    float* g = w.gu.as<float>();
    matvec(s, d.ple_gate, h, act, g);
    const bool q = is_quantized(d.ple_proj.dtype);
    gpu::gelu_mul_by(s, g, w.ple.as<const float>() + static_cast<int64_t>(li) * P, P, w.g.as<float>(), q ? act : nullptr);
    matvec(s, d.ple_proj, w.g.as<const float>(), act, proj);
    gpu::residual_norm(s, H, x, proj, d.ple_post_norm.as<const float>(), w_next, off, eps, h, act, d.scalar);
  });
}

void CudaExecutor::build_persistent_shape(bool asked) {
  std::string why;
  if (gemma4_) why = "Gemma 4 takes the fused graph step";
  else if (q6k_embed_) why = "a Q6_K embedding takes the fused graph step";
  else if (!fused_) why = "the fused step's stacked weights are not available";
  for (int li = 0; li < cfg_.n_layers && why.empty(); ++li) {
    const DevLayer& d = layers_[li];
    for (const gpu::DeviceWeight* W : {&d.qkv, &d.o, &d.gu, &d.down})
      if (W->dtype != DType::Q4_0 && W->dtype != DType::Q8_0) why = "layer matrices must be Q4_0 or Q8_0";
    if (cfg_.layers[li].head_dim != max_hd_) why = "head_dim differs between layers";
  }
  if (!why.empty()) {
    if (asked) std::fprintf(stderr, "cuda: EG_CUDA_STEP=persistent not used: %s\n", why.c_str());
    return;
  }
  PersistentShape& p = persistent_;
  auto matrix = [](const gpu::DeviceWeight& W, int wk) {
    gpu::StepMatrix m;
    m.data = W.data.as<const uint8_t>();
    m.scales = W.scales.as<const uint16_t>();
    m.rows = W.rows;
    m.cols = W.cols;
    m.dtype = static_cast<int>(W.dtype);
    m.wk = wk;
    return m;
  };
  p.embed = matrix(embed_, 1);
  p.embed_scale = embed_scale_;
  p.hidden = cfg_.hidden_size;
  p.max_act = std::max(max_q_, max_i_);
  p.w_offset = cfg_.norm_offset;
  p.eps = cfg_.rms_norm_eps;
  p.head_dim = max_hd_;
  p.n_heads = cfg_.n_heads;
  int per_sm = 1;  // 1 CTA per multiprocessor (the barriers cost less; measured on the H200)
  if (const char* c = std::getenv("EG_CUDA_STEP_CTAS")) per_sm = std::max(1, std::atoi(c));  // tuning: CTAs per SM
  gpu::StepPlan probe;
  probe.hidden = p.hidden;
  probe.max_act = p.max_act;
  probe.head_dim = p.head_dim;
  const int grid = gpu::step_grid(gpu::Stream(0), probe, per_sm);
  if (grid <= 0) {
    if (asked) std::fprintf(stderr, "cuda: EG_CUDA_STEP=persistent not used: no cooperative launch of the step fits\n");
    return;
  }
  p.n_splits = std::max(1, std::min(1024, grid / std::max(1, cfg_.n_heads)));
  const char* pf = std::getenv("EG_CUDA_STEP_PREFETCH");  // tuning: 1 = L2 prefetch of the next layer
  const bool prefetch = pf && std::string(pf) == "1";  // measured slower on the H200: off by default
  for (int li = 0; li < cfg_.n_layers; ++li) {
    const LayerConfig& lc = cfg_.layers[li];
    const DevLayer& d = layers_[li];
    gpu::StepLayer l;
    l.qkv = matrix(d.qkv, gpu::plan_step_matrix(d.qkv.rows, d.qkv.cols, d.qkv.dtype, grid));
    l.o = matrix(d.o, gpu::plan_step_matrix(d.o.rows, d.o.cols, d.o.dtype, grid));
    l.gu = matrix(d.gu, 1);
    l.down = matrix(d.down, gpu::plan_step_matrix(d.down.rows, d.down.cols, d.down.dtype, grid));
    l.input_norm = d.input_norm.as<const float>();
    l.post_attn_norm = d.post_attn_norm.as<const float>();
    l.pre_ffw_norm = d.pre_ffw_norm.as<const float>();
    l.post_ffw_norm = d.post_ffw_norm.as<const float>();
    l.qa = qkv_args(lc, d, gpu::KVElem::F16);
    l.aa = attn_args(lc, gpu::KVElem::F16, p.n_splits);
    l.aa.split_min_keys = split_min_keys_set_ ? split_min_keys_ : 16;  // 16 measured best here
    size_t bytes = 0;
    for (const gpu::DeviceWeight* W : {&d.qkv, &d.o, &d.gu, &d.down}) bytes += W->data.bytes() + W->scales.bytes();
    l.prefetch_next = bytes <= (16u << 20) && prefetch ? 1 : 0;  // two layers in flight must fit the L2 (50 MB on an H200)
    p.layers.push_back(l);
  }
  p.grid = grid;
  if (const char* br = std::getenv("EG_CUDA_STEP_BARRIER")) {  // tuning: counter (default) | flag
    const std::string v = br;
    if (v != "flag" && v != "counter") throw Error("EG_CUDA_STEP_BARRIER must be flag or counter, not '" + v + "'");
    p.barrier_mode = v == "flag" ? 2 : 1;
  }
  if (const char* pr = std::getenv("EG_CUDA_STEP_PROBE")) {
    const std::string v = pr;  // tuning only: time parts of the step (the results are garbage)
    p.probe = v == "barriers" ? 1 : v == "no-attention" ? 2 : v == "no-matvec" ? 3 : 0;
  }
  desc_ += " [persistent step, " + std::to_string(grid) + " CTAs]";
}

void CudaExecutor::step_persistent(int32_t token, int pos, CudaKV& st, CudaWorkspace& w) const {
  const gpu::Stream& s = w.stream;
  PersistentBuffers b;
  b.x = w.x.as<float>();
  b.x2 = w.x2.as<float>();
  b.proj = w.proj.as<float>();
  b.qkv = w.qkv.as<float>();
  b.act = w.act.data();
  b.counters = w.counters.as<uint32_t>();
  b.result = w.result.as<uint64_t>();
  if (timing_ == 1) {
    if (!w.timer) w.timer = std::make_unique<gpu::EventTimer>(w.stream);
    w.timer->start();
  }
  w.persistent.enqueue(s, persistent_, b, token, pos, st.k, st.v, st.serial, st.elem);
  gpu::MatvecInput in_lm;
  in_lm.src_dev = w.proj.as<const float>();
  in_lm.residual_dev = w.x2.as<const float>();
  in_lm.w_post_dev = layers_.back().post_ffw_norm.as<const float>();
  in_lm.w_norm_dev = final_norm_.as<const float>();
  in_lm.w_offset = cfg_.norm_offset;
  in_lm.eps = cfg_.rms_norm_eps;
  gpu::lm_head_argmax_fused(s, embed_, in_lm, cfg_.final_softcap, w.result.as<uint64_t>(), w.logits.as<float>());
  if (timing_ == 1) {
    w.timer->stop();
    w.timed_ms += w.timer->elapsed_ms();
    ++w.timed_steps;
  }
}

void CudaExecutor::enqueue_step_fused(CudaKV& st, CudaWorkspace& w, bool prof) const {
  const gpu::Stream& s = w.stream;
  const int64_t H = cfg_.hidden_size;
  const float eps = cfg_.rms_norm_eps, off = cfg_.norm_offset;
  const auto* args = w.args.as<const gpu::StepArgs>();
  float* x = w.x.as<float>();
  float* proj = w.proj.as<float>();
  void* act = w.act.data();
  const int n_splits = splits(st.max_tokens);
  auto input = [&](const float* src) {
    gpu::MatvecInput in;
    in.src_dev = src;
    in.w_offset = off;
    in.eps = eps;
    return in;
  };
  // The residual stream alternates between x and x2: `res` holds it; a joint still to apply
  // (res + rmsnorm(proj; joint_w))·joint_scale is done by the next input stage, which writes the
  // new residual to the other buffer.
  float* res = x;
  float* other = w.x2.as<float>();
  const float* joint_w = nullptr;
  float joint_scale = 1.0f;
  auto staged = [&](const float* w_norm) {
    gpu::MatvecInput in = input(joint_w ? proj : res);
    if (joint_w) {
      in.residual_dev = res;
      in.w_post_dev = joint_w;
      in.scale = joint_scale;
      in.residual_out_dev = other;
      std::swap(res, other);
      joint_w = nullptr;
      joint_scale = 1.0f;
    }
    in.w_norm_dev = w_norm;
    return in;
  };
  op(w, prof, 0, [&] { gpu::embed_row(s, embed_, args, embed_scale_, x, w.result.as<uint64_t>()); });
  if (ple_LP_ > 0) {
    op(w, prof, 10, [&] {
      ple_inputs(s, 1, x, act, w.ple_tok.as<const float>(), w.ple.as<float>(), nullptr, nullptr, nullptr);
    });
  }
  for (int li = 0; li < cfg_.n_layers; ++li) {
    const LayerConfig& lc = cfg_.layers[li];
    const DevLayer& d = layers_[li];
    const int kl = d.kv_layer;  // itself, or the source of a KV-shared layer (Gemma 4)
    float* qkv = w.qkv.as<float>();
    const gpu::MatvecInput in_qkv = staged(d.input_norm.as<const float>());
    op(w, prof, 1, [&] { gpu::matvec_fused(s, d.qkv, in_qkv, qkv); });
    const gpu::QKVHeadArgs qa = qkv_args(lc, d, st.elem);
    gpu::AttentionArgs aa = attn_args(lc, st.elem, n_splits);
    if (attn_split_) {
      // EG_CUDA_ATTN=split: qkv_heads + split attention + combine (which quantizes o's input).
      const bool o_quant = is_quantized(d.o.dtype);
      op(w, prof, 2, [&] { gpu::qkv_heads(s, qa, qkv, args, w.q.as<float>(), st.k[li].data(), st.v[li].data()); });
      op(w, prof, 3, [&] {
        gpu::attention_decode(s, aa, w.q.as<const float>(), st.k[kl].data(), st.v[kl].data(), args,
                              w.partial.as<float>(), w.attn.as<float>(), o_quant ? act : nullptr);
      });
      op(w, prof, 4, [&] { matvec(s, d.o, w.attn.as<const float>(), act, proj); });
    } else if (attn_cluster_ && (!w.long_keys || (aa.window > 0 && aa.window <= cluster_max_keys_)) &&
               gpu::attention_cluster_supported(qa, aa)) {
      // One cluster per KV head (fused.h); the merged heads come out quantized for o.
      const bool o_quant = is_quantized(d.o.dtype);
      const int gq = aa.n_heads / aa.n_kv_heads;
      const int hpc = gq % cluster_heads_ == 0 ? cluster_heads_ : 1;
      op(w, prof, 3, [&] {
        gpu::attention_cluster(s, qa, aa, qkv, args, st.k[kl].data(), st.v[kl].data(), w.attn.as<float>(),
                               o_quant ? act : nullptr, 0, cluster_ctas_, hpc);
      });
      op(w, prof, 4, [&] {
        if (o_quant) matvec(s, d.o, w.attn.as<const float>(), act, proj);
        else gpu::matvec_fused(s, d.o, input(w.attn.as<const float>()), proj);
      });
    } else {
      aa.split_min_keys = split_min_keys_;
      op(w, prof, 3, [&] {
        gpu::attention_fused(s, qa, aa, qkv, args, st.k[kl].data(), st.v[kl].data(), w.partial.as<float>(),
                             w.counters.as<uint32_t>(), w.attn.as<float>());
      });
      op(w, prof, 4, [&] { gpu::matvec_fused(s, d.o, input(w.attn.as<const float>()), proj); });
    }
    joint_w = d.post_attn_norm.as<const float>();
    const gpu::MatvecInput in_gu = staged(d.pre_ffw_norm.as<const float>());
    op(w, prof, 6, [&] { gpu::matvec_gelu_fused(s, d.gu, in_gu, w.g.as<float>()); });
    if (down_quant_ && is_quantized(d.down.dtype)) {
      // One parallel quantize launch instead of the per-CTA input stage (EG_CUDA_DOWN=stage).
      op(w, prof, 7, [&] { gpu::quantize_act(s, w.g.as<const float>(), lc.intermediate_size, act); });
      op(w, prof, 8, [&] { gpu::matvec(s, d.down, nullptr, act, proj); });
    } else {
      op(w, prof, 8, [&] { gpu::matvec_fused(s, d.down, input(w.g.as<const float>()), proj); });
    }
    joint_w = d.post_ffw_norm.as<const float>();
    joint_scale = ple_LP_ > 0 ? 1.0f : d.scalar;
    if (ple_LP_ > 0) {
      // Gemma 4's per-layer embedding gate (layer_end_step's math): g = ple_gate·v on the stage
      // that applies the FFW joint, gelu(g)·ple_row (+ int8), proj = ple_proj·that; the next
      // stage applies (v + rmsnorm(proj; ple_post_norm))·layer_scalar.
      // Two kernels (the GELU·row in the gate's epilogue, the projection quantizing its 256-wide
      // input itself), or three with EG_CUDA_PLE=separate (gelu_mul_by between them).
      const int64_t P = cfg_.ple_dim;
      const float* row = w.ple.as<const float>() + static_cast<int64_t>(li) * P;
      const gpu::MatvecInput in_ple = staged(nullptr);
      op(w, prof, 10, [&] {
        if (ple_separate_) {
          float* g = w.gu.as<float>();
          gpu::matvec_fused(s, d.ple_gate, in_ple, g);
          const bool q = is_quantized(d.ple_proj.dtype);
          gpu::gelu_mul_by(s, g, row, P, w.g.as<float>(), q ? act : nullptr);
          matvec(s, d.ple_proj, w.g.as<const float>(), act, proj);
        } else {
          gpu::matvec_gelu_by_fused(s, d.ple_gate, in_ple, row, w.g.as<float>());
          gpu::matvec_fused(s, d.ple_proj, input(w.g.as<const float>()), proj);
        }
      });
      joint_w = d.ple_post_norm.as<const float>();
      joint_scale = d.scalar;
    }
  }
  if (q6k_embed_) {
    // A Q6_K LM head (q6k.h) takes the f32 normed activation: the joint and the final norm in
    // one residual_norm, then the warp-per-row matvec with soft-cap and argmax.
    float* h = w.h.as<float>();
    op(w, prof, 9, [&] {
      gpu::residual_norm(s, H, res, proj, joint_w, final_norm_.as<const float>(), off, eps, h, nullptr, joint_scale);
      gpu::lm_head_argmax(s, embed_, h, nullptr, cfg_.final_softcap, w.result.as<uint64_t>(), w.logits.as<float>());
    });
    return;
  }
  const gpu::MatvecInput in_lm = staged(final_norm_.as<const float>());
  op(w, prof, 9, [&] {
    gpu::lm_head_argmax_fused(s, embed_, in_lm, cfg_.final_softcap, w.result.as<uint64_t>(), w.logits.as<float>());
  });
}

}  // namespace eg::cudaexec
