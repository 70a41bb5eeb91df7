// llama.cpp mmproj GGUF -> the towers' configs and HF-named tensors (see mmproj.h); Gemma 4: mmproj_read_gemma4.cpp.
#include <set>

#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "model/mmproj.h"
#include "model/mmproj_detail.h"
#include "model/mmproj_names.h"

namespace eg {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// The Gemma 3 file (projector type "gemma3", vision only).
void read_gemma3(Mmproj& m, const mmproj_detail::Fail& fail) {
  const GGUFFile& g = *m.file;
  if (m.has_audio) throw fail("a Gemma 3 mmproj (projector type 'gemma3') with an audio encoder is not supported");
  auto pos = [&](const char* key) {
    const int64_t v = g.get_int(key);
    if (v <= 0 || v > (1 << 20)) throw fail(std::string("metadata '") + key + "' must be in 1..1048576, is " + std::to_string(v));
    return static_cast<int>(v);
  };
  vision::VisionConfig& c = m.vision;
  c.kind = vision::TowerKind::Siglip;
  c.hidden = pos("clip.vision.embedding_length");
  c.intermediate = pos("clip.vision.feed_forward_length");
  c.layers = pos("clip.vision.block_count");
  c.heads = pos("clip.vision.attention.head_count");
  c.patch_size = pos("clip.vision.patch_size");
  c.image_size = pos("clip.vision.image_size");
  c.text_hidden = pos("clip.vision.projection_dim");
  if (!g.find("clip.vision.attention.layer_norm_epsilon"))
    throw fail("missing metadata key 'clip.vision.attention.layer_norm_epsilon'");
  c.eps = static_cast<float>(g.get_float("clip.vision.attention.layer_norm_epsilon", 1e-6));
  if (!(c.eps > 0.0f && c.eps < 1.0f)) throw fail("clip.vision.attention.layer_norm_epsilon must be in (0, 1)");
  if (c.layers > 1024) throw fail("clip.vision.block_count " + std::to_string(c.layers) + " is implausible");
  if (c.hidden % c.heads != 0) throw fail("clip.vision.embedding_length is not a multiple of the head count");
  c.head_dim = c.hidden / c.heads;
  c.kv_heads = c.heads;
  if (g.find("clip.vision.attention.head_count_kv") && g.get_int("clip.vision.attention.head_count_kv") != c.heads)
    throw fail("grouped-query attention (clip.vision.attention.head_count_kv) is not a SigLIP tower");
  if (!g.get_bool("clip.use_gelu", false) || g.get_bool("clip.use_silu", false))
    throw fail("the Gemma 3 tower uses gelu (tanh): clip.use_gelu must be true");
  if (c.image_size % c.patch_size != 0) throw fail("clip.vision.image_size is not a multiple of clip.vision.patch_size");
  const int side = c.image_size / c.patch_size;
  const int64_t scale = g.get_int("clip.vision.projector.scale_factor", 4);
  if (scale <= 0 || side % scale != 0)
    throw fail("clip.vision.projector.scale_factor " + std::to_string(scale) + " does not pool the " +
               std::to_string(side) + "x" + std::to_string(side) + " patch grid");
  c.mm_tokens_per_image = (side / static_cast<int>(scale)) * (side / static_cast<int>(scale));

  vision::ImageProcessorConfig& p = m.processor;  // Gemma3ImageProcessor defaults (bilinear, 1/255)
  p.gemma4 = false;
  p.height = p.width = c.image_size;
  p.image_seq_length = c.mm_tokens_per_image;
  for (const char* key : {"clip.vision.image_mean", "clip.vision.image_std"}) {
    const GGUFValue* v = g.find(key);
    if (!v || !v->is_array() || v->floats.size() != 3)
      throw fail(std::string("metadata '") + key + "' must be an array of 3 floats");
    float* dst = std::string(key).find("mean") != std::string::npos ? p.mean : p.std;
    for (int i = 0; i < 3; ++i) dst[i] = static_cast<float>(v->floats[i]);
  }
  for (float s : p.std)
    if (!(s != 0.0f)) throw fail("clip.vision.image_std must be non-zero");

  // Tensors: exactly the expected set, in the expected shapes.
  std::set<std::string> expected;
  for (const auto& t : mmproj_detail::gemma3_tensors(c)) {
    expected.insert(t.gguf);
    const GGUFTensor* gt = g.find_tensor(t.gguf);
    if (!gt) throw fail("missing tensor '" + t.gguf + "'");
    if (gt->shape() != t.shape)
      throw fail("tensor '" + t.gguf + "': shape " + shape_text(gt->shape()) + ", expected " + shape_text(t.shape) +
                 " from the clip.vision.* keys");
    const bool plain = gt->dtype == DType::F32 || gt->dtype == DType::F16 || gt->dtype == DType::BF16;
    if (!plain && !t.layer_matrix)
      throw fail("tensor '" + t.gguf + "': type " + dtype_name(gt->dtype) + " (only F32/F16/BF16 here)");
    TensorInfo info;
    info.name = t.hf;
    info.shape = t.shape;
    if (t.gguf == "mm.soft_emb_norm.weight") {
      // Stored 1 + w (llama.cpp's converter); the tower applies Gemma3RMSNorm's (1 + w) itself.
      auto w = std::make_shared<std::vector<float>>(static_cast<size_t>(gt->numel()));
      cpu::to_f32(gt->data, gt->dtype, w->size(), w->data());
      for (float& x : *w) x -= 1.0f;
      info.dtype = DType::F32;
      info.data = reinterpret_cast<const uint8_t*>(w->data());
      info.nbytes = w->size() * sizeof(float);
      m.store.add_external(std::move(info), w);
    } else {
      info.dtype = gt->dtype;
      info.data = gt->data;
      info.nbytes = gt->nbytes;
      m.store.add_external(std::move(info), m.file);
    }
  }
  for (const GGUFTensor& t : g.tensors())
    if (!expected.count(t.name)) throw fail("unexpected tensor '" + t.name + "' for a Gemma 3 vision tower");
}

}  // namespace

