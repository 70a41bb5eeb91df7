#include "engine/audio_prompt.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"

namespace eg {

namespace {

int audio_seq_length(const std::string& dir) {
  const std::string path = dir + "/processor_config.json";
  if (!std::filesystem::exists(path)) return 750;
  const auto j = nlohmann::json::parse(read_file(path), nullptr, false);
  if (j.is_object() && j.contains("audio_seq_length") && j["audio_seq_length"].is_number_integer())
    return j["audio_seq_length"].get<int>();
  return 750;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::unique_ptr<AudioEncoder> AudioEncoder::load(const LoadedModel& lm, const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir) || !fs::exists(fs::path(dir) / "config.json"))
    throw Error("this model has no audio tower (" + dir +
                " is not a Hugging Face checkpoint folder; give a GGUF's towers with --mmproj FILE)");
  auto e = std::unique_ptr<AudioEncoder>(new AudioEncoder());
  e->ac_ = audio::load_audio_config(dir);
  if (!e->ac_.present) throw Error("this model has no audio tower (" + dir + ")");
  const ModelConfig& mc = lm.model().config();
  if (mc.family != ModelFamily::Gemma4) throw Error(dir + ": the audio tower (Gemma 4) does not belong to this text model");
  if (e->ac_.text_hidden != mc.hidden_size)
    throw Error("audio tower of " + dir + " produces " + std::to_string(e->ac_.text_hidden) +
                "-wide soft tokens but the text model is " + std::to_string(mc.hidden_size) + " wide");
  const audio::FeatureConfig fc = audio::load_feature_config(dir);
  if (fc.sampling_rate != audio::kModelRate)
    throw Error(dir + ": feature_extractor.sampling_rate " + std::to_string(fc.sampling_rate) + " is not 16000");
  e->fe_ = std::make_unique<audio::FeatureExtractor>(fc);
  e->tower_ = std::make_unique<audio::Gemma4AudioTower>(e->ac_, lm.model().weights().store);
  e->seq_length_ = audio_seq_length(dir);
  if (e->seq_length_ < 1) throw Error(dir + ": audio_seq_length must be positive");
  const Tokenizer& tok = lm.tokenizer();
  for (int id : {e->ac_.boa_id, e->ac_.eoa_id, e->ac_.audio_token_id})
    if (id < 0 || id >= tok.vocab_size() || id >= mc.vocab_size)
      throw Error(dir + ": audio token id " + std::to_string(id) + " is outside the vocabulary");
  e->boa_ = tok.piece(e->ac_.boa_id);
  e->eoa_ = tok.piece(e->ac_.eoa_id);
  e->marker_ = tok.piece(e->ac_.audio_token_id);
  return e;
}

std::unique_ptr<AudioEncoder> AudioEncoder::load_mmproj(const LoadedModel& lm, std::shared_ptr<const Mmproj> mm) {
  const std::string& path = mm->path;
  if (!mm->has_audio)
    throw Error("this model has no audio tower (" + path + ": the mmproj has no audio encoder, clip.has_audio_encoder)");
  if (mm->audio_projector_type != "gemma4a")
    throw Error(path + ": audio projector type '" + mm->audio_projector_type + "' is not supported");
  const ModelConfig& mc = lm.model().config();
  if (mc.family != ModelFamily::Gemma4)
    throw Error(path + ": a Gemma 4 audio tower (projector type 'gemma4a') does not belong to this " +
                std::string(mc.family == ModelFamily::Gemma3 ? "Gemma 3" : "Gemma 2") + " text model");
  auto e = std::unique_ptr<AudioEncoder>(new AudioEncoder());
  e->ac_ = mm->audio;
  if (e->ac_.text_hidden != mc.hidden_size)
    throw Error(path + ": the audio tower produces " + std::to_string(e->ac_.text_hidden) +
                "-wide soft tokens (clip.audio.projection_dim) but the text model is " + std::to_string(mc.hidden_size) +
                " wide");
  const Tokenizer& tok = lm.tokenizer();
  const char* names[3] = {"<|audio>", "<audio|>", "<|audio|>"};  // by text, as llama.cpp's mtmd
  int* ids[3] = {&e->ac_.boa_id, &e->ac_.eoa_id, &e->ac_.audio_token_id};
  for (int i = 0; i < 3; ++i) {
    *ids[i] = tok.token_id(names[i]);
    if (*ids[i] < 0 || *ids[i] >= mc.vocab_size)
      throw Error(path + ": the text model's vocabulary has no " + names[i] + " token (needed for audio)");
  }
  e->fe_ = std::make_unique<audio::FeatureExtractor>(mm->features);
  e->tower_ = std::make_unique<audio::Gemma4AudioTower>(e->ac_, mm->store);
  e->seq_length_ = 750;  // Gemma4Processor's audio_seq_length (the mmproj has no key for it)
  e->boa_ = tok.piece(e->ac_.boa_id);
  e->eoa_ = tok.piece(e->ac_.eoa_id);
  e->marker_ = tok.piece(e->ac_.audio_token_id);
  e->mmproj_ = std::move(mm);
  return e;
}

std::vector<int> AudioEncoder::tokens_for(int64_t n) const {
  const audio::FeatureConfig& c = fe_->config();
  if (n > static_cast<int64_t>(max_seconds_ * audio::kModelRate))
    throw Error("audio clip of " + std::to_string(n / audio::kModelRate) + " s is longer than the limit of " +
                std::to_string(static_cast<int>(max_seconds_)) + " s");
  std::vector<int> seg;
  for (int64_t at = 0; at < n; at += c.max_samples) {
    const int frames = audio::valid_frames(std::min<int64_t>(c.max_samples, n - at), c);
    if (frames == 0) continue;  // a trailing piece under one frame
    seg.push_back(std::min(audio::Gemma4AudioTower::tokens_for_frames(frames), seq_length_));
  }
  if (seg.empty())
    throw Error("audio clip of " + std::to_string(n) + " samples is too short (at least 161 samples, about 10 ms, at 16 kHz)");
  return seg;
}

std::vector<float> AudioEncoder::encode(const audio::Pcm& pcm) const {
  if (pcm.rate != audio::kModelRate) throw Error("internal: AudioEncoder::encode needs 16 kHz audio");
  const std::vector<int> seg = tokens_for(static_cast<int64_t>(pcm.samples.size()));
  const audio::FeatureConfig& c = fe_->config();
  std::vector<float> soft, part;
  size_t k = 0;
  const int64_t n = static_cast<int64_t>(pcm.samples.size());
  for (int64_t at = 0; at < n && k < seg.size(); at += c.max_samples) {
    const int64_t len = std::min<int64_t>(c.max_samples, n - at);
    if (audio::valid_frames(len, c) == 0) continue;
    const audio::Features F = fe_->extract(pcm.samples.data() + at, len);
    tower_->encode(F.values.data(), F.valid, F.mel, part);
    const size_t rows = static_cast<size_t>(seg[k++]) * ac_.text_hidden;  // ≤ the tower's (seq_length cap)
    soft.insert(soft.end(), part.begin(), part.begin() + std::min(rows, part.size()));
  }
  return soft;
}

std::string AudioEncoder::expanded_marker(const std::vector<int>& segments) const {
  std::string s;
  for (int n : segments) {
    s += boa_;
    for (int i = 0; i < n; ++i) s += marker_;
    s += eoa_;
  }
  return s;
}

std::vector<std::shared_ptr<SessionImage>> encode_session_audio(const AudioEncoder& enc, const audio::Pcm& pcm,
                                                                int hidden_size) {
  const std::vector<int> seg = enc.tokens_for(static_cast<int64_t>(pcm.samples.size()));
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> soft = enc.encode(pcm);
  const double ms = ms_since(t0);
  int total = 0;
  for (int n : seg) total += n;
  std::vector<std::shared_ptr<SessionImage>> out;
  size_t row = 0;
  for (int n : seg) {
    auto im = std::make_shared<SessionImage>();
    im->n = n;
    im->id = next_image_id();
    im->bidirectional = false;
    im->audio = true;
    im->encode_ms = total > 0 ? ms * n / total : 0;  // the clip's time, shared by its blocks' sizes
    const size_t len = static_cast<size_t>(n) * hidden_size;
    if (row + len > soft.size()) throw Error("internal: the audio tower gave too few soft tokens");
    im->soft.assign(soft.begin() + row, soft.begin() + row + len);
    row += len;
    out.push_back(std::move(im));
  }
  return out;
}

namespace {

// Runs of placeholder id `ph` in ids: their starts, which must match `counts` exactly.
std::vector<int> runs_of(const std::vector<int32_t>& ids, int32_t ph, const std::vector<int>& counts, const char* what) {
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
      throw Error(std::string("the prompt has a run of ") + std::to_string(j - i) + " " + what +
                  " placeholder tokens where " +
                  (k < counts.size() ? std::string(what) + " block " + std::to_string(k + 1) + " needs exactly " +
                                           std::to_string(counts[k])
                                     : std::string("none is left")) +
                  " (is there placeholder text in the prompt?)");
    starts.push_back(static_cast<int>(i));
    i = j;
  }
  if (starts.size() != counts.size())
    throw Error("the prompt has " + std::to_string(starts.size()) + " " + what + " placeholder runs but " +
                std::to_string(counts.size()) + " were expected");
  return starts;
}

}  // namespace

