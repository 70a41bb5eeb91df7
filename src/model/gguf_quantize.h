// Writing a Gemma model as a llama.cpp-compatible GGUF file, quantized with llama-quantize's
// default recipe (llama.cpp src/llama-quant.cpp llama_tensor_get_type; our own code).
//
// Source: a Hugging Face directory (config.json, safetensors, tokenizer.json) or a GGUF file.
// Output: metadata keys and tensor names as llama.cpp's converter writes them (gguf_model.h;
// Gemma 2/3 norms stored 1 + w; Gemma 4 rope_freqs generated for proportional RoPE), tokenizer
// arrays (Tokenizer::to_gguf_metadata), chat template.
//
// Recipe (type names as llama-quantize's ftypes):
//  * 1-D tensors, norms, rope_freqs, layer_output_scale, the MoE router ffn_gate_inp and
//    per_layer_model_proj: F32. Only tensors whose name ends in "weight" with >= 2 dims are quantized.
//  * token_embd (the tied LM head) and per_layer_token_embd: Q8_0 for q8_0, else Q6_K (Q8_0 when
//    the row is not a multiple of 256).
//  * q4_k_m: attn_v and ffn_down Q6_K in the "use_more_bits" layers (i < n/8 || i >= 7n/8 ||
//    (i - n/8) % 3 == 2; attn_v: i counts the attn_v tensors in layer order, n their number;
//    ffn_down*: i = layer, n = block count). q4_k (= Q4_K_S): attn_v Q5_K in the first 4,
//    ffn_down Q5_K in layers < n/8.
//  * 8 experts (llama-quantize's Mixtral rule): attn_k and attn_v Q8_0; attn_output Q5_K for
//    q4_k / q4_k_m.
//  * Rows that do not fit the block size fall back: Q4_K→Q5_0, Q5_K→Q5_1, Q6_K→Q8_0,
//    EG_Q4_G128→Q4_0; anything still not fitting → F16. Each fallback is reported.
//  * f16 / f32: every quantizable tensor F16 / F32, the rest F32.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace eg {

class ProgressSink;  // core/progress.h

struct GGUFQuantizeOptions {
  std::string type = "q8_0";  // q8_0 | q4_0 | q4_k | q4_k_m | eg_q4_g128 | f16 | f32
  /// Activation-aware scaling (quant/awq.h) before quantizing: calibration text file and token count.
  bool awq = false;
  std::string calib_file;
  int64_t calib_tokens = 32768;
  bool awq_clip = false;  ///< also search per-block weight clipping (AwqOptions::clip)
  /// One line per message (fallbacks, skipped tensors, AWQ choices); may be empty.
  std::function<void(const std::string&)> log;
  /// Progress (AWQ calibration and search, then "quantize": output bytes written); may be nullptr.
  ProgressSink* progress = nullptr;
};

struct GGUFQuantizeReport {
  std::map<std::string, DType> tensor_types;   // GGUF name -> written type
  std::vector<std::string> fallbacks;          // "blk.0.proj.weight: Q4_K -> Q5_0 (row 64 ...)"
  uint64_t bytes_written = 0;
};

/// Tensor type llama-quantize's recipe gives one tensor (see the header comment).
/// name: GGUF name; ne: ggml dims; n_layers: block count; n_experts: expert count (0 = dense);
/// attn_v_index / n_attn_v: position of this attn_v among all attn_v tensors in layer order.
/// Sets *fallback to a note when the row did not fit the chosen type. Throws eg::Error for an
/// unknown type name.
DType gguf_recipe_type(const std::string& type, const std::string& name, const std::vector<int64_t>& ne,
                       int n_layers, int n_experts, int attn_v_index, int n_attn_v, std::string* fallback);

/// llama.cpp general.file_type of a type name (q8_0 → 7, q4_0 → 2, q4_k → 14, q4_k_m → 15,
/// f16 → 1, f32 → 0, eg_q4_g128 → 1024, our own).
uint32_t gguf_file_type(const std::string& type);

/// Reads `in` (HF directory or .gguf), writes `out` (atomically). After writing, the output is
/// read back and its ModelConfig compared with the source's (layer types, head dims, RoPE,
/// scales, soft-caps, KV sharing): a model GGUF cannot express is an error, and `out` is removed.
/// Throws eg::Error.
GGUFQuantizeReport quantize_to_gguf(const std::string& in, const std::string& out, const GGUFQuantizeOptions& opt);

}  // namespace eg
