// A Gemma 4 mmproj (gemma4v + gemma4a) -> the towers' configs and HF-named tensors, every
// converter transform inverted (mmproj.h, mmproj_gemma4_names.h).
#include <cmath>
#include <set>

#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "model/mmproj_detail.h"
#include "model/mmproj_gemma4_names.h"

namespace eg::mmproj_detail {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

bool plain_type(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16; }

// The inverse of the converter's transform (stored values -> checkpoint values).
std::vector<float> inverse(const G4Tensor& t, const std::vector<float>& s, const Fail& fail) {
  if (t.transform == G4Transform::PatchPermute) {
    const int64_t Hv = t.gguf_shape[0], ps = t.gguf_shape[2];
    std::vector<float> o(s.size());
    for (int64_t n = 0; n < Hv; ++n)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t y = 0; y < ps; ++y)
          for (int64_t x = 0; x < ps; ++x)
            o[n * 3 * ps * ps + (y * ps + x) * 3 + c] = s[((n * 3 + c) * ps + y) * ps + x];
    return o;
  }
  std::vector<float> o = s;
  if (t.transform == G4Transform::Softplus)
    for (float& x : o) {
      // softplus(w) = s  <=>  w = s + log(1 − e^(−s)), s > 0.
      const double v = x;
      if (!(v > 0.0) || !std::isfinite(v))
        throw fail("tensor '" + t.gguf + "' holds softplus(per_dim_scale) and must be positive, has " + std::to_string(v));
      x = static_cast<float>(v + std::log(-std::expm1(-v)));
    }
  return o;
}

}  // namespace

