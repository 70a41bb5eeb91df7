// HF checkpoint folder -> llama.cpp mmproj GGUF (see mmproj.h).
#include <cstring>
#include <filesystem>

#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "model/mmproj.h"
#include "model/mmproj_detail.h"
#include "model/mmproj_names.h"
#include "vision/tensor_bind.h"

namespace eg {

namespace {

using mmproj_detail::KV;

// The converter's type for one tensor (Gemma3VisionModel.tensor_force_quant, then ModelBase's
// rules: 1-D and *_norm.weight F32; q8_0 rows not a multiple of 32 fall back to F16).
DType tensor_type(const mmproj_detail::MmprojTensor& t, DType base, const MmprojWriteOptions& opt) {
  if (t.gguf == "mm.input_projection.weight") return DType::F16;
  if (t.hf.find(".embeddings.") != std::string::npos) return DType::F32;
  if (t.shape.size() <= 1 || (t.gguf.size() >= 12 && t.gguf.compare(t.gguf.size() - 12, 12, "_norm.weight") == 0))
    return DType::F32;
  if (base == DType::Q8_0 && t.shape.back() % 32 != 0) {
    if (opt.log) opt.log(t.gguf + ": Q8_0 -> F16 (row of " + std::to_string(t.shape.back()) + ")");
    return DType::F16;
  }
  return base;
}

}  // namespace

MmprojWriteReport write_mmproj(const std::string& dir, const std::string& out, const MmprojWriteOptions& opt) {
  namespace fs = std::filesystem;
  uint32_t ftype = 0;
  const DType base = mmproj_detail::parse_type(opt.type, ftype);
  if (!fs::is_directory(dir) || !fs::exists(fs::path(dir) / "config.json"))
    throw Error("mmproj: " + dir + " is not a Hugging Face checkpoint folder (config.json)");
  vision::VisionConfig vc = vision::load_vision_config(dir);
  if (vc.kind == vision::TowerKind::None)
    throw Error("mmproj: " + dir + " has no vision tower (no vision_config in config.json)");
  if (vc.kind == vision::TowerKind::Gemma4) return mmproj_detail::write_gemma4(dir, out, opt, vc);
  const vision::ImageProcessorConfig pc = vision::load_image_processor_config(dir, false);
  if (pc.height != vc.image_size || pc.width != vc.image_size)
    throw Error("mmproj: " + dir + ": the image processor's size " + std::to_string(pc.height) + "x" +
                std::to_string(pc.width) + " does not match the tower's image_size " + std::to_string(vc.image_size));
  if (pc.image_seq_length != vc.mm_tokens_per_image)
    throw Error("mmproj: " + dir + ": image_seq_length " + std::to_string(pc.image_seq_length) +
                " does not match mm_tokens_per_image " + std::to_string(vc.mm_tokens_per_image));
  const int side = vc.image_size / vc.patch_size;
  int tok_side = 1;
  while (tok_side * tok_side < vc.mm_tokens_per_image) ++tok_side;
  const int scale = side / tok_side;

  const TensorStore store = TensorStore::open_dir(dir);
  const std::string V = vision::find_tensor_prefix(store, {"vision_tower.vision_model.", "vision_tower.", "model.vision_tower."},
                                                   "embeddings.patch_embedding.weight", "vision_tower");
  const std::string M = vision::find_tensor_prefix(store, {"multi_modal_projector.", "model.multi_modal_projector."},
                                                   "mm_input_projection_weight", "multi_modal_projector");
  const auto list = mmproj_detail::gemma3_tensors(vc);
  std::vector<const TensorInfo*> src;
  std::vector<GGUFTensorSpec> specs;
  MmprojWriteReport rep;
  rep.projector_type = "gemma3";
  for (const auto& t : list) {
    const bool proj = t.hf.rfind(mmproj_detail::kProjPrefix, 0) == 0;
    const std::string name = proj ? M + t.hf.substr(mmproj_detail::kProjPrefix.size())
                                  : V + t.hf.substr(mmproj_detail::kVisionPrefix.size());
    src.push_back(&vision::need_tensor(store, name, t.shape));
    const DType d = tensor_type(t, base, opt);
    specs.push_back({t.gguf, d, std::vector<int64_t>(t.shape.rbegin(), t.shape.rend())});
    rep.tensor_types[t.gguf] = d;
  }
  for (const std::string& n : store.names())
    if (n.find("vision_model.head.") != std::string::npos && opt.log) opt.log("skipping " + n + " (attention-pooling head)");

  KV kv = mmproj_detail::general_keys(dir, ftype);
  kv.emplace_back("clip.has_vision_encoder", GGUFValue::boolean(true));
  kv.emplace_back("clip.vision.projection_dim", GGUFValue::u32(vc.text_hidden));
  kv.emplace_back("clip.vision.image_size", GGUFValue::u32(vc.image_size));
  kv.emplace_back("clip.vision.patch_size", GGUFValue::u32(vc.patch_size));
  kv.emplace_back("clip.vision.embedding_length", GGUFValue::u32(vc.hidden));
  kv.emplace_back("clip.vision.feed_forward_length", GGUFValue::u32(vc.intermediate));
  kv.emplace_back("clip.vision.block_count", GGUFValue::u32(vc.layers));
  kv.emplace_back("clip.vision.attention.head_count", GGUFValue::u32(vc.heads));
  kv.emplace_back("clip.vision.image_mean", GGUFValue::f32_array({pc.mean[0], pc.mean[1], pc.mean[2]}));
  kv.emplace_back("clip.vision.image_std", GGUFValue::f32_array({pc.std[0], pc.std[1], pc.std[2]}));
  kv.emplace_back("clip.projector_type", GGUFValue::str("gemma3"));
  kv.emplace_back("clip.vision.attention.layer_norm_epsilon", GGUFValue::f32(vc.eps));
  kv.emplace_back("clip.use_gelu", GGUFValue::boolean(true));
  if (scale > 0 && scale != 4) kv.emplace_back("clip.vision.projector.scale_factor", GGUFValue::u32(scale));

  GGUFWriter w(out, kv, specs);
  std::vector<float> f;
  for (size_t i = 0; i < list.size(); ++i) {
    const TensorInfo& t = *src[i];
    f.resize(static_cast<size_t>(t.numel()));
    cpu::to_f32(t.data, t.dtype, f.size(), f.data());
    // Gemma3RMSNorm scales by (1 + w): llama.cpp's graph multiplies by the stored value.
    if (list[i].gguf == "mm.soft_emb_norm.weight")
      for (float& x : f) x += 1.0f;
    mmproj_detail::append_rows(w, f, specs[i].ne[0], specs[i].dtype);
  }
  w.finish();
  rep.bytes_written = fs::file_size(out);
  mmproj_detail::verify_written(out);
  return rep;
}

}  // namespace eg
