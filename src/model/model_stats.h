// Size arithmetic of a Gemma checkpoint, from its ModelConfig alone (plus, when available, the
// dtypes in its safetensors headers): the tensors the engine binds, parameter counts, bytes that
// must be read per generated token, KV-cache bytes per token. Nothing here reads weight data, so
// it is instant even for a 31B checkpoint. Used by `edgegemma inspect` and `edgegemma synth`.
//
// Definitions follow ../shared/docs/gemma-architectures.md §5.2-§5.3:
// - embedding = V·H (the tied LM head is the same tensor, counted once);
// - PLE table = the Gemma 4 per-layer embedding table [V_ple, L·P];
// - transformer blocks = everything else (norms, per-layer PLE gate/projection,
//   per_layer_model_projection, layer scalars, router/experts);
// - streamed per token = every tensor multiplied at each decode step, i.e. everything except the
//   gathered rows of the token embedding and of the PLE table, plus the whole embedding once more
//   as the tied LM head; of the MoE experts only top_k of num_experts count.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "format/safetensors.h"
#include "model/config.h"

namespace eg {

/// What a tensor is, for the counts above.
enum class TensorRole { Embedding, PleTable, Experts, Other };
/// How `synth` fills a tensor: noise, zeros (Gemma 2/3 (1+w) norms) or ones (Gemma 4 norms,
/// layer_scalar, router scales).
enum class TensorInit { Random, Zeros, Ones };

struct CheckpointTensor {
  std::string name;  // with the prefix
  std::vector<int64_t> shape;
  TensorRole role = TensorRole::Other;
  TensorInit init = TensorInit::Random;
  int64_t numel() const;
};

/// Every tensor the engine binds for `cfg` (model/weights.cpp), in checkpoint order (globals,
/// then layer by layer), names under `prefix`. cfg.ple_dim must be resolved (>= 0).
std::vector<CheckpointTensor> checkpoint_tensors(const ModelConfig& cfg, const std::string& prefix = "model.");

struct ParamCounts {
  int64_t embedding = 0;    // V·H
  int64_t ple_table = 0;    // V_ple·L·P
  int64_t blocks = 0;       // everything else
  int64_t total = 0;
  int64_t active = 0;       // per token: total minus the experts not chosen (== total without MoE)
  int64_t streamed_without_head = 0;  // multiplied each step, LM head excluded
  int64_t lm_head = 0;                // V·H (tied)
  int64_t streamed = 0;               // streamed_without_head + lm_head
};

/// KV-cache bytes per token of one layer type.
struct KVTypeStats {
  int layers = 0;          // layers of this type
  int kv_layers = 0;       // of which store their own K/V
  int shared_layers = 0;   // of which read another layer's K/V (store none)
  int64_t bytes16 = 0;     // K+V bytes per token over this type's layers, 16-bit cache
  int64_t bytes32 = 0;     // same for an f32 cache
};

struct ModelStats {
  ParamCounts params;
  // Per token that must be read, by the dtypes of the checkpoint (0 when unknown) and at 2 bytes
  // per parameter (bf16).
  int64_t streamed_bytes_checkpoint = 0;
  int64_t streamed_bytes_bf16 = 0;
  bool checkpoint_dtypes_known = false;
  // Weight bytes on disk (all tensors of the safetensors files, decoder or not), by dtype name.
  bool have_weights = false;
  std::map<std::string, int64_t> disk_bytes_by_dtype;
  int64_t disk_bytes = 0;
  int64_t decoder_disk_bytes = 0;   // the tensors the engine binds
  int64_t disk_tensors = 0;
  std::vector<std::string> missing_tensors;  // expected by the engine, absent from the files
  // KV cache.
  std::vector<int64_t> kv_bytes16_per_layer;  // 0 for KV-shared layers
  std::map<LayerType, KVTypeStats> kv_by_type;
  int64_t kv_bytes16 = 0, kv_bytes32 = 0;     // per token, all layers
};

/// Counts from the config; `store` (may be null) adds dtypes and on-disk bytes.
ModelStats compute_model_stats(const ModelConfig& cfg, const TensorStore* store = nullptr);

/// Layer types compactly: "S" sliding, "F" full; a periodic pattern as "(SSSSF)x7", a periodic
/// pattern with a remainder as "(SSSSSF)x2 SS", else the plain string.
std::string layer_pattern_string(const ModelConfig& cfg);

}  // namespace eg
