// Model::forward_batch: one decode step for B independent sequences (model.h).
//
// The decoder stack of Model::forward (model.cpp) with T = B rows, where row b is the next token of
// sequence b at its own position kvs[b]->n_past(). The matmuls, norms, GeGLU, MoE and PLE are
// row-independent ops (each output element is one dot product in a fixed order, whatever the
// number of rows: ops/matmul.cpp), so they run once over all B rows; RoPE takes the per-row
// positions; the K/V write and paged attention run per row against that row's cache
// (blocks::attention_rows). A single token never crosses a page boundary, so each cache gets one
// begin_append(pos, 1) / commit(pos + 1), exactly the calls forward() makes for that token.
#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "model/blocks.h"
#include "model/model.h"
#include "ops/ops.h"

namespace eg {

using blocks::grow;

void Model::forward_batch(const int32_t* tokens, int B, KVCache* const* kvs, ForwardScratch& s,
                          std::vector<float>& logits) const {
  if (B <= 0) throw Error("forward_batch: no sequences (B = " + std::to_string(B) + ")");
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  // Validate every row before touching any cache.
  std::unordered_set<const KVCache*> seen;
  std::vector<int32_t> pos(B);
  for (int b = 0; b < B; ++b) {
    const std::string row = "forward_batch: sequence " + std::to_string(b) + ": ";
    const KVCache* kv = kvs[b];
    if (!kv) throw Error(row + "null KV cache");
    if (!seen.insert(kv).second) throw Error(row + "KV cache passed twice in one batch");
    if (kv->n_layers() != cfg_.n_layers)
      throw Error(row + "KV cache has " + std::to_string(kv->n_layers()) + " layers, the model " +
                  std::to_string(cfg_.n_layers));
    for (int li = 0; li < cfg_.n_layers; ++li)
      if (kv->page_bytes(li) != kv_page_bytes(cfg_, li, kv->options()))
        throw Error(row + "KV cache layer " + std::to_string(li) + " does not match the model's KV shape");
    if (kv->n_past() + 1 > kv->capacity())
      throw Error(row + "context full: " + std::to_string(kv->n_past() + 1) +
                  " tokens do not fit the KV cache of " + std::to_string(kv->capacity()));
    if (tokens[b] < 0 || tokens[b] >= V || (cfg_.ple_dim > 0 && tokens[b] >= cfg_.ple_vocab))
      throw Error(row + "token id " + std::to_string(tokens[b]) + " outside the vocabulary (size " +
                  std::to_string(V) + ")");
    pos[b] = kv->n_past();
  }

  const blocks::Step st{cfg_, B, pos.data(), s};
  embed(tokens, B, s);
  if (cfg_.ple_dim > 0) {
    grow(s.ple, static_cast<size_t>(B) * cfg_.n_layers * cfg_.ple_dim);
    blocks::ple_inputs(st, w_, tokens, s.x.data(), s.ple.data());
  }

  for (int b = 0; b < B; ++b) kvs[b]->begin_append(pos[b], 1);  // cannot throw: validated above
  const float eps = cfg_.rms_norm_eps, off = cfg_.norm_offset;
  float* x = s.x.data();
  for (int li = 0; li < cfg_.n_layers; ++li) {
    const LayerWeights& lw = w_.layers[li];
    ops::rmsnorm(x, B, H, lw.input_norm.data, lw.input_norm.dtype, off, eps, s.h.data());
    blocks::attention_rows(st, li, lw, inv_freq_[li].data(), kvs, s.h.data(), s.proj.data());
    ops::rmsnorm(s.proj.data(), B, H, lw.post_attn_norm.data, lw.post_attn_norm.dtype, off, eps, s.proj.data());
    ops::add_inplace(x, s.proj.data(), B * H);
    blocks::feed_forward(st, cfg_.layers[li], lw, x);
    if (cfg_.ple_dim > 0) blocks::ple_block(st, li, lw, s.ple.data(), x);
    if (cfg_.layer_scalar)
      for (int64_t i = 0; i < B * H; ++i) x[i] *= lw.layer_scalar;
  }
  for (int b = 0; b < B; ++b) kvs[b]->commit(pos[b] + 1);

  ops::rmsnorm(x, B, H, w_.final_norm.data, w_.final_norm.dtype, off, eps, s.h.data());
  logits.resize(static_cast<size_t>(B) * V);
  ops::matmul(s.h.data(), B, w_.embed, logits.data());
  if (cfg_.final_softcap > 0.0f) ops::softcap(logits.data(), static_cast<int64_t>(B) * V, cfg_.final_softcap);
}

}  // namespace eg
