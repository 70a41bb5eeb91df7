// Gemma models from GGUF files as llama.cpp writes them (convert_hf_to_gguf.py, conversion/gemma.py;
// llama.cpp src/llama-arch.cpp key/tensor names, src/llama-model.cpp hparams; shared
// gemma-architectures.md §1.3, §2.3, §3.4): metadata -> ModelConfig, llama.cpp tensor names ->
// the Hugging Face names the weight binder expects. And the reverse direction for the writer.
//
// Conventions followed:
//  * general.architecture gemma / gemma2 / gemma3 / gemma4 ("gemma" = Gemma 1 is treated as
//    Gemma 2 without soft-capping and with all layers full).
//  * Gemma 2/3 norms are stored as 1 + w: the config gets norm_offset = 0 (the stored values are
//    used as they are, no subtraction).
//  * gemma-embedding (EmbeddingGemma): a Gemma 3 decoder run bidirectionally (ModelConfig::
//    bidirectional; llama.cpp's symmetric window), attention.sliding_window_pattern = period n
//    (layer i full iff (i+1) % n == 0, default 6), pooling_type (1 = mean), the sentence-
//    transformers Dense layers as dense_2.weight [feat_out, feat_in] / dense_3.weight (kept in the
//    store under their own names; read by src/embed/), dense_2_feat_in/out, dense_3_feat_in/out.
//  * Layer types: Gemma 2 alternates sliding/full starting with sliding; Gemma 3 has every 6th
//    layer full; Gemma 4 stores attention.sliding_window_pattern (true = sliding).
//  * Gemma 2 has no rope.freq_base: 10000. Gemma 3's local base is rope.freq_base_swa (10000
//    when absent); linear rope scaling (rope.scaling.type/factor) applies to full layers.
//  * Attention scale: 1/sqrt(key_length), except the 27B models (Gemma 2 with 46 layers, Gemma 3
//    with 62 layers): 1/sqrt(embedding_length / head_count), as llama.cpp; Gemma 4: 1.
//  * Gemma 4: per-layer head dims key_length (full) / key_length_swa (sliding); head_count_kv and
//    feed_forward_length scalar or per layer; KV sharing (attention.shared_kv_layers) reads the
//    last non-shared layer of the same type (transformers' rule); K=V on full layers that have no
//    attn_v tensor; rope_freqs.weight = [1.0 × p, ≥1e20 × rest] gives the proportional RoPE's
//    rotated pair count p on full layers.
#pragma once
#include <memory>
#include <string>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/config.h"

namespace eg {

/// Reads the architecture from GGUF metadata. Throws eg::Error naming the file and key for a
/// missing/ill-typed key, an unsupported architecture, or inconsistent values.
ModelConfig gguf_model_config(const GGUFFile& g);

/// A TensorStore viewing the GGUF's decoder tensors under Hugging Face names ("model.layers.3.
/// self_attn.q_proj.weight") in PyTorch-order shapes; unknown names are kept under their own
/// name (reported as ignored by the binder). The store keeps `g` alive.
TensorStore gguf_tensor_store(const std::shared_ptr<GGUFFile>& g);

/// llama.cpp name -> HF name under "model." ("blk.3.attn_q.weight" ->
/// "model.layers.3.self_attn.q_proj.weight"); "" when the name is not a known decoder tensor.
std::string gguf_to_hf_name(const std::string& gguf_name);
/// HF name without the decoder prefix ("layers.3.self_attn.q_proj.weight", "embed_tokens.weight")
/// -> llama.cpp name; "" when unknown.
std::string hf_to_gguf_name(const std::string& hf_name);

}  // namespace eg
