// Model: a loaded Gemma text decoder (config + mapped weights) and its forward pass.
//
// One forward pass for every Gemma generation, driven by ModelConfig (gemma-architectures.md §0-§3;
// transformers modeling_gemma2/3/4.py): x = E[ids]·√H (+ Gemma 4 per-layer-embedding inputs); per
// layer: RMSNorm → attention sub-block (blocks.h: q/k/v, q/k/v norms, RoPE, GQA with causal or
// sliding-window mask, soft-capping, KV sharing) → post-attention norm → residual → feed-forward
// sub-block (GeGLU, optional MoE) → Gemma 4 PLE block → layer scalar; final norm, tied LM head,
// optional final soft-capping. All compute in f32; RMSNorm is (1+w) for Gemma 2/3, w for Gemma 4.
//
// A Model is shared read-only; per-sequence state lives in KVCache and ForwardScratch.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "model/config.h"
#include "model/weights.h"

namespace eg {

/// Reusable activation buffers of one sequence (grown on demand, never shrunk).
struct ForwardScratch {
  std::vector<float> x, h, q, k, v, attn, proj, gate, up, ple, moe_in, moe_out;
};

/// The √H embedding scale as transformers materialises it in the compute dtype: float32(√H) for
/// f32, rounded to bf16 / f16 for 16-bit runs (gemma-architectures.md §0.5: 1152 → 34.0 in bf16).
float embedding_scale(int hidden_size, DType compute);

/// Which positions get logits.
enum class LogitsMode { Last, All, None };

/// Rows that replace the token embeddings in one forward call: the soft tokens of an image
/// (gemma-multimodal.md §0.3). The tokens at those positions are the placeholder ids; their
/// embeddings are computed and then overwritten by `rows`, which are used as given (not scaled by
/// √H). Gemma 4 PLE: the per-layer token part uses row 0 (pad) at these positions (§0.3 item 5).
/// With `bidirectional` (Gemma 3 images) the n rows also see each other's later positions during
/// this prefill (`causal OR same block`, then the sliding window), as transformers'
/// token_type_ids mask; otherwise they stay causal.
struct EmbedSpan {
  int begin = 0;                // first row, relative to this call's tokens
  int n = 0;                    // rows
  const float* rows = nullptr;  // [n, H] f32
  bool bidirectional = false;
};

/// Throws eg::Error unless every span lies inside a call of T tokens, in order, without overlap,
/// with rows (the message Model::forward and every executor's prefill_media give).
void check_embed_spans(const std::vector<EmbedSpan>& spans, int T);

/// The last key each of the call's T rows sees, as absolute positions from pos0: pos0 + t, or the
/// last position of the bidirectional span holding row t. Empty when no span is bidirectional
/// (every row causal).
std::vector<int32_t> embed_key_end(const std::vector<EmbedSpan>& spans, int pos0, int T);

class Model {
 public:
  /// Loads config.json (+ generation_config.json) and the safetensors of `dir`, validates every
  /// tensor shape. Throws eg::Error.
  static std::unique_ptr<Model> load_dir(const std::string& dir);
  /// Loads a llama.cpp-style GGUF file (architectures gemma2/gemma3/gemma4; any supported tensor
  /// type; conventions in model/gguf_model.h). Throws eg::Error naming the file.
  static std::unique_ptr<Model> load_gguf(const std::string& path);
  /// From an already parsed config and opened tensors.
  Model(ModelConfig cfg, TensorStore store);

  const ModelConfig& config() const { return cfg_; }
  const ModelWeights& weights() const { return w_; }

  /// Gives every matmul weight that has an interleaved CPU layout on this machine
  /// (backend/cpu/packed.h: Q4_0, Q8_0 and Q6_K with AVX-512 VNNI (Q6_K off with EDGEGEMMA_REPACK_Q6K=0);
  /// F16, BF16, F32 with AVX-512F)
  /// its packed copy, and releases the mapped pages it came from, so resident memory does not
  /// grow (model/cpu_repack.cpp). Idempotent; block-quantized results are bit-identical before
  /// and after, float weights change only in f32 dot-product rounding (packed.h). Returns the
  /// bytes packed.
  size_t repack_for_cpu();

  /// Runs T tokens at positions kv.n_past() .. kv.n_past()+T-1 (one batched pass: matrix-matrix
  /// products), appends their K/V to `kv` and advances it. Writes logits [V] for the last token
  /// (Last), [T, V] for every token (All) or nothing (None) into `logits` (resized).
  /// Throws eg::Error if the cache has no room for T more tokens or an id is outside the vocab.
  /// `media`: optional embedding overrides (EmbedSpan), inside [0, T), non-overlapping, in order;
  /// a bidirectional span is processed in one pass even when it crosses KV pages. Throws eg::Error,
  /// before changing the cache, for a span outside the call, or when a bidirectional span would
  /// need sliding-window pages the cache's rollback margin does not keep (KVCacheOptions).
  void forward(const int32_t* tokens, int T, KVCache& kv, ForwardScratch& s, LogitsMode mode,
               std::vector<float>& logits, const std::vector<EmbedSpan>* media = nullptr) const;

  /// The encoder pass of a bidirectional model (cfg.bidirectional: EmbeddingGemma's
  /// Gemma3TextModel): T tokens at positions 0 .. T-1 in one pass, each layer attending over all
  /// T (full layers) or the symmetric window |q - k| <= W/2 (sliding layers), no causal mask;
  /// writes the final-normed last hidden state [T, H] f32 into `hidden` (resized). Uses a
  /// transient F32 KV cache of T positions (no state survives the call). f32 throughout.
  /// Throws eg::Error if the model is not bidirectional, T <= 0 or an id is outside the vocab.
  void encode(const int32_t* tokens, int T, ForwardScratch& s, std::vector<float>& hidden) const;

  /// One decode step for B independent sequences (src/model/forward_batch.cpp): sequence b
  /// appends token tokens[b] at position kvs[b]->n_past() to its own cache kvs[b] and advances it
  /// by one. Every matmul runs once with B rows (the weights are read once per step for all B
  /// tokens); RoPE, the K/V write, attention (sliding windows, KV sharing, soft-caps), MoE routing
  /// and Gemma 4 PLE are per row. logits: [B, V] f32 (resized), row b for sequence b, bit-identical
  /// to forward(&tokens[b], 1, *kvs[b], s, LogitsMode::Last, ...) run alone (tested in
  /// tests/forward_batch_test.cpp). The caches may have different page sizes, KV types and
  /// lengths, but must be distinct and made for this model.
  /// Throws eg::Error, before changing any cache, if B <= 0, a pointer is null or repeated, a cache
  /// does not match the model's layers, a cache is full (naming the row) or an id is outside the
  /// vocabulary.
  void forward_batch(const int32_t* tokens, int B, KVCache* const* kvs, ForwardScratch& s,
                     std::vector<float>& logits) const;

 private:
  /// Scaled input embeddings of n tokens into s.x [n, H] (grows s.x, s.h, s.proj to n rows).
  void embed(const int32_t* tokens, int n, ForwardScratch& s) const;

  ModelConfig cfg_;
  ModelWeights w_;
  std::vector<std::vector<float>> inv_freq_;  // per layer, [rope_dims/2]
  float embed_scale_ = 1.0f;
};

}  // namespace eg
