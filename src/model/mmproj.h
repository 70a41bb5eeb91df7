// llama.cpp "mmproj" GGUF files: a multimodal checkpoint's vision tower and projector (Gemma 4:
// also the audio tower) stored apart from the text GGUF, as llama.cpp's converter writes them
// (convert_hf_to_gguf.py --mmproj: MmprojModel, Gemma3VisionModel, Gemma4VisionAudioModel;
// gguf-py constants.py Keys.Clip*, TENSOR_NAMES V_* / A_*; tensor_mapping.py) and as llama.cpp's
// tools/mtmd/clip.cpp loads them (read, not copied).
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
//
// Gemma 4 (projector types "gemma4v" + "gemma4a", one file with both towers, as the converter's
// Gemma4VisionAudioModel writes it; a checkpoint without an audio_config gives a vision-only file):
//   clip.has_vision_encoder = true, clip.vision.projector_type = "gemma4v" (no clip.projector_type),
//   clip.vision.{image_size (224, unused), patch_size, embedding_length, feed_forward_length,
//   block_count, attention.head_count, attention.layer_norm_epsilon, projection_dim, image_mean,
//   image_std}, clip.vision.projector.scale_factor (pooling kernel; only when not 3);
//   clip.has_audio_encoder = true, clip.audio.projector_type = "gemma4a", clip.audio.{
//   embedding_length, feed_forward_length (4 × hidden), block_count, attention.head_count,
//   projection_dim, num_mel_bins, attention.layer_norm_epsilon (1e-5, unused: the tower's RMSNorm
//   eps is 1e-6, as llama.cpp's graph)}.
//   Tensors and the converter's transforms: model/mmproj_gemma4_names.h (patch embedding stored as
//   a [Hv, 3, ps, ps] conv kernel, audio per_dim_scale as softplus(w), the depthwise conv [Ha, k],
//   clip bounds as F32 [1]; RMSNorm weights as they are, Gemma 4's norms scale by w). Each is
//   inverted on read. Keys the format lacks are the released values (both towers' fixed
//   hyper-parameters: RoPE θ 100, 280 soft tokens per image, bicubic resize; chunk 12, left
//   context 13, logit cap 50, the Gemma 4 log-mel front end); the writer refuses a checkpoint
//   that differs from them rather than write a file that would run differently.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "format/gguf.h"
#include "audio/features.h"
#include "audio/gemma4_audio.h"
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
  std::string projector_type;                 // "gemma3" | "gemma4v" (+ "gemma4a": audio_projector_type)
  std::string audio_projector_type;           // "gemma4a" when the audio tower was written
  uint64_t bytes_written = 0;
};

/// Writes the vision tower (Gemma 3) or the vision and audio towers (Gemma 4) of the Hugging Face
/// checkpoint folder `dir` (config.json with a vision_config, processor_config.json /
/// preprocessor_config.json, safetensors) as a llama.cpp mmproj GGUF at `out` (atomically).
/// Throws eg::Error for a checkpoint without a vision tower, a setting the mmproj format cannot
/// carry (see the header comment), an unknown type, a missing tensor or a wrong shape (out is then
/// not created).
MmprojWriteReport write_mmproj(const std::string& dir, const std::string& out, const MmprojWriteOptions& opt);

/// A parsed mmproj file: the towers' configs and processor settings from the clip.* keys, and
/// their tensors under the Hugging Face names the towers bind (vision/siglip.h,
/// vision/gemma4_vision.h, audio/gemma4_audio.h), shapes in PyTorch order, every converter
/// transform inverted (soft_emb_norm back to w, the Gemma 4 patch embedding back to
/// [Hv, ps·ps·3], per_dim_scale back to w: owned F32 copies; the rest points into the file).
struct Mmproj {
  std::string path;
  bool has_vision = false, has_audio = false;
  std::string projector_type;        // the vision projector: "gemma3" | "gemma4v" ("" without vision)
  std::string audio_projector_type;  // "gemma4a" ("" without audio)
  vision::VisionConfig vision;  // kind Siglip / Gemma4; text_hidden = clip.vision.projection_dim; token ids unset (-1)
  vision::ImageProcessorConfig processor;  // from the keys; the family's processor defaults otherwise
  audio::AudioConfig audio;       // present = has_audio; text_hidden = clip.audio.projection_dim; token ids unset
  audio::FeatureConfig features;  // the Gemma 4 log-mel defaults (feature_size = clip.audio.num_mel_bins)
  std::shared_ptr<GGUFFile> file;
  TensorStore store;
};

/// Opens and validates `path`. Throws eg::Error naming the file: not a GGUF, not an mmproj
/// ("general.architecture is 'gemma3', not 'clip': a text model GGUF, not an mmproj file"), no
/// encoder, a projector type this build cannot run, a missing / ill-typed clip.* key, a geometry
/// that does not fit (image size not a multiple of the patch size, a pooling that does not divide
/// the patch grid), an unknown, missing, mis-typed or mis-shaped tensor.
Mmproj open_mmproj(const std::string& path);

}  // namespace eg
