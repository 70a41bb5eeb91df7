// Fixture of the Gemma 4 mmproj tests (mmproj_gemma4_test, mmproj_gemma4_errors_test):
// tiny-gemma4-mm's text model as our f32 GGUF and its towers as f32 / f16 / q8_0 mmproj files,
// in a temp dir; GGUF rewriting for the bad-file cases.
#pragma once
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "audio_test_util.h"
#include "core/error.h"
#include "format/gguf.h"
#include "model/gguf_quantize.h"
#include "model/mmproj.h"
#include "vision_test_util.h"

namespace egtest {

struct G4Files {
  std::string dir, text, mm_f32, mm_f16, mm_q8;
};

inline const G4Files& g4_files() {
  static G4Files f = [] {
    G4Files f;
    f.dir = make_temp_dir();
    f.text = f.dir + "/tiny-gemma4-mm-f32.gguf";
    eg::GGUFQuantizeOptions q;
    q.type = "f32";
    eg::quantize_to_gguf(g4mm_dir(), f.text, q);
    eg::MmprojWriteOptions o;
    for (auto [type, path] : {std::pair{"f32", &f.mm_f32}, std::pair{"f16", &f.mm_f16}, std::pair{"q8_0", &f.mm_q8}}) {
      *path = f.dir + "/mmproj-tiny-gemma4-mm-" + type + ".gguf";
      o.type = type;
      eg::write_mmproj(g4mm_dir(), *path, o);
    }
    return f;
  }();
  return f;
}

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const eg::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// One tensor of a GGUF being rewritten: name, type, ne, bytes.
struct GTensor {
  std::string name;
  eg::DType dtype;
  std::vector<int64_t> ne;
  std::string bytes;
};
using GKV = std::vector<std::pair<std::string, eg::GGUFValue>>;

/// A copy of the GGUF `src` at `dst` with its metadata / tensors changed by `edit`.
inline void rewrite(const std::string& src, const std::string& dst, const std::function<void(GKV&, std::vector<GTensor>&)>& edit) {
  auto g = eg::GGUFFile::open(src);
  GKV kv = g->metadata();
  std::vector<GTensor> ts;
  for (const auto& t : g->tensors())
    ts.push_back({t.name, t.dtype, t.ne, std::string(reinterpret_cast<const char*>(t.data), t.nbytes)});
  edit(kv, ts);
  std::vector<eg::GGUFTensorSpec> specs;
  for (const auto& t : ts) specs.push_back({t.name, t.dtype, t.ne});
  eg::GGUFWriter w(dst, kv, specs);
  for (const auto& t : ts) w.append(t.bytes.data(), t.bytes.size());
  w.finish();
}

inline void set_kv(GKV& kv, const std::string& key, eg::GGUFValue v) {
  for (auto& [k, val] : kv)
    if (k == key) {
      val = std::move(v);
      return;
    }
  kv.emplace_back(key, std::move(v));
}

inline void drop_kv(GKV& kv, const std::function<bool(const std::string&)>& pred) {
  kv.erase(std::remove_if(kv.begin(), kv.end(), [&](const auto& p) { return pred(p.first); }), kv.end());
}

inline void drop_tensors(std::vector<GTensor>& ts, const std::function<bool(const std::string&)>& pred) {
  ts.erase(std::remove_if(ts.begin(), ts.end(), [&](const GTensor& t) { return pred(t.name); }), ts.end());
}

}  // namespace egtest
