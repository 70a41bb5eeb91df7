// `edgegemma quantize`: write a model (Hugging Face directory or GGUF) as a quantized GGUF file
// that llama.cpp and edgegemma load (model/gguf_quantize.h), and/or the towers of a multimodal
// Hugging Face checkpoint as a llama.cpp mmproj file (--mmproj, model/mmproj.h).
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "core/error.h"
#include "core/progress.h"
#include "model/gguf_quantize.h"
#include "model/mmproj.h"

namespace eg::cli {

namespace {
struct QuantizeArgs {
  std::string in, out, type = "q8_0", calib, mmproj, mmproj_type = "f16";
  bool awq = false, awq_clip = false, quiet = false;
  int64_t calib_tokens = 32768;
  int threads = 0;
};

void print_counts(const std::string& out, uint64_t bytes, const std::map<std::string, DType>& types) {
  std::map<std::string, int> counts;
  for (const auto& [name, t] : types) ++counts[dtype_name(t)];
  std::printf("wrote %s: %llu bytes, %zu tensors:", out.c_str(), static_cast<unsigned long long>(bytes), types.size());
  for (const auto& [t, n] : counts) std::printf(" %d x %s", n, t.c_str());
  std::printf("\n");
}

int quantize(const QuantizeArgs& a) {
  apply_threads(a.threads);
  if (a.out.empty() && a.mmproj.empty()) throw Error("give -o OUT.gguf (the text model), --mmproj OUT.gguf (the vision / audio towers), or both");
  ProgressReporter progress(ProgressReporter::stderr_options(a.quiet));
  if (!a.mmproj.empty()) {
    MmprojWriteOptions mo;
    mo.type = a.mmproj_type;
    mo.log = [&progress](const std::string& s) { progress.message(s); };
    const MmprojWriteReport r = write_mmproj(a.in, a.mmproj, mo);
    print_counts(a.mmproj, r.bytes_written, r.tensor_types);
  }
  if (a.out.empty()) return 0;
  GGUFQuantizeOptions o;
  o.type = a.type;
  o.awq = a.awq;
  o.calib_file = a.calib;
  o.calib_tokens = a.calib_tokens;
  o.awq_clip = a.awq_clip;
  if (a.awq_clip && !a.awq) throw Error("--awq-clip needs --awq");
  if (!a.awq && (!a.calib.empty())) throw Error("--calib needs --awq");
  o.log = [&progress](const std::string& s) { progress.message(s); };
  o.progress = &progress;
  const GGUFQuantizeReport r = quantize_to_gguf(a.in, a.out, o);
  print_counts(a.out, r.bytes_written, r.tensor_types);
  if (!r.fallbacks.empty()) std::printf("%zu tensors fell back to another type (see stderr)\n", r.fallbacks.size());
  return 0;
}
}  // namespace

Action register_quantize(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  app.add_option("-m,--model", a->in, "input: Hugging Face model directory or .gguf file")->required();
  app.add_option("-o,--output", a->out, "output .gguf file of the text model (written atomically)");
  app.add_option("--mmproj", a->mmproj,
                 "also (or only) write the vision tower (Gemma 4: and the audio tower) of a multimodal HF checkpoint as a llama.cpp mmproj .gguf");
  app.add_option("--mmproj-type", a->mmproj_type, "matrix type of the mmproj: f16 (default) | f32 | q8_0")
      ->check(CLI::IsMember({"f16", "f32", "q8_0"}));
  app.add_option("--type", a->type, "q8_0 | q4_0 | q4_k | q4_k_m | eg_q4_g128 | f16 | f32 (default q8_0)")
      ->check(CLI::IsMember({"q8_0", "q4_0", "q4_k", "q4_k_m", "eg_q4_g128", "f16", "f32"}));
  app.add_flag("--awq", a->awq, "activation-aware weight scaling before quantizing (needs --calib)");
  app.add_option("--calib", a->calib, "calibration text file for --awq (e.g. shared/data/corpus/train.txt)");
  app.add_option("--calib-tokens", a->calib_tokens, "calibration tokens for --awq (default 32768)")->check(kCount);
  app.add_flag("--awq-clip", a->awq_clip, "with --awq: also search a per-block clipping ratio of the weights");
  app.add_option("-t,--threads", a->threads, "threads (default: all cores)")->check(kCount);
  app.add_flag("-q,--quiet", a->quiet, "no progress on stderr (warnings and errors still)");
  return [a] { return quantize(*a); };
}

}  // namespace eg::cli
