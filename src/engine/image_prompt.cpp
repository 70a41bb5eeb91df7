#include "engine/image_prompt.h"

#include <chrono>

#include <atomic>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"

namespace eg {

std::unique_ptr<ImageEncoder> ImageEncoder::load(const LoadedModel& lm, const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir) || !fs::exists(fs::path(dir) / "config.json"))
    throw Error("this model has no vision tower (" + dir +
                " is not a Hugging Face checkpoint folder; give a GGUF's towers with --mmproj FILE)");
  auto e = std::unique_ptr<ImageEncoder>(new ImageEncoder());
  e->vc_ = vision::load_vision_config(dir);
  if (e->vc_.kind == vision::TowerKind::None) throw Error("this model has no vision tower (" + dir + ")");
  const ModelConfig& mc = lm.model().config();
  const bool want_g4 = e->vc_.kind == vision::TowerKind::Gemma4;
  if (want_g4 != (mc.family == ModelFamily::Gemma4))
    throw Error(dir + ": the vision tower (" + (want_g4 ? "Gemma 4" : "Gemma 3") +
                ") does not belong to this text model");
  // Gemma 3: every image block bidirectional; Gemma 4 26B/31B ("vision"): on sliding layers
  // (Model::forward applies ModelConfig::image_blocks_sliding_only); E2B/E4B: causal.
  e->bidirectional_ = !want_g4 || mc.image_blocks_sliding_only;
  if (e->vc_.text_hidden != mc.hidden_size)
    throw Error("vision tower of " + dir + " produces " + std::to_string(e->vc_.text_hidden) +
                "-wide soft tokens but the text model is " + std::to_string(mc.hidden_size) + " wide");
  e->pc_ = vision::load_image_processor_config(dir, want_g4);
  const auto& store = lm.model().weights().store;
  if (want_g4) {
    if (e->pc_.patch_size != e->vc_.patch_size || e->pc_.pooling_kernel != e->vc_.pooling_kernel)
      throw Error(dir + ": the image processor's patch_size " + std::to_string(e->pc_.patch_size) + " / pooling " +
                  std::to_string(e->pc_.pooling_kernel) + " do not match the tower's " +
                  std::to_string(e->vc_.patch_size) + " / " + std::to_string(e->vc_.pooling_kernel));
    e->g4_ = std::make_unique<vision::Gemma4VisionTower>(e->vc_, store);
  } else {
    if (e->pc_.height != e->vc_.image_size || e->pc_.width != e->vc_.image_size)
      throw Error(dir + ": the image processor's size " + std::to_string(e->pc_.height) + "x" +
                  std::to_string(e->pc_.width) + " does not match the tower's image_size " +
                  std::to_string(e->vc_.image_size));
    if (e->pc_.image_seq_length != e->vc_.mm_tokens_per_image)
      throw Error(dir + ": image_seq_length " + std::to_string(e->pc_.image_seq_length) +
                  " does not match mm_tokens_per_image " + std::to_string(e->vc_.mm_tokens_per_image));
    e->siglip_ = std::make_unique<vision::SiglipTower>(e->vc_, store);
  }
  e->bind_tokens(lm, dir);
  return e;
}

void ImageEncoder::bind_tokens(const LoadedModel& lm, const std::string& origin) {
  const Tokenizer& tok = lm.tokenizer();
  const int V = lm.model().config().vocab_size;
  for (int id : {vc_.boi_id, vc_.eoi_id, vc_.image_token_id})
    if (id < 0 || id >= tok.vocab_size() || id >= V)
      throw Error(origin + ": image token id " + std::to_string(id) + " is outside the vocabulary");
  boi_ = tok.piece(vc_.boi_id);
  eoi_ = tok.piece(vc_.eoi_id);
  image_ = tok.piece(vc_.image_token_id);
  marker_ = gemma4() ? image_ : boi_;
}

