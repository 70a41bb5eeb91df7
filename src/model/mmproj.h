// llama.cpp "mmproj" GGUF files: a multimodal checkpoint's vision tower (and projector) stored
// apart from the text GGUF, as llama.cpp's converter writes them (convert_hf_to_gguf.py
// --mmproj: MmprojModel, Gemma3VisionModel; gguf-py constants.py Keys.ClipVision, TENSOR_NAMES
// V_*; tensor_mapping.py) and as llama.cpp's tools/mtmd/clip.cpp loads them (read, not copied).
//
// File layout written and read here (Gemma 3, projector type "gemma3"):
//   general.architecture = "clip", general.type = "mmproj", general.file_type,
//   clip.projector_type = "gemma3", clip.has_vision_encoder = true, clip.use_gelu = true,
//   clip.vision.{image_size, patch_size, embedding_length, feed_forward_length, block_count,
//   attention.head_count, attention.layer_norm_epsilon, projection_dim (= the text model's
//   hidden size), image_mean, image_std}, clip.vision.projector.scale_factor (only when the
//   patch grid side / token grid side is not 4, as the converter).
//   Tensors (HF name under vision_tower.vision_model. / multi_modal_projector. -> GGUF):
//     embeddings.patch_embedding.{weight,bias}   -> v.patch_embd.{weight,bias}  (F32)
//     embeddings.position_embedding.weight       -> v.position_embd.weight      (F32)
//     encoder.layers.N.self_attn.{q,k,v}_proj.*  -> v.blk.N.attn_{q,k,v}.*
//     encoder.layers.N.self_attn.out_proj.*      -> v.blk.N.attn_out.*
//     encoder.layers.N.layer_norm{1,2}.*         -> v.blk.N.ln{1,2}.*
//     encoder.layers.N.mlp.fc{1,2}.*             -> v.blk.N.ffn_{up,down}.*
//     post_layernorm.*                           -> v.post_ln.*
//     mm_input_projection_weight [Hv, H]         -> mm.input_projection.weight (F16, not transposed)
//     mm_soft_emb_norm.weight                    -> mm.soft_emb_norm.weight    (stored 1 + w, F32)
//   1-D tensors F32; other matrices the chosen type (f32, f16, q8_0; q8_0 rows that are not a
//   multiple of 32 fall back to f16, as the converter). vision_model.head.* is not written.
//   GGUF dims are ggml order (ne[0] = innermost); shapes are PyTorch order reversed.
// Gemma 4 ("gemma4v" / "gemma4a") is not written or read yet: a clear eg::Error.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "vision/preprocess.h"
#include "vision/vision_config.h"

namespace eg {

struct MmprojWriteOptions {
  std::string type = "f16";  // f32 | f16 | q8_0 (matrices; see the header comment)
  std::function<void(const std::string&)> log;  // skipped tensors, fallbacks; may be empty
};

struct MmprojWriteReport {
  std::map<std::string, DType> tensor_types;  // GGUF name -> written type
  std::string projector_type;                 // "gemma3"
  uint64_t bytes_written = 0;
};

/// Writes the vision tower of the Hugging Face checkpoint folder `dir` (config.json with a
/// vision_config, processor_config.json / preprocessor_config.json, safetensors) as a llama.cpp
/// mmproj GGUF at `out` (atomically). Throws eg::Error for a checkpoint without a vision tower, a
/// tower this writer does not know (Gemma 4: not yet), an unknown type, a missing tensor or a
/// wrong shape (out is then not created).
MmprojWriteReport write_mmproj(const std::string& dir, const std::string& out, const MmprojWriteOptions& opt);

/// A parsed mmproj file: the vision tower's config and processor settings from the clip.* keys,
/// and its tensors under the Hugging Face names the towers bind (vision/siglip.h), shapes in
/// PyTorch order, soft_emb_norm converted back to the checkpoint's w (an owned F32 copy).
struct Mmproj {
  std::string path;
  std::string projector_type;  // "gemma3"
  vision::VisionConfig vision;  // kind Siglip; text_hidden = clip.vision.projection_dim; token ids unset (-1)
  vision::ImageProcessorConfig processor;  // image size, mean/std; Gemma 3 processor defaults otherwise
  std::shared_ptr<GGUFFile> file;
  TensorStore store;
};

/// Opens and validates `path`. Throws eg::Error naming the file: not a GGUF, not an mmproj
/// ("general.architecture is 'gemma3', not 'clip': a text model GGUF, not an mmproj file"), no
/// vision encoder, a projector type this build cannot run, a missing / ill-typed clip.* key, a
/// geometry that does not fit (image size not a multiple of the patch size, a pooling that does
/// not divide the patch grid), an unknown, missing or mis-shaped tensor.
Mmproj open_mmproj(const std::string& path);

}  // namespace eg
