#include "engine/image_prompt.h"

#include <filesystem>

#include "core/error.h"

namespace eg {

std::unique_ptr<ImageEncoder> ImageEncoder::load(const LoadedModel& lm, const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir) || !fs::exists(fs::path(dir) / "config.json"))
    throw Error("this model has no vision tower (" + dir +
                " is not a Hugging Face checkpoint folder; GGUF mmproj files are not supported yet)");
  auto e = std::unique_ptr<ImageEncoder>(new ImageEncoder());
  e->vc_ = vision::load_vision_config(dir);
  if (e->vc_.kind == vision::TowerKind::None) throw Error("this model has no vision tower (" + dir + ")");
  if (e->vc_.kind == vision::TowerKind::Gemma4)
    throw Error("Gemma 4 images are not supported yet (" + dir + ")");
  if (e->vc_.text_hidden != lm.model().config().hidden_size)
    throw Error("vision tower of " + dir + " produces " + std::to_string(e->vc_.text_hidden) +
                "-wide soft tokens but the text model is " + std::to_string(lm.model().config().hidden_size) + " wide");
  e->pc_ = vision::load_image_processor_config(dir, false);
  if (e->pc_.height != e->vc_.image_size || e->pc_.width != e->vc_.image_size)
    throw Error(dir + ": the image processor's size " + std::to_string(e->pc_.height) + "x" +
                std::to_string(e->pc_.width) + " does not match the tower's image_size " +
                std::to_string(e->vc_.image_size));
  if (e->pc_.image_seq_length != e->vc_.mm_tokens_per_image)
    throw Error(dir + ": image_seq_length " + std::to_string(e->pc_.image_seq_length) +
                " does not match mm_tokens_per_image " + std::to_string(e->vc_.mm_tokens_per_image));
  e->tower_ = std::make_unique<vision::SiglipTower>(e->vc_, lm.model().weights().store);
  const Tokenizer& tok = lm.tokenizer();
  const int V = lm.model().config().vocab_size;
  for (int id : {e->vc_.boi_id, e->vc_.eoi_id, e->vc_.image_token_id})
    if (id < 0 || id >= tok.vocab_size() || id >= V)
      throw Error(dir + ": image token id " + std::to_string(id) + " is outside the vocabulary");
  e->boi_ = tok.piece(e->vc_.boi_id);
  e->eoi_ = tok.piece(e->vc_.eoi_id);
  e->image_ = tok.piece(e->vc_.image_token_id);
  return e;
}

std::vector<float> ImageEncoder::encode(const vision::RgbImage& img) const {
  const std::vector<float> pv = vision::gemma3_pixel_values(img, pc_);
  std::vector<float> soft;
  tower_->encode(pv.data(), soft);
  return soft;
}

std::string ImageEncoder::expanded_marker() const {
  std::string s = "\n\n" + boi_;
  for (int i = 0; i < tokens_per_image(); ++i) s += image_;
  return s + eoi_ + "\n\n";
}

int count_markers(const std::string& text, const std::string& marker) {
  if (marker.empty()) return 0;
  int n = 0;
  for (size_t p = text.find(marker); p != std::string::npos; p = text.find(marker, p + marker.size())) ++n;
  return n;
}

ImagePrompt build_image_prompt(const LoadedModel& lm, const ImageEncoder& enc, const std::string& text,
                               const std::vector<vision::RgbImage>& images, bool no_bos) {
  const int markers = count_markers(text, enc.marker());
  if (markers != static_cast<int>(images.size()))
    throw Error("the prompt has " + std::to_string(markers) + " image marker(s) " + enc.marker() + " but " +
                std::to_string(images.size()) + " image(s) were given");
  std::string expanded;
  const std::string rep = enc.expanded_marker();
  size_t at = 0;
  for (size_t p = text.find(enc.marker()); p != std::string::npos; p = text.find(enc.marker(), at)) {
    expanded += text.substr(at, p - at) + rep;
    at = p + enc.marker().size();
  }
  expanded += text.substr(at);
  ImagePrompt r;
  r.ids = lm.encode_prompt(expanded, no_bos);
  // The placeholder runs, in order; each must be exactly one image.
  const int32_t ph = enc.config().image_token_id, N = enc.tokens_per_image();
  std::vector<int> starts;
  for (size_t i = 0; i < r.ids.size();) {
    if (r.ids[i] != ph) { ++i; continue; }
    size_t j = i;
    while (j < r.ids.size() && r.ids[j] == ph) ++j;
    if (static_cast<int>(j - i) != N)
      throw Error("the prompt has a run of " + std::to_string(j - i) +
                  " image placeholder tokens where an image needs exactly " + std::to_string(N) +
                  " (is there image placeholder text in the prompt?)");
    starts.push_back(static_cast<int>(i));
    i = j;
  }
  if (starts.size() != images.size())
    throw Error("the prompt has " + std::to_string(starts.size()) + " image placeholder runs but " +
                std::to_string(images.size()) + " image(s) were given");
  r.soft.reserve(images.size());
  for (const auto& img : images) r.soft.push_back(enc.encode(img));
  for (size_t k = 0; k < images.size(); ++k)
    r.spans.push_back(EmbedSpan{starts[k], N, r.soft[k].data(), true});
  return r;
}

}  // namespace eg
