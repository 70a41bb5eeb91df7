// A Gemma 4 HF checkpoint -> llama.cpp mmproj GGUF with the vision and audio towers (mmproj.h,
// mmproj_gemma4_names.h for the tensors and the converter's transforms).
#include <cmath>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "audio/features.h"
#include "audio/gemma4_audio.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "core/file_util.h"
#include "model/mmproj_detail.h"
#include "model/mmproj_gemma4_names.h"
#include "vision/preprocess.h"
#include "vision/tensor_bind.h"

namespace eg::mmproj_detail {

namespace {

int audio_seq_length(const std::string& dir) {
  const std::string path = dir + "/processor_config.json";
  if (!std::filesystem::exists(path)) return 750;
  const auto j = nlohmann::json::parse(read_file(path), nullptr, false);
  if (j.is_object() && j.contains("audio_seq_length") && j["audio_seq_length"].is_number_integer())
    return j["audio_seq_length"].get<int>();
  return 750;
}

// The converter's stored type (mmproj_gemma4_names.h G4Type).
DType stored_type(const G4Tensor& t, DType base, const MmprojWriteOptions& opt) {
  if (t.type == G4Type::F32) return DType::F32;
  if (t.type == G4Type::Patch) return base == DType::F16 ? DType::F16 : DType::F32;
  if (base == DType::Q8_0 && t.gguf_shape.back() % 32 != 0) {
    if (opt.log) opt.log(t.gguf + ": Q8_0 -> F16 (row of " + std::to_string(t.gguf_shape.back()) + ")");
    return DType::F16;
  }
  return base;
}

// The converter's transform, forward (checkpoint values -> stored values).
std::vector<float> forward(const G4Tensor& t, std::vector<float> f) {
  if (t.transform == G4Transform::PatchPermute) {
    const int64_t Hv = t.gguf_shape[0], ps = t.gguf_shape[2];
    std::vector<float> o(f.size());
    for (int64_t n = 0; n < Hv; ++n)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t y = 0; y < ps; ++y)
          for (int64_t x = 0; x < ps; ++x)
            o[((n * 3 + c) * ps + y) * ps + x] = f[n * 3 * ps * ps + (y * ps + x) * 3 + c];
    return o;
  }
  if (t.transform == G4Transform::Softplus)
    for (float& x : f) x = static_cast<float>(std::log1p(std::exp(static_cast<double>(x))));
  return f;
}

[[noreturn]] void refuse(const std::string& dir, const std::string& what) {
  throw Error("mmproj: " + dir + ": " + what + "; the mmproj format has no key for it (llama.cpp fixes the value)");
}

}  // namespace