MediaPrompt build_media_prompt(const LoadedModel& lm, const ImageEncoder* ie, const AudioEncoder* ae,
                               const std::string& text, const std::vector<PromptMedium>& media, bool no_bos,
                               bool pan_and_scan) {
  using K = PromptMedium::Kind;
  std::vector<const PromptMedium*> imgs, clips;
  for (const auto& m : media) (m.kind == K::Image ? imgs : clips).push_back(&m);
  if (!imgs.empty() && !ie) throw Error("internal: images without an image encoder");
  if (!clips.empty() && !ae) throw Error("this model has no audio tower");
  const int n_img = ie ? count_markers(text, ie->marker()) : 0;
  const int n_aud = ae ? count_markers(text, ae->marker()) : 0;
  if (n_img != static_cast<int>(imgs.size()))
    throw Error("the prompt has " + std::to_string(n_img) + " image marker(s) " + (ie ? ie->marker() : "") + " but " +
                std::to_string(imgs.size()) + " image(s) were given");
  if (n_aud != static_cast<int>(clips.size()))
    throw Error("the prompt has " + std::to_string(n_aud) + " audio marker(s) " + (ae ? ae->marker() : "") + " but " +
                std::to_string(clips.size()) + " audio clip(s) were given");
  MediaPrompt r;
  std::vector<int> img_counts, img_crops, block_counts;  // per image; per block (image, then its crops)
  std::vector<std::vector<vision::CropBox>> img_boxes;
  std::vector<std::vector<int>> clip_segs;
  for (const auto* m : imgs) {
    img_boxes.push_back(ie->crops_for(m->image, pan_and_scan));
    img_counts.push_back(ie->tokens_for(m->image));
    img_crops.push_back(static_cast<int>(img_boxes.back().size()));
    block_counts.push_back(img_counts.back());
    for (const auto& b : img_boxes.back()) block_counts.push_back(ie->tokens_for(vision::crop_image(m->image, b)));
  }
  for (const auto* m : clips) clip_segs.push_back(ae->tokens_for(static_cast<int64_t>(m->audio.samples.size())));
  // Expand the markers in text order.
  std::string expanded;
  size_t at = 0, ki = 0, ka = 0;
  for (;;) {
    const size_t pi = ie && ki < imgs.size() ? text.find(ie->marker(), at) : std::string::npos;
    const size_t pa = ae && ka < clips.size() ? text.find(ae->marker(), at) : std::string::npos;
    if (pi == std::string::npos && pa == std::string::npos) break;
    if (pi < pa) {
      expanded += text.substr(at, pi - at) + ie->expanded_marker(img_counts[ki], img_crops[ki]);
      ++ki;
      at = pi + ie->marker().size();
    } else {
      expanded += text.substr(at, pa - at) + ae->expanded_marker(clip_segs[ka++]);
      at = pa + ae->marker().size();
    }
  }
  expanded += text.substr(at);
  r.ids = lm.encode_prompt(expanded, no_bos);
  std::vector<int> seg_counts;
  for (const auto& s : clip_segs) seg_counts.insert(seg_counts.end(), s.begin(), s.end());
  const std::vector<int> img_starts = ie ? runs_of(r.ids, ie->config().image_token_id, block_counts, "image") : std::vector<int>{};
  const std::vector<int> aud_starts = ae ? runs_of(r.ids, ae->config().audio_token_id, seg_counts, "audio") : std::vector<int>{};
  const int H = lm.model().config().hidden_size;
  r.soft.reserve(media.size() + block_counts.size());
  // Per image: the original's block, then one per crop (r.soft: one entry per block or clip).
  size_t si = 0, bi = 0;
  std::vector<size_t> clip_soft;  // r.soft index of each medium's (clip's) soft tokens
  for (const auto& m : media) {
    const auto t0 = std::chrono::steady_clock::now();
    if (m.kind == K::Image) {
      int total = 0;
      for (size_t c = 0; c <= img_boxes[si].size(); ++c, ++bi) {
        r.soft.push_back(c == 0 ? ie->encode(m.image) : ie->encode(vision::crop_image(m.image, img_boxes[si][c - 1])));
        const int n = block_counts[bi];
        if (static_cast<int>(r.soft.back().size()) != n * H)
          throw Error("internal: an image gave " + std::to_string(r.soft.back().size() / H) + " soft tokens, expected " +
                      std::to_string(n));
        r.spans.push_back(EmbedSpan{img_starts[bi], n, r.soft.back().data(), ie->bidirectional()});
        total += n;
      }
      r.image_encode_ms += ms_since(t0);
      r.tokens_per_medium.push_back(total);
      clip_soft.push_back(0);
      ++si;
    } else {
      clip_soft.push_back(r.soft.size());
      r.soft.push_back(ae->encode(m.audio));
      r.audio_encode_ms += ms_since(t0);
      r.tokens_per_medium.push_back(0);  // set below
    }
  }
  // Audio spans: one per segment, rows in order through each clip's soft tokens.
  size_t seg = 0, clip_i = 0;
  for (size_t mi = 0; mi < media.size(); ++mi) {
    if (media[mi].kind != K::Audio) continue;
    const std::vector<float>& soft = r.soft[clip_soft[mi]];
    const float* rows = soft.data();
    int total = 0;
    for (int n : clip_segs[clip_i]) {
      r.spans.push_back(EmbedSpan{aud_starts[seg++], n, rows, false});
      rows += static_cast<size_t>(n) * H;
      total += n;
    }
    if (soft.size() != static_cast<size_t>(total) * H)
      throw Error("internal: an audio clip gave " + std::to_string(soft.size() / H) + " soft tokens, expected " +
                  std::to_string(total));
    r.tokens_per_medium[mi] = total;
    ++clip_i;
  }
  std::sort(r.spans.begin(), r.spans.end(), [](const EmbedSpan& a, const EmbedSpan& b) { return a.begin < b.begin; });
  return r;
}