std::unique_ptr<ImageEncoder> ImageEncoder::load_mmproj(const LoadedModel& lm, std::shared_ptr<const Mmproj> mm) {
  auto e = std::unique_ptr<ImageEncoder>(new ImageEncoder());
  const ModelConfig& mc = lm.model().config();
  const std::string& path = mm->path;
  if (!mm->has_vision)
    throw Error("this model has no vision tower (" + path + ": the mmproj has no vision encoder, clip.has_vision_encoder)");
  const bool g4 = mm->projector_type == "gemma4v";
  if (!g4 && mm->projector_type != "gemma3")
    throw Error(path + ": projector type '" + mm->projector_type + "' is not supported");
  const ModelFamily want = g4 ? ModelFamily::Gemma4 : ModelFamily::Gemma3;
  if (mc.family != want)
    throw Error(path + ": a " + (g4 ? "Gemma 4 mmproj (projector type 'gemma4v')" : "Gemma 3 mmproj (projector type 'gemma3')") +
                " does not belong to this " +
                (mc.family == ModelFamily::Gemma4 ? "Gemma 4" : mc.family == ModelFamily::Gemma3 ? "Gemma 3" : "Gemma 2") +
                " text model");
  e->vc_ = mm->vision;
  if (e->vc_.text_hidden != mc.hidden_size)
    throw Error(path + ": the vision tower produces " + std::to_string(e->vc_.text_hidden) +
                "-wide soft tokens (clip.vision.projection_dim) but the text model is " +
                std::to_string(mc.hidden_size) + " wide");
  // The marker tokens by their text, as llama.cpp's mtmd (Gemma 3: <start_of_image> …; Gemma 4: <|image> …).
  const Tokenizer& tok = lm.tokenizer();
  const char* g3_names[3] = {"<start_of_image>", "<end_of_image>", "<image_soft_token>"};
  const char* g4_names[3] = {"<|image>", "<image|>", "<|image|>"};
  const char* const* names = g4 ? g4_names : g3_names;
  int* ids[3] = {&e->vc_.boi_id, &e->vc_.eoi_id, &e->vc_.image_token_id};
  for (int i = 0; i < 3; ++i) {
    *ids[i] = tok.token_id(names[i]);
    if (*ids[i] < 0)
      throw Error(path + ": the text model's vocabulary has no " + names[i] + " token (needed for images)");
  }
  e->pc_ = mm->processor;
  // Gemma 3: each image block is bidirectional. Gemma 4: causal for E2B/E4B, the 26B/31B rule
  // when the text model's config has it (a GGUF: gguf_config.cpp).
  e->bidirectional_ = !g4 || mc.image_blocks_sliding_only;
  if (g4) e->g4_ = std::make_unique<vision::Gemma4VisionTower>(e->vc_, mm->store);
  else e->siglip_ = std::make_unique<vision::SiglipTower>(e->vc_, mm->store);
  e->mmproj_ = std::move(mm);
  e->bind_tokens(lm, path);
  return e;
}

int ImageEncoder::tokens_for(const vision::RgbImage& img) const {
  if (!gemma4()) return vc_.mm_tokens_per_image;
  int h = 0, w = 0;
  vision::gemma4_target_size(img.height, img.width, pc_, h, w);
  const int side = pc_.patch_size * pc_.pooling_kernel;
  return (h / side) * (w / side);
}

std::vector<float> ImageEncoder::encode(const vision::RgbImage& img) const {
  std::vector<float> soft;
  if (gemma4()) {
    g4_->encode(vision::gemma4_patches(img, pc_), soft);
  } else {
    const std::vector<float> pv = vision::gemma3_pixel_values(img, pc_);
    siglip_->encode(pv.data(), soft);
  }
  return soft;
}

std::vector<vision::CropBox> ImageEncoder::crops_for(const vision::RgbImage& img, bool pan_and_scan) const {
  if (gemma4()) {
    if (pan_and_scan) throw Error("pan-and-scan is a Gemma 3 image processor option (this is a Gemma 4 model)");
    return {};
  }
  if (!pan_and_scan) return {};
  // As Gemma3Processor: its call's defaults (off; min crop 256, at most 4 crops, ratio 1.2) win over
  // the image processor config's do_pan_and_scan / pan_and_scan_* keys, which only the image
  // processor used alone honours (transformers 5.17, tests/fixtures/gemma3-panscan: custom_config).
  const vision::ImageProcessorConfig def{};
  vision::ImageProcessorConfig ps = pc_;
  ps.pan_and_scan_min_crop_size = def.pan_and_scan_min_crop_size;
  ps.pan_and_scan_max_num_crops = def.pan_and_scan_max_num_crops;
  ps.pan_and_scan_min_ratio_to_activate = def.pan_and_scan_min_ratio_to_activate;
  return vision::pan_and_scan_crops(img.height, img.width, ps);
}