void read_gemma4(Mmproj& m, const Fail& fail) {
  const GGUFFile& g = *m.file;
  auto pos = [&](const std::string& key) {
    if (!g.find(key)) throw fail("missing metadata key '" + key + "'");
    const int64_t v = g.get_int(key);
    if (v <= 0 || v > (1 << 20)) throw fail("metadata '" + key + "' must be in 1..1048576, is " + std::to_string(v));
    return static_cast<int>(v);
  };
  auto need = [&](const std::string& name, size_t dims) -> const GGUFTensor& {
    const GGUFTensor* t = g.find_tensor(name);
    if (!t) throw fail("missing tensor '" + name + "'");
    if (t->ne.size() != dims) throw fail("tensor '" + name + "': shape " + shape_text(t->shape()) + " has the wrong rank");
    return *t;
  };
  std::vector<G4Tensor> list;
  if (m.has_vision) {
    if (m.projector_type != "gemma4v")
      throw fail("vision projector type '" + m.projector_type + "' with a Gemma 4 audio tower (expected 'gemma4v')");
    vision::VisionConfig& c = m.vision;
    c.kind = vision::TowerKind::Gemma4;
    c.hidden = pos("clip.vision.embedding_length");
    c.intermediate = pos("clip.vision.feed_forward_length");
    c.layers = pos("clip.vision.block_count");
    c.heads = pos("clip.vision.attention.head_count");
    c.patch_size = pos("clip.vision.patch_size");
    c.text_hidden = pos("clip.vision.projection_dim");
    if (c.layers > 1024) throw fail("clip.vision.block_count " + std::to_string(c.layers) + " is implausible");
    if (!g.find("clip.vision.attention.layer_norm_epsilon"))
      throw fail("missing metadata key 'clip.vision.attention.layer_norm_epsilon'");
    c.eps = static_cast<float>(g.get_float("clip.vision.attention.layer_norm_epsilon", 1e-6));
    if (!(c.eps > 0.0f && c.eps < 1.0f)) throw fail("clip.vision.attention.layer_norm_epsilon must be in (0, 1)");
    if (g.find("clip.vision.attention.head_dim")) {
      c.head_dim = pos("clip.vision.attention.head_dim");
    } else {
      if (c.hidden % c.heads != 0) throw fail("clip.vision.embedding_length is not a multiple of the head count");
      c.head_dim = c.hidden / c.heads;
    }
    c.kv_heads = c.heads;
    if (g.find("clip.vision.attention.head_count_kv") && g.get_int("clip.vision.attention.head_count_kv") != c.heads)
      throw fail("clip.vision.attention.head_count_kv differs from the head count (not a Gemma 4 vision tower)");
    if (g.get_bool("clip.use_silu", false)) throw fail("the Gemma 4 vision tower uses gelu (tanh), not silu");
    c.pooling_kernel = static_cast<int>(g.get_int("clip.vision.projector.scale_factor", 3));
    if (c.pooling_kernel < 1 || c.pooling_kernel > 64)
      throw fail("clip.vision.projector.scale_factor " + std::to_string(c.pooling_kernel) + " is not a pooling kernel");
    c.rope_theta = 100.0f;  // fixed, as llama.cpp's gemma4v
    c.clipped_linears = true;  // a missing bound is ±inf
    const GGUFTensor& pe = need("v.position_embd.weight", 3);
    if (pe.ne[0] != c.hidden || pe.ne[2] != 2 || pe.ne[1] < 1 || pe.ne[1] > (1 << 20))
      throw fail("tensor 'v.position_embd.weight': shape " + shape_text(pe.shape()) + ", expected [2, n, " +
                 std::to_string(c.hidden) + "]");
    c.position_embedding_size = static_cast<int>(pe.ne[1]);
    const bool sb = g.find_tensor("v.std_bias") != nullptr, ss = g.find_tensor("v.std_scale") != nullptr;
    if (sb != ss) throw fail("v.std_bias and v.std_scale come together (standardize)");
    c.standardize = sb;

    vision::ImageProcessorConfig& p = m.processor;  // Gemma4ImageProcessor defaults, as llama.cpp
    p.gemma4 = true;
    p.filter = vision::ResizeFilter::Bicubic;
    p.patch_size = c.patch_size;
    p.pooling_kernel = c.pooling_kernel;
    p.max_soft_tokens = p.image_seq_length = 280;
    bool identity = true;
    for (const char* key : {"clip.vision.image_mean", "clip.vision.image_std"}) {
      const GGUFValue* v = g.find(key);
      if (!v || !v->is_array() || v->floats.size() != 3)
        throw fail(std::string("metadata '") + key + "' must be an array of 3 floats");
      const bool mean = std::string(key).find("mean") != std::string::npos;
      float* dst = mean ? p.mean : p.std;
      for (int i = 0; i < 3; ++i) {
        dst[i] = static_cast<float>(v->floats[i]);
        identity = identity && dst[i] == (mean ? 0.0f : 1.0f);
      }
    }
    for (float s : p.std)
      if (!(s != 0.0f)) throw fail("clip.vision.image_std must be non-zero");
    p.do_normalize = !identity;  // the released processor: mean 0, std 1, do_normalize false
    list = gemma4v_tensors(c);
  }
  if (m.has_audio) {
    if (m.audio_projector_type != "gemma4a")
      throw fail("audio projector type '" + m.audio_projector_type + "' is not Gemma 4's ('gemma4a')");
    audio::AudioConfig& a = m.audio;
    a.present = true;
    a.hidden = pos("clip.audio.embedding_length");
    a.layers = pos("clip.audio.block_count");
    a.heads = pos("clip.audio.attention.head_count");
    a.text_hidden = pos("clip.audio.projection_dim");
    const int ffn = pos("clip.audio.feed_forward_length");
    const int mel = pos("clip.audio.num_mel_bins");
    if (a.layers > 1024) throw fail("clip.audio.block_count " + std::to_string(a.layers) + " is implausible");
    if (a.hidden % a.heads != 0 || a.hidden % 2 != 0)
      throw fail("clip.audio.embedding_length is not an even multiple of the head count");
    if (mel != 128) throw fail("clip.audio.num_mel_bins " + std::to_string(mel) + " is not 128 (Gemma 4's log-mel features)");
    // The fixed hyper-parameters (AudioConfig defaults: chunk 12, left context 13, logit cap 50,
    // residual 0.5, RMSNorm eps 1e-6 — llama.cpp's gemma4a graph uses the same); the rest from
    // the tensors.
    const GGUFTensor& c0 = need("a.conv1d.0.weight", 4);
    const GGUFTensor& c1 = need("a.conv1d.1.weight", 4);
    const GGUFTensor& dw = need("a.blk.0.conv_dw.weight", 2);
    const GGUFTensor& op = need("a.pre_encode.out.weight", 2);
    if (c0.ne[3] < 1 || c0.ne[3] > 65536 || c1.ne[3] < 1 || c1.ne[3] > 65536)
      throw fail("tensor 'a.conv1d.*.weight': implausible channel counts");
    a.conv_channels = {static_cast<int>(c0.ne[3]), static_cast<int>(c1.ne[3])};
    if (dw.ne[0] < 1 || dw.ne[0] > 1024) throw fail("tensor 'a.blk.0.conv_dw.weight': implausible kernel size");
    a.conv_kernel = static_cast<int>(dw.ne[0]);
    if (op.ne[1] < 1 || op.ne[1] > (1 << 20)) throw fail("tensor 'a.pre_encode.out.weight': implausible width");
    a.output_dims = static_cast<int>(op.ne[1]);
    m.features.feature_size = mel;
    const auto at = gemma4a_tensors(a, ffn, mel);
    list.insert(list.end(), at.begin(), at.end());
  }

  // Tensors: exactly the expected set (the optional ones may be absent), in the expected shapes.
  std::set<std::string> expected;
  for (const G4Tensor& t : list) {
    expected.insert(t.gguf);
    const GGUFTensor* gt = g.find_tensor(t.gguf);
    if (!gt) {
      if (t.optional) continue;
      throw fail("missing tensor '" + t.gguf + "'");
    }
    if (gt->shape() != t.gguf_shape)
      throw fail("tensor '" + t.gguf + "': shape " + shape_text(gt->shape()) + ", expected " + shape_text(t.gguf_shape) +
                 " from the clip.* keys");
    if (t.type != G4Type::Matrix && !plain_type(gt->dtype))
      throw fail("tensor '" + t.gguf + "': type " + dtype_name(gt->dtype) + " (only F32/F16/BF16 here)");
    TensorInfo info;
    info.name = t.hf;
    info.shape = t.hf_shape;
    if (t.transform == G4Transform::PatchPermute || t.transform == G4Transform::Softplus) {
      std::vector<float> s(static_cast<size_t>(gt->numel()));
      cpu::to_f32(gt->data, gt->dtype, s.size(), s.data());
      auto w = std::make_shared<std::vector<float>>(inverse(t, s, fail));
      info.dtype = DType::F32;
      info.data = reinterpret_cast<const uint8_t*>(w->data());
      info.nbytes = w->size() * sizeof(float);
      m.store.add_external(std::move(info), w);
    } else {  // None, Squeeze, Scalar: the same values in another shape
      info.dtype = gt->dtype;
      info.data = gt->data;
      info.nbytes = gt->nbytes;
      m.store.add_external(std::move(info), m.file);
    }
  }
  for (const GGUFTensor& t : g.tensors())
    if (!expected.count(t.name))
      throw fail("unexpected tensor '" + t.name + "' for the Gemma 4 " +
                 (m.has_audio ? (m.has_vision ? "vision and audio towers" : "audio tower") : "vision tower"));
}

}  // namespace eg::mmproj_detail
