#include "model/model.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/packed.h"
#include "core/error.h"
#include "model/blocks.h"
#include "ops/ops.h"

namespace eg {

std::unique_ptr<Model> Model::load_dir(const std::string& dir) {
  ModelConfig cfg = load_hf_config(dir);
  TensorStore store = TensorStore::open_dir(dir);
  return std::make_unique<Model>(std::move(cfg), std::move(store));
}

Model::Model(ModelConfig cfg, TensorStore store) : cfg_(std::move(cfg)) {
  resolve_config_from_tensors(cfg_, store);
  w_ = bind_weights(std::move(store), cfg_);
  inv_freq_.resize(cfg_.n_layers);
  for (int i = 0; i < cfg_.n_layers; ++i) {
    const LayerConfig& l = cfg_.layers[i];
    inv_freq_[i].assign(l.rope_dims / 2, 0.0f);  // pairs past rope_pairs keep frequency 0
    ops::rope_inv_freq(l.rope_theta, l.rope_dims, l.rope_linear_factor, inv_freq_[i].data());
    std::fill(inv_freq_[i].begin() + l.rope_pairs, inv_freq_[i].end(), 0.0f);
  }
  embed_scale_ = embedding_scale(cfg_.hidden_size, DType::F32);  // the f32 compute path
}

float embedding_scale(int hidden_size, DType compute) {
  // Python computes H**0.5 in double; torch then stores it in the compute dtype.
  const float f = static_cast<float>(std::sqrt(static_cast<double>(hidden_size)));
  switch (compute) {
    case DType::F32: return f;
    case DType::BF16: return bf16_to_f32(f32_to_bf16(f));
    case DType::F16: return f16_to_f32(f32_to_f16(f));
  }
  return f;
}

using blocks::grow;

void Model::embed(const int32_t* tokens, int n, ForwardScratch& s) const {
  // Embedding lookup, scaled by √H.
  const int64_t H = cfg_.hidden_size;
  grow(s.x, static_cast<size_t>(n) * H);
  grow(s.h, static_cast<size_t>(n) * H);
  grow(s.proj, static_cast<size_t>(n) * H);
  const size_t row_bytes = dtype_row_bytes(w_.embed.dtype, H);
  // A packed LM head (repack_for_cpu) holds the same bytes as the mapped table: read the row from
  // it, so a lookup does not page the released file back in (each fault maps a whole folio of the
  // page cache, ~0.5 GB of RSS after a few hundred random tokens on gemma-3-1b BF16).
  std::vector<uint8_t> packed_row(w_.embed.packed != nullptr ? row_bytes : 0);
  for (int t = 0; t < n; ++t) {
    float* xr = s.x.data() + static_cast<size_t>(t) * H;
    const uint8_t* row = static_cast<const uint8_t*>(w_.embed.data) + tokens[t] * row_bytes;
    if (w_.embed.packed != nullptr) {
      cpu::unpack_row(w_.embed.dtype, w_.embed.packed, w_.embed.rows, w_.embed.cols, tokens[t], packed_row.data());
      row = packed_row.data();
    }
    cpu::to_f32(row, w_.embed.dtype, H, xr);
    for (int64_t i = 0; i < H; ++i) xr[i] *= embed_scale_;
  }
}

void check_embed_spans(const std::vector<EmbedSpan>& spans, int T) {
  for (size_t i = 0, end = 0; i < spans.size(); ++i) {
    const EmbedSpan& m = spans[i];
    if (m.n <= 0 || m.begin < static_cast<int>(end) || m.begin + m.n > T || !m.rows)
      throw Error("forward: embedding span " + std::to_string(i) + " (rows " + std::to_string(m.begin) + ".." +
                  std::to_string(m.begin + m.n - 1) + ") is outside the call's " + std::to_string(T) +
                  " tokens or overlaps the previous one");
    end = static_cast<size_t>(m.begin + m.n);
  }
}

std::vector<int32_t> embed_key_end(const std::vector<EmbedSpan>& spans, int pos0, int T) {
  std::vector<int32_t> key_end;
  for (const EmbedSpan& m : spans) {
    if (!m.bidirectional) continue;
    if (key_end.empty()) {
      key_end.resize(static_cast<size_t>(T));
      for (int t = 0; t < T; ++t) key_end[t] = pos0 + t;
    }
    for (int t = m.begin; t < m.begin + m.n; ++t) key_end[t] = pos0 + m.begin + m.n - 1;
  }
  return key_end;
}

void Model::forward(const int32_t* tokens, int T, KVCache& kv, ForwardScratch& s, LogitsMode mode,
                    std::vector<float>& logits, const std::vector<EmbedSpan>* media) const {
  if (T <= 0) throw Error("forward: no tokens");
  if (cfg_.bidirectional) throw Error("this is a bidirectional (embedding) model: it has no causal forward pass");
  if (kv.n_layers() != cfg_.n_layers)
    throw Error("KV cache has " + std::to_string(kv.n_layers()) + " layers, the model " + std::to_string(cfg_.n_layers));
  const int n_past = kv.n_past();
  if (n_past + T > kv.capacity())
    throw Error("context full: " + std::to_string(n_past + T) + " tokens do not fit the KV cache of " +
                std::to_string(kv.capacity()));
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  for (int t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= V || (cfg_.ple_dim > 0 && tokens[t] >= cfg_.ple_vocab))
      throw Error("token id " + std::to_string(tokens[t]) + " outside the vocabulary (size " +
                  std::to_string(V) + ")");
  const std::vector<EmbedSpan> no_media;
  const std::vector<EmbedSpan>& spans = media ? *media : no_media;
  check_embed_spans(spans, T);

  std::vector<int32_t> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = n_past + t;
  // Bidirectional spans: their rows see keys up to the span's last position.
  const std::vector<int32_t> key_end = embed_key_end(spans, n_past, T);

  // The decoder stack runs once per page-aligned run of positions (KV cache pages: kv_cache.h),
  // so a sliding-window layer recycles its old pages at the same positions however the caller
  // batched the tokens. Every op is row-independent, so the split does not change any value. A
  // bidirectional span that crosses a page boundary joins the runs it touches into one group:
  // all their pages are prepared first, then the group runs as one pass.
  const int page = kv.options().page_tokens;
  struct Group { int c0, T; std::vector<std::pair<int, int>> chunks; };  // chunks: (offset, rows)
  std::vector<Group> groups;
  for (int c0 = 0; c0 < T;) {
    const int Tc = std::min(T - c0, page - (n_past + c0) % page);
    const bool joins = !groups.empty() && [&] {
      const int boundary = c0;  // does a bidirectional span cross it?
      for (const EmbedSpan& m : spans)
        if (m.bidirectional && m.begin < boundary && m.begin + m.n > boundary) return true;
      return false;
    }();
    if (!joins) groups.push_back(Group{c0, 0, {}});
    groups.back().chunks.push_back({c0, Tc});
    groups.back().T += Tc;
    c0 += Tc;
  }
  // A group's later pages must not recycle sliding-window keys its first rows still need.
  const int margin = kv.options().rollback_margin_tokens < 0 ? page : kv.options().rollback_margin_tokens;
  for (const Group& g : groups) {
    if (g.chunks.size() < 2 || cfg_.sliding_window <= 0) continue;
    const int W = cfg_.sliding_window;
    const int a_last = n_past + g.chunks.back().first;
    const int keep_from = a_last - W + 1 - margin;
    const int kept = keep_from > 0 ? keep_from / page * page : 0;
    if (kept > std::max(0, n_past + g.c0 - W + 1))
      throw Error("an image's soft tokens span more KV-cache pages than the sliding window's rollback margin (" +
                  std::to_string(margin) + " tokens) keeps: use a larger KV page size or margin");
  }

  embed(tokens, T, s);
  for (const EmbedSpan& m : spans)
    std::memcpy(s.x.data() + static_cast<size_t>(m.begin) * H, m.rows, static_cast<size_t>(m.n) * H * sizeof(float));
  const blocks::Step all{cfg_, T, pos.data(), s};
  const int64_t LP = static_cast<int64_t>(cfg_.n_layers) * cfg_.ple_dim;
  if (cfg_.ple_dim > 0) {
    grow(s.ple, static_cast<size_t>(T) * LP);
    std::vector<int32_t> ple_tokens;
    const int32_t* pt = tokens;
    if (!spans.empty()) {  // media positions use the pad row (0) of the per-layer table
      ple_tokens.assign(tokens, tokens + T);
      for (const EmbedSpan& m : spans) std::fill(ple_tokens.begin() + m.begin, ple_tokens.begin() + m.begin + m.n, 0);
      pt = ple_tokens.data();
    }
    blocks::ple_inputs(all, w_, pt, s.x.data(), s.ple.data());
  }

  const float eps = cfg_.rms_norm_eps, off = cfg_.norm_offset;
  for (const Group& g : groups) {
    for (size_t i = 0; i < g.chunks.size(); ++i) {
      kv.begin_append(n_past + g.chunks[i].first, g.chunks[i].second);
      if (i + 1 < g.chunks.size()) kv.commit(n_past + g.chunks[i].first + g.chunks[i].second);
    }
    const int c0 = g.c0, Tc = g.T, p0 = n_past + c0;
    const blocks::Step st{cfg_, Tc, pos.data() + c0, s, key_end.empty() ? nullptr : key_end.data() + c0};
    float* x = s.x.data() + static_cast<size_t>(c0) * H;
    const float* ple = cfg_.ple_dim > 0 ? s.ple.data() + static_cast<size_t>(c0) * LP : nullptr;
    for (int li = 0; li < cfg_.n_layers; ++li) {
      const LayerConfig& lc = cfg_.layers[li];
      const LayerWeights& lw = w_.layers[li];
      ops::rmsnorm(x, Tc, H, lw.input_norm.data, lw.input_norm.dtype, off, eps, s.h.data());
      blocks::attention(st, li, lw, inv_freq_[li].data(), kv, s.h.data(), s.proj.data());
      ops::rmsnorm(s.proj.data(), Tc, H, lw.post_attn_norm.data, lw.post_attn_norm.dtype, off, eps, s.proj.data());
      ops::add_inplace(x, s.proj.data(), Tc * H);
      blocks::feed_forward(st, lc, lw, x);
      if (cfg_.ple_dim > 0) blocks::ple_block(st, li, lw, ple, x);
      if (cfg_.layer_scalar)
        for (int64_t i = 0; i < Tc * H; ++i) x[i] *= lw.layer_scalar;
    }
    kv.commit(p0 + Tc);
  }

  if (mode == LogitsMode::None) return;
  const int first = mode == LogitsMode::Last ? T - 1 : 0;
  const int rows = T - first;
  ops::rmsnorm(s.x.data() + static_cast<size_t>(first) * H, rows, H, w_.final_norm.data, w_.final_norm.dtype,
               off, eps, s.h.data());
  logits.resize(static_cast<size_t>(rows) * V);
  ops::matmul(s.h.data(), rows, w_.embed, logits.data());
  if (cfg_.final_softcap > 0.0f) ops::softcap(logits.data(), static_cast<int64_t>(rows) * V, cfg_.final_softcap);
}

void Model::encode(const int32_t* tokens, int T, ForwardScratch& s, std::vector<float>& hidden) const {
  if (!cfg_.bidirectional) throw Error("encode: the model is not bidirectional (use_bidirectional_attention)");
  if (T <= 0) throw Error("encode: no tokens");
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  for (int t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= V)
      throw Error("token id " + std::to_string(tokens[t]) + " outside the vocabulary (size " + std::to_string(V) + ")");
  // One page holds all T positions: nothing is recycled, and every layer writes all its keys
  // before any query reads them (attention() writes K/V, then attends).
  KVCacheOptions opt;
  opt.type = KVType::F32;
  opt.page_tokens = T;
  opt.max_tokens = T;
  KVCache kv(cfg_, opt);
  std::vector<int32_t> pos(T), key_end(T, T - 1);
  for (int t = 0; t < T; ++t) pos[t] = t;
  embed(tokens, T, s);
  kv.begin_append(0, T);
  const blocks::Step st{cfg_, T, pos.data(), s, key_end.data()};
  const float eps = cfg_.rms_norm_eps, off = cfg_.norm_offset;
  float* x = s.x.data();
  for (int li = 0; li < cfg_.n_layers; ++li) {
    const LayerWeights& lw = w_.layers[li];
    ops::rmsnorm(x, T, H, lw.input_norm.data, lw.input_norm.dtype, off, eps, s.h.data());
    blocks::attention(st, li, lw, inv_freq_[li].data(), kv, s.h.data(), s.proj.data());
    ops::rmsnorm(s.proj.data(), T, H, lw.post_attn_norm.data, lw.post_attn_norm.dtype, off, eps, s.proj.data());
    ops::add_inplace(x, s.proj.data(), T * H);
    blocks::feed_forward(st, cfg_.layers[li], lw, x);
  }
  hidden.resize(static_cast<size_t>(T) * H);
  ops::rmsnorm(x, T, H, w_.final_norm.data, w_.final_norm.dtype, off, eps, hidden.data());
}

}  // namespace eg