Mmproj open_mmproj(const std::string& path) {
  Mmproj m;
  m.path = path;
  m.file = GGUFFile::open(path);
  const GGUFFile& g = *m.file;
  const mmproj_detail::Fail fail = [&](const std::string& what) { return Error(path + ": " + what); };
  const std::string arch = g.get_string("general.architecture", "");
  if (arch != "clip")
    throw fail("general.architecture is '" + arch +
               "', not 'clip': not an mmproj file (a text model GGUF goes to -m, its mmproj to --mmproj)");
  m.has_vision = g.get_bool("clip.has_vision_encoder", false);
  m.has_audio = g.get_bool("clip.has_audio_encoder", false);
  if (!m.has_vision && !m.has_audio)
    throw fail("the mmproj has no vision or audio encoder (clip.has_vision_encoder, clip.has_audio_encoder)");
  // One projector type for the file (clip.projector_type), else one per tower
  // (clip.vision/audio.projector_type, mixed-modality files): clip.cpp's precedence.
  const std::string common = g.get_string("clip.projector_type", "");
  if (m.has_vision) m.projector_type = common.empty() ? g.get_string("clip.vision.projector_type", "") : common;
  if (m.has_audio) m.audio_projector_type = common.empty() ? g.get_string("clip.audio.projector_type", "") : common;
  for (const std::string& p : {m.projector_type, m.audio_projector_type})
    if (p == "gemma4uv" || p == "gemma4ua")
      throw fail("projector type '" + p + "' (the unified Gemma 4 towers) is not supported");
  if (m.projector_type == "gemma3") {
    read_gemma3(m, fail);
  } else if (m.projector_type == "gemma4v" || m.audio_projector_type == "gemma4a") {
    mmproj_detail::read_gemma4(m, fail);
  } else {
    const std::string p = m.has_vision ? m.projector_type : m.audio_projector_type;
    throw fail("projector type '" + p +
               "' is not a Gemma 3 or Gemma 4 projector (this build runs 'gemma3', 'gemma4v' and 'gemma4a')");
  }
  return m;
}

}  // namespace eg