size_t ImageEncoder::weight_bytes() const { return g4_ ? g4_->weight_bytes() : siglip_->weight_bytes(); }

std::string ImageEncoder::expanded_marker(int n, int crops) const {
  std::string seq = gemma4() ? boi_ : "\n\n" + boi_;
  for (int i = 0; i < n; ++i) seq += image_;
  seq += eoi_ + (gemma4() ? "" : "\n\n");
  if (crops <= 0) return seq;
  std::string s = "Here is the original image " + seq + " and here are some crops to help you see better ";
  for (int c = 0; c < crops; ++c) s += (c > 0 ? " " : "") + seq;
  return s;
}

std::vector<std::shared_ptr<const SessionImage>> media_blocks(
    const std::vector<std::shared_ptr<const SessionImage>>& items) {
  std::vector<std::shared_ptr<const SessionImage>> out;
  for (const auto& it : items) {
    out.push_back(it);
    out.insert(out.end(), it->crops.begin(), it->crops.end());
  }
  return out;
}

int soft_tokens_with_crops(const SessionImage& im) {
  int n = im.n;
  for (const auto& c : im.crops) n += c->n;
  return n;
}

uint64_t next_image_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

namespace {

std::shared_ptr<SessionImage> encode_one(const ImageEncoder& enc, const vision::RgbImage& img, int hidden_size) {
  auto im = std::make_shared<SessionImage>();
  im->n = enc.tokens_for(img);
  im->soft = enc.encode(img);
  im->bidirectional = enc.bidirectional();
  im->id = next_image_id();
  if (im->soft.size() != static_cast<size_t>(im->n) * hidden_size)
    throw Error("internal: the vision tower gave " + std::to_string(im->soft.size()) + " values for " +
                std::to_string(im->n) + " soft tokens");
  return im;
}

}  // namespace

std::shared_ptr<SessionImage> encode_session_image(const ImageEncoder& enc, const vision::RgbImage& img,
                                                   int hidden_size, bool pan_and_scan) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<vision::CropBox> boxes = enc.crops_for(img, pan_and_scan);
  auto im = encode_one(enc, img, hidden_size);
  for (const auto& b : boxes) im->crops.push_back(encode_one(enc, vision::crop_image(img, b), hidden_size));
  im->encode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return im;
}

size_t expand_rendered_markers(const ImageEncoder& enc, std::string& text,
                               std::vector<std::pair<size_t, size_t>>& protect, const std::vector<int>& counts,
                               size_t* cut, const std::vector<int>* crops) {
  if (crops != nullptr && crops->size() != counts.size()) throw Error("internal: crops and counts differ in size");
  const std::string& mk = enc.marker();
  std::string out;
  std::vector<std::pair<size_t, size_t>> shifts;  // (original position, bytes added before it)
  size_t at = 0, k = 0, last_end = 0, added = 0;
  for (size_t q = text.find(mk); q != std::string::npos; q = text.find(mk, q + mk.size())) {
    bool inside = false;
    for (const auto& c : protect) inside = inside || (q >= c.first && q < c.second);
    if (inside) continue;
    if (k < counts.size()) {
      const std::string rep = enc.expanded_marker(counts[k], crops != nullptr ? (*crops)[k] : 0);
      out.append(text, at, q - at);
      out += rep;
      last_end = out.size();
      added += rep.size() - mk.size();
      shifts.push_back({q + mk.size(), added});
    }
    at = q + mk.size();
    ++k;
  }
  if (k != counts.size())
    throw Error("the chat template wrote " + std::to_string(k) + " image marker(s) " + mk + " for " +
                std::to_string(counts.size()) + " image(s)");
  out.append(text, at, std::string::npos);
  auto map = [&](size_t pos) {
    size_t add = 0;
    for (const auto& s : shifts)
      if (s.first <= pos) add = s.second;
    return pos + add;
  };
  for (auto& c : protect) c = {map(c.first), map(c.second)};
  if (cut != nullptr && *cut != std::string::npos) *cut = map(*cut);
  text = std::move(out);
  return last_end;
}

