#include "engine/loaded_model.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "engine/audio_prompt.h"
#include "engine/image_prompt.h"
#include "engine/prompt_bos.h"
#include "format/gguf.h"
#include "tokenizer/chat_template.h"
#include "model/gguf_model.h"
#include "model/mmproj.h"

namespace eg {

LoadedModel::LoadedModel(std::unique_ptr<Model> m, Tokenizer t)
    : model_(std::move(m)), exec_(make_cpu_executor(*model_)), tokenizer_(std::move(t)) {
  const ModelConfig& cfg = model_->config();
  auto add = [&](int id) {
    if (id >= 0 && std::find(stop_ids_.begin(), stop_ids_.end(), id) == stop_ids_.end())
      stop_ids_.push_back(id);
  };
  for (int id : cfg.eos_token_ids) add(id);
  // The end-of-turn token of the chat format, looked up by name in the checkpoint's own
  // vocabulary (never by a hard-coded id): Gemma 2/3 "<end_of_turn>", Gemma 4 "<turn|>".
  add(tokenizer_.token_id(cfg.family == ModelFamily::Gemma4 ? "<turn|>" : "<end_of_turn>"));
  // The tokenizer may know a few ids the embedding lacks (Gemma 3 1B: <image_soft_token> = 262144
  // with vocab_size 262144), or the embedding may have padding rows (Gemma 3 4B: 262208); ids the
  // embedding lacks are rejected by Model::forward. A larger difference means the two do not
  // belong together.
  const int diff = tokenizer_.vocab_size() - cfg.vocab_size;
  if (diff > 64 || diff < -1024)
    throw Error("tokenizer.json has " + std::to_string(tokenizer_.vocab_size()) +
                " tokens but the model's vocab_size is " + std::to_string(cfg.vocab_size) +
                ": they do not belong to the same model");
  // The vision tower (Gemma 3's SigLIP, Gemma 4's) runs when an image is given
  // (engine/image_prompt.h), Gemma 4's audio tower when a clip is (engine/audio_prompt.h).
  const bool vision = cfg.multimodal_wrapper;
  if (cfg.multimodal_wrapper)
    notes_.push_back(std::string("multimodal checkpoint: the vision tower runs for images") +
                     (cfg.family == ModelFamily::Gemma4 ? ", the audio tower for audio clips" : "") + ", else text only");
  for (const auto& p : model_->weights().ignored_prefixes) {
    const bool tower = p.find("vision_tower.") != std::string::npos || p.find("multi_modal_projector.") != std::string::npos ||
                       p.find("embed_vision.") != std::string::npos ||
                       (cfg.family == ModelFamily::Gemma4 &&
                        (p.find("audio_tower.") != std::string::npos || p.find("embed_audio.") != std::string::npos));
    if (!(vision && tower)) notes_.push_back("ignoring tensors under '" + p + "'");
  }
}

LoadedModel::~LoadedModel() = default;

void LoadedModel::attach_mmproj(const std::string& path) {
  auto m = std::make_shared<Mmproj>(open_mmproj(path));
  // The cheap checks now, so that a wrong file is an error at load even for a text-only run (the
  // towers themselves are built, and checked in full, on first use).
  const ModelConfig& mc = model().config();
  const char* fam = mc.family == ModelFamily::Gemma4 ? "Gemma 4" : mc.family == ModelFamily::Gemma3 ? "Gemma 3" : "Gemma 2";
  const bool g4v = m->projector_type == "gemma4v", g3v = m->projector_type == "gemma3";
  if ((g3v && mc.family != ModelFamily::Gemma3) || (g4v && mc.family != ModelFamily::Gemma4) ||
      (m->has_audio && mc.family != ModelFamily::Gemma4))
    throw Error(path + ": a " + (g3v ? "Gemma 3" : "Gemma 4") + " mmproj (projector type '" +
                (m->has_vision ? m->projector_type : m->audio_projector_type) + "') does not belong to this " + fam +
                " text model");
  if (m->has_vision && m->vision.text_hidden != mc.hidden_size)
    throw Error(path + ": the vision tower produces " + std::to_string(m->vision.text_hidden) +
                "-wide soft tokens (clip.vision.projection_dim) but the text model is " + std::to_string(mc.hidden_size) + " wide");
  if (m->has_audio && m->audio.text_hidden != mc.hidden_size)
    throw Error(path + ": the audio tower produces " + std::to_string(m->audio.text_hidden) +
                "-wide soft tokens (clip.audio.projection_dim) but the text model is " + std::to_string(mc.hidden_size) + " wide");
  std::lock_guard<std::mutex> lk(image_mu_);
  std::lock_guard<std::mutex> la(audio_mu_);
  mmproj_ = std::move(m);
  mmproj_path_ = path;
  image_enc_.reset();
  audio_enc_.reset();
}

const ImageEncoder& LoadedModel::image_encoder() const {
  std::lock_guard<std::mutex> lk(image_mu_);
  if (!image_enc_) {
    if (mmproj_) image_enc_ = ImageEncoder::load_mmproj(*this, mmproj_);
    else if (dir_.empty())
      throw Error("this model has no vision tower (a GGUF file: give its vision tower with --mmproj FILE)");
    else image_enc_ = ImageEncoder::load(*this, dir_);
  }
  return *image_enc_;
}

const AudioEncoder& LoadedModel::audio_encoder() const {
  std::lock_guard<std::mutex> lk(audio_mu_);
  if (!audio_enc_) {
    if (mmproj_) audio_enc_ = AudioEncoder::load_mmproj(*this, mmproj_);
    else if (dir_.empty())
      throw Error("this model has no audio tower (a GGUF file: give its audio tower with --mmproj FILE)");
    else audio_enc_ = AudioEncoder::load(*this, dir_);
  }
  return *audio_enc_;
}

std::unique_ptr<LoadedModel> LoadedModel::load_dir(const std::string& dir) {
  const auto t0 = std::chrono::steady_clock::now();
  namespace fs = std::filesystem;
  if (!fs::exists(dir)) throw Error("model path does not exist: " + dir);
  if (fs::path(dir).extension() == ".gguf" && fs::is_regular_file(dir)) return load_gguf(dir);
  auto model = Model::load_dir(dir);
  if (!fs::exists(fs::path(dir) / "tokenizer.json")) throw Error("missing tokenizer.json in " + dir);
  Tokenizer tok = Tokenizer::load_dir(dir);
  auto lm = std::make_unique<LoadedModel>(std::move(model), std::move(tok));
  lm->dir_ = dir;
  try {
    lm->chat_template_ = load_chat_template(dir);
  } catch (const Error&) {
    lm->chat_template_.clear();  // no template: fine for raw completion; chat says so when used
  }
  lm->load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return lm;
}

std::unique_ptr<LoadedModel> LoadedModel::load_gguf(const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!std::filesystem::exists(path)) throw Error("model path does not exist: " + path);
  std::shared_ptr<GGUFFile> g = GGUFFile::open(path);
  ModelConfig cfg = gguf_model_config(*g);
  std::unique_ptr<Model> model;
  try {
    model = std::make_unique<Model>(std::move(cfg), gguf_tensor_store(g));
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  Tokenizer tok = Tokenizer::from_gguf(*g);
  auto lm = std::make_unique<LoadedModel>(std::move(model), std::move(tok));
  lm->chat_template_ = lm->tokenizer().chat_template();
  lm->load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return lm;
}

std::unique_ptr<LoadedModel> LoadedModel::load(const std::string& path) {
  auto lm = load_files(path);
  lm->repack_for_cpu();  // the CPU executor (the constructor's) reads the packed copies
  return lm;
}

std::unique_ptr<LoadedModel> LoadedModel::load_files(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(path)) {
    if (fs::path(path).extension() != ".gguf")
      throw Error(path + ": a model is a Hugging Face directory or a .gguf file");
    return load_gguf(path);
  }
  return load_dir(path);
}

std::unique_ptr<LoadedModel> LoadedModel::load(const std::string& path, DeviceRequest device) {
  auto lm = load_files(path);
  lm->use_device(device);
  return lm;
}

void LoadedModel::use_device(DeviceRequest device) {
  exec_ = make_executor(*model_, device);
  if (exec_->device() == Device::CPU) repack_for_cpu();
}

void LoadedModel::repack_for_cpu() {
  const auto t0 = std::chrono::steady_clock::now();
  if (model_->repack_for_cpu() > 0)
    load_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<int32_t> LoadedModel::encode_prompt(const std::string& text, bool no_bos) const {
  std::vector<int32_t> ids = tokenizer_.encode(text, /*add_bos=*/false, /*parse_special=*/true);
  apply_prompt_bos(tokenizer_, ids, !no_bos);
  return ids;
}

size_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<size_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace eg
