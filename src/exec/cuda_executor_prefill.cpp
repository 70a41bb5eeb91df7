// The CUDA executor's GEMM prefill (cuda_executor_impl.h, docs/cuda.md "GEMM prefill"): chunks
// of T tokens through 16-bit tensor-core GEMMs and the row / attention kernels of prefill.h.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <string>

#include "exec/cuda_executor_impl.h"

namespace eg::cudaexec {

void CudaExecutor::ensure_prefill_scratch(CudaWorkspace& w, int n) const {
  PrefillScratch& p = w.pf;
  if (p.tokens >= n) return;
  const int64_t H = cfg_.hidden_size, C = n;
  const int64_t k16 = std::max({H, max_q_, max_i_});
  p.ids = gpu::DeviceBuffer(C * 4);
  p.key_end = gpu::DeviceBuffer(C * 4);
  p.x = gpu::DeviceBuffer(C * H * 4);
  p.proj = gpu::DeviceBuffer(C * H * 4);
  p.h16 = gpu::DeviceBuffer(C * k16 * 2);
  p.qkv = gpu::DeviceBuffer(C * max_qkv_ * 4);
  p.q = gpu::DeviceBuffer(C * max_q_ * 4);
  p.gu = gpu::DeviceBuffer(C * 2 * max_i_ * 4);
  if ((!pf_once_ || ple_tiled_.rows > 0) && !p.w16.data()) {
    size_t mx = ple_tiled_.rows > 0 ? gpu::dequant_bytes(ple_tiled_) : 0;
    for (const DevLayer& d : layers_)
      for (const gpu::DeviceWeight* W : {&d.qkv, &d.q, &d.k, &d.v, &d.o, &d.gu, &d.gate, &d.up, &d.down, &d.ple_gate,
                                         &d.ple_proj})
        if (W->rows > 0) mx = std::max(mx, gpu::dequant_bytes(*W));
    p.w16 = gpu::DeviceBuffer(mx);
  }
  {
    size_t ab = 0;  // the largest layer's split scratch (EG_CUDA_PREFILL_ATTN_SPLIT=0: none, unsplit)
    for (const LayerConfig& lc : cfg_.layers)
      ab = std::max(ab, gpu::attention_prefill_scratch_bytes(attn_args(lc, gpu::KVElem::F16, 1), n));
    if (pf_attn_split_) p.attn_part = gpu::DeviceBuffer(ab);
  }
  if (ple_LP_ > 0) {
    p.ple = gpu::DeviceBuffer(static_cast<size_t>(C * ple_LP_) * 4);
    p.ple_tok = gpu::DeviceBuffer(static_cast<size_t>(C * ple_LP_) * 4);
    const DType et = m_.weights().ple_embed.dtype;
    if (gpu::dequant_rows_supports(et, ple_LP_)) {
      p.ple_staged.wait();  // an earlier chunk's upload may still read the old staging buffer
      p.ple_stage = gpu::PinnedBuffer(static_cast<size_t>(C) * dtype_row_bytes(et, ple_LP_));
      p.ple_rows = gpu::DeviceBuffer(p.ple_stage.bytes());
    }
  }
  if (!p.result.data()) p.result = gpu::DeviceBuffer(8);
  if (!p.gemm) p.gemm = std::make_unique<gpu::Gemm>(w.stream);
  p.tokens = n;
}

void CudaExecutor::upload_ple_token_rows(const int32_t* tokens, int T, PrefillScratch& p, const gpu::Stream& s) const {
  const ops::Weight& E = m_.weights().ple_embed;
  if (!gpu::dequant_rows_supports(E.dtype, ple_LP_)) {
    ple_token_rows(tokens, T, p.ple_host);
    gpu::copy_to_device_async(s, p.ple_tok.data(), p.ple_host.data(), p.ple_host.size() * 4);
    return;
  }
  const size_t rb = dtype_row_bytes(E.dtype, ple_LP_);
  auto* stage = static_cast<uint8_t*>(p.ple_stage.data());
  const auto* table = static_cast<const uint8_t*>(E.data);
  p.ple_staged.wait();  // the previous chunk's upload has read the staging buffer
  for (int t = 0; t < T; ++t) std::memcpy(stage + static_cast<size_t>(t) * rb, table + static_cast<size_t>(tokens[t]) * rb, rb);
  gpu::copy_to_device_async(s, p.ple_rows.data(), stage, static_cast<size_t>(T) * rb);
  p.ple_staged.record(s);
  gpu::dequant_rows(s, E.dtype, p.ple_rows.data(), T, ple_LP_,
                    static_cast<float>(std::sqrt(static_cast<double>(cfg_.ple_dim))), p.ple_tok.as<float>());
}

void CudaExecutor::gemm(CudaWorkspace& w, const DevLayer& d, const gpu::DeviceWeight& W, const void* x16, int T, float* y,
          int64_t ldy) const {
  const void* w16 = nullptr;
  for (const auto& [src, buf] : d.w16)
    if (src == &W) w16 = buf.data();
  if (!w16) {
    gpu::dequant_weight(w.stream, W, pf_type_, w.pf.w16.data());
    w16 = w.pf.w16.data();
    if (timing_ == 3) w.pf.mark(w.stream, 1);
  }
  w.pf.gemm->run(pf_type_, w16, W.rows, W.cols, x16, T, y, ldy);
  if (timing_ == 3) w.pf.mark(w.stream, 2);
}

void CudaExecutor::prefill_chunk(const int32_t* tokens, int T, KVCache& kv, CudaKV& st, CudaWorkspace& w, float* logits_out,
                   bool all, const std::vector<EmbedSpan>* media, const int32_t* key_end) const {
  ensure_prefill_scratch(w, T);
  const gpu::Stream& s = w.stream;
  PrefillScratch& p = w.pf;
  const int pos0 = kv.n_past();
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  const float eps = cfg_.rms_norm_eps, off = cfg_.norm_offset;
  const gpu::GemmType ty = pf_type_;
  float* x = p.x.as<float>();
  float* proj = p.proj.as<float>();
  float* qkv = p.qkv.as<float>();
  float* gu = p.gu.as<float>();
  void* h16 = p.h16.data();
  // EG_CUDA_TIMING=3: events between the stages (PrefillScratch::kStages), the stage of the work
  // since the previous mark; gemm() marks its dequantization (1) and GEMM (2) itself.
  const auto mark = [&](int stage) {
    if (timing_ == 3) p.mark(s, stage);
  };
  mark(0);
  gpu::copy_to_device_async(s, p.ids.data(), tokens, static_cast<size_t>(T) * 4);
  gpu::embed_rows(s, embed_, p.ids.as<const int32_t>(), T, embed_scale_, x);
  // Media rows replace their tokens' embeddings (as stored: no embedding scale), before the PLE
  // context part reads x; their PLE token rows are the table's pad row 0 (Model::forward).
  std::vector<int32_t> ple_ids;
  if (media) {
    for (const EmbedSpan& m : *media)
      gpu::copy_to_device_async(s, x + static_cast<int64_t>(m.begin) * H, m.rows, static_cast<size_t>(m.n) * H * 4);
    if (ple_LP_ > 0) {
      ple_ids.assign(tokens, tokens + T);
      for (const EmbedSpan& m : *media) std::fill(ple_ids.begin() + m.begin, ple_ids.begin() + m.begin + m.n, 0);
    }
  }
  if (key_end) gpu::copy_to_device_async(s, p.key_end.data(), key_end, static_cast<size_t>(T) * 4);
  // Gemma 4 PLE inputs of the chunk: the context part now (it reads the embedding, which layer 0
  // updates in place); the token rows and the mix in layer 0, before its PLE gate, so that the
  // host copies the rows while the GPU runs layer 0.
  if (ple_LP_ > 0) ple_context(s, T, x, nullptr, p.ple.as<float>(), p.gemm.get(), h16, p.w16.data());
  gpu::norm_rows(s, T, H, x, layers_[0].input_norm.as<const float>(), off, eps, ty, h16);
  mark(0);
  for (int li = 0; li < cfg_.n_layers; ++li) {
    const LayerConfig& lc = cfg_.layers[li];
    const DevLayer& d = layers_[li];
    const int64_t hd = lc.head_dim, qn = cfg_.n_heads * hd, kn = lc.n_kv_heads * hd, wq = qn + 2 * kn;
    if (d.qkv_fused) {
      gemm(w, d, d.qkv, h16, T, qkv, wq);
    } else {
      gemm(w, d, d.q, h16, T, qkv, wq);
      if (d.k.rows > 0) gemm(w, d, d.k, h16, T, qkv + qn, wq);
      if (d.v.rows > 0) gemm(w, d, d.v, h16, T, qkv + qn + kn, wq);
    }
    gpu::qk_rope_kv_rows(s, qkv_args(lc, d, st.elem), T, pos0, qkv, p.q.as<float>(), st.k[li].data(), st.v[li].data());
    mark(3);
    const int kl = d.kv_layer;  // itself, or the source of a KV-shared layer (written above it)
    // Bidirectional media rows (Gemma 4 "vision": on sliding layers only, as attention_block.cpp).
    const bool bidi = key_end && !(cfg_.image_blocks_sliding_only && lc.type != LayerType::Sliding);
    gpu::attention_prefill(s, attn_args(lc, st.elem, 1), T, pos0, p.q.as<const float>(), st.k[kl].data(),
                           st.v[kl].data(), ty, h16, p.attn_part.data(), p.attn_part.bytes(),
                           bidi ? p.key_end.as<const int32_t>() : nullptr);
    mark(4);
    gemm(w, d, d.o, h16, T, proj, H);
    gpu::residual_norm_rows(s, T, H, x, proj, d.post_attn_norm.as<const float>(), d.pre_ffw_norm.as<const float>(),
                            off, eps, ty, h16);
    mark(5);
    const int64_t I = lc.intermediate_size;
    if (d.gu.rows > 0) {
      gemm(w, d, d.gu, h16, T, gu, 2 * I);
    } else {
      gemm(w, d, d.gate, h16, T, gu, 2 * I);
      gemm(w, d, d.up, h16, T, gu + I, 2 * I);
    }
    gpu::gelu_mul_rows(s, T, I, gu, fused_ ? gpu::GateUpLayout::Interleaved : gpu::GateUpLayout::Stacked, ty, h16);
    mark(5);
    gemm(w, d, d.down, h16, T, proj, H);
    if (gemma4_) {
      // x += rmsnorm(down; post_ffw); the PLE gate (E2B, E4B); x ·= layer scalar; the next
      // layer's input norm (none after the last: the LM head below norms x itself).
      const float* next = li + 1 < cfg_.n_layers ? layers_[li + 1].input_norm.as<const float>() : nullptr;
      if (ple_LP_ > 0) {
        const int64_t P = cfg_.ple_dim;
        gpu::residual_norm_rows(s, T, H, x, proj, d.post_ffw_norm.as<const float>(), nullptr, off, eps, ty, h16);
        mark(5);
        if (li == 0) {
          upload_ple_token_rows(ple_ids.empty() ? tokens : ple_ids.data(), T, p, s);
          ple_mix(s, T, p.ple_tok.as<const float>(), p.ple.as<float>());
          mark(0);
        }
        gemm(w, d, d.ple_gate, h16, T, gu, P);
        gpu::gelu_mul_rows_by(s, T, P, gu, P, p.ple.as<const float>() + static_cast<int64_t>(li) * P, ple_LP_, ty, h16);
        mark(5);
        gemm(w, d, d.ple_proj, h16, T, proj, H);
        gpu::residual_norm_rows(s, T, H, x, proj, d.ple_post_norm.as<const float>(), next, off, eps, ty, h16, d.scalar);
      } else {
        gpu::residual_norm_rows(s, T, H, x, proj, d.post_ffw_norm.as<const float>(), next, off, eps, ty, h16, d.scalar);
      }
      mark(5);
      continue;
    }
    if (li + 1 < cfg_.n_layers)
      gpu::residual_norm_rows(s, T, H, x, proj, d.post_ffw_norm.as<const float>(),
                              layers_[li + 1].input_norm.as<const float>(), off, eps, ty, h16);
    mark(5);
  }
  // LM head: the decode step's (residual + post-ffw norm + final norm stage) on each wanted row.
  // Gemma 4: x is complete (PLE, scalar), so only the final norm.
  for (int t = all ? 0 : T - 1; logits_out && t < T; ++t) {
    if (q6k_embed_) {  // the Q6_K LM head (q6k.h) takes a normed f32 row: the joint here, then the head
      float* xr = x + static_cast<int64_t>(t) * H;
      if (gemma4_) gpu::rmsnorm(s, xr, 1, H, final_norm_.as<const float>(), off, eps, w.h.as<float>());
      else
        gpu::residual_norm(s, H, xr, proj + static_cast<int64_t>(t) * H, layers_.back().post_ffw_norm.as<const float>(),
                           final_norm_.as<const float>(), off, eps, w.h.as<float>(), nullptr);
      gpu::lm_head_argmax(s, embed_, w.h.as<const float>(), nullptr, cfg_.final_softcap, p.result.as<uint64_t>(),
                          w.logits.as<float>());
      gpu::copy_to_host_async(s, logits_out + (all ? static_cast<size_t>(t) * V : 0), w.logits.data(),
                              static_cast<size_t>(V) * 4);
      continue;
    }
    gpu::MatvecInput in;
    if (gemma4_) {
      in.src_dev = x + static_cast<int64_t>(t) * H;
    } else {
      in.src_dev = proj + static_cast<int64_t>(t) * H;
      in.residual_dev = x + static_cast<int64_t>(t) * H;
      in.w_post_dev = layers_.back().post_ffw_norm.as<const float>();
    }
    in.w_norm_dev = final_norm_.as<const float>();
    in.w_offset = off;
    in.eps = eps;
    gpu::zero_async(s, p.result.data(), 8);
    gpu::lm_head_argmax_fused(s, embed_, in, cfg_.final_softcap, p.result.as<uint64_t>(), w.logits.as<float>());
    gpu::copy_to_host_async(s, logits_out + (all ? static_cast<size_t>(t) * V : 0), w.logits.data(),
                            static_cast<size_t>(V) * 4);
  }
  if (timing_ == 3) {
    mark(6);
    p.flush_marks(T);
  }
  // Host bookkeeping (begin_append must not cross a page): the device rows are written above.
  const int P = kv.options().page_tokens;
  for (int p0 = pos0; p0 < pos0 + T;) {
    const int n = std::min(pos0 + T, (p0 / P + 1) * P) - p0;
    kv.begin_append(p0, n);
    kv.commit(p0 + n);
    p0 += n;
  }
}

void CudaExecutor::prefill_media(const int32_t* tokens, int T, const std::vector<EmbedSpan>& media, KVCache& kv,
                                 StepWorkspace& ws, LogitsMode mode, std::vector<float>& logits) const {
  if (media.empty()) return prefill(tokens, T, kv, ws, mode, logits);
  if (T <= 0) throw Error("forward: no tokens");
  CudaKV& st = check_cache(kv);
  check_room(kv, T, -1);
  for (int t = 0; t < T; ++t) check_token(tokens[t]);
  check_embed_spans(media, T);  // Model::forward's check and message
  auto& w = static_cast<CudaWorkspace&>(ws);
  const int64_t V = cfg_.vocab_size, H = cfg_.hidden_size;
  const int pos0 = kv.n_past();
  // Each row's last key (absolute): its own position, or a bidirectional span's last one.
  const std::vector<int32_t> key_end = embed_key_end(media, pos0, T);
  if (mode == LogitsMode::Last) logits.resize(static_cast<size_t>(V));
  if (mode == LogitsMode::All) logits.resize(static_cast<size_t>(T) * V);
  for (int c0 = 0; c0 < T;) {
    int n = std::min(pf_chunk_, T - c0);
    // Never cut a bidirectional span (its rows need keys up to its end): end the chunk before it,
    // or, when it starts the chunk, take all of it.
    for (const EmbedSpan& m : media)
      if (m.bidirectional && m.begin < c0 + n && m.begin + m.n > c0 + n)
        n = m.begin > c0 ? m.begin - c0 : std::min(m.begin + m.n - c0, 65535);
    std::vector<EmbedSpan> part;  // the spans' rows inside this chunk, relative to it
    for (const EmbedSpan& m : media) {
      const int b = std::max(m.begin, c0), e = std::min(m.begin + m.n, c0 + n);
      if (b < e) part.push_back({b - c0, e - b, m.rows + static_cast<int64_t>(b - m.begin) * H, m.bidirectional});
    }
    const bool last = c0 + n == T;
    float* out = mode == LogitsMode::All ? logits.data() + static_cast<size_t>(c0) * V
                 : mode == LogitsMode::Last && last ? logits.data() : nullptr;
    prefill_chunk(tokens + c0, n, kv, st, w, out, mode == LogitsMode::All, part.empty() ? nullptr : &part,
                  key_end.empty() ? nullptr : key_end.data() + c0);
    c0 += n;
  }
  w.stream.sync();
}

}  // namespace eg::cudaexec
