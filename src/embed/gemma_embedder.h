// EmbeddingGemma (and any Gemma 3 encoder in its layout) behind the Embedder interface:
// tokens <bos> [prompt] text <eos> -> Model::encode (bidirectional Gemma 3, f32) -> mean pooling
// -> Dense layers (2_Dense 768->3072, 3_Dense 3072->768, no activation) -> L2 normalisation ->
// optional Matryoshka truncation re-normalised. Follows sentence-transformers' encode() for this
// module list (docs/embeddings.md). Internal to src/embed; users go through open.h.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "embed/embedder.h"
#include "embed/st_config.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace eg::embed {

/// One Dense layer: weight [out, in] (any matmul dtype), optional f32 bias [out].
struct DenseLayer {
  ops::Weight w;
  std::vector<float> bias;
  std::shared_ptr<const void> owner;  // keeps the weight bytes mapped
};

/// Per-stage outputs of one text, for tests against sentence-transformers' modules.
struct EmbedStages {
  std::vector<int32_t> ids;
  std::vector<float> token_embeddings;  // [T, H] last hidden state (after the final norm)
  std::vector<float> pooled;            // [H]
  std::vector<std::vector<float>> dense;  // after each Dense layer
  std::vector<float> embedding;         // normalised, full dimension
};

class GemmaEmbedder final : public Embedder {
 public:
  struct Parts {
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tokenizer;
    std::vector<DenseLayer> dense;
    std::vector<Prompt> prompts;
    std::string default_prompt_name;
    int max_tokens = 0;
    std::vector<std::string> weight_files;  // hashed (in this order) by model_digest()
    int threads = 0;
    // tokenizer_config.json's add_bos_token / add_eos_token: transformers rebuilds the
    // post-processor from them, so the ids start with <bos> / end with <eos> even when
    // tokenizer.json's own post-processor does not add them (EmbeddingGemma: both true).
    bool ensure_bos = false, ensure_eos = false;
  };
  /// Throws eg::Error if the parts do not fit together (the Dense chain must start at the hidden
  /// size; the model must be bidirectional).
  explicit GemmaEmbedder(Parts parts);

  int full_dim() const override { return full_dim_; }
  std::vector<int> supported_dims() const override { return dims_; }
  std::vector<std::string> task_names() const override;
  int max_tokens() const override { return p_.max_tokens; }
  std::string model_digest() const override;
  std::vector<Embedding> embed(const std::vector<std::string>& texts, const EmbedOptions& options) override;

  /// The prompt prefix of `task` ("" for none; the default prompt when task is empty).
  /// Throws eg::Error for an unknown task, listing the known ones.
  std::string prefix_for(const std::string& task) const;
  /// Token ids of one text as embed() feeds them (prefix applied, <bos>/<eos> as the tokenizer's
  /// post-processor adds them). Throws on over-long input or invalid UTF-8.
  std::vector<int32_t> tokenize(const std::string& text, const EmbedOptions& options) const;
  /// Every stage for one text of already tokenized ids (tests).
  EmbedStages run_stages(const std::vector<int32_t>& ids);
  const Model& model() const { return *p_.model; }

 private:
  Parts p_;
  int full_dim_ = 0;
  std::vector<int> dims_;
  std::mutex mu_;  // one text at a time: the scratch below is shared
  ForwardScratch scratch_;
  mutable std::mutex digest_mu_;
  mutable std::string digest_;
};

/// Matryoshka dimensions offered for a full dimension: EmbeddingGemma's 768 -> {768, 512, 256,
/// 128}; any other size (test models) -> itself and its halvings down to 16 ({64, 32, 16}).
std::vector<int> matryoshka_dims(int full_dim);

/// v[0..d) scaled to unit L2 norm (x / max(||x||, 1e-12), torch.nn.functional.normalize).
std::vector<float> truncate_normalize(const std::vector<float>& v, int d);

}  // namespace eg::embed
