// A model ready to serve: the forward pass, its tokenizer, and which token ids end a turn.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "exec/executor.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace eg {

class ImageEncoder;
class AudioEncoder;
struct Mmproj;

class LoadedModel {
 public:
  /// Loads a Hugging Face model directory (config.json, *.safetensors, tokenizer.json,
  /// tokenizer_config.json, optional generation_config.json). Throws eg::Error.
  static std::unique_ptr<LoadedModel> load_dir(const std::string& dir);
  /// Loads a GGUF file alone: model (Model::load_gguf), tokenizer (Tokenizer::from_gguf), stop
  /// ids (tokenizer.ggml.eos_token_id + the end-of-turn token). Throws eg::Error.
  static std::unique_ptr<LoadedModel> load_gguf(const std::string& path);
  /// A directory (Hugging Face) or a file ending in .gguf, for the CPU executor (its weights
  /// packed for the CPU kernels: Model::repack_for_cpu).
  static std::unique_ptr<LoadedModel> load(const std::string& path);
  /// The files, then the step executor for `device` (use_device).
  static std::unique_ptr<LoadedModel> load(const std::string& path, DeviceRequest device);
  /// A directory or .gguf file with the CPU executor over the weights as mapped (no packing).
  static std::unique_ptr<LoadedModel> load_files(const std::string& path);

  const Model& model() const { return *model_; }
  /// Where steps run (exec/executor.h): the CPU executor unless use_device chose another.
  const StepExecutor& executor() const { return *exec_; }
  /// Replaces the executor by the one for `device` (make_executor). Throws eg::Error when an
  /// explicitly requested device is unavailable; the old executor stays then. Call it before any
  /// Session, scheduler or KV cache uses this model.
  /// When the executor is the CPU's, the weights are packed for it (Model::repack_for_cpu; the
  /// time counts in load_ms()).
  void use_device(DeviceRequest device);
  const Tokenizer& tokenizer() const { return tokenizer_; }
  /// Ids that end generation: eos_token_id of config.json and generation_config.json, plus the
  /// chat format's end-of-turn token when the vocabulary has it (<end_of_turn>; Gemma 4 <turn|>).
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  /// The model's chat template (Jinja source): chat_template.jinja or tokenizer_config.json's
  /// for a Hugging Face directory (load_chat_template), tokenizer.chat_template for a GGUF;
  /// "" when the model has none.
  const std::string& chat_template() const { return chat_template_; }
  /// Wall time of load_dir in milliseconds.
  double load_ms() const { return load_ms_; }
  /// Things the user should know ("vision tower ignored: text-only inference").
  const std::vector<std::string>& notes() const { return notes_; }

  /// Prompt text -> ids with exactly one BOS at the start, whatever the tokenizer's
  /// add_bos_token says (engine/prompt_bos.h), unless `no_bos` (then none is added; a "<bos>" the
  /// text itself starts with stays). A duplicate BOS (text that already starts with "<bos>") is
  /// removed. Special-token text is parsed as special tokens.
  std::vector<int32_t> encode_prompt(const std::string& text, bool no_bos) const;

  /// The checkpoint's vision tower and image processor (engine/image_prompt.h), loaded on first
  /// use and shared (thread-safe). Throws eg::Error "this model has no vision tower" for a
  /// text-only checkpoint or a GGUF file, or the tower's own error (mismatched shapes, ...);
  /// a failed load is retried by the next call.
  const ImageEncoder& image_encoder() const;
  /// The checkpoint's audio tower and feature extractor (engine/audio_prompt.h), loaded on first
  /// use and shared (thread-safe); with an attached mmproj, its audio tower. Throws eg::Error
  /// "this model has no audio tower" for a checkpoint without one, a GGUF file without an mmproj
  /// or an mmproj without an audio encoder; a failed load is retried by the next call.
  const AudioEncoder& audio_encoder() const;
  /// Uses the llama.cpp mmproj file `path` (model/mmproj.h) for images and audio from now on,
  /// instead of the checkpoint's own towers (a text GGUF has none): opened and validated now, its
  /// towers built on first use (ImageEncoder / AudioEncoder::load_mmproj, which check that they
  /// fit this model; a Gemma 3 or vision-only file has no audio tower). Not
  /// found automatically next to a GGUF (llama.cpp's tools also need --mmproj). Throws eg::Error
  /// naming the file (not an mmproj, unsupported projector, bad tensors); nothing changes then.
  /// Call it before the model is shared between threads.
  void attach_mmproj(const std::string& path);
  /// The attached mmproj file ("" when none).
  const std::string& mmproj_path() const { return mmproj_path_; }
  /// The Hugging Face directory the model was loaded from ("" for a GGUF file).
  const std::string& source_dir() const { return dir_; }

  LoadedModel(std::unique_ptr<Model> m, Tokenizer t);
  ~LoadedModel();

 private:
  std::unique_ptr<Model> model_;
  void repack_for_cpu();
  std::unique_ptr<StepExecutor> exec_;
  Tokenizer tokenizer_;
  std::vector<int32_t> stop_ids_;
  double load_ms_ = 0;
  std::string chat_template_;
  std::vector<std::string> notes_;
  std::string dir_;
  std::string mmproj_path_;
  std::shared_ptr<const Mmproj> mmproj_;
  mutable std::mutex image_mu_;
  mutable std::unique_ptr<ImageEncoder> image_enc_;
  mutable std::mutex audio_mu_;
  mutable std::unique_ptr<AudioEncoder> audio_enc_;
};

/// Peak resident set size of this process in bytes (getrusage).
size_t peak_rss_bytes();

}  // namespace eg