int count_markers(const std::string& text, const std::string& marker) {
  if (marker.empty()) return 0;
  int n = 0;
  for (size_t p = text.find(marker); p != std::string::npos; p = text.find(marker, p + marker.size())) ++n;
  return n;
}

std::vector<int> image_placeholder_runs(const ImageEncoder& enc, const std::vector<int32_t>& ids,
                                        const std::vector<int>& counts) {
  const int32_t ph = enc.config().image_token_id;
  std::vector<int> starts;
  for (size_t i = 0; i < ids.size();) {
    if (ids[i] != ph) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < ids.size() && ids[j] == ph) ++j;
    const size_t k = starts.size();
    if (k >= counts.size() || static_cast<int>(j - i) != counts[k])
      throw Error("the prompt has a run of " + std::to_string(j - i) + " image placeholder tokens where " +
                  (k < counts.size() ? "image " + std::to_string(k + 1) + " needs exactly " + std::to_string(counts[k])
                                     : std::string("no image is left")) +
                  " (is there image placeholder text in the prompt?)");
    starts.push_back(static_cast<int>(i));
    i = j;
  }
  if (starts.size() != counts.size())
    throw Error("the prompt has " + std::to_string(starts.size()) + " image placeholder runs but " +
                std::to_string(counts.size()) + " image(s) were given");
  return starts;
}

ImagePrompt build_image_prompt(const LoadedModel& lm, const ImageEncoder& enc, const std::string& text,
                               const std::vector<vision::RgbImage>& images, bool no_bos, bool pan_and_scan) {
  const int markers = count_markers(text, enc.marker());
  if (markers != static_cast<int>(images.size()))
    throw Error("the prompt has " + std::to_string(markers) + " image marker(s) " + enc.marker() + " but " +
                std::to_string(images.size()) + " image(s) were given");
  ImagePrompt r;
  std::vector<vision::RgbImage> blocks;  // each image, then its crops
  std::vector<int> block_tokens;
  std::vector<int> per_image;
  for (const auto& img : images) {
    const std::vector<vision::CropBox> boxes = enc.crops_for(img, pan_and_scan);
    const int n = enc.tokens_for(img);
    per_image.push_back(n);
    r.crops_per_image.push_back(static_cast<int>(boxes.size()));
    r.tokens_per_image.push_back(n * (1 + static_cast<int>(boxes.size())));
    blocks.push_back(img);
    block_tokens.push_back(n);
    for (const auto& b : boxes) {
      blocks.push_back(vision::crop_image(img, b));
      block_tokens.push_back(enc.tokens_for(blocks.back()));
    }
  }
  std::string expanded;
  size_t at = 0, k = 0;
  for (size_t p = text.find(enc.marker()); p != std::string::npos; p = text.find(enc.marker(), at)) {
    expanded += text.substr(at, p - at) + enc.expanded_marker(per_image[k], r.crops_per_image[k]);
    ++k;
    at = p + enc.marker().size();
  }
  expanded += text.substr(at);
  r.ids = lm.encode_prompt(expanded, no_bos);
  const std::vector<int> starts = image_placeholder_runs(enc, r.ids, block_tokens);
  r.soft.reserve(blocks.size());
  for (const auto& img : blocks) r.soft.push_back(enc.encode(img));
  const int H = lm.model().config().hidden_size;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (static_cast<int>(r.soft[i].size()) != block_tokens[i] * H)
      throw Error("internal: image block " + std::to_string(i + 1) + " gave " + std::to_string(r.soft[i].size() / H) +
                  " soft tokens, expected " + std::to_string(block_tokens[i]));
    r.spans.push_back(EmbedSpan{starts[i], block_tokens[i], r.soft[i].data(), enc.bidirectional()});
  }
  return r;
}

}  // namespace eg