MmprojWriteReport write_gemma4(const std::string& dir, const std::string& out, const MmprojWriteOptions& opt,
                               const vision::VisionConfig& vc) {
  namespace fs = std::filesystem;
  uint32_t ftype = 0;
  const DType base = parse_type(opt.type, ftype);
  // Vision: what the file cannot say must be what llama.cpp and our reader assume.
  if (vc.rope_theta != 100.0f) refuse(dir, "vision rope_theta " + std::to_string(vc.rope_theta) + " is not 100");
  if (vc.kv_heads != vc.heads) refuse(dir, "vision num_key_value_heads differs from num_attention_heads");
  const vision::ImageProcessorConfig pc = vision::load_image_processor_config(dir, true);
  if (pc.patch_size != vc.patch_size || pc.pooling_kernel != vc.pooling_kernel)
    throw Error("mmproj: " + dir + ": the image processor's patch_size / pooling_kernel_size do not match the tower's");
  if (pc.max_soft_tokens != 280) refuse(dir, "max_soft_tokens " + std::to_string(pc.max_soft_tokens) + " is not 280");
  if (pc.filter != vision::ResizeFilter::Bicubic) refuse(dir, "the image processor does not resize bicubic");
  if (!pc.do_rescale || std::abs(pc.rescale_factor - 1.0 / 255.0) > 1e-12) refuse(dir, "rescale_factor is not 1/255");

  // Audio (absent: a vision-only file, as the converter writes for a checkpoint without audio_config).
  const audio::AudioConfig ac = audio::load_audio_config(dir);
  if (ac.present) {
    if (ac.chunk != 12 || ac.context_left != 13 || ac.context_right != 0)
      refuse(dir, "audio attention chunk / context is not 12 / 13 / 0");
    if (ac.logit_cap != 50.0f || ac.residual_weight != 0.5f || ac.eps != 1e-6f)
      refuse(dir, "audio attention_logit_cap / residual_weight / rms_norm_eps is not 50 / 0.5 / 1e-6");
    if (ac.gradient_clipping < 1e10f) refuse(dir, "audio gradient_clipping is below 1e10");
    const audio::FeatureConfig fc = audio::load_feature_config(dir), d;
    if (fc.sampling_rate != d.sampling_rate || fc.frame_length != d.frame_length || fc.hop_length != d.hop_length ||
        fc.fft_length != d.fft_length || fc.min_frequency != d.min_frequency || fc.max_frequency != d.max_frequency ||
        fc.mel_floor != d.mel_floor || fc.input_scale_factor != d.input_scale_factor || fc.feature_size != d.feature_size)
      refuse(dir, "the audio feature extractor differs from Gemma 4's log-mel defaults");
    if (audio_seq_length(dir) != 750) refuse(dir, "audio_seq_length is not 750");
  }

  const TensorStore store = TensorStore::open_dir(dir);
  using vision::find_tensor_prefix;
  std::vector<std::pair<std::string, std::string>> prefixes = {
      {kG4Vision, find_tensor_prefix(store, {"model.vision_tower.", "vision_tower."}, "patch_embedder.input_proj.weight",
                                     "vision_tower")},
      {kG4EmbedVision, find_tensor_prefix(store, {"model.embed_vision.", "embed_vision."}, "embedding_projection.weight",
                                          "embed_vision")}};
  std::vector<G4Tensor> list = gemma4v_tensors(vc);
  int64_t ffn = 0, mel = 0;
  if (ac.present) {
    const std::string A = find_tensor_prefix(store, {"model.audio_tower.", "audio_tower."}, "output_proj.weight", "audio_tower");
    prefixes.push_back({kG4Audio, A});
    prefixes.push_back({kG4EmbedAudio, find_tensor_prefix(store, {"model.embed_audio.", "embed_audio."},
                                                          "embedding_projection.weight", "embed_audio")});
    const TensorInfo* f1 = store.find(A + "layers.0.feed_forward1.ffw_layer_1.linear.weight");
    const TensorInfo* ip = store.find(A + "subsample_conv_projection.input_proj_linear.weight");
    if (!f1 || f1->shape.size() != 2 || !ip || ip->shape.size() != 2)
      throw Error("mmproj: " + dir + ": the audio tower lacks feed_forward1 / input_proj_linear weights");
    ffn = f1->shape[0];
    mel = ip->shape[1] / ac.conv_channels[1] * 4;
    if (ffn != 4 * ac.hidden) refuse(dir, "the audio feed-forward width is not 4 x hidden_size");
    if (mel != 128) refuse(dir, "the audio tower does not take 128 mel bins");
    const auto a = gemma4a_tensors(ac, ffn, mel);
    list.insert(list.end(), a.begin(), a.end());
  }
  auto store_name = [&](const std::string& hf) {
    for (const auto& [canon, real] : prefixes)
      if (hf.rfind(canon, 0) == 0) return real + hf.substr(canon.size());
    throw Error("internal: mmproj tensor without a prefix: " + hf);
  };

  std::vector<const TensorInfo*> src;
  std::vector<const G4Tensor*> used;
  std::vector<GGUFTensorSpec> specs;
  std::set<std::string> taken;
  MmprojWriteReport rep;
  rep.projector_type = "gemma4v";
  if (ac.present) rep.audio_projector_type = "gemma4a";
  for (const G4Tensor& t : list) {
    const std::string name = store_name(t.hf);
    if (t.optional && !store.find(name)) continue;
    if ((t.gguf == "v.std_bias" || t.gguf == "v.std_scale") && !vc.standardize) continue;
    // Bounds of a tower that does not clip are not used by transformers: not written (llama.cpp
    // would apply them).
    if (t.transform == G4Transform::Scalar && !(t.gguf[0] == 'v' ? vc.clipped_linears : ac.clipped_linears)) continue;
    src.push_back(&vision::need_tensor(store, name, t.hf_shape));
    used.push_back(&t);
    taken.insert(name);
    const DType d = stored_type(t, base, opt);
    specs.push_back({t.gguf, d, std::vector<int64_t>(t.gguf_shape.rbegin(), t.gguf_shape.rend())});
    rep.tensor_types[t.gguf] = d;
  }
  if (vc.standardize && !rep.tensor_types.count("v.std_bias"))
    throw Error("mmproj: " + dir + ": vision standardize is set but the checkpoint has no std_bias / std_scale");
  for (const std::string& n : store.names()) {
    bool tower = false;
    for (const auto& p : prefixes) tower = tower || n.rfind(p.second, 0) == 0;
    if (tower && !taken.count(n) && opt.log) opt.log("skipping " + n + " (not used by the towers)");
  }

  KV kv = general_keys(dir, ftype);
  kv.emplace_back("clip.has_vision_encoder", GGUFValue::boolean(true));
  kv.emplace_back("clip.vision.projection_dim", GGUFValue::u32(vc.text_hidden));
  kv.emplace_back("clip.vision.image_size", GGUFValue::u32(224));  // unused; the converter's placeholder
  kv.emplace_back("clip.vision.patch_size", GGUFValue::u32(vc.patch_size));
  kv.emplace_back("clip.vision.embedding_length", GGUFValue::u32(vc.hidden));
  kv.emplace_back("clip.vision.feed_forward_length", GGUFValue::u32(vc.intermediate));
  kv.emplace_back("clip.vision.block_count", GGUFValue::u32(vc.layers));
  kv.emplace_back("clip.vision.attention.head_count", GGUFValue::u32(vc.heads));
  if (vc.head_dim * vc.heads != vc.hidden) kv.emplace_back("clip.vision.attention.head_dim", GGUFValue::u32(vc.head_dim));
  // The mean / std the processor applies (identity when it does not normalise).
  const bool norm = pc.do_normalize;
  kv.emplace_back("clip.vision.image_mean", GGUFValue::f32_array({norm ? pc.mean[0] : 0.0f, norm ? pc.mean[1] : 0.0f,
                                                                  norm ? pc.mean[2] : 0.0f}));
  kv.emplace_back("clip.vision.image_std", GGUFValue::f32_array({norm ? pc.std[0] : 1.0f, norm ? pc.std[1] : 1.0f,
                                                                 norm ? pc.std[2] : 1.0f}));
  if (ac.present) {
    kv.emplace_back("clip.has_audio_encoder", GGUFValue::boolean(true));
    kv.emplace_back("clip.audio.projection_dim", GGUFValue::u32(ac.text_hidden));
    kv.emplace_back("clip.audio.embedding_length", GGUFValue::u32(ac.hidden));
    kv.emplace_back("clip.audio.feed_forward_length", GGUFValue::u32(static_cast<uint32_t>(ffn)));
    kv.emplace_back("clip.audio.block_count", GGUFValue::u32(ac.layers));
    kv.emplace_back("clip.audio.attention.head_count", GGUFValue::u32(ac.heads));
  }
  kv.emplace_back("clip.vision.projector_type", GGUFValue::str("gemma4v"));
  kv.emplace_back("clip.vision.attention.layer_norm_epsilon", GGUFValue::f32(vc.eps));
  if (vc.pooling_kernel != 3)
    kv.emplace_back("clip.vision.projector.scale_factor", GGUFValue::u32(vc.pooling_kernel));
  if (ac.present) {
    kv.emplace_back("clip.audio.projector_type", GGUFValue::str("gemma4a"));
    kv.emplace_back("clip.audio.num_mel_bins", GGUFValue::u32(static_cast<uint32_t>(mel)));
    kv.emplace_back("clip.audio.attention.layer_norm_epsilon", GGUFValue::f32(1e-5f));  // the converter's constant
  }

  GGUFWriter w(out, kv, specs);
  std::vector<float> f;
  for (size_t i = 0; i < used.size(); ++i) {
    const TensorInfo& t = *src[i];
    f.resize(static_cast<size_t>(t.numel()));
    cpu::to_f32(t.data, t.dtype, f.size(), f.data());
    append_rows(w, forward(*used[i], f), specs[i].ne[0], specs[i].dtype);
  }
  w.finish();
  rep.bytes_written = fs::file_size(out);
  verify_written(out);
  return rep;
}

}  // namespace eg::mmproj_detail