size_t expand_rendered_media(const ImageEncoder* ie, const AudioEncoder* ae, std::string& text,
                             std::vector<std::pair<size_t, size_t>>& protect,
                             const std::vector<std::shared_ptr<const SessionImage>>& items, size_t* cut) {
  for (const auto& it : items) {
    if (it->audio && !ae) throw Error("this model has no audio tower");
    if (!it->audio && !ie) throw Error("this model has no vision tower");
  }
  const std::string im = ie ? ie->marker() : std::string(), am = ae ? ae->marker() : std::string();
  auto next = [&](size_t from, bool& is_audio) {
    const size_t a = am.empty() ? std::string::npos : text.find(am, from);
    const size_t b = im.empty() ? std::string::npos : text.find(im, from);
    is_audio = a < b;
    return std::min(a, b);
  };
  std::string out;
  std::vector<std::pair<size_t, size_t>> shifts;  // (original position, bytes added before it)
  size_t at = 0, k = 0, last_end = 0, added = 0;
  bool is_audio = false;
  for (size_t q = next(0, is_audio); q != std::string::npos;) {
    const size_t len = is_audio ? am.size() : im.size();
    bool inside = false;
    for (const auto& c : protect) inside = inside || (q >= c.first && q < c.second);
    if (!inside) {
      if (k < items.size()) {
        if (items[k]->audio != is_audio)
          throw Error("the chat template wrote an " + std::string(is_audio ? "audio" : "image") + " marker where " +
                      (items[k]->audio ? "an audio clip" : "an image") + " belongs");
        const std::string rep = is_audio ? ae->expanded_marker({items[k]->n})
                                         : ie->expanded_marker(items[k]->n, static_cast<int>(items[k]->crops.size()));
        out.append(text, at, q - at);
        out += rep;
        last_end = out.size();
        added += rep.size() - len;
        shifts.push_back({q + len, added});
      }
      at = q + len;
      ++k;
    }
    q = next(q + len, is_audio);
  }
  if (k != items.size())
    throw Error("the chat template wrote " + std::to_string(k) + " media marker(s) for " + std::to_string(items.size()) +
                " image(s) / audio block(s)");
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

std::vector<int> media_placeholder_runs(const ImageEncoder* ie, const AudioEncoder* ae, const std::vector<int32_t>& ids,
                                        const std::vector<std::shared_ptr<const SessionImage>>& items) {
  std::vector<int> ic, ac;
  for (const auto& it : items) (it->audio ? ac : ic).push_back(it->n);
  if (!ic.empty() && !ie) throw Error("this model has no vision tower");
  if (!ac.empty() && !ae) throw Error("this model has no audio tower");
  const std::vector<int> is = ie ? runs_of(ids, ie->config().image_token_id, ic, "image") : std::vector<int>{};
  const std::vector<int> as = ae ? runs_of(ids, ae->config().audio_token_id, ac, "audio") : std::vector<int>{};
  std::vector<int> starts;
  size_t a = 0, b = 0;
  for (const auto& it : items) starts.push_back(it->audio ? as[a++] : is[b++]);
  return starts;
}

}  // namespace eg
