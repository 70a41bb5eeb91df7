// libFuzzer target: audio decoding and features (src/audio: libsndfile from memory for WAV / FLAC /
// OGG / MP3, downmix, libsoxr resampling to 16 kHz, the Gemma 4 log-mel feature extractor).
// docs/reliability.md. Built by scripts/fuzz.
//
// Input: byte 0 selects the cap on clip length (max_seconds 0.5 .. 8, so the header check is
// exercised on both sides), the rest is the encoded file.
// Checks: decode_audio throws nothing but eg::Error; a decoded clip is non-empty, within the cap,
// at a rate in [1 kHz, 384 kHz] with finite samples; after resampling to 16 kHz the features have
// the documented shape (valid frames a prefix, mask agreeing) and finite values.
// Seeds (EG_FUZZ_WRITE_SEEDS): 0.2 s clips encoded here by libsndfile as WAV PCM 8/16/24/32,
// float, stereo 44.1 kHz, FLAC and OGG Vorbis.
#include <sndfile.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "audio/audio.h"
#include "audio/features.h"
#include "core/error.h"
#include "fuzz_util.h"

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) egfuzz::fail("audio_fuzz", what);
}

const eg::audio::FeatureExtractor& extractor() {
  static const eg::audio::FeatureExtractor fx(
      eg::audio::load_feature_config(egfuzz::shared_dir() + "/models/tiny-gemma4-mm"));
  return fx;
}

void write_clip(const std::string& dir, const std::string& name, int format, int rate, int channels) {
  const std::string tmp = dir + "/.clip.tmp";
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = channels;
  info.format = format;
  SNDFILE* f = sf_open(tmp.c_str(), SFM_WRITE, &info);
  if (!f) return;  // this libsndfile cannot write the format: no seed
  const int frames = rate / 5;
  std::vector<float> v(size_t(frames) * channels);
  for (int i = 0; i < frames; ++i)
    for (int c = 0; c < channels; ++c) v[size_t(i) * channels + c] = 0.4f * std::sin(0.05f * i * (c + 1));
  sf_writef_float(f, v.data(), frames);
  sf_close(f);
  egfuzz::write_seed(dir, name, std::string(1, '\x20') + egfuzz::read_text(tmp));
  std::remove(tmp.c_str());
}

void write_seeds(const std::string& dir) {
  write_clip(dir, "pcm8.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_U8, 8000, 1);
  write_clip(dir, "pcm16.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1);
  write_clip(dir, "pcm24.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_24, 16000, 1);
  write_clip(dir, "pcm32.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_32, 22050, 1);
  write_clip(dir, "float.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1);
  write_clip(dir, "stereo44k.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 44100, 2);
  write_clip(dir, "a.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1);
  write_clip(dir, "a.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 16000, 1);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  egfuzz::maybe_write_seeds(write_seeds);
  (void)extractor();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const double max_seconds = 0.5 + (data[0] & 15) * 0.5;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  eg::audio::Pcm pcm;
  try {
    pcm = eg::audio::decode_audio(bytes, "fuzz input", max_seconds);
  } catch (const eg::Error&) {
    return 0;
  }
  check(!pcm.samples.empty(), "decoded an empty clip");
  check(pcm.rate >= 1000 && pcm.rate <= 384000, "decoded rate outside [1 kHz, 384 kHz]");
  check(pcm.seconds() <= max_seconds + 1e-6, "decoded clip longer than the cap");
  for (float s : pcm.samples) check(std::isfinite(s), "decoded sample not finite");
  try {
    const eg::audio::Pcm p16 = eg::audio::to_model_rate(pcm);
    check(p16.rate == eg::audio::kModelRate, "resampled to the wrong rate");
    const eg::audio::Features f = extractor().extract(p16.samples.data(), int64_t(p16.samples.size()));
    check(f.values.size() == size_t(f.frames) * f.mel && f.mask.size() == size_t(f.frames),
          "feature shape differs from frames x mel");
    check(f.valid >= 0 && f.valid <= f.frames, "valid frames outside [0, frames]");
    for (int i = 0; i < f.frames; ++i) check((f.mask[i] != 0) == (i < f.valid), "mask is not a valid prefix");
    for (float v : f.values) check(std::isfinite(v), "feature not finite");
  } catch (const eg::Error&) {
    // A clip too short for one frame after resampling is a clear error, not a bug.
  }
  return 0;
}
